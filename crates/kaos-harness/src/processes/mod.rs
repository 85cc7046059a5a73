//! Running the real binaries: `kaos-testkit serve` and the controller executables as separate
//! processes, as they are deployed; [`ChartCluster`] runs them as the chart deploys them.

mod chart;

pub use chart::{
    ChartCluster, Crash, Crashes, LOST_LEASE, Replica, binary_of, chart_env, documents, mint_token,
};

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
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .current_dir(crate::repo_root())
            .args(["build", "--workspace", "--all-targets"]);
        // The test runner sets the package variables of the test's crate; build scripts that
        // watch them (ring's) would see a change and rebuild everything above them, here and
        // in the next cargo run.
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| {
                n.starts_with("CARGO_PKG_")
                    || matches!(
                        n,
                        "CARGO_MANIFEST_DIR"
                            | "CARGO_MANIFEST_PATH"
                            | "CARGO_CRATE_NAME"
                            | "CARGO_PRIMARY_PACKAGE"
                    )
            }) {
                cargo.env_remove(name);
            }
        }
        let status = cargo.status().expect("cargo runs");
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
    /// Removed after a passing test unless `KAOS_KEEP_SCRATCH` is set; kept after a failing one,
    /// whose message points at the logs.
    fn drop(&mut self) {
        if !std::thread::panicking() && std::env::var_os("KAOS_KEEP_SCRATCH").is_none() {
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

/// Starts one controller binary as a pod would run it, logging to `<scratch>/<name>.log` (after
/// what an earlier process of that name logged there).
pub fn start_controller(
    scratch: &Scratch,
    binary: &str,
    name: &str,
    kubeconfig: &Path,
    env: &BTreeMap<String, String>,
) -> Process {
    start_program(
        scratch,
        &binaries().join(binary),
        &[],
        name,
        kubeconfig,
        env,
    )
}

/// [`start_controller`] of any program with `args` (the harness's tests run a shell command
/// standing in for a controller).
pub(crate) fn start_program(
    scratch: &Scratch,
    program: &Path,
    args: &[String],
    name: &str,
    kubeconfig: &Path,
    env: &BTreeMap<String, String>,
) -> Process {
    let metrics_port = free_port();
    let probe_port = free_port();
    // Appended to, so a replica started again keeps what it logged before it exited.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(scratch.0.join(format!("{name}.log")))
        .expect("log file");
    let child = Command::new(program)
        .args(args)
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
        .unwrap_or_else(|e| panic!("{} starts: {e}", program.display()));
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

/// The sum of every sample of a metric family (`family{labels} value`, all labels) in a scrape.
pub fn family_total(metrics: &str, family: &str) -> f64 {
    let prefix = format!("{family}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub const POLL: Duration = Duration::from_millis(100);
