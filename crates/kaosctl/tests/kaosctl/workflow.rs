//! The sandbox runs workflows: `kaosctl workflow run` starts a run that the workflow
//! controller sends to fake A2A agents, `dev` shows it, and errors are one line and a hint.

use std::time::Duration;

use kaosctl::dev;
use serde_json::Value;

use super::{Scratch, WORKFLOW, assert_has_lines, kaosctl, repo, run, start_sandbox, stderr_lines};

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
    let scratch = Scratch::new("workflow");
    let orphan = "apiVersion: kaos.tools/v1alpha1\nkind: AgentWorkflow\nmetadata: {name: orphan}\nspec: {steps: [{name: a, agentRef: ghost}]}\n";
    let apply = vec![
        scratch.credentials(),
        repo().join("examples/quickstart.yaml"),
        scratch.write("workflow.yaml", &format!("{WORKFLOW}---\n{orphan}")),
    ];
    // A bare name is in the default namespace.
    let agent_addresses = vec![
        format!("worker={worker}").parse().expect("an address"),
        format!("default/coordinator={coordinator}")
            .parse()
            .expect("an address"),
    ];
    let sandbox = start_sandbox(&scratch, apply, agent_addresses).await;
    let kubeconfig = scratch.join("kubeconfig");

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
    assert_has_lines(
        &report,
        &[
        "AgentWorkflow  greet        Ready\n".to_string(),
        "AgentWorkflow  orphan       AgentNotFound\n".to_string(),
        format!(
            "runs:\n  {stdout}  Succeeded  ask Succeeded, left Succeeded, right Succeeded, join Succeeded\n"
        ),
        format!("agent addresses (workflow steps go there):\n  default/worker={worker}\n  default/coordinator={coordinator}\n"),
        "workflow-controller: http://".to_string(),
        "get agents,modelapis,mcpservers,memorystores,accessgrants,thirdpartyservices,agentworkflows,agentworkflowruns\n".to_string(),
        ],
    );

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
        stderr_lines(&out),
        [
            "kaosctl: AgentWorkflow gret not found in namespace default",
            "hint: namespace default has greet, orphan; or pass --namespace",
        ]
    );
    let out = kaosctl(args(&["workflow", "run", "greet", "-n", "elsewhere"])).await;
    assert_eq!(
        stderr_lines(&out),
        [
            "kaosctl: AgentWorkflow greet not found in namespace elsewhere",
            "hint: namespace elsewhere has no AgentWorkflow: apply one first, or pass --namespace",
        ]
    );
    sandbox.stop().await;
}

#[test]
fn a_bad_agent_address_is_refused_naming_what_is_wrong() {
    let out = run(["dev", "--agent-address", "worker=127.0.0.1"]);
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
    let scratch = Scratch::new("nowhere");
    let port = kaos_testkit::free_port();
    let kubeconfig = scratch.write(
        "kubeconfig",
        &format!("apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\nusers: [{{name: u, user: {{}}}}]\n"),
    );
    let kubeconfig = kubeconfig.display().to_string();
    let out = run(["workflow", "run", "greet", "--kubeconfig", &kubeconfig]);
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
}
