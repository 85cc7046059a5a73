//! Events against kaos-testkit: one event per distinct occurrence, and a repeat within the
//! series window counted in the first event's `series` instead of a new event.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kaos_runtime::events::Events;
use kaos_testkit::{ApiServer, Cluster};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

#[tokio::test]
async fn a_repeated_event_is_a_series_and_a_new_note_a_new_event() {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    let object: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "parent", "namespace": "default"}}))
            .expect("configmap");
    let object = Api::<ConfigMap>::default_namespaced(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    let events = Events::new(client.clone(), "kaos-test-controller", Some("pod-1".into()));

    for _ in 0..3 {
        events
            .warning(&object, "SecretNotFound", "create Secret s".into())
            .await;
    }
    events
        .normal(&object, "Applied", "applied Deployment d".into())
        .await;

    let mut list = Api::<Event>::default_namespaced(client)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    list.sort_by_key(|e| e.reason.clone());
    let summary: Vec<_> = list
        .iter()
        .map(|e| {
            (
                e.type_.as_deref().unwrap_or_default(),
                e.reason.as_deref().unwrap_or_default(),
                e.note.as_deref().unwrap_or_default(),
                e.series.as_ref().map(|s| s.count),
                e.regarding.as_ref().and_then(|r| r.name.as_deref()),
                e.reporting_instance.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "Normal",
                "Applied",
                "applied Deployment d",
                None,
                Some("parent"),
                Some("pod-1")
            ),
            (
                "Warning",
                "SecretNotFound",
                "create Secret s",
                Some(3),
                Some("parent"),
                Some("pod-1")
            ),
        ]
    );
}
