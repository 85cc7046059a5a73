//! kube-rs's runtime (watcher, metadata watcher, Controller with `owns` and `watches`) against the
//! testkit, in-process and over HTTP, including after injected watch cuts and 410 Gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kaos_testkit::faults::FaultConfig;
use kaos_testkit::{ApiServer, Cluster, ServeOptions, TestServer};
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::time::timeout;

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("ConfigMap")
}

async fn http_client(server: &TestServer) -> Client {
    let kubeconfig: kube::config::Kubeconfig =
        serde_saphyr::from_str(&server.kubeconfig(None)).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// Collects the names the watcher reports until `want` names are seen; also returns how many
/// errors the watcher surfaced (and recovered from) on the way.
async fn names_seen(client: Client, want: usize) -> (Vec<String>, usize) {
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let stream = watcher(cms, watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let (mut seen, mut errors) = (Vec::new(), 0);
    while seen.len() < want {
        let next = timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("watch event in time")
            .expect("stream continues");
        match next {
            Ok(cm) if !seen.contains(&cm.name_any()) => seen.push(cm.name_any()),
            Ok(_) => {}
            // kube's watcher reports a 410 or a failed call, then lists again on the next poll.
            Err(_) => errors += 1,
        }
    }
    seen.sort();
    (seen, errors)
}

/// Watch requests for ConfigMaps the testkit has answered so far. The testkit subscribes a watch
/// to the cluster's changes before it answers and audits the request, so a change made once this
/// count has moved reaches that watch: the fence that a watch is open.
fn configmap_watches(api: &ApiServer) -> usize {
    let records = api.audit.records();
    records
        .iter()
        .filter(|r| r.verb == "watch" && r.resource == "configmaps" && r.code == 200)
        .count()
}

/// Waits until the testkit has answered `count` watches of ConfigMaps.
async fn until_watches(api: &ApiServer, count: usize) {
    for _ in 0..2000 {
        if configmap_watches(api) >= count {
            return;
        }
        // The poll of this wait, not a fence.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the testkit did not answer {count} watches of ConfigMaps within 10 s");
}

async fn create_configmaps(client: &Client, names: &[&str]) {
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for name in names {
        cms.create(&PostParams::default(), &configmap(name))
            .await
            .expect("create");
    }
}

#[tokio::test]
async fn watcher_sees_existing_and_new_objects_in_process_and_over_http() {
    let api = ApiServer::new(Cluster::default());
    let in_process = Client::new(api.clone().router(), "default");
    create_configmaps(&in_process, &["a", "b"]).await;

    let watching = tokio::spawn(names_seen(in_process.clone(), 3));
    // Fenced: c is created once the watcher listed a and b and its watch is open, so c comes
    // through the watch.
    until_watches(&api, 1).await;
    create_configmaps(&in_process, &["c"]).await;
    assert_eq!(
        watching.await.expect("task"),
        (vec!["a".to_string(), "b".into(), "c".into()], 0)
    );

    let server = TestServer::start(api.clone(), &ServeOptions::default())
        .await
        .expect("serve");
    let over_http = http_client(&server).await;
    let watching = tokio::spawn(names_seen(over_http.clone(), 4));
    // Fenced as above: the second watch of ConfigMaps is the one over HTTP.
    until_watches(&api, 2).await;
    create_configmaps(&over_http, &["d"]).await;
    let (seen, errors) = watching.await.expect("task");
    assert_eq!(
        (seen, errors),
        (vec!["a".to_string(), "b".into(), "c".into(), "d".into()], 0)
    );
}

#[tokio::test]
async fn watcher_recovers_from_cut_streams_and_410_gone() {
    let api = ApiServer::new(Cluster::new(50));
    let client = Client::new(api.clone().router(), "default");
    // Every watch stream ends after one event; one watch start in three is answered 410.
    api.faults.set(FaultConfig {
        seed: 3,
        watch_cut_events: Some(1),
        gone_rate: 0.3,
        ..Default::default()
    });
    let watching = tokio::spawn(names_seen(client.clone(), 20));
    let names: Vec<String> = (0..20).map(|i| format!("cm-{i:02}")).collect();
    // Fenced: each object is created once the watcher has watched again since the last one was
    // (after the cut that followed its one event, or after a 410 and a new list), so the objects
    // meet the watcher's restarts one by one instead of racing them.
    let mut watches = 0;
    for name in &names {
        until_watches(&api, watches + 1).await;
        watches = configmap_watches(&api);
        create_configmaps(&client, &[name]).await;
    }
    // Compaction makes every resume from an old resourceVersion a real 410.
    api.cluster.compact();
    let (seen, errors) = watching.await.expect("task");
    assert_eq!(seen, names, "every object was seen despite the faults");
    assert!(
        errors > 0,
        "the injected 410s reached the watcher, which recovered"
    );
}

#[tokio::test]
async fn metadata_watcher_receives_partial_object_metadata() {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    create_configmaps(&client, &["m1"]).await;
    let cms: Api<PartialObjectMeta<ConfigMap>> = Api::default_namespaced(client.clone());
    let stream = watcher(cms, watcher::Config::default()).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let first = timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("in time")
        .expect("no error")
        .expect("an object");
    assert_eq!(first.name_any(), "m1");
    assert!(first.metadata.uid.is_some());
    assert!(first.metadata.resource_version.is_some());

    // The server answers the metadata-only form kube asks for, not the full objects.
    let request = http::Request::get("/api/v1/namespaces/default/configmaps")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(request).await.expect("list");
    let list: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
    assert!(
        list["items"][0].get("data").is_none(),
        "no data in the metadata form"
    );
}

/// A Controller over ConfigMaps that owns Secrets and watches other ConfigMaps through a mapper:
/// the reconciler creates one owned Secret per ConfigMap.
#[tokio::test]
async fn controller_with_owns_and_watches_reconciles_in_process() {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    controller_with_owns_and_watches(client).await;
}

#[tokio::test]
async fn controller_with_owns_and_watches_reconciles_over_http_with_cut_watches() {
    let api = ApiServer::new(Cluster::default());
    api.faults.set(FaultConfig {
        seed: 11,
        watch_cut_after: Some(Duration::from_millis(150)),
        gone_rate: 0.2,
        ..Default::default()
    });
    let server = TestServer::start(api, &ServeOptions::default())
        .await
        .expect("serve");
    controller_with_owns_and_watches(http_client(&server).await).await;
}

#[tokio::test]
async fn watches_get_bookmarks_when_they_allow_them() {
    let mut api = ApiServer::new(Cluster::default());
    api.bookmark_interval = Duration::from_millis(20);
    let client = Client::new(api.clone().router(), "default");
    create_configmaps(&client, &["b1"]).await;
    let request = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=0",
    )
    .body(Vec::new())
    .expect("request");
    let mut lines = std::pin::pin!(
        client
            .request_events::<serde_json::Value>(request)
            .await
            .expect("watch")
    );
    let mut types = Vec::new();
    while let Some(Ok(event)) = lines.next().await {
        let kind = match event {
            kube::core::WatchEvent::Added(_) => "ADDED",
            kube::core::WatchEvent::Modified(_) => "MODIFIED",
            kube::core::WatchEvent::Deleted(_) => "DELETED",
            kube::core::WatchEvent::Bookmark(_) => "BOOKMARK",
            kube::core::WatchEvent::Error(_) => "ERROR",
        };
        types.push(kind.to_string());
        if types.iter().any(|t| t == "BOOKMARK") {
            break;
        }
    }
    assert_eq!(types.first().map(String::as_str), Some("ADDED"));
    assert!(types.iter().any(|t| t == "BOOKMARK"), "{types:?}");
}

/// A bookmark promises that every event up to its version was sent: a client that resumes
/// from it (after a cut watch) must lose nothing, even when the bookmark is due while events
/// are still queued for the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookmark_never_passes_an_event_not_yet_sent() {
    let mut api = ApiServer::new(Cluster::default());
    api.bookmark_interval = Duration::from_millis(1);
    let client = Client::new(api.clone().router(), "default");
    let since = api.cluster.resource_version();
    let request = http::Request::get(format!(
        "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=10&resourceVersion={since}"
    ))
    .body(Vec::new())
    .expect("request");
    let lines = client
        .request_events::<serde_json::Value>(request)
        .await
        .expect("watch");
    let writer = tokio::spawn({
        let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
        async move {
            let mut versions = Vec::new();
            for i in 0..300 {
                let created = cms
                    .create(&PostParams::default(), &configmap(&format!("cm-{i}")))
                    .await
                    .expect("create");
                versions.push(
                    created
                        .resource_version()
                        .unwrap_or_default()
                        .parse::<u64>()
                        .expect("rv"),
                );
            }
            versions
        }
    });
    let rv_of = |o: &serde_json::Value| -> u64 {
        o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0)
    };
    // (is a bookmark, version), in the order the stream sent them.
    let mut stream = std::pin::pin!(lines);
    let mut seen: Vec<(bool, u64)> = Vec::new();
    let mut written: Option<Vec<u64>> = None;
    let mut writer = Some(writer);
    while let Ok(Some(Ok(event))) = timeout(Duration::from_secs(10), stream.next()).await {
        match event {
            kube::core::WatchEvent::Added(o) => seen.push((false, rv_of(&o))),
            kube::core::WatchEvent::Bookmark(b) => {
                let rv = b.metadata.resource_version.parse().unwrap_or(0);
                seen.push((true, rv));
                if let Some(w) = writer.take_if(|w| w.is_finished()) {
                    written = Some(w.await.expect("writer"));
                }
                if written.as_ref().is_some_and(|w| w.iter().all(|v| *v <= rv)) {
                    break;
                }
            }
            _ => {}
        }
    }
    let written = written.expect("every write was followed by a bookmark");
    let bookmarks = seen.iter().filter(|(b, _)| *b).count();
    assert!(bookmarks > 10, "bookmarks came while writing: {bookmarks}");
    for (position, (is_bookmark, rv)) in seen.iter().enumerate() {
        if !is_bookmark {
            continue;
        }
        let sent_before: std::collections::HashSet<u64> = seen[..position]
            .iter()
            .filter(|(b, _)| !b)
            .map(|(_, v)| *v)
            .collect();
        let missing: Vec<&u64> = written
            .iter()
            .filter(|v| **v <= *rv && !sent_before.contains(v))
            .collect();
        assert!(
            missing.is_empty(),
            "bookmark at {rv} was sent before the events at {missing:?}"
        );
    }
}

async fn controller_with_owns_and_watches(client: Client) {
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    create_configmaps(&client, &["parent"]).await;

    struct Ctx {
        secrets: Api<Secret>,
        reconciles: AtomicUsize,
    }
    let ctx = Arc::new(Ctx {
        secrets: secrets.clone(),
        reconciles: AtomicUsize::new(0),
    });
    async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
        ctx.reconciles.fetch_add(1, Ordering::SeqCst);
        let owner = cm.controller_owner_ref(&()).expect("owner ref");
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{}-secret", cm.name_any()), "ownerReferences": [owner]},
            "stringData": {"from": cm.name_any()}});
        ctx.secrets
            .patch(
                &format!("{}-secret", cm.name_any()),
                &PatchParams::apply("test-controller").force(),
                &Patch::Apply(secret),
            )
            .await?;
        Ok(Action::await_change())
    }
    fn error_policy(_: Arc<ConfigMap>, _: &kube::Error, _: Arc<Ctx>) -> Action {
        Action::requeue(Duration::from_millis(50))
    }
    let trigger = cms.clone();
    let controller = Controller::new(cms.clone(), watcher::Config::default().labels("!trigger"))
        .owns(secrets.clone(), watcher::Config::default())
        .watches(
            trigger,
            watcher::Config::default().labels("trigger"),
            |cm: ConfigMap| {
                cm.labels().get("trigger").map(|target| {
                    kube::runtime::reflector::ObjectRef::new(target).within("default")
                })
            },
        )
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let running = tokio::spawn(controller);

    let wait_for = |name: &'static str| {
        let secrets = secrets.clone();
        async move {
            for _ in 0..200 {
                if secrets.get(name).await.is_ok() {
                    return;
                }
                // The poll of this wait, not a fence.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{name} was never created");
        }
    };
    let reconciles = || ctx.reconciles.load(Ordering::SeqCst);
    let until_reconciles = |count: usize, what: &'static str| async move {
        for _ in 0..200 {
            if reconciles() >= count {
                return;
            }
            // The poll of this wait, not a fence.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what}: {} reconciles, not {count}", reconciles());
    };
    wait_for("parent-secret").await;
    // Fenced: the Secret's creation, reported through `owns`, was reconciled too (a no-op), so
    // no reconcile is pending from here.
    until_reconciles(2, "the owned Secret's creation reconciled").await;

    // Deleting the owned Secret triggers a reconcile through `owns`, which recreates it; its
    // creation is one more reconcile, as above.
    let before = reconciles();
    secrets
        .delete("parent-secret", &Default::default())
        .await
        .expect("delete");
    wait_for("parent-secret").await;
    until_reconciles(before + 2, "the deletion and the re-creation reconciled").await;

    // A labelled ConfigMap maps to its target through `watches`. In process nothing else is
    // pending (fenced above), so the next reconcile is the trigger's; over HTTP with cut
    // watches, each relist reconciles again too, so there the count shows less.
    let before = reconciles();
    let trigger: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "t", "labels": {"trigger": "parent"}}}))
            .expect("trigger");
    cms.create(&PostParams::default(), &trigger)
        .await
        .expect("trigger");
    until_reconciles(before + 1, "watches mapped the trigger to its target").await;
    assert_eq!(ConfigMap::kind(&()), "ConfigMap");
    running.abort();
}

#[tokio::test]
async fn faults_limited_to_a_resource_leave_the_others_alone() {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    // Set as a test driving a served testkit would: PUT /kaos-testkit/faults.
    let set_faults = |body: serde_json::Value| {
        http::Request::put("/kaos-testkit/faults")
            .body(body.to_string().into_bytes())
            .expect("request")
    };
    let set = set_faults(json!({"errorRate": 1.0, "resources": ["configmaps"]}));
    client.request_text(set).await.expect("faults set");
    assert_eq!(api.faults.config().resources, ["configmaps"]);

    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let failed = configmaps.list(&Default::default()).await;
    assert!(
        matches!(failed, Err(kube::Error::Api(ref s)) if s.code == 500),
        "the named resource is faulted: {failed:?}"
    );
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    secrets
        .list(&Default::default())
        .await
        .expect("another resource is not");

    let refused = client
        .request_text(set_faults(json!({"resources": "configmaps"})))
        .await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 400),
        "resources must be a list: {refused:?}"
    );
}
