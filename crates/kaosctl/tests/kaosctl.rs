//! `kaosctl render` prints what the controllers really create; `kaosctl dev --exit-when-ready`
//! brings the quickstart to Ready in a sandbox and, with `--kubeconfig`, on an existing cluster;
//! errors are one line and a hint.

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
            "kaos-modelapi-controller"
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
