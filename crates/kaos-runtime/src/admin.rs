//! The admin HTTP endpoints of a controller process, as controller-runtime managers serve them:
//! `/metrics` on one address, `/healthz` and `/readyz` on another. Readiness turns on once the
//! watches have synced, whether or not this replica leads.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

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

/// Binds both listeners (so a taken port fails startup) and serves them in the background.
/// Returns the bound addresses (useful with port 0) and the serving tasks.
pub async fn serve(
    metrics_address: Option<SocketAddr>,
    probe_address: Option<SocketAddr>,
    metrics_state: Arc<Metrics>,
    health: Arc<Health>,
) -> std::io::Result<(Vec<SocketAddr>, Vec<JoinHandle<()>>)> {
    let mut bound = Vec::new();
    let mut tasks = Vec::new();
    let routers = [
        (
            metrics_address,
            Router::new()
                .route("/metrics", get(metrics))
                .with_state(metrics_state),
        ),
        (
            probe_address,
            Router::new()
                .route("/healthz", get(healthz))
                .route("/readyz", get(readyz))
                .with_state(health),
        ),
    ];
    for (address, router) in routers {
        let Some(address) = address else { continue };
        let listener = TcpListener::bind(address).await?;
        bound.push(listener.local_addr()?);
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!("admin server stopped: {e}");
            }
        }));
    }
    Ok((bound, tasks))
}
