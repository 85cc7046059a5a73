//! A kube client whose watch responses are read as its reader consumes them: per open watch, the
//! resourceVersion up to which everything was delivered (its events, and the testkit's bookmarks,
//! each of which promises that every earlier event of its watch was sent). What the fences of
//! `crate::fence` wait on.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use http_body_util::BodyExt;
use kaos_testkit::ApiServer;
use serde_json::Value;
use tower::ServiceExt;

/// One watch request of the client and what its response delivered so far.
struct Stream {
    /// The path with the selectors and the metadata-only flag: what names one watch, whatever
    /// resourceVersion it resumes from.
    key: String,
    /// Every event up to this resourceVersion was delivered.
    delivered: u64,
    /// Until the response body is dropped (the watch ended and its reader let it go).
    open: bool,
    /// The start of a line not complete yet.
    partial: Vec<u8>,
}

/// The watches of one client ([`TestCluster::start_fenced`]), as their responses are read.
#[derive(Clone, Default)]
pub struct Watches {
    /// None for a cluster whose client is not tapped ([`TestCluster::start`]).
    streams: Option<Arc<Mutex<Vec<Stream>>>>,
}

impl Watches {
    pub(crate) fn tapped() -> Self {
        Self {
            streams: Some(Arc::default()),
        }
    }

    fn lock(streams: &Mutex<Vec<Stream>>) -> MutexGuard<'_, Vec<Stream>> {
        streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a watch request; returns its index (None when `request` is no watch).
    fn opened<B>(&self, request: &http::Request<B>) -> Option<usize> {
        let streams = self.streams.as_ref()?;
        let query = request.uri().query().unwrap_or("");
        let param = |name: &str| {
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        if !matches!(param("watch").as_deref(), Some("true" | "1")) {
            return None;
        }
        let metadata_only = request
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
        let key = format!(
            "{} labelSelector={} fieldSelector={}{}",
            request.uri().path(),
            param("labelSelector").unwrap_or_default(),
            param("fieldSelector").unwrap_or_default(),
            if metadata_only { " (metadata)" } else { "" }
        );
        // A watch from a resourceVersion is sent only what came after it: what came before was
        // delivered by the list or the watch it resumes.
        let from = param("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut streams = Self::lock(streams);
        streams.push(Stream {
            key,
            delivered: from,
            open: true,
            partial: Vec::new(),
        });
        Some(streams.len() - 1)
    }

    /// Reads one chunk of the response of watch `index`.
    fn read(&self, index: usize, chunk: &[u8]) {
        let Some(streams) = &self.streams else { return };
        let mut streams = Self::lock(streams);
        let stream = &mut streams[index];
        stream.partial.extend_from_slice(chunk);
        while let Some(end) = stream.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = stream.partial.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            let version = event
                .pointer("/object/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(version) = version {
                stream.delivered = stream.delivered.max(version);
            }
        }
    }

    fn closed(&self, index: usize) {
        if let Some(streams) = &self.streams {
            Self::lock(streams)[index].open = false;
        }
    }

    /// What keeps the watches from having delivered everything up to `version`: each open
    /// watch behind it, and each watch (by key) with no open stream (between a watch that ended
    /// and the next). Empty when caught up.
    pub fn behind(&self, version: u64) -> Vec<String> {
        let Some(streams) = &self.streams else {
            panic!("a fence needs a cluster started with TestCluster::start_fenced");
        };
        let streams = Self::lock(streams);
        let mut behind: Vec<String> = streams
            .iter()
            .filter(|s| s.open && s.delivered < version)
            .map(|s| format!("the watch {} at {} of {version}", s.key, s.delivered))
            .collect();
        let mut keys: Vec<&str> = streams.iter().map(|s| s.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            if !streams.iter().any(|s| s.open && s.key == key) {
                behind.push(format!("the watch {key} not open again yet"));
            }
        }
        behind
    }

    /// How many watch requests the client made so far.
    pub fn started(&self) -> usize {
        self.streams
            .as_ref()
            .map_or(0, |streams| Self::lock(streams).len())
    }
}

/// Marks its watch closed when the response body (which owns it) is dropped.
struct Closer {
    watches: Watches,
    index: usize,
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.watches.closed(self.index);
    }
}

/// A kube client of `api` whose watch responses `watches` reads as they are consumed.
pub(crate) fn tapped_client(api: &ApiServer, watches: &Watches) -> kube::Client {
    let router = api.clone().router();
    let watches = watches.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (router, watches) = (router.clone(), watches.clone());
        async move {
            let watch = watches.opened(&request);
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(|body| match watch {
                Some(index) => {
                    let closer = Closer { watches, index };
                    body.map_frame(move |frame| {
                        if let Some(chunk) = frame.data_ref() {
                            closer.watches.read(closer.index, chunk);
                        }
                        frame
                    })
                    .boxed_unsync()
                }
                None => body.boxed_unsync(),
            }))
        }
    });
    kube::Client::new(service, "default")
}
