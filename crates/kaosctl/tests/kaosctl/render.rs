//! `kaosctl render` prints what the controllers really create: the sandbox's controllers
//! create the same objects; access kinds, workflows and runs render to nothing, and what the
//! API server or a controller would refuse is reported.

use std::time::Duration;

use kaos_testkit::cluster::ListOptions;
use kaosctl::dev::Dev;
use kaosctl::render::render;
use serde_json::Value;

use super::{
    ACCESS, Scratch, WORKFLOW, assert_has_lines, example, quickstart, repo, run_with_input,
    start_sandbox, yaml_documents,
};

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

    let scratch = Scratch::new("render");
    let sandbox = start_sandbox(&scratch, vec![], vec![]).await;
    sandbox
        .wait_ready(Duration::from_secs(60), false)
        .await
        .expect("quickstart Ready");
    // The coordinator learns its peer after the worker is Ready: let that settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_created_as_rendered(&sandbox, rendered.objects);
    let cluster = &sandbox.testkit.as_ref().expect("a sandbox").api.cluster;
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
}

/// Asserts that the sandbox's controllers created the rendered objects.
fn assert_created_as_rendered(sandbox: &Dev, rendered: Vec<Value>) {
    let cluster = &sandbox.testkit.as_ref().expect("a sandbox").api.cluster;
    let differences = differences(cluster, rendered);
    assert!(
        differences.is_empty(),
        "render and reality differ:\n{}",
        differences.join("\n")
    );
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

    let scratch = Scratch::new("render-memory");
    let apply = vec![
        scratch.credentials(),
        repo().join("examples/quickstart.yaml"),
        repo().join("examples/memory-and-autonomy.yaml"),
    ];
    let sandbox = start_sandbox(&scratch, apply, vec![]).await;
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
    assert_has_lines(
        &report,
        &[
            "PersistentVolumeClaim default/memorystore-support-memory-data",
            "memorystore-controller: http://",
        ],
    );
    assert_created_as_rendered(&sandbox, rendered.objects);
    sandbox.stop().await;
}

/// The notes of `documents`, the quickstart and resources that add no object to it.
fn notes_beside_the_quickstart(documents: &[Value]) -> Vec<String> {
    let rendered = render(documents).expect("renders");
    assert!(rendered.problems.is_empty(), "{:?}", rendered.problems);
    assert_eq!(
        rendered.objects,
        render(&quickstart()).expect("renders").objects,
        "they add no object"
    );
    rendered.notes
}

/// AccessGrants and ThirdPartyServices render to nothing, with a comment each; an invalid one
/// is refused like any other resource.
#[test]
fn render_validates_access_kinds_and_creates_nothing_for_them() {
    let mut documents = quickstart();
    let access = yaml_documents(ACCESS);
    documents.extend(access.iter().cloned());
    assert_eq!(
        notes_beside_the_quickstart(&documents),
        [
            "AccessGrant default/researchers: creates no objects; the authz controller writes its status (Enforced=False, AuthorizationDisabled: kaos-rs does not enforce it)",
            "ThirdPartyService default/github: creates no objects; the authz controller writes its status (Ready=False, FeatureDisabled: kaos-rs does not enforce it)",
        ]
    );

    let (ok, stdout, _) = render_cli(ACCESS);
    assert!(ok);
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

/// Runs `kaosctl render -f -` on `manifest`: (success, stdout, stderr).
fn render_cli(manifest: &str) -> (bool, String, String) {
    let out = run_with_input(["render", "-f", "-"], manifest);
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
    assert_eq!(
        notes_beside_the_quickstart(&documents),
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
