//! The requests of a ModelAPI's model check, made once per rollout, each within its own
//! timeout: a Proxy's LiteLLM `GET /health/readiness` (the proxy's own state, no model called),
//! then `GET /v1/models`; a Hosted's Ollama `GET /api/tags`. What an answer means is `models`'s.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kaos_workload::verification::overrides::AddressOverrides;
use serde_json::Value;

use crate::models::{Expected, Models, Outcome};

pub const READINESS_PATH: &str = "/health/readiness";
pub const MODELS_PATH: &str = "/v1/models";
pub const TAGS_PATH: &str = "/api/tags";
/// A list larger than this is refused rather than read into memory (LiteLLM lists a wildcard
/// entry's whole provider: ~50 KiB for `openai/*`).
const MAX_RESPONSE_BYTES: usize = 8 << 20;

#[derive(Clone)]
pub struct ModelsClient {
    http: Client<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
}

/// Why a request got no usable answer.
enum Failure {
    /// No answer (no connection, or none within the timeout).
    Unreachable(String),
    /// An answer that is not the one asked for (an HTTP error, not JSON).
    Bad(String),
}

impl ModelsClient {
    pub fn new(timeout: Duration) -> Self {
        Self {
            // No idle connections kept: a check happens once per rollout.
            http: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http(),
            timeout,
        }
    }

    /// Checks the server at `endpoint` (the ModelAPI's `status.endpoint`, reached through
    /// `overrides`) for what `expected` says.
    pub async fn verify(
        &self,
        endpoint: &str,
        overrides: &AddressOverrides,
        expected: &Expected,
    ) -> Outcome {
        let base = overrides.url(endpoint, "");
        let fail = |path: &str, failure: Failure| {
            let url = format!("{base}{path}");
            match failure {
                Failure::Unreachable(why) => Outcome::unreachable(expected, &url, &why),
                Failure::Bad(why) => Outcome::list_failed(expected, &url, &why),
            }
        };
        match &expected.models {
            Models::Hosted(_) => match self.get(&format!("{base}{TAGS_PATH}")).await {
                Ok(body) => match names(&body, "/models", "name") {
                    Some(listed) => Outcome::hosted_listed(expected, &base, &listed),
                    None => fail(TAGS_PATH, Failure::Bad("with no models list".into())),
                },
                Err(failure) => fail(TAGS_PATH, failure),
            },
            Models::Proxy(_) => {
                if let Err(failure) = self.get(&format!("{base}{READINESS_PATH}")).await {
                    return fail(READINESS_PATH, failure);
                }
                match self.get(&format!("{base}{MODELS_PATH}")).await {
                    Ok(body) => match names(&body, "/data", "id") {
                        Some(listed) => Outcome::proxy_listed(expected, &base, &listed),
                        None => fail(MODELS_PATH, Failure::Bad("with no model list".into())),
                    },
                    Err(failure) => fail(MODELS_PATH, failure),
                }
            }
        }
    }

    /// The JSON answer of `GET url`, within the timeout.
    async fn get(&self, url: &str) -> Result<Value, Failure> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(url)
            .header(header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| Failure::Unreachable(format!("invalid address ({e})")))?;
        let exchange = async {
            let response = self.http.request(request).await.map_err(|e| {
                // hyper's own message ("client error (Connect)") says little: its cause does.
                let cause = std::error::Error::source(&e).map_or(e.to_string(), |c| c.to_string());
                Failure::Unreachable(cause)
            })?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| Failure::Bad(format!("with an answer that could not be read ({e})")))?
                .to_bytes();
            Ok::<_, Failure>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                Failure::Unreachable(format!("no answer within {}s", self.timeout.as_secs_f64()))
            })??;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            // The proxy runs keyless (docs/security.md): a key asked for is one agents lack too.
            return Err(Failure::Bad(format!(
                "HTTP {status}: it asks for a key (a master_key in its config?), which agents do not present"
            )));
        }
        if !status.is_success() {
            return Err(Failure::Bad(format!("HTTP {status}")));
        }
        // The body itself is never quoted: a status message is no place for what a server says.
        serde_json::from_slice(&bytes).map_err(|_| Failure::Bad("with something not JSON".into()))
    }
}

/// The `field` of each item of the list at `pointer` in `body`, if there is such a list.
fn names(body: &Value, pointer: &str, field: &str) -> Option<Vec<String>> {
    let items = body.pointer(pointer)?.as_array()?;
    Some(
        items
            .iter()
            .filter_map(|item| item.get(field)?.as_str().map(String::from))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_read_from_openai_and_ollama_lists() {
        let openai = json!({"object": "list", "data": [{"id": "gpt-4o"}, {"object": "model"}, {"id": "kaos.a.b"}]});
        assert_eq!(
            names(&openai, "/data", "id"),
            Some(vec!["gpt-4o".to_string(), "kaos.a.b".to_string()])
        );
        let ollama = json!({"models": [{"name": "smollm2:135m", "model": "smollm2:135m"}]});
        assert_eq!(
            names(&ollama, "/models", "name"),
            Some(vec!["smollm2:135m".to_string()])
        );
        assert_eq!(names(&json!({"detail": "x"}), "/data", "id"), None);
    }
}
