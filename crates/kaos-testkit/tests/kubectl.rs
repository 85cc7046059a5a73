//! The real `kubectl` drives the real `kaos-testkit serve` binary: our independent check that
//! the testkit speaks Kubernetes. Without a kubectl the tests fail, saying where to get one: they
//! never pass by skipping (docs/testing.md).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

struct Served {
    child: Child,
    kubeconfig: PathBuf,
    _dir: TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kaos-testkit-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The kubectl these tests run: `KAOS_KUBECTL` (scripts/test.sh sets it to the one that
/// `scripts/control-plane build` makes, v1.37.2), else that build's
/// (`$KAOS_CONTROL_PLANE_CACHE/bin/kubectl`, default `.cache/control-plane/bin/kubectl`), else
/// `kubectl` on PATH. With none of them the test fails.
fn kubectl_binary() -> &'static Path {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| {
        // Absolute: the tests run kubectl in the repository's root, not in this crate's.
        if let Some(path) = std::env::var_os("KAOS_KUBECTL") {
            return std::fs::canonicalize(&path).unwrap_or_else(|error| {
                panic!("KAOS_KUBECTL={}: {error}", Path::new(&path).display())
            });
        }
        let cache = std::env::var_os("KAOS_CONTROL_PLANE_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join(".cache/control-plane"));
        let built = cache.join("bin/kubectl");
        if built.is_file() {
            return built;
        }
        let on_path = Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            on_path,
            "no kubectl: these tests drive kaos-testkit with the real kubectl. Build it with \
             `scripts/control-plane build` (needs Go; makes {}), put kubectl on PATH, or set \
             KAOS_KUBECTL",
            built.display()
        );
        PathBuf::from("kubectl")
    })
}

fn serve(name: &str) -> Served {
    let dir = TempDir::new(name);
    let kubeconfig = dir.0.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kaos-testkit"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--simulate-deployments",
            "50",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .expect("kaos-testkit starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().expect("a line").expect("readable");
    assert!(
        first.starts_with("kaos-testkit serving http://127.0.0.1:"),
        "{first}"
    );
    let second = lines.next().expect("a line").expect("readable");
    assert_eq!(second, format!("kubeconfig: {}", kubeconfig.display()));
    Served {
        child,
        kubeconfig,
        _dir: dir,
    }
}

fn kubectl(served: &Served, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(kubectl_binary());
    command
        .args(args)
        .env("KUBECONFIG", &served.kubeconfig)
        .current_dir(repo())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("kubectl runs");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("kubectl finishes")
}

/// Runs kubectl and returns its stdout, failing the test with its stderr if it fails.
fn ok(served: &Served, args: &[&str]) -> String {
    let out = kubectl(served, args, None);
    assert!(
        out.status.success(),
        "kubectl {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl get <resource> <name> -o jsonpath=<template>`.
fn jsonpath(served: &Served, resource: &str, name: &str, template: &str) -> String {
    let output = format!("jsonpath={template}");
    ok(served, &["get", resource, name, "-o", &output])
}

/// `kubectl patch <resource> <name> --type <patch_type> -p <patch>`.
fn patch(served: &Served, resource: &str, name: &str, patch_type: &str, patch: &str) {
    ok(
        served,
        &["patch", resource, name, "--type", patch_type, "-p", patch],
    );
}

#[test]
fn kubectl_installs_crds_applies_examples_and_reads_them_back() {
    let served = serve("examples");
    let version = ok(&served, &["version", "-o", "json"]);
    assert!(version.contains("v1.33.0+kaos-testkit"), "{version}");

    let out = ok(&served, &["apply", "--server-side", "-f", "deploy/crds/"]);
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/agents.kaos.tools serverside-applied"
        ),
        "{out}"
    );
    let out = ok(&served, &["apply", "--server-side", "-f", "examples/"]);
    assert!(
        out.contains("agent.kaos.tools/coordinator serverside-applied"),
        "{out}"
    );

    // Printer columns come from the CRD.
    let table = ok(&served, &["get", "agents"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "MODELAPI", "MODEL", "READY", "PHASE", "TOKENS", "BUDGET", "AGE"
        ]
    );
    assert!(
        table.lines().any(|l| l.starts_with("coordinator")
            && l.contains("llm-proxy")
            && l.contains("openai/gpt-4o")),
        "{table}"
    );
    let header = ok(&served, &["get", "modelapis"]);
    assert!(
        header.starts_with("NAME") && header.lines().next().unwrap_or("").contains("MODE"),
        "{header}"
    );
    let short = ok(&served, &["get", "mcp", "-o", "name"]);
    assert!(short.contains("mcpserver.kaos.tools/echo-tools"), "{short}");

    // Defaults are applied on the stored object.
    let yaml = ok(&served, &["get", "agent", "worker", "-o", "yaml"]);
    assert!(yaml.contains("waitForDependencies: true"), "{yaml}");
    assert!(yaml.contains("reasoningLoopMaxSteps: 5"), "{yaml}");
    let memory = jsonpath(&served, "agent", "coordinator", "{.spec.config.memory}");
    let memory: serde_json::Value = serde_json::from_str(&memory).expect("json");
    assert_eq!(
        memory,
        serde_json::json!({"enabled": true, "contextLimit": 10, "maxSessions": 1000, "maxSessionEvents": 500})
    );

    // A merge patch bumps the generation.
    patch(
        &served,
        "agent",
        "worker",
        "merge",
        r#"{"spec":{"model":"openai/gpt-4.1"}}"#,
    );
    let generation = jsonpath(
        &served,
        "agent",
        "worker",
        "{.metadata.generation} {.spec.model}",
    );
    assert_eq!(generation, "2 openai/gpt-4.1");

    // kubectl wait on a status field written through the status subresource.
    ok(
        &served,
        &[
            "patch",
            "modelapi",
            "llm-proxy",
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Ready","ready":true}}"#,
        ],
    );
    ok(
        &served,
        &[
            "wait",
            "--for=jsonpath={.status.phase}=Ready",
            "modelapi/llm-proxy",
            "--timeout=10s",
        ],
    );
    let table = ok(&served, &["get", "modelapi", "llm-proxy"]);
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()[1..4]
            == ["Proxy", "true", "Ready"],
        "{table}"
    );

    // A finalizer holds a deletion until it is removed.
    patch(
        &served,
        "agent",
        "worker",
        "merge",
        r#"{"metadata":{"finalizers":["kaos.tools/agent-finalizer"]}}"#,
    );
    ok(&served, &["delete", "agent", "worker", "--wait=false"]);
    let marked = jsonpath(&served, "agent", "worker", "{.metadata.deletionTimestamp}");
    assert!(!marked.is_empty(), "held with a deletionTimestamp");
    patch(
        &served,
        "agent",
        "worker",
        "json",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    );
    ok(
        &served,
        &["wait", "--for=delete", "agent/worker", "--timeout=10s"],
    );
    let gone = kubectl(&served, &["get", "agent", "worker"], None);
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains(r#"agents.kaos.tools "worker" not found"#)
    );
}

#[test]
fn kubectl_gets_the_cel_rule_message_and_the_strict_field_error() {
    let served = serve("rules");
    ok(&served, &["apply", "--server-side", "-f", "deploy/crds/"]);
    let proxy_without_config = "apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: bad}\nspec: {mode: Proxy}\n";
    let out = kubectl(
        &served,
        &["apply", "--server-side", "-f", "-"],
        Some(proxy_without_config),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"The ModelAPI "bad" is invalid: spec: Invalid value: mode Proxy requires proxyConfig (at least proxyConfig.models)"#),
        "{stderr}"
    );

    let misspelt = "apiVersion: kaos.tools/v1alpha1\nkind: Agent\nmetadata: {name: typo}\nspec: {modelAPI: m, model: x, mcpServer: [a]}\n";
    for apply in [
        &["apply", "--server-side", "-f", "-"][..],
        &["apply", "-f", "-"][..],
    ] {
        let out = kubectl(&served, apply, Some(misspelt));
        assert!(!out.status.success(), "{apply:?} must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(r#"strict decoding error: unknown field "spec.mcpServer""#),
            "{stderr}"
        );
    }
}

#[test]
fn kubectl_works_with_deployments_and_the_simulator() {
    let served = serve("deployments");
    let deployment = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {tier: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
"#;
    let out = kubectl(&served, &["apply", "-f", "-"], Some(deployment));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok(
        &served,
        &["rollout", "status", "deployment/web", "--timeout=10s"],
    );
    let table = ok(&served, &["get", "deployment", "web"]);
    assert!(
        table.lines().nth(1).unwrap_or("").contains("2/2"),
        "{table}"
    );
    ok(
        &served,
        &[
            "patch",
            "deployment",
            "web",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
    );
    ok(
        &served,
        &[
            "wait",
            "--for=jsonpath={.status.readyReplicas}=3",
            "deployment/web",
            "--timeout=10s",
        ],
    );
    // `kubectl scale` goes through deployments/scale; `kubectl get all` reads the category.
    ok(&served, &["scale", "deployment", "web", "--replicas=4"]);
    let replicas = jsonpath(&served, "deployment", "web", "{.spec.replicas}");
    assert_eq!(replicas, "4");
    let all = ok(&served, &["get", "all", "-o", "name"]);
    assert_eq!(
        all.trim(),
        "deployment.apps/web",
        "no ConfigMaps or Secrets in `all`"
    );
    let selected = ok(
        &served,
        &["get", "deployments", "-l", "tier=web", "-o", "name"],
    );
    assert_eq!(selected.trim(), "deployment.apps/web");
    ok(&served, &["delete", "deployment", "web"]);
    let left = ok(&served, &["get", "deployments", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");
}
