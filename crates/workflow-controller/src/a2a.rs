//! The A2A client that workflow steps call agents with: JSON-RPC 2.0 over plain HTTP to the KAOS
//! agent runtime (pydantic-ai-server's `POST /`: SendMessage, GetTask, ListTasks, CancelTask).
//! Agents are reached on their in-cluster Service, so no TLS. Every call has a deadline, and
//! errors name the method and the endpoint but never a request body: it holds the user's input.

use std::error::Error as StdError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value, json};

/// The task metadata key a step's idempotency key travels under: the agent keeps a message's
/// metadata on its task, so a dispatch whose answer was lost can be found again (ListTasks).
pub const IDEMPOTENCY_KEY: &str = "kaos.tools/idempotency-key";

/// The agent runtime's JSON-RPC error code for an unknown task id.
const TASK_NOT_FOUND: i64 = -32001;

/// ListTasks answers with every task the agent retains (up to 10,000, with their histories):
/// bounded so that a runaway agent cannot make the controller buffer without limit.
const MAX_RESPONSE_BYTES: usize = 32 << 20;

/// The agent runtime's server (uvicorn) closes a connection idle for 5 s: ours are dropped
/// first, so a request is not sent on a connection the agent is closing.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// A JSON-RPC error message is the agent's text: kept short in our errors and statuses.
const MAX_ERROR_MESSAGE_CHARS: usize = 300;

/// One step attempt to send: what the engine asks the dispatcher to send an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepSend {
    /// The step's name, for logs.
    pub step: String,
    pub idempotency_key: String,
    pub endpoint: String,
    /// The rendered input: the user's text. Never logged.
    pub text: String,
    pub budgets: Option<Budgets>,
    /// The step's time limit: an interactive send lasts as long as the task.
    pub timeout: Duration,
}

/// The autonomous-mode limits of one task. Unset fields take the agent's defaults (10
/// iterations, 300 s, 50 tool calls); 0 means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budgets {
    pub max_iterations: Option<i32>,
    pub max_runtime_seconds: Option<i64>,
    pub max_tool_calls: Option<i32>,
}

impl From<&kaos_api::workflow::StepBudgets> for Budgets {
    fn from(budgets: &kaos_api::workflow::StepBudgets) -> Self {
        Self {
            max_iterations: budgets.max_iterations,
            max_runtime_seconds: budgets.max_runtime_seconds,
            max_tool_calls: budgets.max_tool_calls,
        }
    }
}

/// A task's lifecycle state as the agent reports it (`status.state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    /// The agent waits for a user's answer: a workflow has no user to give one.
    InputRequired,
    Completed,
    Failed,
    Canceled,
    /// A state this client does not know, kept verbatim.
    Other(String),
}

impl TaskState {
    fn from_wire(state: &str) -> Self {
        match state {
            "submitted" => Self::Submitted,
            "working" => Self::Working,
            "input-required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            other => Self::Other(other.to_string()),
        }
    }

    /// Whether the task will not change any more.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }
}

/// What a workflow reads of an agent's task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub state: TaskState,
    /// `status.message`: for a failed task, the agent's error.
    pub message: Option<String>,
    /// The task's answer: `output` when the agent set it (autonomous tasks), else the text of
    /// its last agent message; empty while it has none.
    pub output: String,
    /// The idempotency key the task was sent with, if any.
    pub idempotency_key: Option<String>,
}

/// Why an A2A call failed, in words that say what to look at. Never carries a request body.
#[derive(Debug, thiserror::Error)]
pub enum A2aError {
    #[error("invalid agent endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    #[error("cannot connect to the agent at {endpoint}: {reason}")]
    Connect { endpoint: String, reason: String },
    #[error("{method} to the agent at {endpoint} failed: {reason}")]
    Transport {
        method: &'static str,
        endpoint: String,
        reason: String,
    },
    #[error("{method} to the agent at {endpoint} timed out after {}s", timeout.as_secs_f64())]
    Timeout {
        method: &'static str,
        endpoint: String,
        timeout: Duration,
    },
    #[error("{method} to the agent at {endpoint} answered HTTP {status}")]
    HttpStatus {
        method: &'static str,
        endpoint: String,
        status: http::StatusCode,
    },
    #[error("{method} to the agent at {endpoint} answered JSON-RPC error {code}: {message}")]
    JsonRpc {
        method: &'static str,
        endpoint: String,
        code: i64,
        message: String,
    },
    #[error("{method} to the agent at {endpoint} gave a bad response: {reason}")]
    BadResponse {
        method: &'static str,
        endpoint: String,
        reason: String,
    },
}

/// A JSON-RPC client for agents' A2A endpoints; cheap to clone (one connection pool).
#[derive(Clone)]
pub struct A2aClient {
    http: Client<HttpConnector, Full<Bytes>>,
    next_request_id: Arc<AtomicU64>,
}

impl Default for A2aClient {
    fn default() -> Self {
        Self::new()
    }
}

impl A2aClient {
    pub fn new() -> Self {
        Self {
            http: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .build_http(),
            next_request_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Sends `text` as a user message and returns the task the agent made of it. Without
    /// budgets the agent answers once the task is done (interactive mode: `timeout` must cover
    /// the whole run); with budgets it runs autonomously and answers at once, still working.
    /// The idempotency key is also the task's context (the agent's session).
    pub async fn send_message(
        &self,
        endpoint: &str,
        text: &str,
        idempotency_key: &str,
        budgets: Option<&Budgets>,
        timeout: Duration,
    ) -> Result<Task, A2aError> {
        let params = send_message_params(text, idempotency_key, budgets);
        let result = self.call(endpoint, "SendMessage", params, timeout).await?;
        parse_task(&result).map_err(|reason| bad_response("SendMessage", endpoint, reason))
    }

    /// The task `id`, or `None` when the agent does not know it (never had it, or forgot it:
    /// the agent keeps a bounded number of tasks, in memory only).
    pub async fn get_task(
        &self,
        endpoint: &str,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<Task>, A2aError> {
        match self
            .call(endpoint, "GetTask", json!({ "id": id }), timeout)
            .await
        {
            Ok(result) => parse_task(&result)
                .map(Some)
                .map_err(|reason| bad_response("GetTask", endpoint, reason)),
            Err(A2aError::JsonRpc { code, .. }) if code == TASK_NOT_FOUND => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The newest task sent with this idempotency key, if the agent still has one: how a
    /// dispatch whose answer was lost (timeout, controller restart) is found instead of sent
    /// twice. The agent does not deduplicate by itself.
    pub async fn find_task_by_key(
        &self,
        endpoint: &str,
        idempotency_key: &str,
        timeout: Duration,
    ) -> Result<Option<Task>, A2aError> {
        let result = self.call(endpoint, "ListTasks", json!({}), timeout).await?;
        let tasks = result
            .get("tasks")
            .and_then(Value::as_array)
            .ok_or_else(|| bad_response("ListTasks", endpoint, "no tasks list".to_string()))?;
        // The agent lists newest first: the first match is the latest attempt with this key.
        for task in tasks {
            let key = task
                .get("metadata")
                .and_then(|metadata| metadata.get(IDEMPOTENCY_KEY))
                .and_then(Value::as_str);
            if key == Some(idempotency_key) {
                return parse_task(task)
                    .map(Some)
                    .map_err(|reason| bad_response("ListTasks", endpoint, reason));
            }
        }
        Ok(None)
    }

    /// Asks the agent to cancel the task `id`. A task that is already finished, or that the
    /// agent does not know, is nothing to cancel: both are success.
    pub async fn cancel_task(
        &self,
        endpoint: &str,
        id: &str,
        timeout: Duration,
    ) -> Result<(), A2aError> {
        match self
            .call(endpoint, "CancelTask", json!({ "id": id }), timeout)
            .await
        {
            Ok(_) => Ok(()),
            Err(A2aError::JsonRpc { code, .. }) if code == TASK_NOT_FOUND => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// One JSON-RPC call: the `result` of the answer, or the error that says why there is none.
    async fn call(
        &self,
        endpoint: &str,
        method: &'static str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, A2aError> {
        let uri = parse_endpoint(endpoint)?;
        let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|error| invalid_endpoint(endpoint, error.to_string()))?;

        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|error| request_error(method, endpoint, &error))?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|error| body_error(method, endpoint, error))?
                .to_bytes();
            Ok::<_, A2aError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| A2aError::Timeout {
                method,
                endpoint: endpoint.to_string(),
                timeout,
            })??;

        if !status.is_success() {
            return Err(A2aError::HttpStatus {
                method,
                endpoint: endpoint.to_string(),
                status,
            });
        }
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|error| bad_response(method, endpoint, format!("not JSON ({error})")))?;
        if let Some(error) = answer.get("error").filter(|error| !error.is_null()) {
            return Err(A2aError::JsonRpc {
                method,
                endpoint: endpoint.to_string(),
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: shorten(
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("(no message)"),
                ),
            });
        }
        match answer {
            Value::Object(mut fields) => Ok(fields.remove("result").unwrap_or(Value::Null)),
            _ => Err(bad_response(
                method,
                endpoint,
                "not a JSON-RPC response object".to_string(),
            )),
        }
    }
}

/// SendMessage's params: the text as one user text part, the idempotency key in the message
/// metadata (the agent copies it onto the task) and as the context id, and the autonomous
/// configuration only when the step has budgets.
fn send_message_params(text: &str, idempotency_key: &str, budgets: Option<&Budgets>) -> Value {
    let mut params = json!({
        "message": {
            "role": "user",
            "parts": [{ "type": "text", "text": text }],
            "metadata": { IDEMPOTENCY_KEY: idempotency_key },
        },
        "contextId": idempotency_key,
    });
    if let (Some(budgets), Value::Object(fields)) = (budgets, &mut params) {
        let mut limits = Map::new();
        if let Some(value) = budgets.max_iterations {
            limits.insert("maxIterations".into(), value.into());
        }
        if let Some(value) = budgets.max_runtime_seconds {
            limits.insert("maxRuntimeSeconds".into(), value.into());
        }
        if let Some(value) = budgets.max_tool_calls {
            limits.insert("maxToolCalls".into(), value.into());
        }
        fields.insert(
            "configuration".into(),
            json!({ "mode": "autonomous", "budgets": limits }),
        );
    }
    params
}

/// A task as the agent serializes it (`Task.to_dict`), read leniently: only the id and the
/// state are required.
fn parse_task(value: &Value) -> Result<Task, String> {
    let id = value
        .get("id")
        .and_then(Value::as_str)
        .ok_or("the task has no id")?;
    let status = value.get("status");
    let state = status
        .and_then(|status| status.get("state"))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("task {id} has no status.state"))?;
    let message = status
        .and_then(|status| status.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let output = value
        .get("output")
        .and_then(Value::as_str)
        .filter(|output| !output.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| last_agent_text(value));
    let idempotency_key = value
        .get("metadata")
        .and_then(|metadata| metadata.get(IDEMPOTENCY_KEY))
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Task {
        id: id.to_string(),
        state: TaskState::from_wire(state),
        message,
        output,
        idempotency_key,
    })
}

/// The text parts of the task's last agent message, concatenated (parts of one message are one
/// text); empty when the agent has not answered.
fn last_agent_text(task: &Value) -> String {
    let Some(history) = task.get("history").and_then(Value::as_array) else {
        return String::new();
    };
    let Some(answer) = history
        .iter()
        .rev()
        .find(|message| message.get("role").and_then(Value::as_str) == Some("agent"))
    else {
        return String::new();
    };
    answer
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect()
}

/// An agent endpoint is a plain `http://host[:port][/path]` URL.
fn parse_endpoint(endpoint: &str) -> Result<Uri, A2aError> {
    let uri: Uri = endpoint
        .parse()
        .map_err(|error: http::uri::InvalidUri| invalid_endpoint(endpoint, error.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(invalid_endpoint(
            endpoint,
            "only http:// endpoints are supported".to_string(),
        ));
    }
    if uri.authority().is_none() {
        return Err(invalid_endpoint(endpoint, "no host".to_string()));
    }
    Ok(uri)
}

fn invalid_endpoint(endpoint: &str, reason: String) -> A2aError {
    A2aError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        reason,
    }
}

fn bad_response(method: &'static str, endpoint: &str, reason: String) -> A2aError {
    A2aError::BadResponse {
        method,
        endpoint: endpoint.to_string(),
        reason,
    }
}

fn request_error(
    method: &'static str,
    endpoint: &str,
    error: &hyper_util::client::legacy::Error,
) -> A2aError {
    // hyper's own message ("client error (Connect)") says little: its causes say what happened.
    let reason = causes(error).unwrap_or_else(|| error.to_string());
    if error.is_connect() {
        A2aError::Connect {
            endpoint: endpoint.to_string(),
            reason,
        }
    } else {
        A2aError::Transport {
            method,
            endpoint: endpoint.to_string(),
            reason,
        }
    }
}

fn body_error(
    method: &'static str,
    endpoint: &str,
    error: Box<dyn StdError + Send + Sync>,
) -> A2aError {
    if error.is::<LengthLimitError>() {
        return bad_response(
            method,
            endpoint,
            format!("the response is larger than {MAX_RESPONSE_BYTES} bytes"),
        );
    }
    let reason = match causes(error.as_ref()) {
        Some(causes) => format!("{error}: {causes}"),
        None => error.to_string(),
    };
    A2aError::Transport {
        method,
        endpoint: endpoint.to_string(),
        reason,
    }
}

/// The messages of an error's sources, outermost first: "tcp connect error: Connection refused
/// (os error 111)".
fn causes(error: &(dyn StdError + 'static)) -> Option<String> {
    let mut messages: Vec<String> = Vec::new();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if messages.last() != Some(&message) {
            messages.push(message);
        }
        source = cause.source();
    }
    (!messages.is_empty()).then(|| messages.join(": "))
}

fn shorten(message: &str) -> String {
    match message.char_indices().nth(MAX_ERROR_MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &message[..end]),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests;
