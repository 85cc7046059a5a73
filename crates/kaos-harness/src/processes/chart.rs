//! The chart's default rendering (`deploy/`) on a testkit with RBAC, each controller binary run
//! under its chart ServiceAccount with its own token, as the chart deploys them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::{Process, Scratch, apply_yaml, client, serve_testkit, start_controller};

/// One running controller replica under its chart ServiceAccount.
pub struct Replica {
    pub process: Process,
    /// The controller's ServiceAccount.
    pub service_account: String,
    /// The credential it authenticates with, as the testkit's audit log names it.
    pub client: String,
    binary: String,
    kubeconfig: PathBuf,
    env: BTreeMap<String, String>,
    /// Times it was restarted after exiting.
    pub restarts: usize,
}

/// The chart's default rendering (`deploy/`) on a testkit with RBAC, and `replicas` processes of
/// each controller binary, each with its own token for the chart's ServiceAccount.
pub struct ChartCluster {
    pub testkit: Process,
    pub admin: kube::Client,
    pub admin_kubeconfig: PathBuf,
    pub chart: Vec<Value>,
    /// (binary, replicas)
    pub controllers: Vec<(String, Vec<Replica>)>,
}

pub fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(crate::repo_root().join(path)).expect("manifest");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The binary a chart Deployment runs: its `app.kubernetes.io/name` (the controller's name),
/// whatever the release prefix and suffix of the Deployment's own name.
pub fn binary_of(deployment: &Value) -> String {
    deployment["metadata"]["labels"]["app.kubernetes.io/name"]
        .as_str()
        .expect("a controller Deployment is labelled app.kubernetes.io/name")
        .to_string()
}

/// The environment the chart gives a controller's pod (its literal values; `start_controller`
/// sets the fieldRefs as the kubelet would), text logs, then `extra_env`.
pub fn chart_env(pod: &Value, extra_env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = pod["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    env.insert("LOG_FORMAT".into(), "text".into());
    for (k, v) in extra_env {
        env.insert(k.to_string(), v.to_string());
    }
    env
}

/// A token of a ServiceAccount minted by the testkit: `{"token", "client"}` (the client is how
/// its audit log names the credential).
pub async fn mint_token(admin: &kube::Client, namespace: &str, service_account: &str) -> Value {
    let request = http::Request::post(format!(
        "/kaos-testkit/tokens?namespace={namespace}&serviceAccount={service_account}"
    ))
    .body(Vec::new())
    .expect("request");
    serde_json::from_str(&admin.request_text(request).await.expect("token")).expect("json")
}

impl ChartCluster {
    pub async fn start(
        scratch: &Scratch,
        testkit_flags: &[&str],
        replicas: usize,
        extra_env: &[(&str, &str)],
    ) -> Self {
        let mut flags = vec!["--rbac"];
        flags.extend_from_slice(testkit_flags);
        let (testkit, admin_kubeconfig) = serve_testkit(scratch, &flags);
        let admin = client(&admin_kubeconfig).await;
        let chart = documents("deploy/kaos.yaml");
        apply_yaml(
            &admin,
            &std::fs::read_to_string(crate::repo_root().join("deploy/namespace.yaml"))
                .expect("namespace"),
        )
        .await;
        apply_yaml(
            &admin,
            &std::fs::read_to_string(crate::repo_root().join("deploy/kaos.yaml")).expect("chart"),
        )
        .await;
        let admin_text = std::fs::read_to_string(&admin_kubeconfig).expect("kubeconfig");
        let admin_token = admin_text
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: "))
            .expect("admin token")
            .to_string();
        let mut controllers = Vec::new();
        for deployment in chart.iter().filter(|o| o["kind"] == "Deployment") {
            let binary = binary_of(deployment);
            let pod = &deployment["spec"]["template"]["spec"];
            let service_account = pod["serviceAccountName"]
                .as_str()
                .expect("service account")
                .to_string();
            let env = chart_env(pod, extra_env);
            let mut replicas_of = Vec::new();
            for index in 0..replicas {
                let minted = mint_token(&admin, "kaos-system", &service_account).await;
                let token = minted["token"].as_str().expect("token");
                let kubeconfig = scratch.0.join(format!("{binary}-{index}.kubeconfig"));
                std::fs::write(&kubeconfig, admin_text.replace(&admin_token, token))
                    .expect("kubeconfig");
                let process = start_controller(
                    scratch,
                    &binary,
                    &format!("{binary}-{index}"),
                    &kubeconfig,
                    &env,
                );
                replicas_of.push(Replica {
                    process,
                    service_account: service_account.clone(),
                    client: minted["client"].as_str().unwrap_or("").to_string(),
                    binary: binary.clone(),
                    kubeconfig,
                    env: env.clone(),
                    restarts: 0,
                });
            }
            controllers.push((binary, replicas_of));
        }
        Self {
            testkit,
            admin,
            admin_kubeconfig,
            chart,
            controllers,
        }
    }

    /// Restarts replicas that exited (as a kubelet would; a replica exits when it loses its
    /// lease), except those in `stopped` (killed on purpose). Returns how many were restarted.
    pub fn restart_exited(&mut self, scratch: &Scratch, stopped: &[String]) -> usize {
        let mut restarted = 0;
        for (_, replicas) in &mut self.controllers {
            for replica in replicas.iter_mut() {
                if stopped.contains(&replica.process.name) || replica.process.is_running() {
                    continue;
                }
                let name = replica.process.name.clone();
                replica.process = start_controller(
                    scratch,
                    &replica.binary,
                    &name,
                    &replica.kubeconfig,
                    &replica.env,
                );
                replica.restarts += 1;
                restarted += 1;
            }
        }
        restarted
    }

    /// The testkit's audit log.
    pub async fn audit(&self) -> Vec<Value> {
        let request = http::Request::get("/kaos-testkit/audit")
            .body(Vec::new())
            .expect("request");
        serde_json::from_str(&self.admin.request_text(request).await.expect("audit")).expect("json")
    }

    /// Every (user, verb, group, resource, namespace) an RBAC rule allowed.
    pub async fn used_grants(&self) -> Vec<Value> {
        let request = http::Request::get("/kaos-testkit/grants")
            .body(Vec::new())
            .expect("request");
        serde_json::from_str(&self.admin.request_text(request).await.expect("grants"))
            .expect("json")
    }
}
