//! Kubernetes events (`events.k8s.io/v1`) about the custom resources: children created or
//! updated, and failures. Publishing is best effort: a failed event never fails a reconcile.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: controller.to_string(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::debug!("could not publish an event: {e}");
        }
    }

    pub async fn normal<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        reason: &str,
        note: String,
    ) {
        self.publish(object, EventType::Normal, reason, "Reconcile", note)
            .await;
    }

    pub async fn warning<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        reason: &str,
        note: String,
    ) {
        self.publish(object, EventType::Warning, reason, "Reconcile", note)
            .await;
    }
}
