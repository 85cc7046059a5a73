//! kube-rs's `Api` against the in-process testkit: CRUD, errors, metadata rules, the status
//! subresource, selectors, pagination, server-side apply, finalizers and garbage collection.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::agent::Agent;
use kaos_testkit::{ApiServer, Cluster};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
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

fn api_error(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(status) => (status.code, status.reason),
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn crud_and_errors_carry_kube_apiserver_status() {
    let (_, client) = client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let created = cms
        .create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .expect("create");
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let rv1: u64 = created
        .resource_version()
        .expect("rv")
        .parse()
        .expect("numeric rv");

    let dup = cms
        .create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .expect_err("exists");
    assert_eq!(api_error(dup), (409, "AlreadyExists".into()));
    let missing = cms.get("nope").await.expect_err("missing");
    assert_eq!(api_error(missing), (404, "NotFound".into()));

    // A replace based on a stale resourceVersion is a conflict.
    let mut fresh = cms.get("a").await.expect("get");
    fresh.data = Some([("k".to_string(), "v2".to_string())].into());
    let replaced = cms
        .replace("a", &PostParams::default(), &fresh)
        .await
        .expect("replace");
    let rv2: u64 = replaced
        .resource_version()
        .expect("rv")
        .parse()
        .expect("numeric");
    assert!(rv2 > rv1, "resourceVersion increases");
    let stale = cms
        .replace("a", &PostParams::default(), &fresh)
        .await
        .expect_err("stale");
    assert_eq!(api_error(stale), (409, "Conflict".into()));

    // generateName picks a unique name.
    let mut generated = configmap("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let g = cms
        .create(&PostParams::default(), &generated)
        .await
        .expect("generateName");
    assert!(g.name_any().starts_with("gen-") && g.name_any().len() == 9);

    // Creating in a namespace that does not exist fails like kube-apiserver.
    let elsewhere: Api<ConfigMap> = Api::namespaced(cms.clone().into_client(), "missing-ns");
    let e = elsewhere
        .create(&PostParams::default(), &configmap("x", json!({})))
        .await
        .expect_err("no ns");
    assert_eq!(api_error(e), (404, "NotFound".into()));

    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(
        api_error(cms.get("a").await.expect_err("gone")),
        (404, "NotFound".into())
    );
}

#[tokio::test]
async fn generation_moves_only_on_spec_changes_and_status_is_a_subresource() {
    let (api, client) = client();
    install_crds(&api);
    let agents: Api<Agent> = Api::default_namespaced(client);
    let agent: Agent = serde_json::from_value(json!({
        "apiVersion": "kaos.tools/v1alpha1", "kind": "Agent", "metadata": {"name": "a"},
        "spec": {"modelAPI": "m", "model": "x"}, "status": {"phase": "Ready", "ready": true}
    }))
    .expect("valid Agent");
    let created = agents
        .create(&PostParams::default(), &agent)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status is ignored on create");
    assert!(created.spec.wait_for_dependencies, "defaults applied");

    let label = json!({"metadata": {"labels": {"team": "a"}}});
    let labelled = agents
        .patch("a", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("label");
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata changes keep the generation"
    );

    let status = json!({"status": {"phase": "Ready", "ready": true}});
    let with_status = agents
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    assert_eq!(
        with_status.metadata.generation,
        Some(1),
        "status changes keep the generation"
    );
    assert!(with_status.status.as_ref().is_some_and(|s| s.ready));

    let spec = json!({"spec": {"model": "y"}, "status": {"ready": false}});
    let changed = agents
        .patch("a", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .expect("spec");
    assert_eq!(changed.metadata.generation, Some(2));
    assert!(
        changed.status.as_ref().is_some_and(|s| s.ready),
        "main writes ignore status"
    );

    let status_with_spec = json!({"spec": {"model": "z"}, "status": {"ready": false}});
    let s = agents
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&status_with_spec),
        )
        .await
        .expect("status");
    assert_eq!(s.spec.model, "y", "status writes ignore spec");
    assert_eq!(s.metadata.generation, Some(2));

    // An update that changes nothing keeps the resourceVersion.
    let before = agents.get("a").await.expect("get");
    let after = agents
        .replace("a", &PostParams::default(), &before)
        .await
        .expect("no-op replace");
    assert_eq!(before.resource_version(), after.resource_version());

    // Schema validation reaches kube-rs as a 422 with the field path.
    let bad = json!({"spec": {"config": {"reasoningLoopMaxSteps": 50}}});
    let e = agents
        .patch("a", &PatchParams::default(), &Patch::Merge(&bad))
        .await
        .expect_err("invalid");
    let kube::Error::Api(status) = e else {
        panic!("API error expected")
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("spec.config.reasoningLoopMaxSteps"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn label_selectors_and_pagination() {
    let (_, client) = client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    for (i, tier) in ["web", "web", "db", "web", "cache"].iter().enumerate() {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("cm-{i}"), json!({"tier": tier, "app": "x"})),
        )
        .await
        .expect("create");
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier=web"))
                .await
                .expect("list")
        ),
        ["cm-0", "cm-1", "cm-3"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier notin (web),app"))
                .await
                .expect("list")
        ),
        ["cm-2", "cm-4"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier!=web"))
                .await
                .expect("list")
        ),
        ["cm-2", "cm-4"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=cm-4"))
                .await
                .expect("list")
        ),
        ["cm-4"]
    );

    let first = cms
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(names(first.clone()), ["cm-0", "cm-1"]);
    let token = first.metadata.continue_.clone().expect("more pages");
    let second = cms
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(names(second.clone()), ["cm-2", "cm-3"]);
    let third = cms
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().expect("more")),
        )
        .await
        .expect("page 3");
    assert_eq!(names(third.clone()), ["cm-4"]);
    assert!(third.metadata.continue_.as_deref().unwrap_or("").is_empty());

    // A change while the pages are read: every page reports the first page's version, so a
    // watch started where the list ended still delivers it (as kube-apiserver's snapshot does).
    let first = cms
        .list(&ListParams::default().limit(3))
        .await
        .expect("page 1");
    cms.patch(
        "cm-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"changed": "while listing"}})),
    )
    .await
    .expect("change");
    let last = cms
        .list(
            &ListParams::default()
                .limit(3)
                .continue_token(first.metadata.continue_.as_deref().expect("more")),
        )
        .await
        .expect("page 2");
    assert_eq!(
        last.metadata.resource_version,
        first.metadata.resource_version
    );
    let since = last.metadata.resource_version.clone().expect("version");
    let mut events = std::pin::pin!(
        cms.watch(&kube::api::WatchParams::default().timeout(1), &since)
            .await
            .expect("watch")
    );
    let changed = loop {
        match futures::StreamExt::next(&mut events).await {
            Some(Ok(kube::core::WatchEvent::Modified(cm))) => break Some(cm),
            Some(Ok(_)) => continue,
            _ => break None,
        }
    };
    assert_eq!(
        changed.map(|cm| cm.name_any()).as_deref(),
        Some("cm-0"),
        "the change made between the pages reaches the watch"
    );
}

#[tokio::test]
async fn server_side_apply_with_two_field_managers() {
    let (_, client) = client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let apply = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data});

    cms.patch(
        "shared",
        &PatchParams::apply("controller"),
        &Patch::Apply(apply(json!({"a": "1", "b": "1"}))),
    )
    .await
    .expect("controller applies");
    cms.patch(
        "shared",
        &PatchParams::apply("user"),
        &Patch::Apply(apply(json!({"u": "1"}))),
    )
    .await
    .expect("user applies");
    let conflict = cms
        .patch(
            "shared",
            &PatchParams::apply("user"),
            &Patch::Apply(apply(json!({"u": "1", "a": "2"}))),
        )
        .await
        .expect_err("a belongs to the controller");
    assert_eq!(api_error(conflict), (409, "Conflict".into()));

    // The controller stops applying b: b goes, the user's field stays.
    let cm = cms
        .patch(
            "shared",
            &PatchParams::apply("controller"),
            &Patch::Apply(apply(json!({"a": "1"}))),
        )
        .await
        .expect("controller re-applies");
    let data = cm.data.clone().expect("data");
    assert_eq!(data.keys().collect::<Vec<_>>(), ["a", "u"]);
    let managers: Vec<String> = cm
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["controller", "user"]);

    // Forcing takes the field over; the controller's next apply then conflicts.
    cms.patch(
        "shared",
        &PatchParams::apply("user").force(),
        &Patch::Apply(apply(json!({"u": "1", "a": "2"}))),
    )
    .await
    .expect("forced");
    let conflict = cms
        .patch(
            "shared",
            &PatchParams::apply("controller"),
            &Patch::Apply(apply(json!({"a": "1"}))),
        )
        .await
        .expect_err("a now belongs to the user");
    assert_eq!(api_error(conflict), (409, "Conflict".into()));
}

#[tokio::test]
async fn finalizers_hold_deletion_and_owners_collect_their_dependents() {
    let (_, client) = client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &configmap("owner", json!({})))
        .await
        .expect("owner");
    let owner_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                            "uid": owner.uid().expect("uid"), "controller": true}]);
    for name in ["dep-1", "dep-2"] {
        let mut dep = configmap(name, json!({}));
        dep.metadata.owner_references =
            Some(serde_json::from_value(owner_ref.clone()).expect("refs"));
        cms.create(&PostParams::default(), &dep)
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
    let mut dep = configmap("dep-3", json!({}));
    dep.metadata.owner_references = Some(
        serde_json::from_value(json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "owner2", "uid": owner.uid().expect("uid")}]))
        .expect("refs"),
    );
    cms.create(&PostParams::default(), &dep)
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
    let mut dep = configmap("dep-4", json!({}));
    dep.metadata.owner_references = Some(
        serde_json::from_value(json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "owner3", "uid": owner.uid().expect("uid"), "blockOwnerDeletion": true}]))
        .expect("refs"),
    );
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
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client);
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
    assert_eq!(
        api_error(
            agents
                .list(&ListParams::default())
                .await
                .expect_err("kind gone")
        )
        .0,
        404
    );
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
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client);
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
    match refused {
        kube::Error::Api(status) => assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (
                403,
                "Forbidden",
                "agents.kaos.tools \"b\" is forbidden: create not allowed while custom resource definition is terminating"
            )
        ),
        other => panic!("expected an API error, got {other}"),
    }

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
    assert_eq!(
        api_error(
            agents
                .list(&ListParams::default())
                .await
                .expect_err("kind gone")
        )
        .0,
        404
    );
}

#[tokio::test]
async fn deployment_simulator_turns_a_deployment_ready_or_keeps_it_unready() {
    let (api, client) = client();
    tokio::spawn(kaos_testkit::simulator::run(
        api.cluster.clone(),
        std::time::Duration::from_millis(10),
    ));
    let deployments: Api<Deployment> = Api::default_namespaced(client);
    let deployment = |name: &str, annotations: serde_json::Value| -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .expect("deployment")
    };
    deployments
        .create(&PostParams::default(), &deployment("ok", json!({})))
        .await
        .expect("create");
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "stuck",
                json!({(kaos_testkit::simulator::ROLLOUT_ANNOTATION): "unready"}),
            ),
        )
        .await
        .expect("create");
    let ready = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
    };
    let mut settled = None;
    for _ in 0..100 {
        let d = deployments.get("ok").await.expect("get");
        if ready(&d) == 2 {
            settled = Some(d);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let d = settled.expect("the simulator made the Deployment ready");
    let status = d.status.expect("status");
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.available_replicas
        ),
        (Some(2), Some(2), Some(2))
    );
    let stuck = deployments.get("stuck").await.expect("get");
    let stuck_status = stuck.status.expect("the simulator reported the rollout");
    assert_eq!(stuck_status.ready_replicas, Some(0));
    assert_eq!(stuck_status.updated_replicas, Some(2));
}

#[tokio::test]
async fn a_terminating_namespace_refuses_new_content_like_kube_apiserver() {
    use k8s_openapi::api::core::v1::Namespace;
    let (_, client) = client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "leaving"}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &ns)
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
    let refused = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("expected an API error, got {other}"),
    };
    let (code, reason, message) = refused(
        cms.create(&PostParams::default(), &configmap("new", json!({})))
            .await
            .expect_err("terminating"),
    );
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
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
    assert_eq!(refused(applied).0, 403);

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
