//! Behaviour the differential suite (tests/control_plane/test_differential.py) found different
//! from kube-apiserver v1.37 and the testkit now shares, checked here over plain HTTP requests to
//! the in-process router, so it holds without a real control plane.

use axum::body::Body;
use http::{Method, Request, StatusCode};
use kaos_testkit::{ApiServer, Cluster};
use serde_json::{Value, json};
use tower::ServiceExt;

const CM: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";
const AGENTS: &str = "/apis/kaos.tools/v1alpha1/namespaces/default/agents";
const MODELAPIS: &str = "/apis/kaos.tools/v1alpha1/namespaces/default/modelapis";

struct Kit(ApiServer);

impl Kit {
    fn new() -> Self {
        let api = ApiServer::new(Cluster::default());
        let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
        kaos_testkit::manifests::apply_path(&api.cluster, &crds).expect("CRDs install");
        Self(api)
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let content_type = match method {
            Method::PATCH if path.contains("fieldManager") => "application/apply-patch+yaml",
            Method::PATCH => "application/merge-patch+json",
            _ => "application/json",
        };
        self.send(method, path, content_type, "application/json", body)
            .await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        accept: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .header("accept", accept)
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .expect("request");
        let (status, bytes) = self.answer(request).await;
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// The status and the whole body of the server's answer to `request`.
    async fn answer(&self, request: Request<Body>) -> (StatusCode, axum::body::Bytes) {
        let response = self
            .0
            .clone()
            .router()
            .oneshot(request)
            .await
            .expect("answer");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, bytes)
    }

    /// Every event of a watch from `since` that the history holds (the stream is cut after 1 s).
    async fn watch(&self, path: &str, since: &str) -> Vec<Value> {
        let uri = format!("{path}&watch=true&resourceVersion={since}&timeoutSeconds=1");
        let request = Request::get(uri).body(Body::empty()).expect("request");
        let (_, bytes) = self.answer(request).await;
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|line| serde_json::from_str(line).expect("event"))
            .collect()
    }

    fn resource_version(&self) -> String {
        self.0.cluster.resource_version().to_string()
    }
}

fn configmap(name: &str, metadata: Value) -> Value {
    let mut body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata});
    body["metadata"]["name"] = json!(name);
    body
}

fn summary(events: &[Value]) -> Vec<(String, String, Value)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["object"]["metadata"]["finalizers"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn delete_answers_a_success_status_unless_finalizers_hold_the_object() {
    let kit = Kit::new();
    kit.call(Method::POST, CM, Some(configmap("plain", json!({}))))
        .await;
    let (status, body) = kit.call(Method::DELETE, &format!("{CM}/plain"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["status"], "Success");
    assert_eq!(body["details"]["name"], "plain");
    assert_eq!(body["details"]["kind"], "configmaps");
    assert!(
        body["details"].get("group").is_none(),
        "no empty group: {body}"
    );

    let held = json!({"finalizers": ["example.com/hold"]});
    kit.call(Method::POST, CM, Some(configmap("held", held)))
        .await;
    let (_, body) = kit.call(Method::DELETE, &format!("{CM}/held"), None).await;
    assert_eq!(body["kind"], "ConfigMap", "a held object is answered");
    assert!(body["metadata"]["deletionTimestamp"].is_string());
}

#[tokio::test]
async fn no_new_finalizer_on_a_deleted_object_is_forbidden_as_kube_words_it() {
    let kit = Kit::new();
    let held = json!({"finalizers": ["example.com/hold"]});
    kit.call(Method::POST, CM, Some(configmap("held", held)))
        .await;
    kit.call(Method::DELETE, &format!("{CM}/held"), None).await;
    let more = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}});
    let (status, body) = kit
        .call(Method::PATCH, &format!("{CM}/held"), Some(more))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        body["details"]["causes"][0],
        json!({"reason": "FieldValueForbidden", "field": "metadata.finalizers",
               "message": "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/more\"}"})
    );
}

#[tokio::test]
async fn the_deleted_event_after_the_last_finalizer_carries_the_last_stored_state() {
    let kit = Kit::new();
    let held = json!({"finalizers": ["example.com/hold"]});
    kit.call(Method::POST, CM, Some(configmap("held", held)))
        .await;
    let since = kit.resource_version();
    kit.call(Method::DELETE, &format!("{CM}/held"), None).await;
    let release = json!({"metadata": {"finalizers": null}});
    let (_, answer) = kit
        .call(Method::PATCH, &format!("{CM}/held"), Some(release))
        .await;
    assert!(answer["metadata"].get("finalizers").is_none());
    let events = kit.watch(&format!("{CM}?"), &since).await;
    let hold = json!(["example.com/hold"]);
    assert_eq!(
        summary(&events),
        [
            ("MODIFIED".into(), "held".into(), hold.clone()),
            ("DELETED".into(), "held".into(), hold)
        ]
    );
}

#[tokio::test]
async fn a_custom_resource_needs_a_resource_version_to_be_replaced() {
    let kit = Kit::new();
    let agent = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
                       "metadata": {"name": "a"}, "spec": {"modelAPI": "m", "model": "x"}});
    kit.call(Method::POST, AGENTS, Some(agent.clone())).await;
    let (status, body) = kit
        .call(Method::PUT, &format!("{AGENTS}/a"), Some(agent))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        body["message"],
        "agents.kaos.tools \"a\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
    );
    // Built-in kinds may be replaced unconditionally.
    kit.call(Method::POST, CM, Some(configmap("c", json!({}))))
        .await;
    let (status, _) = kit
        .call(
            Method::PUT,
            &format!("{CM}/c"),
            Some(configmap("c", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_namespace_is_labelled_with_its_name() {
    let kit = Kit::new();
    let (_, created) = kit
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"metadata": {"name": "team"}})),
        )
        .await;
    assert_eq!(
        created["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team"})
    );
    let relabel = json!({"metadata": {"labels": {"kubernetes.io/metadata.name": "other"}}});
    let (_, patched) = kit
        .call(Method::PATCH, "/api/v1/namespaces/team", Some(relabel))
        .await;
    assert_eq!(
        patched["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team"
    );
}

async fn owner_with_dependents(kit: &Kit, owner: &str) {
    let (_, created) = kit
        .call(Method::POST, CM, Some(configmap(owner, json!({}))))
        .await;
    let reference = |block: bool| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": owner,
                "uid": created["metadata"]["uid"], "blockOwnerDeletion": block}])
    };
    let dependents = [
        (
            "held",
            json!({"ownerReferences": reference(true), "finalizers": ["example.com/hold"]}),
        ),
        ("free", json!({"ownerReferences": reference(false)})),
    ];
    for (name, metadata) in dependents {
        let name = format!("{owner}-{name}");
        kit.call(Method::POST, CM, Some(configmap(&name, metadata)))
            .await;
    }
}

#[tokio::test]
async fn a_foreground_deletion_waits_only_for_dependents_that_block_it() {
    let kit = Kit::new();
    owner_with_dependents(&kit, "fg").await;
    kit.call(
        Method::DELETE,
        &format!("{CM}/fg?propagationPolicy=Foreground"),
        None,
    )
    .await;
    let (_, owner) = kit.call(Method::GET, &format!("{CM}/fg"), None).await;
    assert_eq!(
        owner["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let release = json!({"metadata": {"finalizers": null}});
    kit.call(Method::PATCH, &format!("{CM}/fg-held"), Some(release))
        .await;
    let (status, _) = kit.call(Method::GET, &format!("{CM}/fg"), None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the blocking dependent is gone"
    );

    // Without blockOwnerDeletion, a held dependent does not keep its owner.
    let (_, created) = kit
        .call(Method::POST, CM, Some(configmap("fg2", json!({}))))
        .await;
    let reference = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "fg2",
                            "uid": created["metadata"]["uid"]}]);
    let metadata = json!({"ownerReferences": reference, "finalizers": ["example.com/hold"]});
    kit.call(Method::POST, CM, Some(configmap("fg2-dep", metadata)))
        .await;
    kit.call(
        Method::DELETE,
        &format!("{CM}/fg2?propagationPolicy=Foreground"),
        None,
    )
    .await;
    let (status, _) = kit.call(Method::GET, &format!("{CM}/fg2"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_orphan_deletion_passes_through_the_orphan_finalizer() {
    let kit = Kit::new();
    owner_with_dependents(&kit, "or").await;
    let since = kit.resource_version();
    let (_, answer) = kit
        .call(
            Method::DELETE,
            &format!("{CM}/or?propagationPolicy=Orphan"),
            None,
        )
        .await;
    assert_eq!(answer["metadata"]["finalizers"], json!(["orphan"]));
    assert!(answer["metadata"]["deletionTimestamp"].is_string());
    let events = kit.watch(&format!("{CM}?"), &since).await;
    let mut seen = summary(&events);
    seen[1..3].sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        seen,
        [
            ("MODIFIED".into(), "or".into(), json!(["orphan"])),
            ("MODIFIED".into(), "or-free".into(), Value::Null),
            (
                "MODIFIED".into(),
                "or-held".into(),
                json!(["example.com/hold"])
            ),
            ("DELETED".into(), "or".into(), json!(["orphan"])),
        ]
    );
    let (_, dependent) = kit.call(Method::GET, &format!("{CM}/or-free"), None).await;
    assert!(
        dependent["metadata"]
            .get("ownerReferences")
            .is_none_or(|r| r == &json!([]))
    );
}

#[tokio::test]
async fn an_object_leaving_a_watched_selector_is_deleted_as_it_was() {
    let kit = Kit::new();
    let since = kit.resource_version();
    kit.call(
        Method::POST,
        CM,
        Some(configmap("w", json!({"labels": {"w": "in"}}))),
    )
    .await;
    let out = json!({"metadata": {"labels": {"w": "out"}}});
    kit.call(Method::PATCH, &format!("{CM}/w"), Some(out)).await;
    let events = kit
        .watch(&format!("{CM}?labelSelector=w%3Din"), &since)
        .await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["type"], "DELETED");
    assert_eq!(
        events[1]["object"]["metadata"]["labels"],
        json!({"w": "in"})
    );
    assert_eq!(
        events[1]["object"]["metadata"]["resourceVersion"],
        kit.resource_version(),
        "at the event's resourceVersion"
    );
}

#[tokio::test]
async fn server_side_apply_creates_with_managed_fields_and_forcing_takes_only_the_conflicts() {
    let kit = Kit::new();
    let deployment = |env: Value, image: Option<&str>| {
        let mut container = json!({"name": "app", "env": env});
        if let Some(image) = image {
            container["image"] = json!(image);
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"selector": {"matchLabels": {"app": "d"}},
                        "template": {"metadata": {"labels": {"app": "d"}},
                                     "spec": {"containers": [container]}}}})
    };
    let apply =
        |manager: &str, force: bool| format!("{DEPLOY}/d?fieldManager={manager}&force={force}");
    let one = deployment(json!([{"name": "A"}, {"name": "B"}]), Some("app:1"));
    let (status, created) = kit
        .call(Method::PATCH, &apply("one", false), Some(one))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "one");

    // Another manager's new item lands after the live ones.
    let two = deployment(json!([{"name": "C"}]), Some("app:2"));
    let (_, forced) = kit
        .call(Method::PATCH, &apply("two", true), Some(two))
        .await;
    let names = |d: &Value| -> Vec<String> {
        d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| e["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(names(&forced), ["A", "B", "C"]);

    // "one" lost only the image: dropping B from its apply still removes B.
    let fewer = deployment(json!([{"name": "A"}]), None);
    let (status, after) = kit
        .call(Method::PATCH, &apply("one", false), Some(fewer))
        .await;
    assert_eq!(status, StatusCode::OK, "{after}");
    assert_eq!(names(&after), ["A", "C"]);
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["image"],
        "app:2"
    );
}

#[tokio::test]
async fn cel_rules_run_beside_bounds_and_are_skipped_after_blocking_errors() {
    let kit = Kit::new();
    // What is created, where its refusal is read, and what is read there.
    let cases = [
        (
            AGENTS,
            json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
                   "metadata": {"name": "a"},
                   "spec": {"modelAPI": "m", "model": "x", "replicas": -1,
                            "gatewayRoute": {"timeout": "soon"}}}),
            "/message",
            // The schema's bound, the scale subresource's check at its path, then the CEL rule.
            json!(
                "Agent.kaos.tools \"a\" is invalid: [spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0, .spec.replicas: Invalid value: -1: should be a non-negative integer, spec.gatewayRoute.timeout: Invalid value: \"soon\": timeout must be a duration such as 30s, 5m, 1h30m or 500ms (0s sets no timeout)]"
            ),
        ),
        // A rule on the object.
        (
            MODELAPIS,
            json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI",
                   "metadata": {"name": "m"}, "spec": {"mode": "Proxy"}}),
            "/message",
            json!(
                "ModelAPI.kaos.tools \"m\" is invalid: spec: Invalid value: mode Proxy requires proxyConfig (at least proxyConfig.models)"
            ),
        ),
        // An enum error blocks the rules.
        (
            MODELAPIS,
            json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "ModelAPI",
                   "metadata": {"name": "m"}, "spec": {"mode": "Local"}}),
            "/details/causes/1",
            json!({"reason": "FieldValueInvalid", "field": "<nil>",
                   "message": "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"}),
        ),
    ];
    for (path, object, pointer, expected) in cases {
        let (_, body) = kit.call(Method::POST, path, Some(object)).await;
        assert_eq!(body.pointer(pointer), Some(&expected), "{body}");
    }
}

#[tokio::test]
async fn discovery_lists_categories_verbs_and_the_scale_subresource_as_kube_does() {
    let kit = Kit::new();
    let (_, core) = kit.call(Method::GET, "/api/v1", None).await;
    let entry = |list: &Value, name: &str| {
        list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(entry(&core, "services")["categories"], json!(["all"]));
    assert!(entry(&core, "configmaps").get("categories").is_none());
    let verbs = entry(&core, "namespaces")["verbs"].clone();
    assert!(
        !verbs
            .as_array()
            .expect("verbs")
            .contains(&json!("deletecollection"))
    );
    let (_, apps) = kit.call(Method::GET, "/apis/apps/v1", None).await;
    assert_eq!(
        entry(&apps, "deployments/scale"),
        json!({"name": "deployments/scale", "singularName": "", "namespaced": true,
               "group": "autoscaling", "version": "v1", "kind": "Scale",
               "verbs": ["get", "patch", "update"]})
    );
}

#[tokio::test]
async fn a_deployment_scales_through_its_scale_subresource() {
    let kit = Kit::new();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    kit.call(Method::POST, DEPLOY, Some(deployment)).await;
    let (status, scale) = kit
        .call(Method::GET, &format!("{DEPLOY}/d/scale"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"], json!({"replicas": 1}));
    assert_eq!(scale["status"]["selector"], "app=d");

    let more = json!({"spec": {"replicas": 3}});
    let (_, scaled) = kit
        .call(Method::PATCH, &format!("{DEPLOY}/d/scale"), Some(more))
        .await;
    assert_eq!(scaled["spec"]["replicas"], 3);
    let (_, deployment) = kit.call(Method::GET, &format!("{DEPLOY}/d"), None).await;
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(deployment["metadata"]["generation"], 2);

    let negative = json!({"spec": {"replicas": -1}});
    let (status, body) = kit
        .call(Method::PATCH, &format!("{DEPLOY}/d/scale"), Some(negative))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["details"]["causes"][0]["field"], "spec.replicas");
}

#[tokio::test]
async fn tables_type_a_custom_resource_s_date_column_as_date() {
    let kit = Kit::new();
    let agent = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
                       "metadata": {"name": "a"}, "spec": {"modelAPI": "m", "model": "x"}});
    kit.call(Method::POST, AGENTS, Some(agent)).await;
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let (_, body) = kit
        .send(Method::GET, AGENTS, "application/json", table, None)
        .await;
    let types: Vec<(&str, &str)> = body["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default(),
                c["type"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        types,
        [
            ("Name", "string"),
            ("ModelAPI", "string"),
            ("Model", "string"),
            ("Ready", "boolean"),
            ("Phase", "string"),
            ("Tokens", "integer"),
            ("Budget", "string"),
            ("Age", "date")
        ]
    );
}
