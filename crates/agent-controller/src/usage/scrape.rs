//! One read of a proxy pod's `/metrics/`: a GET within a timeout, the body parsed as it arrives
//! (never held whole), bounded in size. A failure says what went wrong in a few words, never
//! with the body.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::usage::counters::{Agents, PodReading};
use crate::usage::exposition::{Lines, sample};

/// Where LiteLLM serves Prometheus (`/metrics` answers a redirect to it).
pub const METRICS_PATH: &str = "/metrics/";
/// A body larger than this is refused: LiteLLM's grows with its series, a runaway one is no
/// usage to report.
const MAX_BODY_BYTES: usize = 256 << 20;
/// Lines longer than this are skipped (LiteLLM's longest are about 1 KiB).
const MAX_LINE_BYTES: usize = 64 << 10;

#[derive(Clone)]
pub struct Scraper {
    http: Client<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
}

impl Scraper {
    pub fn new(timeout: Duration) -> Self {
        Self {
            // One connection per pod and round, closed after it: rounds are a minute apart.
            http: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http(),
            timeout,
        }
    }

    /// Reads the counters of `count` agents (numbered by `agents`) from the proxy at `address`
    /// (`host:port`).
    pub async fn read(
        &self,
        address: &str,
        agents: &impl Agents,
        count: usize,
    ) -> Result<PodReading, String> {
        let request = Request::get(format!("http://{address}{METRICS_PATH}"))
            .body(Empty::new())
            .map_err(|e| format!("invalid address ({e})"))?;
        let exchange = async {
            let response = self.http.request(request).await.map_err(|e| {
                // hyper's own message ("client error (Connect)") says little: its cause does.
                std::error::Error::source(&e).map_or(e.to_string(), |c| c.to_string())
            })?;
            if response.status() != StatusCode::OK {
                return Err(format!("HTTP {}", response.status()));
            }
            let mut body = response.into_body();
            let mut reading = PodReading::new(count);
            let mut lines = Lines::new(MAX_LINE_BYTES);
            let mut each = |line: &str| {
                if let Some(sample) = sample(line) {
                    reading.add(&sample, agents);
                }
            };
            let mut read = 0;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("reading the answer: {e}"))?;
                if let Ok(data) = frame.into_data() {
                    read += data.len();
                    if read > MAX_BODY_BYTES {
                        return Err(format!("the answer is larger than {MAX_BODY_BYTES} bytes"));
                    }
                    lines.feed(&data, &mut each);
                }
            }
            lines.finish(&mut each);
            Ok(reading)
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("no answer within {}s", self.timeout.as_secs_f64()))?
    }
}
