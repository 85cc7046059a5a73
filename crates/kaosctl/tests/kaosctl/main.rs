//! The `kaosctl` command line: `render` prints what the controllers really create (`render`);
//! `dev --exit-when-ready` brings the quickstart to Ready in a sandbox and, with
//! `--kubeconfig`, on an existing cluster (`dev`); the sandbox runs workflows that `kaosctl
//! workflow run` starts (`workflow`); `migrate` moves a cluster from KAOS (`migrate`). Errors
//! are one line and a hint.

mod dev;
mod migrate;
mod render;
mod workflow;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kaos_testkit::{ApiServer, ServeOptions, TestServer};
use kaosctl::dev::{self as sandbox, AgentAddress, Cluster, Dev, Options};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents of a YAML text (empty ones left out).
fn yaml_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("yaml")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn example(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("examples").join(name)).expect("example");
    yaml_documents(&text)
}

fn quickstart() -> Vec<Value> {
    example("quickstart.yaml")
}

/// An AccessGrant on the quickstart's worker and a ThirdPartyService it may call, with the
/// client Secret that service reads.
const ACCESS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth}\nstringData: {client-secret: s3cret}\n---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: researchers}\nspec: {subjects: [{kind: Group, name: researchers}, {kind: Agent, name: coordinator}], resources: [{kind: Agent, name: worker}, {kind: MCPServer, name: echo-tools}]}\n---\napiVersion: kaos.tools/v1alpha1\nkind: ThirdPartyService\nmetadata: {name: github}\nspec: {clientID: kaos-dev, clientSecretRef: {name: github-oauth, key: client-secret}, issuerURI: 'https://github.com', scopes: [{name: repo}], protectedResources: ['https://api.github.com'], routeRef: {name: github-egress}, access: [{agent: worker, scopes: [repo]}]}\n";

/// A diamond of steps over the quickstart's agents.
const WORKFLOW: &str = r#"apiVersion: kaos.tools/v1alpha1
kind: AgentWorkflow
metadata: {name: greet}
spec:
  input: "the workflow's input"
  steps:
    - {name: ask, agentRef: worker}
    - {name: left, agentRef: worker, dependsOn: [ask], input: "left of {{ steps.ask.output }}"}
    - {name: right, agentRef: coordinator, dependsOn: [ask], input: "right of {{ steps.ask.output }}"}
    - name: join
      agentRef: coordinator
      dependsOn: [left, right]
      input: "{{ steps.left.output }} + {{ steps.right.output }}"
"#;

/// A directory of its own for one test, removed when it ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kaosctl-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        Self(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to the file `name` in it, and returns its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    /// The provider key Secret the quickstart's ModelAPI reads, as a file to apply.
    fn credentials(&self) -> PathBuf {
        self.write("credentials.yaml", kaosctl::defaults::SANDBOX_CREDENTIALS)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `kaosctl dev`'s sandbox in-process, its kubeconfig in `scratch`, with `apply` applied (the
/// quickstart when empty) and steps sent to `agent_addresses`.
async fn start_sandbox(
    scratch: &Scratch,
    apply: Vec<PathBuf>,
    agent_addresses: Vec<AgentAddress>,
) -> Dev {
    let options = Options {
        cluster: Cluster::Sandbox {
            listen: "127.0.0.1:0".parse().expect("addr"),
            write_kubeconfig: scratch.join("kubeconfig"),
        },
        apply,
        agent_addresses,
    };
    sandbox::start(&options).await.expect("sandbox")
}

/// kaos-testkit on loopback as a cluster of one's own, its Deployments rolled out by the
/// simulator.
async fn serve(api: ApiServer, rbac: bool) -> TestServer {
    let serve = ServeOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        simulate_deployments: Some(Duration::from_millis(100)),
        rbac,
    };
    TestServer::start(api, &serve).await.expect("serves")
}

/// The kaosctl binary, with no kubeconfig but the one its arguments name.
fn kaosctl_command<I: IntoIterator<Item: Into<OsString>>>(args: I) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kaosctl"));
    command
        .args(args.into_iter().map(Into::into))
        .env_remove("KUBECONFIG");
    command
}

/// Runs kaosctl to the end.
fn run<I: IntoIterator<Item: Into<OsString>>>(args: I) -> Output {
    kaosctl_command(args).output().expect("runs")
}

/// Runs kaosctl with `input` on its standard input.
fn run_with_input<I: IntoIterator<Item: Into<OsString>>>(args: I, input: &str) -> Output {
    use std::io::Write;
    kaosctl_command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())?;
            child.wait_with_output()
        })
        .expect("runs")
}

/// Runs kaosctl off the async runtime, so an in-process API server keeps serving meanwhile.
async fn kaosctl<I: IntoIterator<Item: Into<OsString>>>(args: I) -> Output {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    tokio::task::spawn_blocking(move || run(args))
        .await
        .expect("joined")
}

/// Asserts that `text` contains each of `lines`.
fn assert_has_lines<S: AsRef<str>>(text: &str, lines: &[S]) {
    for line in lines.iter().map(AsRef::as_ref) {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

/// The lines kaosctl wrote to its standard error.
fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(String::from)
        .collect()
}
