//! What the caches keep of a child read for its metadata only (Services; Secrets, so that no
//! secret value is ever cached): the metadata, slim ([`SlimMeta`]), and nothing else. Like
//! kube's `PartialObjectMeta`, without a copy of the type fields and with packed labels and
//! annotations.

use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};

use crate::cache::packed::SlimMeta;

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

crate::served_as!([K: Resource<DynamicType = ()>] MetaView<K>, K);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::packed::Labelled;
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
