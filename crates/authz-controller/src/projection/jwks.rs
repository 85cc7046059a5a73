//! The users' signing keys: the JWKS document at the user issuer's keys URL, read as KAOS reads
//! it (over http or https, the system's roots), so the policy can verify users' tokens. Read
//! again every `REFRESH` so rotated keys reach the policy; unchanged keys write nothing.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// How often the keys are read again.
pub const REFRESH: Duration = Duration::from_secs(300);
/// How long one read may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest key set accepted (a JWKS is a few KiB; this keeps a wrong URL out of the data).
const MAX_BYTES: usize = 256 * 1024;

/// The JWKS at `uri`, or why it could not be read (a message for the grants' status).
pub async fn fetch(uri: &str) -> Result<Value, String> {
    let failed = |why: String| format!("reading the users' signing keys from {uri}: {why}");
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| failed(format!("no TLS roots: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let request = http::Request::get(uri)
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::new())
        .map_err(|e| failed(e.to_string()))?;
    let response = tokio::time::timeout(TIMEOUT, client.request(request))
        .await
        .map_err(|_| failed(format!("no answer within {}s", TIMEOUT.as_secs())))?
        .map_err(|e| failed(e.to_string()))?;
    let status = response.status();
    let body = tokio::time::timeout(TIMEOUT, response.into_body().collect())
        .await
        .map_err(|_| failed("the body did not arrive in time".into()))?
        .map_err(|e| failed(e.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(failed(format!("HTTP {status}")));
    }
    if body.len() > MAX_BYTES {
        return Err(failed(format!("{} bytes, more than a key set", body.len())));
    }
    let keys: Value =
        serde_json::from_slice(&body).map_err(|e| failed(format!("not JSON: {e}")))?;
    if !keys.get("keys").is_some_and(Value::is_array) {
        return Err(failed("no \"keys\" list".into()));
    }
    Ok(keys)
}
