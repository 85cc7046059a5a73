//! Where a ModelAPI's proxy pods are read: every ready endpoint of its Service `modelapi-<name>`,
//! from the EndpointSlices Kubernetes keeps for it (selected by `kubernetes.io/service-name`; the
//! slices carry the Service's labels, so the cache watches only ModelAPIs' with
//! [`SLICE_SELECTOR`]), or the address `USAGE_ADDRESS_OVERRIDES` gives instead.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label of the Service an EndpointSlice serves.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The EndpointSlices of ModelAPIs' Services: the Service's labels (`app=modelapi`, the
/// modelapi-controller's) are mirrored onto its slices.
pub const SLICE_SELECTOR: &str = "app=modelapi,kubernetes.io/service-name";
/// The port of a Proxy ModelAPI's Service (LiteLLM's), when a slice names none.
const PROXY_PORT: i32 = 8000;

/// One proxy pod to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// `host:port`.
    pub address: String,
    /// The Pod behind it, if the slice names it (for messages).
    pub name: Option<String>,
}

impl Pod {
    /// What the book keys its readings by.
    pub fn key(&self) -> u64 {
        key(&self.address)
    }

    /// How messages name it: `10.0.0.7:8000 (pod modelapi-llm-abc)`.
    pub fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!("{} (pod {name})", self.address),
            None => self.address.clone(),
        }
    }
}

fn key(address: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    address.hash(&mut hasher);
    hasher.finish()
}

/// The pods of one ModelAPI's Service: those to read (ready), and the keys of every one listed
/// (ready or not), whose readings are kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pods {
    pub ready: Vec<Pod>,
    pub listed: Vec<u64>,
}

impl Pods {
    /// The one address an override gives.
    pub fn overridden(address: &str) -> Self {
        let pod = Pod {
            address: address.to_string(),
            name: None,
        };
        Pods {
            listed: vec![pod.key()],
            ready: vec![pod],
        }
    }
}

/// The slices of the store by (namespace, Service).
pub fn by_service(
    slices: impl IntoIterator<Item = Arc<EndpointSlice>>,
) -> HashMap<(String, String), Vec<Arc<EndpointSlice>>> {
    let mut services: HashMap<(String, String), Vec<Arc<EndpointSlice>>> = HashMap::new();
    for slice in slices {
        let meta = &slice.metadata;
        let service = meta.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL));
        if let (Some(namespace), Some(service)) = (&meta.namespace, service) {
            services
                .entry((namespace.clone(), service.clone()))
                .or_default()
                .push(slice.clone());
        }
    }
    services
}

/// The pods of the slices of one Service.
pub fn pods(slices: &[Arc<EndpointSlice>]) -> Pods {
    let mut pods = Pods::default();
    for slice in slices {
        let ports = slice.ports.as_deref().unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some("http"))
            .or(ports.first())
            .and_then(|p| p.port)
            .unwrap_or(PROXY_PORT);
        for endpoint in &slice.endpoints {
            let Some(ip) = endpoint.addresses.first() else {
                continue;
            };
            let address = if slice.address_type == "IPv6" {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            };
            let pod = Pod {
                address,
                name: endpoint.target_ref.as_ref().and_then(|r| r.name.clone()),
            };
            pods.listed.push(pod.key());
            // Unset means ready (the API's words: an unknown state is taken as ready).
            let conditions = endpoint.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true)
                && !conditions.and_then(|c| c.terminating).unwrap_or(false);
            if ready {
                pods.ready.push(pod);
            }
        }
    }
    pods
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(value: serde_json::Value) -> Arc<EndpointSlice> {
        Arc::new(serde_json::from_value(value).expect("an EndpointSlice"))
    }

    #[test]
    fn ready_endpoints_are_read_and_every_listed_one_kept() {
        let slices = by_service([
            slice(
                json!({"metadata": {"name": "modelapi-llm-abc", "namespace": "ns",
                    "labels": {"kubernetes.io/service-name": "modelapi-llm", "app": "modelapi"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["10.0.0.7"], "conditions": {"ready": true},
                        "targetRef": {"kind": "Pod", "name": "modelapi-llm-1"}},
                    {"addresses": ["10.0.0.8"], "conditions": {"ready": false}},
                    {"addresses": ["10.0.0.9"]},
                    {"addresses": ["10.0.0.10"], "conditions": {"ready": true, "terminating": true}}]}),
            ),
            slice(
                json!({"metadata": {"name": "modelapi-llm-v6", "namespace": "ns",
                    "labels": {"kubernetes.io/service-name": "modelapi-llm"}},
                "addressType": "IPv6", "endpoints": [{"addresses": ["fd00::7"]}]}),
            ),
            slice(json!({"metadata": {"name": "other", "namespace": "ns2",
                    "labels": {"kubernetes.io/service-name": "modelapi-llm"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.1"]}]})),
        ]);
        let found = pods(&slices[&("ns".to_string(), "modelapi-llm".to_string())]);
        let ready: Vec<String> = found.ready.iter().map(Pod::describe).collect();
        assert_eq!(
            ready,
            [
                "10.0.0.7:8000 (pod modelapi-llm-1)",
                "10.0.0.9:8000",
                "[fd00::7]:8000"
            ]
        );
        assert_eq!(found.listed.len(), 5);
        assert!(
            found.listed.contains(&key("10.0.0.8:8000")),
            "kept while not ready"
        );
        assert_eq!(
            Pods::overridden("127.0.0.1:4000").ready[0].address,
            "127.0.0.1:4000"
        );
    }
}
