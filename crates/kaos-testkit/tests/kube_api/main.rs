//! kube-rs's `Api` against the in-process testkit: CRUD, errors, metadata rules, the status
//! subresource, selectors, pagination, server-side apply (`objects`); finalizers, garbage
//! collection and the deletion of CRDs and namespaces (`deletion`); the deployment simulator
//! (`simulator`).

mod deletion;
mod objects;
mod simulator;

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::agent::Agent;
use kaos_testkit::{ApiServer, Cluster};
use kube::api::ListParams;
use kube::core::Status;
use kube::{Api, Client};
use serde_json::json;

fn client() -> (ApiServer, Client) {
    let api = ApiServer::new(Cluster::default());
    let client = Client::new(api.clone().router(), "default");
    (api, client)
}

fn install_crds(api: &ApiServer) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    kaos_testkit::manifests::apply_path(&api.cluster, &dir).expect("CRDs install");
}

fn configmap(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .expect("valid ConfigMap")
}

/// The status of a request the server refused.
fn refusal(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other}"),
    }
}

fn api_error(e: kube::Error) -> (u16, String) {
    let status = refusal(e);
    (status.code, status.reason)
}

/// Asserts that the Agent kind is no longer served: listing it is a 404.
async fn assert_agents_not_served(agents: &Api<Agent>) {
    let listed = agents.list(&ListParams::default()).await;
    assert_eq!(api_error(listed.expect_err("kind gone")).0, 404);
}
