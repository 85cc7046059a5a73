//! Secure metrics (`--metrics-secure`) of a controller process against kaos-testkit with RBAC:
//! `/metrics` over TLS, for callers whose token the API server authenticates (TokenReview) and
//! whose ServiceAccount is bound to the metrics-reader role (SubjectAccessReview). The process
//! runs as its own ServiceAccount, allowed only to create the two reviews.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kaos_runtime::{ControllerId, RuntimeArgs};
use kaos_testkit::auth::Identity;
use kaos_testkit::{ApiServer, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

const ID: ControllerId = ControllerId {
    name: "test",
    lease: "kaos-test-controller",
    kinds: &[("Agent", &["Ready"])],
};

/// The chart's reader role and the controller's review rights, as `charts/kaos` renders them.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kaos-metrics-reader}
rules:
- nonResourceURLs: ["/metrics"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-kaos-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kaos-metrics-reader}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kaos-test-controller}
rules:
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kaos-test-controller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kaos-test-controller}
subjects:
- {kind: ServiceAccount, name: controller, namespace: default}
"#;

/// Accepts any server certificate: the process's own is self-signed, as a ServiceMonitor with
/// `insecureSkipVerify` accepts it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config(trusted: Option<CertificateDer<'static>>) -> Arc<ClientConfig> {
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocols");
    let config = match trusted {
        Some(cert) => {
            let mut roots = RootCertStore::empty();
            roots.add(cert).expect("root");
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
    };
    Arc::new(config)
}

/// `GET /metrics` over TLS with `token` as bearer token: the status code and the body.
async fn scrape(addr: SocketAddr, token: Option<&str>, tls: Arc<ClientConfig>) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut stream = TlsConnector::from(tls)
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    // Servers may close without a TLS close_notify; what was read is the answer.
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response).to_string();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (code, body.to_string())
}

/// Reviews the process asked for so far.
fn reviews(api: &ApiServer) -> usize {
    api.audit
        .records()
        .iter()
        .filter(|r| r.path.ends_with("/tokenreviews") || r.path.ends_with("/subjectaccessreviews"))
        .count()
}

struct Setup {
    api: ApiServer,
    _server: TestServer,
    reader: String,
    stranger: String,
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// A testkit with RBAC and a controller process serving secure metrics with `extra` flags.
async fn start(extra: &[String]) -> Setup {
    let server = TestServer::start_with_rbac(RBAC).await.expect("serve");
    let api = server.api.clone();
    let token = |name: &str| {
        api.auth
            .mint_token(Identity::service_account("default", name))
    };
    let (reader, stranger) = (token("prometheus"), token("stranger"));
    let kubeconfig: kube::config::Kubeconfig =
        serde_saphyr::from_str(&server.kubeconfig(Some(&token("controller")))).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let port = kaos_testkit::free_port();
    let mut flags = vec![
        "test".to_string(),
        format!("--metrics-bind-address=127.0.0.1:{port}"),
        "--health-probe-bind-address=0".into(),
        "--leader-elect=false".into(),
        "--metrics-secure".into(),
    ];
    flags.extend_from_slice(extra);
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        runtime: RuntimeArgs,
    }
    let args = <Cli as clap::Parser>::try_parse_from(flags)
        .expect("flags")
        .runtime;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(kaos_runtime::runner::run_with(
        config,
        args,
        ID,
        async move {
            let _ = stopped.await;
        },
        |runtime| async move {
            runtime.shutdown_signal().await;
            Ok(())
        },
    ));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Setup {
        api,
        _server: server,
        reader,
        stranger,
        addr,
        stop,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_readers_scrape_and_the_reviews_are_cached() {
    let setup = start(&[]).await;
    let tls = client_config(None);

    let (code, body) = scrape(setup.addr, Some(&setup.reader), tls.clone()).await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("controller_runtime_reconcile_total"),
        "{body}"
    );

    let (code, body) = scrape(setup.addr, None, tls.clone()).await;
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    let (code, _) = scrape(setup.addr, Some("not-a-token"), tls.clone()).await;
    assert_eq!(code, 401);

    let (code, body) = scrape(setup.addr, Some(&setup.stranger), tls.clone()).await;
    assert_eq!(code, 403);
    assert_eq!(
        body,
        "Authorization denied for user system:serviceaccount:default:stranger"
    );
    assert!(!body.contains(&setup.stranger), "the token is never echoed");

    // One TokenReview and one SubjectAccessReview per token above (the invalid token only has
    // its TokenReview, no token none); repeated scrapes within the cache's lifetime ask nothing.
    let asked = reviews(&setup.api);
    assert_eq!(asked, 5);
    for _ in 0..3 {
        assert_eq!(
            scrape(setup.addr, Some(&setup.reader), tls.clone()).await.0,
            200
        );
        assert_eq!(
            scrape(setup.addr, Some(&setup.stranger), tls.clone())
                .await
                .0,
            403
        );
        assert_eq!(
            scrape(setup.addr, Some("not-a-token"), tls.clone()).await.0,
            401
        );
    }
    assert_eq!(
        reviews(&setup.api),
        asked,
        "cached decisions make no API calls"
    );

    // The process used exactly its two review grants.
    let used: Vec<_> = setup
        .api
        .auth
        .used_grants()
        .into_iter()
        .filter(|g| g.user == "system:serviceaccount:default:controller")
        .map(|g| (g.verb, g.group, g.resource))
        .collect();
    assert_eq!(
        used,
        [
            (
                "create".into(),
                "authentication.k8s.io".into(),
                "tokenreviews".into()
            ),
            (
                "create".into(),
                "authorization.k8s.io".into(),
                "subjectaccessreviews".into()
            ),
        ]
    );
    let _ = setup.stop.send(());
}

fn write_certificate(dir: &Path) -> CertificateDer<'static> {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    std::fs::write(dir.join("tls.crt"), generated.cert.pem()).expect("write cert");
    std::fs::write(dir.join("tls.key"), generated.signing_key.serialize_pem()).expect("write key");
    generated.cert.der().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_directory_is_served_and_verifies() {
    let dir = std::env::temp_dir().join(format!("kaos-metrics-certs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cert = write_certificate(&dir);
    let setup = start(&[format!("--metrics-cert-dir={}", dir.display())]).await;
    // A client that trusts only that certificate (a ServiceMonitor with its CA) gets through.
    let (code, body) = scrape(setup.addr, Some(&setup.reader), client_config(Some(cert))).await;
    assert_eq!(code, 200, "{body}");
    let _ = setup.stop.send(());
    let _ = std::fs::remove_dir_all(dir);
}
