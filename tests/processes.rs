//! Running the real binaries: `kaos-testkit serve` and the controller executables as separate
//! processes, as they are deployed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::pinned_kind;
use serde_json::Value;

/// Builds the binaries once per test process (a no-op when they are up to date) and returns the
/// directory holding them; `KAOS_BIN_DIR` names a directory of already built ones instead (the
/// benchmark uses release builds).
///
/// It builds the whole workspace with all targets, as `cargo test --workspace` does: with `-p`
/// for only the binaries, Cargo unifies the dependencies' features differently (no dev-dependency
/// features) and compiles tokio, hyper, kube and the rest a second time.
pub fn binaries() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Ok(dir) = std::env::var("KAOS_BIN_DIR") {
            return PathBuf::from(dir);
        }
        let status = Command::new(env!("CARGO"))
            .current_dir(crate::repo_root())
            .args(["build", "--workspace", "--all-targets"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the binaries failed");
        // This test executable lives in <target>/<profile>/deps.
        let exe = std::env::current_exe().expect("test executable");
        exe.parent()
            .and_then(Path::parent)
            .expect("target profile directory")
            .to_path_buf()
    })
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kaos-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }
}

impl Drop for Scratch {
    /// Removed after a passing test; kept after a failing one, whose message points at the logs.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child process killed on drop.
pub struct Process {
    pub name: String,
    pub child: Child,
    pub metrics_port: u16,
    /// Where `/healthz` and `/readyz` answer (0 when the process serves none).
    pub probe_port: u16,
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub use kaos_testkit::free_port;

/// Starts `kaos-testkit serve` with the CRDs and the deployment simulator; returns the process
/// and its kubeconfig.
pub fn serve_testkit(scratch: &Scratch, extra: &[&str]) -> (Process, PathBuf) {
    let kubeconfig = scratch.0.join("kubeconfig");
    let mut child = Command::new(binaries().join("kaos-testkit"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--simulate-deployments",
            "100",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .arg("--apply")
        .arg(crate::repo_root().join("deploy/crds"))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kaos-testkit starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    for _ in 0..2 {
        lines.next().expect("a line").expect("readable");
    }
    (
        Process {
            name: "kaos-testkit".into(),
            child,
            metrics_port: 0,
            probe_port: 0,
        },
        kubeconfig,
    )
}

/// Starts one controller binary as a pod would run it, logging to `<scratch>/<name>.log`.
pub fn start_controller(
    scratch: &Scratch,
    binary: &str,
    name: &str,
    kubeconfig: &Path,
    env: &BTreeMap<String, String>,
) -> Process {
    let metrics_port = free_port();
    let probe_port = free_port();
    let log = std::fs::File::create(scratch.0.join(format!("{name}.log"))).expect("log file");
    let child = Command::new(binaries().join(binary))
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", name)
        .env("POD_NAMESPACE", "kaos-system")
        .env("METRICS_BIND_ADDRESS", format!("127.0.0.1:{metrics_port}"))
        .env(
            "HEALTH_PROBE_BIND_ADDRESS",
            format!("127.0.0.1:{probe_port}"),
        )
        .env(
            "CONTROLLER_LOG_LEVEL",
            std::env::var("KAOS_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .envs(env)
        // The controllers log to stdout (as controller-runtime managers do).
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{binary} starts: {e}"));
    Process {
        name: name.into(),
        child,
        metrics_port,
        probe_port,
    }
}

/// A kube client from a kubeconfig file.
pub async fn client(kubeconfig: &Path) -> kube::Client {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let kubeconfig: kube::config::Kubeconfig =
        serde_saphyr::from_str(&text).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Server-side applies every document of a YAML stream (any kind the server serves).
pub async fn apply_yaml(client: &kube::Client, yaml: &str) {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML");
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        let object: DynamicObject = serde_json::from_value(document).expect("an object");
        let types = object.types.clone().expect("apiVersion and kind");
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let (resource, capabilities) =
            pinned_kind(client, &GroupVersionKind::gvk(group, version, &types.kind))
                .await
                .expect("served kind");
        let api: kube::Api<DynamicObject> =
            if capabilities.scope == kube::discovery::Scope::Namespaced {
                kube::Api::namespaced_with(
                    client.clone(),
                    object.metadata.namespace.as_deref().unwrap_or("default"),
                    &resource,
                )
            } else {
                kube::Api::all_with(client.clone(), &resource)
            };
        let name = object.metadata.name.clone().expect("a name");
        api.patch(
            &name,
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(&object),
        )
        .await
        .expect("applied");
    }
}

/// The body of `/metrics` of a process.
pub async fn scrape(port: u16) -> String {
    http_get(port, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// `GET path` on 127.0.0.1:`port`: the status code and body, None when nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The value of one sample line (`name{labels} value`) in a scrape, 0 if absent.
pub fn sample(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

pub const POLL: Duration = Duration::from_millis(100);

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
