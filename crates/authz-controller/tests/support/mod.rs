//! What the projection tests share: the controller with KAOS's security plane on, a key server
//! standing in for the users' issuer, and reads of the policy ConfigMap.

#![allow(dead_code)] // Each test binary uses its part.

use std::sync::{Arc, Mutex};

use authz_controller::settings::{Args, Security};
use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_harness::cluster::TestCluster;
use kaos_harness::controller::ControllerTest;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub const POLICY_CONFIGMAP: &str = "kaos-authz-policy";
pub const ISSUER: &str = "http://keycloak.test/realms/kaos";

/// The controller with these settings (the shared flags at their defaults).
pub fn start(security: Security) -> ControllerTest {
    let args = Args::try_parse_from(["authz-controller"]).expect("flags");
    ControllerTest::start(
        TestCluster::start(),
        authz_controller::ID,
        args.runtime,
        move |runtime| authz_controller::controller::run(runtime, security),
    )
}

/// Everything on, as KAOS's chart sets it with `pdp.enabled`, the policy ConfigMap in
/// `default`, and users from [`ISSUER`] whose keys are at `jwks_uri`.
pub fn security_on(jwks_uri: &str) -> Security {
    Security {
        ext_authz_url: "kaos-pdp.default.svc:9191".into(),
        pdp_enabled: true,
        policy_configmap_name: POLICY_CONFIGMAP.into(),
        policy_configmap_namespace: "default".into(),
        user_issuer: ISSUER.into(),
        user_audience: "kaos".into(),
        user_jwks_uri: jwks_uri.into(),
        ..Default::default()
    }
}

/// A plain-HTTP server answering every request with a JSON document (the users' key set).
pub struct KeyServer {
    pub url: String,
    body: Arc<Mutex<String>>,
}

impl KeyServer {
    pub async fn start(body: &Value) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/certs", listener.local_addr().expect("address"));
        let body = Arc::new(Mutex::new(body.to_string()));
        let served = body.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let served = served.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let body = served.lock().expect("body").clone();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        KeyServer { url, body }
    }
}

/// The policy ConfigMap's `data.json`, parsed, once it exists.
pub async fn policy_data(h: &ControllerTest) -> Value {
    let cm: ConfigMap = h
        .until(
            POLICY_CONFIGMAP,
            "written by the projector",
            |cm: &ConfigMap| {
                cm.data
                    .as_ref()
                    .is_some_and(|d| d.contains_key("data.json") && d.contains_key("policy.rego"))
            },
        )
        .await;
    serde_json::from_str(&cm.data.expect("data")["data.json"]).expect("data.json is JSON")
}

/// The writes of the policy ConfigMap in `writes` (the audit's `VERB path` lines).
pub fn configmap_writes(writes: &[String]) -> Vec<&String> {
    writes
        .iter()
        .filter(|w| {
            w.contains(&format!("/configmaps/{POLICY_CONFIGMAP}")) || w.ends_with("/configmaps")
        })
        .collect()
}
