//! The client against a fake agent speaking the KAOS runtime's JSON-RPC.

use super::*;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::post};
use std::sync::Mutex;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A fake agent: SendMessage makes a working task, each GetTask of it completes it with
/// an agent answer; every request's method and params are recorded.
#[derive(Default)]
struct FakeAgent {
    tasks: Vec<Value>,
    requests: Vec<(String, Value)>,
    /// Answer every call with this JSON-RPC error.
    rpc_error: Option<(i64, String)>,
    /// Answer every call with this HTTP status.
    http_status: Option<StatusCode>,
    /// Wait this long before answering.
    delay: Option<Duration>,
}

type Shared = Arc<Mutex<FakeAgent>>;

async fn rpc(State(agent): State<Shared>, Json(request): Json<Value>) -> Response {
    let delay = agent.lock().map(|agent| agent.delay).unwrap_or_default();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let mut agent = agent.lock().unwrap_or_else(|e| e.into_inner());
    let method = request["method"].as_str().unwrap_or_default().to_string();
    let params = request["params"].clone();
    agent.requests.push((method.clone(), params.clone()));
    if let Some(status) = agent.http_status {
        return (status, "unavailable").into_response();
    }
    let id = request["id"].clone();
    let reply = |result: Value| Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    let fail = |code: i64, message: &str| {
        Json(json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": code, "message": message, "data": null}}))
    };
    if let Some((code, message)) = &agent.rpc_error {
        return fail(*code, message).into_response();
    }
    let task_index = |agent: &FakeAgent| {
        agent
            .tasks
            .iter()
            .position(|task| task["id"] == params["id"])
    };
    match method.as_str() {
        "SendMessage" => {
            let text = params["message"]["parts"][0]["text"].clone();
            let task = json!({
                "id": format!("task_{}", agent.tasks.len() + 1),
                "sessionId": params["contextId"],
                "status": {"state": "working", "timestamp": "2025-01-01T00:00:00Z"},
                "history": [{"role": "user", "parts": [{"type": "text", "text": text}]}],
                "metadata": params["message"]["metadata"],
                "output": "",
            });
            agent.tasks.insert(0, task.clone());
            reply(task).into_response()
        }
        "GetTask" => match task_index(&agent) {
            Some(index) => {
                let task = &mut agent.tasks[index];
                if task["status"]["state"] == "working" {
                    task["status"]["state"] = json!("completed");
                    let answer = format!("echo: {}", task["history"][0]["parts"][0]["text"]);
                    if let Some(history) = task["history"].as_array_mut() {
                        history.push(json!({"role": "agent", "parts": [
                            {"type": "text", "text": answer},
                            {"type": "data", "data": {"ignored": true}},
                        ]}));
                    }
                }
                reply(task.clone()).into_response()
            }
            None => fail(TASK_NOT_FOUND, "Task not found").into_response(),
        },
        "ListTasks" => {
            let count = agent.tasks.len();
            reply(json!({"tasks": agent.tasks, "count": count})).into_response()
        }
        "CancelTask" => match task_index(&agent) {
            Some(index) => {
                agent.tasks[index]["status"]["state"] = json!("canceled");
                reply(agent.tasks[index].clone()).into_response()
            }
            None => fail(TASK_NOT_FOUND, "Task not found").into_response(),
        },
        other => fail(-32601, &format!("Method not found: {other}")).into_response(),
    }
}

async fn serve(agent: FakeAgent) -> (String, Shared) {
    let shared: Shared = Arc::new(Mutex::new(agent));
    let app = Router::new()
        .route("/", post(rpc))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a local port");
    let address = listener.local_addr().expect("a local address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), shared)
}

/// Sends `text` under the idempotency key `key`, without budgets.
async fn send(client: &A2aClient, endpoint: &str, text: &str, key: &str) -> Result<Task, A2aError> {
    client
        .send_message(endpoint, text, key, None, TIMEOUT)
        .await
}

fn requests(agent: &Shared) -> Vec<(String, Value)> {
    agent.lock().expect("the fake agent").requests.clone()
}

#[tokio::test]
async fn sends_then_polls_until_completed() -> Result<(), A2aError> {
    let (endpoint, _agent) = serve(FakeAgent::default()).await;
    let client = A2aClient::new();

    let sent = send(&client, &endpoint, "hello", "run-1/a/1").await?;
    assert_eq!(sent.state, TaskState::Working);
    assert_eq!(sent.output, "");
    assert_eq!(sent.idempotency_key.as_deref(), Some("run-1/a/1"));

    let mut task = sent;
    for _ in 0..3 {
        if task.state.is_terminal() {
            break;
        }
        task = client
            .get_task(&endpoint, &task.id, TIMEOUT)
            .await?
            .expect("the task it just made");
    }
    assert_eq!(task.state, TaskState::Completed);
    assert_eq!(task.output, "echo: \"hello\"");
    Ok(())
}

#[tokio::test]
async fn sends_the_kaos_wire_format_and_budgets_only_when_set() -> Result<(), A2aError> {
    let (endpoint, agent) = serve(FakeAgent::default()).await;
    let client = A2aClient::new();
    send(&client, &endpoint, "plain", "k1").await?;
    let budgets = Budgets {
        max_iterations: Some(3),
        max_runtime_seconds: None,
        max_tool_calls: Some(7),
    };
    client
        .send_message(&endpoint, "bounded", "k2", Some(&budgets), TIMEOUT)
        .await?;

    let sent = requests(&agent);
    assert_eq!(sent[0].0, "SendMessage");
    assert_eq!(
        sent[0].1,
        json!({
            "message": {
                "role": "user",
                "parts": [{"type": "text", "text": "plain"}],
                "metadata": {"kaos.tools/idempotency-key": "k1"},
            },
            "contextId": "k1",
        })
    );
    assert_eq!(
        sent[1].1["configuration"],
        json!({"mode": "autonomous", "budgets": {"maxIterations": 3, "maxToolCalls": 7}})
    );
    Ok(())
}

#[tokio::test]
async fn an_unknown_task_is_none_and_cancelling_it_is_no_error() -> Result<(), A2aError> {
    let (endpoint, _agent) = serve(FakeAgent::default()).await;
    let client = A2aClient::new();
    assert_eq!(client.get_task(&endpoint, "nope", TIMEOUT).await?, None);
    client.cancel_task(&endpoint, "nope", TIMEOUT).await?;
    Ok(())
}

#[tokio::test]
async fn cancels_a_task() -> Result<(), A2aError> {
    let (endpoint, _agent) = serve(FakeAgent::default()).await;
    let client = A2aClient::new();
    let task = send(&client, &endpoint, "long", "k").await?;
    client.cancel_task(&endpoint, &task.id, TIMEOUT).await?;
    let task = client.get_task(&endpoint, &task.id, TIMEOUT).await?;
    assert_eq!(task.map(|task| task.state), Some(TaskState::Canceled));
    Ok(())
}

#[tokio::test]
async fn finds_the_newest_task_with_an_idempotency_key() -> Result<(), A2aError> {
    let (endpoint, _agent) = serve(FakeAgent::default()).await;
    let client = A2aClient::new();
    send(&client, &endpoint, "one", "run/a/1").await?;
    let second = send(&client, &endpoint, "two", "run/b/1").await?;
    let retry = send(&client, &endpoint, "two again", "run/b/1").await?;
    assert_ne!(second.id, retry.id);

    let found = client
        .find_task_by_key(&endpoint, "run/b/1", TIMEOUT)
        .await?;
    assert_eq!(found.map(|task| task.id), Some(retry.id));
    assert_eq!(
        client
            .find_task_by_key(&endpoint, "run/c/1", TIMEOUT)
            .await?,
        None
    );
    Ok(())
}

#[tokio::test]
async fn a_json_rpc_error_says_its_code_and_message_but_not_the_request() {
    let (endpoint, _agent) = serve(FakeAgent {
        rpc_error: Some((-32602, "Message must contain text content".to_string())),
        ..FakeAgent::default()
    })
    .await;
    let error = A2aClient::new()
        .send_message(&endpoint, "secret user text", "k", None, TIMEOUT)
        .await
        .expect_err("the agent refuses");
    let message = error.to_string();
    assert!(matches!(error, A2aError::JsonRpc { code: -32602, .. }));
    assert_eq!(
        message,
        format!(
            "SendMessage to the agent at {endpoint} answered JSON-RPC error -32602: \
             Message must contain text content"
        )
    );
    assert!(!message.contains("secret"));
}

#[tokio::test]
async fn an_http_error_status_is_reported() {
    let (endpoint, _agent) = serve(FakeAgent {
        http_status: Some(StatusCode::SERVICE_UNAVAILABLE),
        ..FakeAgent::default()
    })
    .await;
    let error = A2aClient::new()
        .get_task(&endpoint, "t", TIMEOUT)
        .await
        .expect_err("the agent is unavailable");
    assert_eq!(
        error.to_string(),
        format!("GetTask to the agent at {endpoint} answered HTTP 503 Service Unavailable")
    );
}

#[tokio::test]
async fn a_refused_connection_names_the_endpoint() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let address = listener.local_addr().expect("a local address");
    drop(listener);
    let endpoint = format!("http://{address}");

    let error = A2aClient::new()
        .send_message(&endpoint, "secret user text", "k", None, TIMEOUT)
        .await
        .expect_err("nothing listens");
    let message = error.to_string();
    assert!(matches!(error, A2aError::Connect { .. }), "{message}");
    assert!(
        message.starts_with(&format!("cannot connect to the agent at {endpoint}: ")),
        "{message}"
    );
    assert!(message.contains("Connection refused"), "{message}");
    assert!(!message.contains("secret"), "{message}");
}

#[tokio::test]
async fn a_slow_agent_times_out() {
    let (endpoint, _agent) = serve(FakeAgent {
        delay: Some(Duration::from_secs(5)),
        ..FakeAgent::default()
    })
    .await;
    let error = A2aClient::new()
        .get_task(&endpoint, "t", Duration::from_millis(100))
        .await
        .expect_err("the agent is too slow");
    assert_eq!(
        error.to_string(),
        format!("GetTask to the agent at {endpoint} timed out after 0.1s")
    );
}

#[tokio::test]
async fn a_bad_endpoint_is_refused_before_any_call() {
    let client = A2aClient::new();
    for endpoint in ["https://agent:8000", "agent:8000", "not a url"] {
        let error = client
            .get_task(endpoint, "t", TIMEOUT)
            .await
            .expect_err("not an http URL");
        assert!(
            matches!(error, A2aError::InvalidEndpoint { .. }),
            "{endpoint}: {error}"
        );
    }
}

#[test]
fn the_output_is_the_task_output_else_the_last_agent_message() {
    let autonomous = json!({"id": "t", "status": {"state": "completed"}, "output": "final",
        "history": [{"role": "agent", "parts": [{"type": "text", "text": "earlier"}]}]});
    assert_eq!(
        parse_task(&autonomous).map(|task| task.output),
        Ok("final".into())
    );

    let interactive = json!({"id": "t", "status": {"state": "completed"}, "output": "",
    "history": [
        {"role": "user", "parts": [{"type": "text", "text": "question"}]},
        {"role": "agent", "parts": [{"type": "text", "text": "first"}]},
        {"role": "user", "parts": [{"type": "text", "text": "again"}]},
        {"role": "agent", "parts": [{"type": "text", "text": "last "},
            {"type": "data", "data": {}}, {"type": "text", "text": "answer"}]},
    ]});
    assert_eq!(
        parse_task(&interactive).map(|task| task.output),
        Ok("last answer".into())
    );

    let failed = json!({"id": "t", "status": {"state": "failed", "message": "model down"}});
    let task = parse_task(&failed).expect("a task");
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.message.as_deref(), Some("model down"));
    assert_eq!(task.output, "");

    let odd = json!({"id": "t", "status": {"state": "paused"}});
    assert_eq!(
        parse_task(&odd).map(|task| task.state),
        Ok(TaskState::Other("paused".into()))
    );
    assert_eq!(
        parse_task(&json!({"id": "t"})),
        Err("task t has no status.state".to_string())
    );
}
