//! The admin HTTP endpoints of a controller process, as controller-runtime managers serve them:
//! `/metrics` on one address, `/healthz` and `/readyz` on another. Readiness turns on once the
//! watches have synced, whether or not this replica leads. In secure mode `/metrics` is HTTPS and
//! only for callers the API server authenticates and authorizes (`metrics_auth`); the probes stay
//! plain HTTP and open, since the kubelet calls them without credentials.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::rustls::ServerConfig;

use crate::metrics::Metrics;
use crate::metrics_auth::{Decision, MetricsAuth, bearer_token};
use crate::metrics_tls::TlsListener;

/// What `/metrics` needs in secure mode.
pub struct SecureMetrics {
    pub tls: Arc<ServerConfig>,
    pub auth: Arc<MetricsAuth>,
}

/// Whether the process is ready to serve (its caches have synced).
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
}

impl Health {
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

async fn metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
}

/// controller-runtime's filter: 401 without a valid token, 403 when the user may not `get` the
/// path, 500 when the API server cannot be asked; the answers name no token.
async fn authorize(State(auth): State<Arc<MetricsAuth>>, request: Request, next: Next) -> Response {
    let token = bearer_token(
        request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    let verb = request.method().as_str().to_ascii_lowercase();
    let path = request.uri().path().to_string();
    match auth.check(token, &verb, &path).await {
        Ok(Decision::Allowed) => next.run(request).await,
        Ok(Decision::Unauthenticated) => (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
        Ok(Decision::Forbidden { user }) => (
            StatusCode::FORBIDDEN,
            format!("Authorization denied for user {user}"),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(%path, "metrics authentication or authorization failed: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Authentication or authorization failed",
            )
                .into_response()
        }
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, &'static str) {
    if health.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
    }
}

/// Binds both listeners (so a taken port fails startup) and serves them in the background;
/// `/metrics` over TLS with authentication and authorization when `secure` is given.
/// Returns the bound addresses (useful with port 0) and the serving tasks.
pub async fn serve(
    metrics_address: Option<SocketAddr>,
    probe_address: Option<SocketAddr>,
    metrics_state: Arc<Metrics>,
    health: Arc<Health>,
    secure: Option<SecureMetrics>,
) -> std::io::Result<(Vec<SocketAddr>, Vec<JoinHandle<()>>)> {
    let mut bound = Vec::new();
    let mut tasks = Vec::new();
    if let Some(address) = metrics_address {
        let listener = TcpListener::bind(address).await?;
        bound.push(listener.local_addr()?);
        let router = Router::new()
            .route("/metrics", get(metrics))
            .with_state(metrics_state);
        tasks.push(match secure {
            None => spawn_server(listener, router),
            Some(SecureMetrics { tls, auth }) => spawn_server(
                TlsListener::new(listener, tls)?,
                router.layer(middleware::from_fn_with_state(auth, authorize)),
            ),
        });
    }
    if let Some(address) = probe_address {
        let listener = TcpListener::bind(address).await?;
        bound.push(listener.local_addr()?);
        let router = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(health);
        tasks.push(spawn_server(listener, router));
    }
    Ok((bound, tasks))
}

fn spawn_server<L>(listener: L, router: Router) -> JoinHandle<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("admin server stopped: {e}");
        }
    })
}
