//! Assertions on what a controller's pure builder returns, for what every controller writes the
//! same way: its Deployment's name, labels and owner, and the one `http` port it serves on.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerPort, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::deployments::container;

/// Asserts the Deployment's name, its labels (exactly these) and the kind of its first owner.
#[track_caller]
pub fn assert_name_labels_and_owner(
    deployment: &Deployment,
    name: &str,
    labels: &[(&str, &str)],
    owner_kind: &str,
) {
    let meta = &deployment.metadata;
    assert_eq!(meta.name.as_deref(), Some(name), "the Deployment's name");
    let expected: BTreeMap<String, String> = labels
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    assert_eq!(
        meta.labels.as_ref(),
        Some(&expected),
        "the labels of {name}"
    );
    let owner = meta.owner_references.as_ref().and_then(|o| o.first());
    assert_eq!(
        owner.map(|o| o.kind.as_str()),
        Some(owner_kind),
        "the owner of {name}"
    );
}

/// Asserts the workload serves on `port` alone: its first container's only port, named `http`,
/// and the Service's only port, forwarding `http` to the same number.
#[track_caller]
pub fn assert_serves_http_on(deployment: &Deployment, service: &Service, port: i32) {
    let http = || Some("http".to_string());
    let tcp = || Some("TCP".to_string());
    assert_eq!(
        container(deployment).and_then(|c| c.ports.clone()),
        Some(vec![ContainerPort {
            container_port: port,
            name: http(),
            protocol: tcp(),
            ..Default::default()
        }]),
        "the container's ports"
    );
    assert_eq!(
        service.spec.as_ref().and_then(|s| s.ports.clone()),
        Some(vec![ServicePort {
            name: http(),
            port,
            target_port: Some(IntOrString::Int(port)),
            protocol: tcp(),
            ..Default::default()
        }]),
        "the Service's ports"
    );
}
