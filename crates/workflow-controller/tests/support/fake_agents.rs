//! Fake agents: small A2A (JSON-RPC) servers that answer SendMessage (interactive: after a
//! scripted delay; with budgets: at once), GetTask, ListTasks and CancelTask as the KAOS agent
//! runtime does, and record every send's idempotency key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::{Json, Router, routing::post};
use serde_json::{Value, json};

/// What a fake agent answers.
#[derive(Clone, Debug, Default)]
pub struct Script {
    pub output: String,
    /// How long a task takes.
    pub delay: Duration,
    /// The first this many tasks fail.
    pub failures: u32,
}

pub fn answers(output: &str, delay_ms: u64) -> Script {
    Script {
        output: output.into(),
        delay: Duration::from_millis(delay_ms),
        failures: 0,
    }
}

/// One SendMessage an agent received.
#[derive(Clone, Debug)]
pub struct Sent {
    pub agent: String,
    pub key: String,
    pub text: String,
    pub task: String,
    pub at: Instant,
}

/// Every fake agent's tasks and what they were asked.
#[derive(Default)]
pub struct World {
    scripts: HashMap<String, Script>,
    /// Per agent, newest first (as the KAOS runtime lists them).
    tasks: HashMap<String, Vec<Value>>,
    pub sends: Vec<Sent>,
    /// (agent, task id) of every CancelTask.
    pub cancels: Vec<(String, String)>,
    pub finished: HashMap<String, Instant>,
    next_id: u64,
}

pub type Fake = Arc<Mutex<World>>;

pub fn world(fake: &Fake) -> std::sync::MutexGuard<'_, World> {
    fake.lock().unwrap_or_else(|e| e.into_inner())
}

const TASK_NOT_FOUND: i64 = -32001;

async fn rpc(
    State((fake, agent)): State<(Fake, String)>,
    Json(request): Json<Value>,
) -> Json<Value> {
    let id = request["id"].clone();
    let params = request["params"].clone();
    let reply = |result: Value| Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    let not_found = || {
        Json(json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": TASK_NOT_FOUND, "message": "Task not found"}}))
    };
    match request["method"].as_str().unwrap_or_default() {
        "SendMessage" => {
            let autonomous = params["configuration"]["mode"] == "autonomous";
            let (task_id, script, fails) = {
                let mut world = world(&fake);
                world.next_id += 1;
                let task_id = format!("{agent}-task-{}", world.next_id);
                let script = world.scripts.get(&agent).cloned().unwrap_or_default();
                let fails = script.failures > 0;
                if let Some(script) = world.scripts.get_mut(&agent) {
                    script.failures = script.failures.saturating_sub(1);
                }
                let text = params["message"]["parts"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let task = json!({
                    "id": task_id, "sessionId": params["contextId"],
                    "status": {"state": "working"},
                    "history": [{"role": "user", "parts": [{"type": "text", "text": text}]}],
                    "metadata": params["message"]["metadata"], "output": "",
                });
                world
                    .tasks
                    .entry(agent.clone())
                    .or_default()
                    .insert(0, task);
                world.sends.push(Sent {
                    agent: agent.clone(),
                    key: params["message"]["metadata"]["kaos.tools/idempotency-key"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    text,
                    task: task_id.clone(),
                    at: Instant::now(),
                });
                (task_id, script, fails)
            };
            // The task runs on whatever happens to the request (a client that goes away).
            let runner = {
                let (fake, agent, task_id) = (fake.clone(), agent.clone(), task_id.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(script.delay).await;
                    let mut world = world(&fake);
                    world.finished.insert(task_id.clone(), Instant::now());
                    if let Some(task) = find_task(&mut world, &agent, &task_id)
                        && task["status"]["state"] == "working"
                    {
                        if fails {
                            task["status"] =
                                json!({"state": "failed", "message": "scripted failure"});
                        } else {
                            task["status"] = json!({"state": "completed"});
                            if let Some(history) = task["history"].as_array_mut() {
                                history.push(json!({"role": "agent",
                                    "parts": [{"type": "text", "text": script.output}]}));
                            }
                        }
                    }
                })
            };
            if !autonomous {
                // Interactive: the answer comes once the task is done, as in the KAOS runtime.
                let _ = runner.await;
            }
            let mut world = world(&fake);
            let task = find_task(&mut world, &agent, &task_id)
                .cloned()
                .unwrap_or_default();
            reply(task)
        }
        "GetTask" => {
            let mut world = world(&fake);
            let task_id = params["id"].as_str().unwrap_or_default();
            match find_task(&mut world, &agent, task_id) {
                Some(task) => reply(task.clone()),
                None => not_found(),
            }
        }
        "ListTasks" => {
            let world = world(&fake);
            let tasks = world.tasks.get(&agent).cloned().unwrap_or_default();
            reply(json!({"tasks": tasks, "count": tasks.len()}))
        }
        "CancelTask" => {
            let mut world = world(&fake);
            let task_id = params["id"].as_str().unwrap_or_default().to_string();
            world.cancels.push((agent.clone(), task_id.clone()));
            match find_task(&mut world, &agent, &task_id) {
                Some(task) => {
                    if task["status"]["state"] == "working" {
                        task["status"] = json!({"state": "canceled"});
                    }
                    reply(task.clone())
                }
                None => not_found(),
            }
        }
        other => Json(json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": -32601, "message": format!("Method not found: {other}")}})),
    }
}

fn find_task<'w>(world: &'w mut World, agent: &str, id: &str) -> Option<&'w mut Value> {
    world
        .tasks
        .get_mut(agent)?
        .iter_mut()
        .find(|task| task["id"] == id)
}

/// Serves one fake agent per script; returns AGENT_ADDRESS_OVERRIDES for them.
pub async fn serve(fake: &Fake, agents: &[(&str, Script)]) -> String {
    let mut overrides = Vec::new();
    for (agent, script) in agents {
        world(fake)
            .scripts
            .insert(agent.to_string(), script.clone());
        let app = Router::new()
            .route("/", post(rpc))
            .with_state((fake.clone(), agent.to_string()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let address = listener.local_addr().expect("a local address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        overrides.push(format!("default/{agent}={address}"));
    }
    overrides.join(",")
}
