//! Stand-ins for the LiteLLM proxies of the budget run (`--budgets`): one loopback listener per
//! ModelAPI answering `GET /metrics/` with the Prometheus families the agent controller's usage
//! collector reads, one series per budgeted agent with LiteLLM 1.110.2's labels (as in
//! crates/agent-controller/tests/fixtures/litellm-1.110.2-metrics.txt), so a scrape costs what a
//! real one costs to send and to parse. While `growing`, every agent's counters grow by one call
//! a second; stopped, they stay where they are. Plain HTTP/1.1, one request per connection, as
//! the collector's one-shot client asks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Tokens of one call (100 prompt, 50 completion) and its price at gpt-4o's rates.
const PROMPT: f64 = 100.0;
const COMPLETION: f64 = 50.0;
const SPEND: f64 = 0.00075;

/// What the proxies serve and what they were asked.
#[derive(Default)]
pub struct Shared {
    /// Per ModelAPI: (agent uid, alias) of its agents.
    pub agents: Mutex<Vec<Vec<(String, String)>>>,
    /// Calls counted before the current growth started, and when it started.
    calls: Mutex<(f64, Option<Instant>)>,
    pub scrapes: AtomicU64,
    pub bytes: AtomicU64,
}

impl Shared {
    /// Calls per agent so far (one a second while growing).
    fn calls(&self) -> f64 {
        let calls = self.calls.lock().expect("calls");
        calls.0
            + calls
                .1
                .map_or(0.0, |since| since.elapsed().as_secs() as f64)
    }

    pub fn grow(&self, on: bool) {
        let mut calls = self.calls.lock().expect("calls");
        match (on, calls.1) {
            (true, None) => calls.1 = Some(Instant::now()),
            (false, Some(since)) => *calls = (calls.0 + since.elapsed().as_secs() as f64, None),
            _ => {}
        }
    }

    /// The `/metrics/` body of ModelAPI `index`.
    fn body(&self, index: usize) -> String {
        let calls = self.calls();
        let agents = self.agents.lock().expect("agents");
        let agents = agents.get(index).map(Vec::as_slice).unwrap_or_default();
        let mut out = String::with_capacity(agents.len() * 5 * 400 + 256);
        out.push_str(
            "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7e+09\n",
        );
        let families = [
            ("litellm_input_tokens_metric_total", calls * PROMPT),
            ("litellm_output_tokens_metric_total", calls * COMPLETION),
            (
                "litellm_total_tokens_metric_total",
                calls * (PROMPT + COMPLETION),
            ),
            ("litellm_requests_metric_total", calls),
            ("litellm_spend_metric_total", calls * SPEND),
        ];
        for (family, value) in families {
            out.push_str(&format!("# TYPE {family} counter\n"));
            for (uid, alias) in agents {
                out.push_str(&format!(
                    "{family}{{api_key_alias=\"None\",api_provider=\"openai\",end_user=\"None\",hashed_api_key=\"not-needed\",model=\"gpt-4o\",model_id=\"{uid}\",org_alias=\"None\",org_id=\"None\",requested_model=\"{alias}\",team=\"None\",team_alias=\"None\",user=\"None\",user_email=\"None\"}} {value:?}\n"
                ));
            }
        }
        out
    }
}

/// Binds one listener per ModelAPI and serves them until the process ends; their addresses.
pub async fn start(shared: &Arc<Shared>, model_apis: usize) -> anyhow::Result<Vec<String>> {
    let mut addresses = Vec::new();
    for index in 0..model_apis {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        addresses.push(listener.local_addr()?.to_string());
        let shared = shared.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let (status, body) = if request.starts_with(b"GET /metrics/ ") {
                        ("200 OK", shared.body(index))
                    } else {
                        ("404 Not Found", String::new())
                    };
                    shared.scrapes.fetch_add(1, Ordering::Relaxed);
                    shared.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                    let head = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
    }
    Ok(addresses)
}
