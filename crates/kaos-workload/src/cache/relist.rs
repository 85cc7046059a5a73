//! Relists seen downstream only once the store shows them.
//!
//! A store (kube-runtime's reflector, or a [`ChildStore`](crate::cache::child_store::ChildStore))
//! keeps a relist's objects aside and swaps them in at `InitDone`. A trigger raised by an
//! `InitApply` can therefore start a reconcile that reads the store *before* the swap: it sees
//! the object as it was before the watch broke (or not at all), writes a status from that, and
//! nothing wakes it again once the swap happens. Under a watch that breaks and relists (410
//! Gone), a Deployment that became ready while the watch was down left its owner Pending.
//!
//! [`after_relists`] holds a relist's events and releases them, in order, with its `InitDone`:
//! every consumer (triggers, relation indexes, change trackers) sees the relist after the store
//! does. The objects of one relist are held once more for as long as it lasts.

use futures::{Stream, TryStreamExt, stream};
use kube::runtime::watcher::Event;

/// Passes `events` on, holding each relist (`Init`, its `InitApply`s) until its `InitDone`.
/// Place it after the store's writer.
pub fn after_relists<K, E, S>(events: S) -> impl Stream<Item = Result<Event<K>, E>> + Send
where
    S: Stream<Item = Result<Event<K>, E>> + Send,
    K: Send,
    E: Send,
{
    let mut held: Option<Vec<Event<K>>> = None;
    events
        .map_ok(move |event| {
            let released = match event {
                // A relist that starts again (the list failed midway) replaces the held one.
                Event::Init => {
                    held = Some(vec![Event::Init]);
                    Vec::new()
                }
                Event::InitApply(object) => match &mut held {
                    Some(relist) => {
                        relist.push(Event::InitApply(object));
                        Vec::new()
                    }
                    None => vec![Event::InitApply(object)],
                },
                Event::InitDone => {
                    let mut relist = held.take().unwrap_or_default();
                    relist.push(Event::InitDone);
                    relist
                }
                live => vec![live],
            };
            stream::iter(released.into_iter().map(Ok))
        })
        .try_flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::child_store::child_store;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_relisted_object_reaches_consumers_only_once_the_store_shows_it() {
        let (store, mut writer) = child_store::<ConfigMap>();
        let watch = vec![
            Event::Init,
            Event::InitDone,
            Event::Apply(cm("a", "1")),
            // The watch broke; the relist shows a changed and a new object.
            Event::Init,
            Event::InitApply(cm("a", "2")),
            Event::InitApply(cm("b", "3")),
            Event::InitDone,
            Event::Apply(cm("b", "4")),
        ];
        let source = stream::iter(watch.into_iter().map(Ok::<_, ()>))
            .inspect_ok(move |event| writer.apply(event));
        let seen: Vec<String> = after_relists(source)
            .map_ok(|event| {
                // What a reconcile triggered by this event would read.
                let version = |name: &str| {
                    store
                        .get("ns", name)
                        .and_then(|c| c.metadata.resource_version.clone())
                        .unwrap_or_else(|| "none".into())
                };
                match event {
                    Event::Init => "init".to_string(),
                    Event::InitDone => "done".to_string(),
                    Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) => {
                        let name = o.metadata.name.clone().unwrap_or_default();
                        format!(
                            "{name}@{} store {}",
                            o.metadata.resource_version.unwrap_or_default(),
                            version(&name)
                        )
                    }
                }
            })
            .try_collect()
            .await
            .expect("no errors");
        assert_eq!(
            seen,
            [
                "init",
                "done",
                "a@1 store 1",
                "init",
                "a@2 store 2",
                "b@3 store 3",
                "done",
                "b@4 store 4",
            ]
        );
    }

    #[tokio::test]
    async fn a_relist_that_starts_again_releases_only_the_last_attempt() {
        let watch = vec![
            Event::Init,
            Event::InitApply(cm("a", "1")),
            Event::Init,
            Event::InitApply(cm("b", "2")),
            Event::InitDone,
        ];
        let released: Vec<Event<ConfigMap>> =
            after_relists(stream::iter(watch.into_iter().map(Ok::<_, ()>)))
                .try_collect()
                .await
                .expect("no errors");
        let names: Vec<_> = released
            .iter()
            .map(|e| match e {
                Event::InitApply(o) => o.metadata.name.clone().unwrap_or_default(),
                Event::Init => "init".into(),
                Event::InitDone => "done".into(),
                _ => "other".into(),
            })
            .collect();
        assert_eq!(names, ["init", "b", "done"]);
    }
}
