//! CRUD, errors, metadata rules, the status subresource, selectors, pagination and
//! server-side apply.

use k8s_openapi::api::core::v1::ConfigMap;
use kaos_api::agent::Agent;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::{api_error, client, configmap, install_crds, refusal};

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
    let status = refusal(e);
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
    let selections = [
        (
            ListParams::default().labels("tier=web"),
            &["cm-0", "cm-1", "cm-3"][..],
        ),
        (
            ListParams::default().labels("tier notin (web),app"),
            &["cm-2", "cm-4"],
        ),
        (ListParams::default().labels("tier!=web"), &["cm-2", "cm-4"]),
        (
            ListParams::default().fields("metadata.name=cm-4"),
            &["cm-4"],
        ),
    ];
    for (selection, expected) in selections {
        let listed = cms.list(&selection).await.expect("list");
        assert_eq!(names(listed), expected, "{selection:?}");
    }

    // The page of `limit` objects after `page`.
    let after = |page: &kube::core::ObjectList<ConfigMap>, limit| {
        let token = page.metadata.continue_.as_deref().expect("more pages");
        ListParams::default().limit(limit).continue_token(token)
    };
    let first = cms
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(names(first.clone()), ["cm-0", "cm-1"]);
    let second = cms.list(&after(&first, 2)).await.expect("page 2");
    assert_eq!(names(second.clone()), ["cm-2", "cm-3"]);
    let third = cms.list(&after(&second, 2)).await.expect("page 3");
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
    let last = cms.list(&after(&first, 3)).await.expect("page 2");
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
    // The ConfigMap `shared` with `data`, server-side applied with `params`.
    let apply = |params: PatchParams, data: serde_json::Value| {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data});
        let cms = &cms;
        async move { cms.patch("shared", &params, &Patch::Apply(body)).await }
    };

    apply(
        PatchParams::apply("controller"),
        json!({"a": "1", "b": "1"}),
    )
    .await
    .expect("controller applies");
    apply(PatchParams::apply("user"), json!({"u": "1"}))
        .await
        .expect("user applies");
    let conflict = apply(PatchParams::apply("user"), json!({"u": "1", "a": "2"}))
        .await
        .expect_err("a belongs to the controller");
    assert_eq!(api_error(conflict), (409, "Conflict".into()));

    // The controller stops applying b: b goes, the user's field stays.
    let cm = apply(PatchParams::apply("controller"), json!({"a": "1"}))
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
    apply(
        PatchParams::apply("user").force(),
        json!({"u": "1", "a": "2"}),
    )
    .await
    .expect("forced");
    let conflict = apply(PatchParams::apply("controller"), json!({"a": "1"}))
        .await
        .expect_err("a now belongs to the user");
    assert_eq!(api_error(conflict), (409, "Conflict".into()));
}
