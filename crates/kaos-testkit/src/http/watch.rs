//! Watch streams: newline-delimited `{"type":…,"object":…}` events, bookmarks, `timeoutSeconds`,
//! label/field selector transitions, and a 410 ERROR event when the requested resourceVersion is
//! older than the history or the client falls behind.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use http::{HeaderMap, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::{ApiServer, path::Query};
use crate::cluster::{EventType, WatchEvent};
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};

struct Filter {
    storage_key: String,
    namespace: String,
    labels: LabelSelector,
    fields: FieldSelector,
    metadata_only: bool,
}

impl Filter {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    /// The event a client with this filter sees for `event`, if any.
    fn translate(&self, event: &WatchEvent) -> Option<(&'static str, Value)> {
        if event.storage_key != self.storage_key
            || (!self.namespace.is_empty() && event.namespace != self.namespace)
        {
            return None;
        }
        let now = self.matches(&event.object);
        let before = event.previous.as_ref().is_some_and(|p| self.matches(p));
        let kind = match event.event_type {
            EventType::Added if now => EventType::Added,
            EventType::Modified if now && before => EventType::Modified,
            EventType::Modified if now => EventType::Added,
            EventType::Modified if before => EventType::Deleted,
            EventType::Deleted if now => EventType::Deleted,
            _ => return None,
        };
        // An object leaving the selector is DELETED as it was when it still matched, at the
        // event's resourceVersion (kube-apiserver's watch cache does the same).
        let leaving = event.event_type == EventType::Modified && kind == EventType::Deleted;
        let object = match (&event.previous, leaving) {
            (Some(previous), true) => {
                let mut previous = previous.clone();
                previous["metadata"]["resourceVersion"] =
                    Value::from(event.resource_version.to_string());
                previous
            }
            _ => event.object.clone(),
        };
        let object = if self.metadata_only {
            super::to_metadata(&object)
        } else {
            object
        };
        Some((kind.as_str(), object))
    }
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": event_type, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn gone_line(error: &ApiError) -> Bytes {
    line("ERROR", &error.to_status())
}

fn start(
    rt: &ResourceType,
    namespace: &str,
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<(Filter, u64)> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let filter = Filter {
        storage_key: rt.storage_key(),
        namespace: namespace.to_string(),
        labels: LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
        fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))?,
        metadata_only: accept
            .split(',')
            .next()
            .unwrap_or("")
            .contains("as=PartialObjectMetadata"),
    };
    let since = match query.get("resourceVersion") {
        None | Some("") | Some("0") => 0,
        Some(v) => v
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?,
    };
    Ok((filter, since))
}

/// `spared`: no faults for this client (the admin, when the fault config spares it).
pub fn serve(
    server: &ApiServer,
    rt: &ResourceType,
    namespace: &str,
    query: &Query,
    headers: &HeaderMap,
    spared: bool,
) -> Response {
    let (filter, since) = match start(rt, namespace, query, headers) {
        Ok(started) => started,
        Err(e) => return super::error_response(&e),
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = query.flag("allowWatchBookmarks");
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let forced_gone = !spared && server.faults.take_forced_gone();
    let cut_after = if spared {
        None
    } else {
        server.faults.watch_cut()
    };
    let subscription = if forced_gone {
        Err(ApiError::gone(format!(
            "too old resource version: {since} (injected)"
        )))
    } else {
        server.cluster.watch(rt, namespace, since)
    };
    let bookmark_interval = server.bookmark_interval;
    let kind = rt.kind.clone();
    let api_version = rt.api_version();
    let cluster = server.cluster.clone();
    tokio::spawn(async move {
        let (backlog, mut receiver, mut last_rv) = match subscription {
            Ok(s) => (s.backlog, s.receiver, s.resource_version),
            Err(e) => {
                let _ = tx.send(gone_line(&e)).await;
                return;
            }
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let cut_deadline = cut_after.map(|(_, after)| tokio::time::Instant::now() + after);
        let mut sent = 0usize;
        let cut_count = cut_after.and_then(|(count, _)| count);
        for event in backlog {
            if let Some((t, object)) = filter.translate(&event) {
                last_rv = last_rv.max(event.resource_version);
                if tx.send(line(t, &object)).await.is_err() {
                    return;
                }
                sent += 1;
            }
        }
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        loop {
            if cut_count.is_some_and(|n| sent >= n) {
                return;
            }
            let stop_at = cut_deadline.map_or(deadline, |c| c.min(deadline));
            tokio::select! {
                _ = tokio::time::sleep_until(stop_at) => return,
                _ = ticker.tick(), if bookmarks => {
                    // A bookmark promises every event up to its version was sent. Events are
                    // published under the cluster's lock, so all those up to the version read
                    // here are already queued: send them first, then the bookmark.
                    let published = cluster.resource_version();
                    loop {
                        match receiver.try_recv() {
                            Ok(event) => {
                                if let Some((t, object)) = filter.translate(&event) {
                                    if tx.send(line(t, &object)).await.is_err() {
                                        return;
                                    }
                                    sent += 1;
                                }
                                last_rv = last_rv.max(event.resource_version);
                            }
                            Err(broadcast::error::TryRecvError::Lagged(_)) => {
                                let error = ApiError::gone("the watch fell too far behind; list again");
                                let _ = tx.send(gone_line(&error)).await;
                                return;
                            }
                            Err(_) => break,
                        }
                    }
                    last_rv = last_rv.max(published);
                    let bookmark = json!({"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": last_rv.to_string(),
                                     "annotations": {"k8s.io/initial-events-end": "true"}}});
                    if tx.send(line("BOOKMARK", &bookmark)).await.is_err() {
                        return;
                    }
                }
                received = receiver.recv() => match received {
                    Ok(event) => {
                        if let Some((t, object)) = filter.translate(&event) {
                            last_rv = event.resource_version;
                            if tx.send(line(t, &object)).await.is_err() {
                                return;
                            }
                            sent += 1;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let error = ApiError::gone("the watch fell too far behind; list again");
                        let _ = tx.send(gone_line(&error)).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    let stream = tokio_stream_from(rx);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn tokio_stream_from(
    rx: mpsc::Receiver<Bytes>,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    futures::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|b| (Ok(b), rx)) },
    )
    .boxed()
}
