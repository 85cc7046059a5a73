//! `kaosctl render` prints what the controllers really create; `kaosctl dev --exit-when-ready`
//! brings the quickstart to Ready in a sandbox and, with `--kubeconfig`, on an existing cluster;
//! the sandbox runs workflows that `kaosctl workflow run` starts; errors are one line and a hint.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kaos_testkit::cluster::ListOptions;
use kaosctl::dev::{self, Cluster, Options};
use kaosctl::render::render;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("examples").join(name)).expect("example");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("yaml")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn quickstart() -> Vec<Value> {
    example("quickstart.yaml")
}

/// "Kind name" of each object.
fn kinds_and_names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Whether every field of `expected` is in `actual` with the same value (lists element-wise).
fn contained(expected: &Value, actual: &Value, path: &str, differences: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (key, value) in e {
                match a.get(key) {
                    Some(other) => contained(value, other, &format!("{path}.{key}"), differences),
                    None => differences.push(format!("{path}.{key} is missing")),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (x, y)) in e.iter().zip(a).enumerate() {
                contained(x, y, &format!("{path}[{i}]"), differences);
            }
        }
        (e, a) if e != a => differences.push(format!("{path}: rendered {e}, created {a}")),
        _ => {}
    }
}

#[tokio::test]
async fn render_prints_what_the_controllers_really_create() {
    let rendered = render(&quickstart()).expect("renders");
    assert!(rendered.problems.is_empty(), "{:?}", rendered.problems);
    assert_eq!(
        kinds_and_names(&rendered.objects),
        [
            "ConfigMap litellm-config-llm-proxy",
            "Deployment modelapi-llm-proxy",
            "Service modelapi-llm-proxy",
            "Deployment mcpserver-echo-tools",
            "Service mcpserver-echo-tools",
            "Deployment agent-worker",
            "Service agent-worker",
            "Deployment agent-coordinator",
            "Service agent-coordinator",
        ]
    );

    let dir = std::env::temp_dir().join(format!("kaosctl-render-{}", std::process::id()));
    let options = Options {
        cluster: Cluster::Sandbox {
            listen: "127.0.0.1:0".parse().expect("addr"),
            write_kubeconfig: dir.join("kubeconfig"),
        },
        apply: vec![],
        agent_addresses: vec![],
    };
    let sandbox = dev::start(&options).await.expect("sandbox");
    sandbox
        .wait_ready(Duration::from_secs(60), false)
        .await
        .expect("quickstart Ready");
    // The coordinator learns its peer after the worker is Ready: let that settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cluster = &sandbox.testkit.as_ref().expect("a sandbox").api.cluster;
    let differences = differences(cluster, rendered.objects);
    assert!(
        differences.is_empty(),
        "render and reality differ:\n{}",
        differences.join("\n")
    );
    let agents = cluster
        .resource("kaos.tools", "v1alpha1", "agents")
        .expect("agents");
    assert_eq!(
        cluster
            .list(&agents, "", &ListOptions::default())
            .expect("list")["items"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Where the rendered objects differ from what the controllers created in `cluster`.
fn differences(cluster: &kaos_testkit::Cluster, rendered: Vec<Value>) -> Vec<String> {
    let mut differences = Vec::new();
    for mut object in rendered {
        let api_version = object["apiVersion"].as_str().unwrap_or("").to_string();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let plural = format!("{}s", object["kind"].as_str().unwrap_or("").to_lowercase());
        let rt = cluster
            .resource(group, version, &plural)
            .expect("served kind");
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let actual = cluster
            .get(&rt, "default", &name)
            .expect("created by a controller");
        // Owner uids exist only in the cluster.
        if let Some(refs) = object
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for r in refs {
                r.as_object_mut().map(|m| m.remove("uid"));
            }
        }
        contained(
            &object,
            &actual,
            &format!("{plural}/{name}"),
            &mut differences,
        );
    }
    differences
}

/// The value of `name` in the env of a rendered Deployment's first container.
fn env<'a>(objects: &'a [Value], deployment: &str, name: &str) -> Option<&'a str> {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == deployment)?
        .pointer("/spec/template/spec/containers/0/env")?
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// A MemoryStore renders to its claim, Deployment and Service, called at its summarization
/// ModelAPI's endpoint, and the agent bound to it gets its endpoint; the sandbox's memorystore
/// controller brings the store to Ready with exactly those objects.
#[tokio::test]
async fn render_and_the_sandbox_agree_on_a_memory_store_and_its_agent() {
    let mut documents = quickstart();
    documents.extend(example("memory-and-autonomy.yaml"));
    let rendered = render(&documents).expect("renders");
    assert!(rendered.problems.is_empty(), "{:?}", rendered.problems);
    let kinds = kinds_and_names(&rendered.objects);
    for object in [
        "PersistentVolumeClaim memorystore-support-memory-data",
        "Deployment memorystore-support-memory",
        "Service memorystore-support-memory",
        "Deployment agent-support-assistant",
    ] {
        assert!(kinds.iter().any(|k| k == object), "{object} in {kinds:?}");
    }
    assert_eq!(
        env(
            &rendered.objects,
            "memorystore-support-memory",
            "KAOS_MEMORY_MODEL_BASE_URL"
        ),
        Some("http://modelapi-llm-proxy.default.svc.cluster.local:8000/v1")
    );
    assert_eq!(
        env(
            &rendered.objects,
            "agent-support-assistant",
            "MEMORY_STORE_ENDPOINT"
        ),
        Some("http://memorystore-support-memory.default.svc.cluster.local:8080")
    );

    let dir = std::env::temp_dir().join(format!("kaosctl-render-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let credentials = dir.join("credentials.yaml");
    std::fs::write(&credentials, kaosctl::defaults::SANDBOX_CREDENTIALS).expect("credentials");
    let options = Options {
        cluster: Cluster::Sandbox {
            listen: "127.0.0.1:0".parse().expect("addr"),
            write_kubeconfig: dir.join("kubeconfig"),
        },
        apply: vec![
            credentials,
            repo().join("examples/quickstart.yaml"),
            repo().join("examples/memory-and-autonomy.yaml"),
        ],
        agent_addresses: vec![],
    };
    let sandbox = dev::start(&options).await.expect("sandbox");
    sandbox
        .wait_ready(Duration::from_secs(60), false)
        .await
        .expect("every example resource Ready");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rows = sandbox.rows().await.expect("rows");
    let store = rows
        .iter()
        .find(|r| r.kind == "MemoryStore" && r.name == "support-memory")
        .expect("the store is reported");
    assert_eq!(
        (store.phase.as_str(), store.endpoint.as_str()),
        (
            "Ready",
            "http://memorystore-support-memory.default.svc.cluster.local:8080"
        )
    );
    let report = sandbox.report().await;
    for line in [
        "PersistentVolumeClaim default/memorystore-support-memory-data",
        "memorystore-controller: http://",
    ] {
        assert!(report.contains(line), "missing {line:?} in:\n{report}");
    }
    let cluster = &sandbox.testkit.as_ref().expect("a sandbox").api.cluster;
    let differences = differences(cluster, rendered.objects);
    assert!(
        differences.is_empty(),
        "render and reality differ:\n{}",
        differences.join("\n")
    );
    sandbox.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// An AccessGrant on the quickstart's worker and a ThirdPartyService it may call, with the
/// client Secret that service reads.
const ACCESS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth}\nstringData: {client-secret: s3cret}\n---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: researchers}\nspec: {subjects: [{kind: Group, name: researchers}, {kind: Agent, name: coordinator}], resources: [{kind: Agent, name: worker}, {kind: MCPServer, name: echo-tools}]}\n---\napiVersion: kaos.tools/v1alpha1\nkind: ThirdPartyService\nmetadata: {name: github}\nspec: {clientID: kaos-dev, clientSecretRef: {name: github-oauth, key: client-secret}, issuerURI: 'https://github.com', scopes: [{name: repo}], protectedResources: ['https://api.github.com'], routeRef: {name: github-egress}, access: [{agent: worker, scopes: [repo]}]}\n";

/// AccessGrants and ThirdPartyServices render to nothing, with a comment each; an invalid one
/// is refused like any other resource.
#[test]
fn render_validates_access_kinds_and_creates_nothing_for_them() {
    let mut documents = quickstart();
    let access: Vec<Value> = serde_saphyr::from_multiple(ACCESS).expect("yaml");
    documents.extend(access.iter().cloned());
    let rendered = render(&documents).expect("renders");
    assert!(rendered.problems.is_empty(), "{:?}", rendered.problems);
    assert_eq!(
        rendered.objects,
        render(&quickstart()).expect("renders").objects,
        "they add no object"
    );
    assert_eq!(
        rendered.notes,
        [
            "AccessGrant default/researchers: creates no objects; the authz controller writes its status (Enforced=False, AuthorizationDisabled: kaos-rs does not enforce it)",
            "ThirdPartyService default/github: creates no objects; the authz controller writes its status (Ready=False, FeatureDisabled: kaos-rs does not enforce it)",
        ]
    );

    let out = Command::new(env!("CARGO_BIN_EXE_kaosctl"))
        .args(["render", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(ACCESS.as_bytes())?;
            child.wait_with_output()
        })
        .expect("runs");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(
        stdout.lines().all(|l| l.starts_with("# ")),
        "comments only: {stdout}"
    );

    let mut bad = access[1].clone();
    bad["spec"]["resources"] = serde_json::json!([{"kind": "Agent"}]);
    let err = render(&[bad]).expect_err("invalid");
    assert!(
        err.to_string()
            .starts_with("AccessGrant researchers is invalid: "),
        "{err}"
    );
}

/// The sandbox runs the authz controller: an AccessGrant and a ThirdPartyService say they are
/// not enforced and that what they name resolves, the table shows those reasons, and waiting
/// for readiness ends although neither is ever Ready.
#[tokio::test]
async fn the_sandbox_reports_access_grants_and_third_party_services() {
    let dir = std::env::temp_dir().join(format!("kaosctl-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let credentials = dir.join("credentials.yaml");
    std::fs::write(&credentials, kaosctl::defaults::SANDBOX_CREDENTIALS).expect("credentials");
    let access = dir.join("access.yaml");
    std::fs::write(&access, ACCESS).expect("access");
    let options = Options {
        cluster: Cluster::Sandbox {
            listen: "127.0.0.1:0".parse().expect("addr"),
            write_kubeconfig: dir.join("kubeconfig"),
        },
        apply: vec![credentials, repo().join("examples/quickstart.yaml"), access],
        agent_addresses: vec![],
    };
    let sandbox = dev::start(&options).await.expect("sandbox");
    sandbox
        .wait_ready(Duration::from_secs(60), false)
        .await
        .expect("everything settles");
    let rows = sandbox.rows().await.expect("rows");
    let row = |kind: &str| {
        rows.iter()
            .find(|r| r.kind == kind)
            .unwrap_or_else(|| panic!("no {kind} in {rows:?}"))
    };
    let (grant, service) = (row("AccessGrant"), row("ThirdPartyService"));
    assert_eq!(
        (grant.name.as_str(), grant.phase.as_str(), grant.settled),
        ("researchers", "AuthorizationDisabled", true)
    );
    assert_eq!(
        (
            service.name.as_str(),
            service.phase.as_str(),
            service.settled
        ),
        ("github", "FeatureDisabled", true)
    );

    let cluster = &sandbox.testkit.as_ref().expect("a sandbox").api.cluster;
    let conditions = |plural: &str, name: &str| -> Vec<(String, String, String)> {
        let resource = cluster
            .resource("kaos.tools", "v1alpha1", plural)
            .expect("served");
        let object = cluster.get(&resource, "default", name).expect("exists");
        let mut conditions: Vec<(String, String, String)> = object["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .map(|c| {
                let text = |k: &str| c[k].as_str().unwrap_or("").to_string();
                (text("type"), text("status"), text("reason"))
            })
            .collect();
        conditions.sort();
        conditions
    };
    let expected = |settled: (&str, &str)| {
        let mut expected = vec![
            (
                settled.0.to_string(),
                "False".to_string(),
                settled.1.to_string(),
            ),
            (
                "ResolvedRefs".to_string(),
                "True".to_string(),
                "ReferencesResolved".to_string(),
            ),
        ];
        expected.sort();
        expected
    };
    assert_eq!(
        conditions("accessgrants", "researchers"),
        expected(("Enforced", "AuthorizationDisabled"))
    );
    assert_eq!(
        conditions("thirdpartyservices", "github"),
        expected(("Ready", "FeatureDisabled"))
    );

    let report = sandbox.report().await;
    for line in [
        "AccessGrant        researchers  AuthorizationDisabled\n",
        "ThirdPartyService  github       FeatureDisabled\n",
        "authz-controller: http://",
    ] {
        assert!(report.contains(line), "missing {line:?} in:\n{report}");
    }
    sandbox.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn render_reports_missing_dependencies_and_bad_manifests_clearly() {
    let lonely = serde_json::json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent", "metadata": {"name": "a"},
        "spec": {"modelAPI": "nowhere", "model": "m"}});
    let rendered = render(&[lonely]).expect("renders");
    assert!(rendered.objects.is_empty());
    assert_eq!(
        rendered.problems,
        [
            "Agent a: Failed to resolve ModelAPI nowhere: no ModelAPI of that name in namespace default"
        ]
    );

    // A store whose embedding ModelAPI is missing waits, and so does an agent bound to it.
    let proxy = serde_json::json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": "llm"},
        "spec": {"mode": "Proxy", "proxyConfig": {"models": ["*"]}}});
    let store = serde_json::json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "MemoryStore", "metadata": {"name": "mem"},
        "spec": {"storage": {"type": "local"}, "models": {"summarization": {"modelAPI": "llm", "model": "m"}, "embedding": {"modelAPI": "embedder", "model": "e"}}}});
    let bound = serde_json::json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent", "metadata": {"name": "b"},
        "spec": {"modelAPI": "llm", "model": "m", "config": {"memory": {"memoryStore": "mem"}}}});
    let rendered = render(&[proxy.clone(), store, bound.clone()]).expect("renders");
    assert_eq!(
        rendered.problems,
        [
            "MemoryStore mem: embedding ModelAPI \"embedder\" not found",
            "Agent b: MemoryStore mem is not ready",
        ]
    );
    let rendered = render(&[proxy, bound]).expect("renders");
    assert_eq!(rendered.problems, ["Agent b: MemoryStore mem not found"]);

    let bad = serde_json::json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI", "metadata": {"name": "m"}, "spec": {"mode": "Proxy"}});
    let err = render(&[bad]).expect_err("invalid");
    assert!(
        err.to_string().contains("mode Proxy requires proxyConfig"),
        "{err}"
    );
}

#[test]
fn the_cli_prints_one_line_and_a_hint_on_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_kaosctl"))
        .args(["render", "-f", "no-such-file.yaml"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "kaosctl: cannot read no-such-file.yaml: No such file or directory (os error 2)",
            "hint: pass existing YAML files with -f, or - for standard input"
        ]
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kaosctl"))
        .arg("crds")
        .output()
        .expect("runs");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("kind: CustomResourceDefinition")
            .count(),
        kaos_api::crd::all().len()
    );
}

#[test]
fn dev_exits_when_the_quickstart_is_ready() {
    let dir = std::env::temp_dir().join(format!("kaosctl-dev-{}", std::process::id()));
    let kubeconfig = dir.join("kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_kaosctl"))
        .args([
            "dev",
            "--listen",
            "127.0.0.1:0",
            "--exit-when-ready",
            "--timeout",
            "90",
            "--write-kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("all resources are Ready"), "{stdout}");
    for line in [
        "ModelAPI   llm-proxy",
        "MCPServer  echo-tools",
        "Agent      coordinator",
        "Agent      worker",
        "Deployment default/agent-worker",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(
        stdout.contains(&format!(
            "try: kubectl --kubeconfig {} get agents",
            kubeconfig.display()
        )),
        "{stdout}"
    );
    assert!(kubeconfig.exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs kaosctl off the async runtime, so an in-process API server keeps serving meanwhile.
async fn kaosctl(args: Vec<std::ffi::OsString>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_kaosctl"))
            .args(args)
            .output()
            .expect("runs")
    })
    .await
    .expect("joined")
}

#[tokio::test]
async fn dev_with_kubeconfig_brings_the_quickstart_to_ready_on_an_existing_cluster() {
    use kaos_testkit::{ApiServer, ServeOptions, TestServer};
    // An existing cluster: kaos-testkit on loopback, no CRDs, no registry, a kubeconfig whose
    // context points at namespace team-a.
    let api = ApiServer::new(kaos_testkit::Cluster::default());
    kaos_testkit::manifests::apply_yaml(
        &api.cluster,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n",
    )
    .expect("namespace");
    let serve = ServeOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        simulate_deployments: Some(Duration::from_millis(100)),
        rbac: false,
    };
    let server = TestServer::start(api, &serve).await.expect("serves");
    let dir = std::env::temp_dir().join(format!("kaosctl-existing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        server
            .kubeconfig(None)
            .replace("namespace: default", "namespace: team-a"),
    )
    .expect("kubeconfig");
    // The provider key Secret the quickstart's ModelAPI reads, as a user creates it first.
    let credentials = dir.join("credentials.yaml");
    std::fs::write(
        &credentials,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: openai-credentials}\nstringData: {api-key: sk-test}\n",
    )
    .expect("credentials");
    let args = |extra: &[&str]| -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["dev".into(), "--kubeconfig".into()];
        args.push(kubeconfig.clone().into());
        args.push("--apply".into());
        args.push(credentials.clone().into());
        args.push("--apply".into());
        args.push(repo().join("examples/quickstart.yaml").into());
        args.extend(["--exit-when-ready", "--timeout", "90"].map(Into::into));
        args.extend(extra.iter().map(Into::into));
        args
    };

    // Without the CRDs: one line naming what is missing, and the flag that installs it.
    let out = kaosctl(args(&[])).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            format!(
                "kaosctl: {} lacks CRD agents.kaos.tools, CRD modelapis.kaos.tools, CRD mcpservers.kaos.tools, CRD memorystores.kaos.tools, CRD accessgrants.kaos.tools, CRD thirdpartyservices.kaos.tools, CRD agentworkflows.kaos.tools, CRD agentworkflowruns.kaos.tools, the MCP runtime registry (ConfigMap kaos-system/kaos-mcp-runtimes)",
                server.url().trim_end_matches('/')
            )
            .as_str(),
            "hint: add --install-crds to install them (the CRDs of `kaosctl crds`, server-side applied, and the default registry)",
        ],
        "{stderr}"
    );

    let out = kaosctl(args(&["--install-crds"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("all resources are Ready"), "{stdout}");
    for line in [
        "ModelAPI   llm-proxy",
        "MCPServer  echo-tools",
        "Agent      coordinator",
        "Agent      worker",
        "Deployment team-a/agent-worker",
        "Service team-a/mcpserver-echo-tools",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(stderr.contains("Leases in namespace team-a"), "{stderr}");
    let cluster = &server.api.cluster;
    let leases = cluster
        .resource("coordination.k8s.io", "v1", "leases")
        .expect("leases");
    let mut holders: Vec<String> = cluster
        .list(&leases, "team-a", &ListOptions::default())
        .expect("list")["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    holders.sort();
    assert_eq!(
        holders,
        [
            "kaos-agent-controller",
            "kaos-authz-controller",
            "kaos-mcpserver-controller",
            "kaos-memorystore-controller",
            "kaos-modelapi-controller",
            "kaos-workflow-controller"
        ]
    );
    // A clean stop hands the Leases over (no holder left), so the next run leads at once.
    for lease in cluster
        .list(&leases, "team-a", &ListOptions::default())
        .expect("list")["items"]
        .as_array()
        .expect("items")
    {
        assert!(
            lease
                .pointer("/spec/holderIdentity")
                .is_none_or(|h| h.is_null() || h == ""),
            "{lease}"
        );
    }

    // Again, with the CRDs in place: no flag needed, and Ready again.
    let out = kaosctl(args(&[])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

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

fn yaml_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("yaml")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Runs `kaosctl render -f -` on `manifest`: (success, stdout, stderr).
fn render_cli(manifest: &str) -> (bool, String, String) {
    use std::io::Write;
    let out = Command::new(env!("CARGO_BIN_EXE_kaosctl"))
        .args(["render", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(manifest.as_bytes())?;
            child.wait_with_output()
        })
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Workflows and runs render to nothing, with a comment each; what the API server refuses is
/// refused with its field path, and what the workflow controller would report (a step reading
/// a step it does not wait for, a missing agent or workflow) is a problem.
#[test]
fn render_validates_workflows_and_runs_and_creates_nothing_for_them() {
    let run = "apiVersion: kaos.tools/v1alpha1\nkind: AgentWorkflowRun\nmetadata: {name: greet-now}\nspec: {workflowRef: greet, input: hi}\n";
    let mut documents = quickstart();
    documents.extend(yaml_documents(WORKFLOW));
    documents.extend(yaml_documents(run));
    let rendered = render(&documents).expect("renders");
    assert!(rendered.problems.is_empty(), "{:?}", rendered.problems);
    assert_eq!(
        rendered.objects,
        render(&quickstart()).expect("renders").objects,
        "they add no object"
    );
    assert_eq!(
        rendered.notes,
        [
            "AgentWorkflow default/greet: creates no objects; the workflow controller sends its steps to their agents over A2A (for each AgentWorkflowRun, and on its schedule) and writes its status",
            "AgentWorkflowRun default/greet-now: creates no objects; the workflow controller sends the steps of its workflow to their agents over A2A and writes its status",
        ]
    );

    // The schema and its CEL rules, as the API server applies them: each error has its path.
    let bad = WORKFLOW
        .replace(
            "dependsOn: [ask], input: \"left",
            "dependsOn: [left], input: \"left",
        )
        .replace("input: \"the workflow's input\"", "schedule: every day");
    let err = render(&yaml_documents(&bad)).expect_err("invalid");
    let message = err.to_string();
    assert!(
        message.starts_with("AgentWorkflow greet is invalid: "),
        "{message}"
    );
    for expected in [
        "spec.steps[1].dependsOn: Invalid value: a step cannot depend on itself",
        "spec.schedule: Invalid value: \"every day\": schedule must be a cron expression",
    ] {
        assert!(message.contains(expected), "{expected:?} in {message}");
    }
    let (ok, stdout, stderr) = render_cli(&bad);
    assert!(!ok && stdout.is_empty(), "{stdout}");
    assert_eq!(stderr.lines().count(), 2, "one line and a hint: {stderr}");
    assert!(
        stderr.starts_with("kaosctl: AgentWorkflow greet is invalid: ")
            && stderr
                .contains("spec.steps[1].dependsOn: Invalid value: a step cannot depend on itself")
            && stderr.contains("\nhint: fix the manifest"),
        "{stderr}"
    );

    // Valid for the API server, refused by the controller: reported like an Agent whose
    // ModelAPI is missing.
    let unordered = WORKFLOW.replace(
        "dependsOn: [ask], input: \"right of {{ steps.ask.output }}\"",
        "dependsOn: [ask], input: \"right of {{ steps.left.output }}\"",
    );
    let mut documents = quickstart();
    documents.extend(yaml_documents(&unordered));
    documents.extend(yaml_documents(
        &run.replace("workflowRef: greet", "workflowRef: missing"),
    ));
    let rendered = render(&documents).expect("renders");
    assert_eq!(
        rendered.problems,
        [
            "AgentWorkflow greet: the input of step right reads the output of left, but right does not depend on left (directly or through its dependencies), so it may not have run yet; fix spec.steps (InvalidGraph)",
            "AgentWorkflowRun greet-now: AgentWorkflow missing not found in namespace default",
        ]
    );
    let (ok, stdout, stderr) = render_cli(WORKFLOW);
    assert!(!ok, "the agents are not in the manifests");
    assert!(stdout.lines().all(|l| l.starts_with("# ")), "{stdout}");
    assert_eq!(
        stderr.trim_end(),
        "kaosctl: AgentWorkflow greet: Agents coordinator, worker not found in namespace default: create them, or fix the agentRef of the steps that name them (AgentNotFound)"
    );
}

/// One task a fake agent received: (idempotency key, text).
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// A fake A2A agent on a local port: answers SendMessage at once with a completed task whose
/// answer is `<name>(<text>)`, lists its tasks (newest first) and gets them, as the KAOS agent
/// runtime does.
async fn fake_agent(name: &'static str) -> (std::net::SocketAddr, Received) {
    use axum::Json;
    use axum::extract::State;
    use serde_json::json;
    type Tasks = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;
    async fn rpc(
        State((name, tasks, received)): State<(&'static str, Tasks, Received)>,
        Json(request): Json<Value>,
    ) -> Json<Value> {
        let params = &request["params"];
        let mut tasks = tasks.lock().expect("tasks");
        let result = match request["method"].as_str().unwrap_or_default() {
            "SendMessage" => {
                let text = params["message"]["parts"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let metadata = params["message"]["metadata"].clone();
                let key = metadata["kaos.tools/idempotency-key"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                received.lock().expect("received").push((key, text.clone()));
                let task = json!({
                    "id": format!("{name}-{}", tasks.len() + 1),
                    "status": {"state": "completed"},
                    "history": [
                        {"role": "user", "parts": [{"type": "text", "text": text}]},
                        {"role": "agent", "parts": [{"type": "text", "text": format!("{name}({text})")}]},
                    ],
                    "metadata": metadata,
                });
                tasks.insert(0, task.clone());
                task
            }
            "ListTasks" => json!({"tasks": *tasks, "count": tasks.len()}),
            "GetTask" => match tasks.iter().find(|t| t["id"] == params["id"]) {
                Some(task) => task.clone(),
                None => {
                    return Json(json!({"jsonrpc": "2.0", "id": request["id"],
                        "error": {"code": -32001, "message": "Task not found"}}));
                }
            },
            other => {
                return Json(json!({"jsonrpc": "2.0", "id": request["id"],
                    "error": {"code": -32601, "message": format!("Method not found: {other}")}}));
            }
        };
        Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
    }
    let received = Received::default();
    let app = axum::Router::new()
        .route("/", axum::routing::post(rpc))
        .with_state((name, Tasks::default(), received.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, received)
}

/// The sandbox runs the workflow controller: a workflow is waited for until Ready (one that
/// cannot run is reported with its reason), `kaosctl workflow run` starts a run that the
/// controller sends to the agents at their `--agent-address`, and `dev` shows the run and its
/// steps; a workflow that does not exist is one line and a hint.
#[tokio::test]
async fn the_sandbox_runs_a_workflow_started_by_kaosctl_workflow_run() {
    let (worker, worker_received) = fake_agent("worker").await;
    let (coordinator, coordinator_received) = fake_agent("coordinator").await;
    let dir = std::env::temp_dir().join(format!("kaosctl-workflow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let credentials = dir.join("credentials.yaml");
    std::fs::write(&credentials, kaosctl::defaults::SANDBOX_CREDENTIALS).expect("credentials");
    let workflow = dir.join("workflow.yaml");
    let orphan = "apiVersion: kaos.tools/v1alpha1\nkind: AgentWorkflow\nmetadata: {name: orphan}\nspec: {steps: [{name: a, agentRef: ghost}]}\n";
    std::fs::write(&workflow, format!("{WORKFLOW}---\n{orphan}")).expect("workflow");
    let kubeconfig = dir.join("kubeconfig");
    let options = Options {
        cluster: Cluster::Sandbox {
            listen: "127.0.0.1:0".parse().expect("addr"),
            write_kubeconfig: kubeconfig.clone(),
        },
        apply: vec![
            credentials,
            repo().join("examples/quickstart.yaml"),
            workflow,
        ],
        // A bare name is in the default namespace.
        agent_addresses: vec![
            format!("worker={worker}").parse().expect("an address"),
            format!("default/coordinator={coordinator}")
                .parse()
                .expect("an address"),
        ],
    };
    let sandbox = dev::start(&options).await.expect("sandbox");

    // Everything settles but the workflow naming a missing agent, which says so.
    let started = std::time::Instant::now();
    let waiting = loop {
        let waiting = sandbox
            .wait_ready(Duration::ZERO, false)
            .await
            .expect_err("orphan never gets Ready");
        if waiting.len() == 1 && !waiting[0].phase.is_empty() {
            break waiting;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{waiting:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        (
            waiting[0].kind.as_str(),
            waiting[0].name.as_str(),
            waiting[0].phase.as_str(),
            waiting[0].message.as_str()
        ),
        (
            "AgentWorkflow",
            "orphan",
            "AgentNotFound",
            "Agent ghost not found in namespace default: create it, or fix the agentRef of the steps that name it"
        )
    );

    let args = |args: &[&str]| -> Vec<std::ffi::OsString> {
        let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        all.push("--kubeconfig".into());
        all.push(kubeconfig.clone().into());
        all
    };
    let out = kaosctl(args(&["workflow", "run", "greet", "--input", "hello"])).await;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("greet-manual-"),
        "the run's name: {stdout}"
    );

    let cluster = &sandbox.testkit.as_ref().expect("a sandbox").api.cluster;
    let runs = cluster
        .resource("kaos.tools", "v1alpha1", "agentworkflowruns")
        .expect("served");
    let created = cluster.get(&runs, "default", &stdout).expect("created");
    assert_eq!(
        created["spec"],
        serde_json::json!({"workflowRef": "greet", "trigger": "Manual", "input": "hello"})
    );

    // What `dev` shows of the run, until it is over.
    let mut follower = dev::RunFollower::default();
    let mut shown = Vec::new();
    let started = std::time::Instant::now();
    loop {
        shown.extend(follower.changes(&sandbox).await);
        if shown
            .last()
            .is_some_and(|l| !l.contains("  Running") && !l.contains("  Pending"))
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{shown:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        shown.last().map(String::as_str),
        Some(
            format!(
                "run default/{stdout}  Succeeded  ask Succeeded, left Succeeded, right Succeeded, join Succeeded"
            )
            .as_str()
        ),
        "{shown:#?}"
    );
    let report = sandbox.report().await;
    for line in [
        "AgentWorkflow  greet        Ready\n".to_string(),
        "AgentWorkflow  orphan       AgentNotFound\n".to_string(),
        format!(
            "runs:\n  {stdout}  Succeeded  ask Succeeded, left Succeeded, right Succeeded, join Succeeded\n"
        ),
        format!("agent addresses (workflow steps go there):\n  default/worker={worker}\n  default/coordinator={coordinator}\n"),
        "workflow-controller: http://".to_string(),
        "get agents,modelapis,mcpservers,memorystores,accessgrants,thirdpartyservices,agentworkflows,agentworkflowruns\n".to_string(),
    ] {
        assert!(report.contains(&line), "missing {line:?} in:\n{report}");
    }

    // Each agent got its steps once, their inputs made of the outputs they depend on.
    let texts = |received: &Received| -> Vec<String> {
        let mut texts: Vec<String> = received
            .lock()
            .expect("received")
            .iter()
            .map(|(_, text)| text.clone())
            .collect();
        texts.sort();
        texts
    };
    assert_eq!(texts(&worker_received), ["hello", "left of worker(hello)"]);
    assert_eq!(
        texts(&coordinator_received),
        [
            "right of worker(hello)",
            "worker(left of worker(hello)) + coordinator(right of worker(hello))"
        ]
    );

    let out = kaosctl(args(&["workflow", "runs", "greet"])).await;
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listed}");
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].ends_with("STEPS"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with(&stdout)
            && lines[1].contains("  Succeeded  Manual  ")
            && lines[1].ends_with("ask Succeeded, left Succeeded, right Succeeded, join Succeeded"),
        "{listed}"
    );

    // A workflow that does not exist: one line, and a hint naming those that do.
    let out = kaosctl(args(&["workflow", "run", "gret"])).await;
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .collect::<Vec<_>>(),
        [
            "kaosctl: AgentWorkflow gret not found in namespace default",
            "hint: namespace default has greet, orphan; or pass --namespace",
        ]
    );
    let out = kaosctl(args(&["workflow", "run", "greet", "-n", "elsewhere"])).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .collect::<Vec<_>>(),
        [
            "kaosctl: AgentWorkflow greet not found in namespace elsewhere",
            "hint: namespace elsewhere has no AgentWorkflow: apply one first, or pass --namespace",
        ]
    );
    sandbox.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_bad_agent_address_is_refused_naming_what_is_wrong() {
    let out = Command::new(env!("CARGO_BIN_EXE_kaosctl"))
        .args(["dev", "--agent-address", "worker=127.0.0.1"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'worker=127.0.0.1' for '--agent-address")
            && stderr.contains(
                "the address has no port (expected NAME=HOST:PORT or NAMESPACE/NAME=HOST:PORT)"
            ),
        "{stderr}"
    );
    // Nothing listens: the run is not created and the hint says where to look.
    let dir = std::env::temp_dir().join(format!("kaosctl-nowhere-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    let port = kaos_testkit::free_port();
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\nusers: [{{name: u, user: {{}}}}]\n"),
    )
    .expect("kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_kaosctl"))
        .args(["workflow", "run", "greet", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "kaosctl: cannot get AgentWorkflow default/greet on http://127.0.0.1:{port}: "
        )),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("hint: is the cluster up? For the sandbox, start `kaosctl dev`"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
