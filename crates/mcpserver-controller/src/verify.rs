//! The MCP handshake the controller makes with a server once per rollout: `initialize`, then
//! `notifications/initialized`, then every page of `tools/list`, over streamable HTTP at
//! `<endpoint>/mcp` (where the KAOS runtimes and FastMCP serve it), each request with its own
//! timeout. A 401 or 403 means the server is there and wants credentials: reachable.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kaos_api::conditions::{
    AUTHENTICATION_REQUIRED, INITIALIZE_FAILED, SERVER_UNREACHABLE, TOOLS_LIST_FAILED, TOOLS_LISTED,
};
use kaos_api::mcpserver::McpServerInfo;
use serde_json::{Value, json};

/// The path of the MCP endpoint under the server's Service address.
pub const MCP_PATH: &str = "/mcp";
/// The protocol revision offered; servers answer with the one they speak.
const PROTOCOL_VERSION: &str = "2025-06-18";
/// A `tools/list` answer larger than this is refused rather than read into memory.
const MAX_RESPONSE_BYTES: usize = 4 << 20;
/// Pages followed at most: a server whose cursor never ends is a failure, not a loop.
const MAX_PAGES: usize = 100;
const SESSION_HEADER: &str = "mcp-session-id";

/// What one check found: the condition it makes and the tools listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub verified: bool,
    pub reason: &'static str,
    pub message: String,
    pub tools: Vec<String>,
    /// Who answered: from a check that listed the tools only.
    pub server_info: Option<McpServerInfo>,
}

/// What a server that listed its tools said of itself.
struct Listed {
    tools: Vec<String>,
    server_info: McpServerInfo,
}

/// A failed step: its reason and what to say.
struct Failure(&'static str, String);

#[derive(Clone)]
pub struct McpClient {
    http: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl McpClient {
    pub fn new(timeout: Duration) -> Self {
        Self {
            // No idle connections kept: a check happens once per rollout.
            http: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http(),
            timeout,
        }
    }

    /// Checks the MCP server at `url` (`http://host:port/mcp`).
    pub async fn verify(&self, url: &str) -> Outcome {
        match self.list_tools(url).await {
            Ok(Some(Listed { tools, server_info })) => Outcome {
                verified: true,
                reason: TOOLS_LISTED,
                message: format!(
                    "MCP initialize and tools/list answered at {url}: {} tools",
                    tools.len()
                ),
                tools,
                server_info: Some(server_info),
            },
            Ok(None) => Outcome {
                verified: true,
                reason: AUTHENTICATION_REQUIRED,
                message: format!(
                    "the MCP server at {url} answers but requires credentials (401/403); its tools are not listed"
                ),
                tools: Vec::new(),
                server_info: None,
            },
            Err(Failure(reason, message)) => Outcome {
                verified: false,
                reason,
                message,
                tools: Vec::new(),
                server_info: None,
            },
        }
    }

    /// The tool names and who answered, or None when the server asks for credentials.
    async fn list_tools(&self, url: &str) -> Result<Option<Listed>, Failure> {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "kaos-mcpserver-controller", "version": env!("CARGO_PKG_VERSION")},
        }});
        let answer = self.post(url, &init, None, None).await;
        let answer = match answer {
            Err(Step::Unauthorized) => return Ok(None),
            Err(Step::Unreachable(why)) => {
                return Err(Failure(
                    SERVER_UNREACHABLE,
                    format!(
                        "no MCP server answered at {url}: {why}; check that the pod listens on its port and serves streamable HTTP at {MCP_PATH}"
                    ),
                ));
            }
            Err(Step::Bad(why)) => {
                return Err(Failure(
                    INITIALIZE_FAILED,
                    format!(
                        "MCP initialize at {url} failed: {why}; check the server's logs (kubectl logs) and that it serves MCP streamable HTTP at {MCP_PATH}"
                    ),
                ));
            }
            Ok(answer) => answer,
        };
        let session = answer.session.as_deref();
        let version = answer
            .body
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(PROTOCOL_VERSION)
            .to_string();
        let server_info = server_info(&answer.body["result"], &version);
        let list_failed = |why: String| {
            Failure(
                TOOLS_LIST_FAILED,
                format!(
                    "MCP initialize answered at {url} but tools/list failed: {why}; check the server's logs (kubectl logs)"
                ),
            )
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.post(url, &initialized, session, Some(&version))
            .await
            .map_err(|step| list_failed(format!("notifications/initialized: {}", step.text())))?;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0..MAX_PAGES {
            let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
            let request =
                json!({"jsonrpc": "2.0", "id": page + 2, "method": "tools/list", "params": params});
            let answer = self
                .post(url, &request, session, Some(&version))
                .await
                .map_err(|step| list_failed(step.text()))?;
            let result = &answer.body["result"];
            let listed = result["tools"]
                .as_array()
                .ok_or_else(|| list_failed("the answer has no result.tools".into()))?;
            tools.extend(
                listed
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(String::from)),
            );
            cursor = result["nextCursor"].as_str().map(String::from);
            if cursor.is_none() {
                self.close(url, session).await;
                return Ok(Some(Listed { tools, server_info }));
            }
        }
        Err(list_failed(format!("more than {MAX_PAGES} pages")))
    }

    /// One JSON-RPC message POSTed; its answer (JSON or one SSE event), or nothing for a
    /// notification.
    async fn post(
        &self,
        url: &str,
        message: &Value,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<Answer, Step> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream");
        if let Some(session) = session {
            request = request.header(SESSION_HEADER, session);
        }
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        let request = request
            .body(Full::new(Bytes::from(message.to_string())))
            .map_err(|e| Step::Unreachable(format!("invalid address ({e})")))?;
        let exchange = async {
            let response = self.http.request(request).await.map_err(|e| {
                // hyper's own message ("client error (Connect)") says little: its cause does.
                let cause = std::error::Error::source(&e).map_or(e.to_string(), |c| c.to_string());
                Step::Unreachable(cause)
            })?;
            let status = response.status();
            let session = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(String::from);
            let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| Step::Bad(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, Step>((status, session, bytes))
        };
        let (status, session, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                Step::Unreachable(format!("no answer within {}s", self.timeout.as_secs_f64()))
            })??;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(Step::Unauthorized);
        }
        if !status.is_success() {
            return Err(Step::Bad(format!("HTTP {status}")));
        }
        if message.get("id").is_none() {
            return Ok(Answer {
                session,
                body: Value::Null,
            });
        }
        let body = json_rpc_answer(&bytes)?;
        if let Some(error) = body.get("error") {
            // The server's own words, bounded: a status message is no place for a stack trace.
            let text: String = error.to_string().chars().take(200).collect();
            return Err(Step::Bad(format!("JSON-RPC error {text}")));
        }
        Ok(Answer { session, body })
    }

    /// Ends the session (a server keeps it otherwise); its answer does not matter.
    async fn close(&self, url: &str, session: Option<&str>) {
        let Some(session) = session else { return };
        let Ok(request) = Request::builder()
            .method(Method::DELETE)
            .uri(url)
            .header(SESSION_HEADER, session)
            .body(Full::new(Bytes::new()))
        else {
            return;
        };
        let _ = tokio::time::timeout(self.timeout, self.http.request(request)).await;
    }
}

struct Answer {
    session: Option<String>,
    body: Value,
}

enum Step {
    Unreachable(String),
    Unauthorized,
    Bad(String),
}

impl Step {
    fn text(self) -> String {
        match self {
            Step::Unreachable(why) | Step::Bad(why) => why,
            Step::Unauthorized => "HTTP 401/403".into(),
        }
    }
}

/// What an initialize `result` says of the server, each text bounded (it is the server's own
/// words, shown in the status).
fn server_info(result: &Value, protocol_version: &str) -> McpServerInfo {
    let text = |pointer: &str| -> String {
        let value = result.pointer(pointer).and_then(Value::as_str);
        value.unwrap_or_default().chars().take(253).collect()
    };
    McpServerInfo {
        name: text("/serverInfo/name"),
        version: text("/serverInfo/version"),
        protocol_version: protocol_version.chars().take(253).collect(),
    }
}

/// The JSON-RPC answer in a body that is JSON, or an SSE stream whose `data:` lines hold it.
fn json_rpc_answer(bytes: &[u8]) -> Result<Value, Step> {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        return Ok(value);
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|value| value.get("result").is_some() || value.get("error").is_some())
        .ok_or_else(|| {
            let start: String = text.chars().take(120).collect();
            Step::Bad(format!("not a JSON-RPC answer: {start:?}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_from_json_or_from_an_sse_event() -> Result<(), String> {
        let plain =
            json_rpc_answer(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).map_err(Step::text)?;
        assert_eq!(plain["id"], 1);
        let sse =
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[]}}\n\n";
        let event = json_rpc_answer(sse.as_bytes()).map_err(Step::text)?;
        assert_eq!(event["id"], 2);
        let html = json_rpc_answer(b"<html>oops</html>").err().map(Step::text);
        assert_eq!(
            html.as_deref(),
            Some("not a JSON-RPC answer: \"<html>oops</html>\"")
        );
        Ok(())
    }

    #[test]
    fn server_info_is_read_and_bounded() {
        let result = json!({"serverInfo": {"name": "x".repeat(300), "version": "1.2.3"}});
        let info = server_info(&result, "2025-06-18");
        assert_eq!(info.name.len(), 253);
        assert_eq!(info.version, "1.2.3");
        assert_eq!(info.protocol_version, "2025-06-18");
        // A server that says nothing of itself: empty texts, not an error.
        assert_eq!(server_info(&json!({}), "2025-03-26").name, "");
    }
}
