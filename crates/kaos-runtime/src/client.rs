//! The Kubernetes client of a controller process, counting every request in
//! `rest_client_requests_total{code,method,host}` as client-go does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// The API server's `host:port`, the `host` label of request metrics.
pub fn api_host(config: &kube::Config) -> String {
    config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// A client for `config` whose requests are counted in `metrics`.
pub fn build(config: kube::Config, metrics: Arc<Metrics>) -> anyhow::Result<kube::Client> {
    let layer = RequestMetricsLayer {
        metrics,
        host: api_host(&config),
    };
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

#[derive(Clone)]
pub struct RequestMetricsLayer {
    metrics: Arc<Metrics>,
    host: String,
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            metrics: self.metrics.clone(),
            host: self.host.clone(),
        }
    }
}

pub struct RequestMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
    host: String,
}

impl<S, B, R> Service<Request<B>> for RequestMetrics<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().to_string();
        let metrics = self.metrics.clone();
        let host = self.host.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            match &result {
                Ok(r) => metrics.record_request(r.status().as_u16(), &method, &host),
                // client-go labels transport failures with the code "<error>".
                Err(_) => metrics.record_request_error(&method, &host),
            }
            result
        })
    }
}
