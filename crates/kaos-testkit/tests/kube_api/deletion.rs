//! Finalizers, garbage collection by owner references, and the deletion of CRDs and namespaces.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kaos_api::agent::Agent;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{api_error, assert_agents_not_served, client, configmap, install_crds, refusal};

/// A reference to `owner` for its dependents.
fn reference_to(owner: &ConfigMap) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().expect("uid"),
        ..Default::default()
    }
}

/// The ConfigMap `name`, a dependent by `reference`.
fn dependent(name: &str, reference: OwnerReference) -> ConfigMap {
    let mut dependent = configmap(name, json!({}));
    dependent.metadata.owner_references = Some(vec![reference]);
    dependent
}

#[tokio::test]
async fn finalizers_hold_deletion_and_owners_collect_their_dependents() {
    let (_, client) = client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", json!({})))
        .await
        .expect("owner");
    let owner_ref = OwnerReference {
        controller: Some(true),
        ..reference_to(&owner)
    };
    for name in ["dep-1", "dep-2"] {
        cms.create(&PostParams::default(), &dependent(name, owner_ref.clone()))
            .await
            .expect("dependent");
    }
    let held = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    cms.patch("dep-2", &PatchParams::default(), &Patch::Merge(&held))
        .await
        .expect("finalizer");

    cms.delete("owner", &DeleteParams::default())
        .await
        .expect("delete owner");
    assert!(
        cms.get("dep-1").await.is_err(),
        "background GC removed dep-1"
    );
    let dep2 = cms.get("dep-2").await.expect("held by its finalizer");
    assert!(dep2.metadata.deletion_timestamp.is_some());

    // Adding finalizers while deleting is refused; removing the last one deletes the object.
    let more = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}});
    let e = cms
        .patch("dep-2", &PatchParams::default(), &Patch::Merge(&more))
        .await
        .expect_err("refused");
    assert_eq!(api_error(e).0, 422);
    let release = json!({"metadata": {"finalizers": null}});
    cms.patch("dep-2", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release");
    assert!(cms.get("dep-2").await.is_err());

    // Orphan propagation keeps dependents and drops their owner reference.
    let owner = cms
        .create(&PostParams::default(), &configmap("owner2", json!({})))
        .await
        .expect("owner2");
    cms.create(
        &PostParams::default(),
        &dependent("dep-3", reference_to(&owner)),
    )
    .await
    .expect("dep-3");
    let orphan = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
        ..Default::default()
    };
    cms.delete("owner2", &orphan).await.expect("orphan delete");
    let kept = cms.get("dep-3").await.expect("orphaned dependent stays");
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    // Foreground: the owner waits, marked, until its blocking dependents are gone.
    let owner = cms
        .create(&PostParams::default(), &configmap("owner3", json!({})))
        .await
        .expect("owner3");
    let blocking = OwnerReference {
        block_owner_deletion: Some(true),
        ..reference_to(&owner)
    };
    let mut dep = dependent("dep-4", blocking);
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &dep)
        .await
        .expect("dep-4");
    cms.delete("owner3", &DeleteParams::foreground())
        .await
        .expect("foreground");
    let waiting = cms
        .get("owner3")
        .await
        .expect("owner waits for its dependents");
    assert_eq!(waiting.finalizers(), ["foregroundDeletion"]);
    cms.patch("dep-4", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .expect("release dep-4");
    assert!(
        cms.get("owner3").await.is_err(),
        "owner goes once its dependents are gone"
    );
}

#[tokio::test]
async fn deleting_a_crd_removes_its_kind_and_objects() {
    let (api, client) = client();
    install_crds(&api);
    let agents: Api<Agent> = Api::default_namespaced(client.clone());
    let agent: Agent =
        serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
        "metadata": {"name": "a"}, "spec": {"modelAPI": "m", "model": "x"}}))
        .expect("agent");
    agents
        .create(&PostParams::default(), &agent)
        .await
        .expect("create");
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = crds.get("agents.kaos.tools").await.expect("crd");
    let established = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    crds.delete("agents.kaos.tools", &DeleteParams::default())
        .await
        .expect("delete CRD");
    assert_agents_not_served(&agents).await;
}

/// As kube-apiserver: a deleted CRD stays Terminating while a resource of its kind still has a
/// finalizer (what an uninstalled operator's resources do), refusing new resources, and goes
/// once the finalizer is released.
#[tokio::test]
async fn a_deleted_crd_waits_for_its_resources_finalizers() {
    let (api, client) = client();
    install_crds(&api);
    let agents: Api<Agent> = Api::default_namespaced(client.clone());
    let held = |name: &str| -> Agent {
        serde_json::from_value(json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": name, "finalizers": ["kaos.tools/agent-finalizer"]},
            "spec": {"modelAPI": "m", "model": "x"}}))
        .expect("agent")
    };
    agents
        .create(&PostParams::default(), &held("a"))
        .await
        .expect("create");
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.delete("agents.kaos.tools", &DeleteParams::default())
        .await
        .expect("delete CRD");

    let terminating = crds
        .get("agents.kaos.tools")
        .await
        .expect("CRD still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(
        terminating.finalizers(),
        ["customresourcecleanup.apiextensions.k8s.io"]
    );
    let agent = agents.get("a").await.expect("agent still there");
    assert!(
        agent.metadata.deletion_timestamp.is_some(),
        "marked deleted"
    );
    let refused = agents
        .create(&PostParams::default(), &held("b"))
        .await
        .expect_err("no new agents while the CRD terminates");
    let status = refusal(refused);
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (
            403,
            "Forbidden",
            "agents.kaos.tools \"b\" is forbidden: create not allowed while custom resource definition is terminating"
        )
    );

    agents
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release");
    assert_eq!(
        api_error(crds.get("agents.kaos.tools").await.expect_err("CRD gone")).0,
        404
    );
    assert_agents_not_served(&agents).await;
}

#[tokio::test]
async fn a_terminating_namespace_refuses_new_content_like_kube_apiserver() {
    let (_, client) = client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut leaving = Namespace::default();
    leaving.metadata.name = Some("leaving".into());
    namespaces
        .create(&PostParams::default(), &leaving)
        .await
        .expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client, "leaving");
    let mut held = configmap("held", json!({}));
    held.metadata.finalizers = Some(vec!["test.kaos.tools/hold".into()]);
    cms.create(&PostParams::default(), &held)
        .await
        .expect("held");
    namespaces
        .delete("leaving", &DeleteParams::default())
        .await
        .expect("delete namespace");

    // Held by the ConfigMap's finalizer, the namespace is Terminating: creates are refused,
    // by POST and by server-side apply alike, with the admission plugin's status.
    let status = refusal(
        cms.create(&PostParams::default(), &configmap("new", json!({})))
            .await
            .expect_err("terminating"),
    );
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "configmaps \"new\" is forbidden: unable to create new content in namespace leaving because it is being terminated"
    );
    let applied = cms
        .patch(
            "applied",
            &PatchParams::apply("test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}}),
            ),
        )
        .await
        .expect_err("terminating");
    assert_eq!(refusal(applied).code, 403);

    // Releasing the last finalizer lets the namespace go.
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert!(namespaces.get_opt("leaving").await.expect("get").is_none());
}
