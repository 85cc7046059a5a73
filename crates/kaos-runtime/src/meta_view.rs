//! What the caches keep of a child read for its metadata only (Services; Secrets, so that no
//! secret value is ever cached): the metadata, slim ([`SlimMeta`]), and nothing else. Like
//! kube's `PartialObjectMeta`, without a copy of the type fields and with packed labels and
//! annotations.

use std::borrow::Cow;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};

use crate::packed::{Labelled, SlimMeta};

/// The metadata of a `K`, served where `K`s are.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(bound = "")]
pub struct MetaView<K> {
    pub metadata: SlimMeta,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> From<ObjectMeta> for MetaView<K> {
    fn from(meta: ObjectMeta) -> Self {
        MetaView {
            metadata: meta.into(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource<DynamicType = ()>> Resource for MetaView<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata.meta
    }
}

impl<K> Labelled for MetaView<K> {
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.label(key)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotation(key)
    }
    fn labels_cover(&self, desired: &ObjectMeta) -> bool {
        self.metadata.labels_cover(desired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use serde_json::json;

    #[test]
    fn keeps_the_metadata_of_a_watched_object_only() {
        let watched = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "agent-a", "namespace": "ns", "labels": {"app": "agent"}},
            "spec": {"ports": [{"port": 8000}]}});
        let view: MetaView<Service> = serde_json::from_value(watched).expect("view");
        assert_eq!(view.meta().name.as_deref(), Some("agent-a"));
        assert_eq!(view.label("app"), Some("agent"));
        assert_eq!(
            MetaView::<Service>::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/services"
        );
    }
}
