//! `release-finalizers` (the chart's pre-delete hook) against kaos-testkit: the controller's
//! Deployment is scaled to 0 and its Lease waited for; only our finalizer goes, foreign ones
//! stay, other kinds are untouched; an object being deleted is then gone; a second run does
//! nothing; a Lease that keeps being renewed fails the run with nothing released; watched
//! namespaces limit where it releases.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kaos_api::agent::Agent;
use kaos_api::modelapi::ModelAPI;
use kaos_runtime::uninstall::{Plan, release_finalizers};
use kaos_testkit::{ApiServer, Cluster};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const OURS: &str = "kaos.tools/agent-finalizer";
const FOREIGN: &str = "example.com/keep";
const SYSTEM: &str = "kaos-system";
const NAME: &str = "kaos-agent-controller";

struct Setup {
    api: ApiServer,
    client: Client,
}

fn setup() -> Setup {
    let api = ApiServer::new(Cluster::default());
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    kaos_testkit::manifests::apply_path(&api.cluster, &crds).expect("CRDs install");
    tokio::spawn(kaos_testkit::simulator::run(
        api.cluster.clone(),
        Duration::from_millis(20),
    ));
    let client = Client::new(api.clone().router(), "default");
    Setup { api, client }
}

impl Setup {
    fn apply(&self, yaml: &str) {
        kaos_testkit::manifests::apply_yaml(&self.api.cluster, yaml).expect("manifests apply");
    }

    fn agent(&self, namespace: &str, name: &str, finalizers: &[&str]) {
        let manifest = json!({"apiVersion": "kaos.tools/v1alpha1", "kind": "Agent",
            "metadata": {"name": name, "namespace": namespace, "finalizers": finalizers},
            "spec": {"modelAPI": "llm", "model": "m"}});
        self.apply(&manifest.to_string());
    }

    async fn finalizers(&self, namespace: &str, name: &str) -> Option<Vec<String>> {
        Api::<Agent>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .expect("get")
            .map(|a| a.finalizers().to_vec())
    }

    /// The controller's Deployment (2 replicas) and a Lease its leader holds (1 s).
    fn controller(&self) {
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {SYSTEM}}}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {NAME}, namespace: {SYSTEM}}}\n\
             spec:\n  replicas: 2\n  selector: {{matchLabels: {{app: c}}}}\n  template:\n    metadata: {{labels: {{app: c}}}}\n    spec: {{containers: [{{name: c, image: c}}]}}\n---\n\
             apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {NAME}, namespace: {SYSTEM}}}\n\
             spec: {{holderIdentity: old-pod_1234, leaseDurationSeconds: 1}}\n"
        ));
    }

    fn plan(&self, watch_namespaces: &[&str], timeout: Duration) -> Plan {
        Plan {
            finalizer: OURS.into(),
            namespace: SYSTEM.into(),
            deployment: Some(NAME.into()),
            lease: Some(NAME.into()),
            watch_namespaces: watch_namespaces.iter().map(|s| s.to_string()).collect(),
            timeout,
            poll: Duration::from_millis(50),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_only_our_finalizer_after_the_controller_stopped() {
    let s = setup();
    s.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n");
    s.controller();
    s.agent("default", "both", &[OURS, FOREIGN]);
    s.agent("default", "foreign-first", &[FOREIGN, OURS]);
    s.agent("default", "none", &[]);
    s.agent("other", "ours", &[OURS]);
    s.apply("apiVersion: kaos.tools/v1alpha1\nkind: ModelAPI\nmetadata: {name: llm, namespace: default, finalizers: [kaos.tools/modelapi-finalizer]}\nspec: {mode: Proxy, proxyConfig: {models: ['*']}}\n");
    // Being deleted (as by a namespace or CRD deletion): held only by our finalizer.
    Api::<Agent>::namespaced(s.client.clone(), "other")
        .delete("ours", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(
        s.finalizers("other", "ours").await,
        Some(vec![OURS.to_string()])
    );

    let started = Instant::now();
    let report = release_finalizers::<Agent>(&s.client, &s.plan(&[], Duration::from_secs(10)))
        .await
        .expect("release");
    // The Lease's holder did not renew it: free after its duration by our clock, not sooner.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let deployment = Api::<Deployment>::namespaced(s.client.clone(), SYSTEM)
        .get(NAME)
        .await
        .expect("deployment");
    assert_eq!(deployment.spec.and_then(|s| s.replicas), Some(0));

    let mut released = report.released.clone();
    released.sort();
    assert_eq!(
        released,
        ["default/both", "default/foreign-first", "other/ours"]
    );
    assert_eq!(report.without, 1);
    assert_eq!(
        s.finalizers("default", "both").await,
        Some(vec![FOREIGN.to_string()])
    );
    assert_eq!(
        s.finalizers("default", "foreign-first").await,
        Some(vec![FOREIGN.to_string()])
    );
    assert_eq!(s.finalizers("default", "none").await, Some(vec![]));
    // The object being deleted is gone once nothing holds it.
    assert_eq!(s.finalizers("other", "ours").await, None);
    // Other kinds are another controller's business.
    let model_api = Api::<ModelAPI>::namespaced(s.client.clone(), "default")
        .get("llm")
        .await
        .expect("modelapi");
    assert_eq!(model_api.finalizers(), ["kaos.tools/modelapi-finalizer"]);

    // Idempotent: a second run (a retried hook) finds nothing to release and writes no object.
    let writes_before = s
        .api
        .audit
        .records()
        .iter()
        .filter(|r| r.is_write())
        .count();
    let again = release_finalizers::<Agent>(&s.client, &s.plan(&[], Duration::from_secs(10)))
        .await
        .expect("second run");
    assert!(again.released.is_empty(), "{again:?}");
    assert_eq!(again.without, 3);
    let writes: Vec<String> = s
        .api
        .audit
        .records()
        .iter()
        .filter(|r| r.is_write())
        .skip(writes_before)
        .map(|r| format!("{} {}", r.verb, r.path))
        .filter(|w| w.contains("kaos.tools"))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_still_renewed_fails_the_run_and_releases_nothing() {
    let s = setup();
    s.controller();
    s.agent("default", "held", &[OURS]);
    // A controller outside the Deployment keeps renewing the Lease.
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), SYSTEM);
    let renewer = tokio::spawn(async move {
        for i in 0.. {
            let renew = json!({"spec": {"leaseTransitions": i}});
            let _ = leases
                .patch(NAME, &PatchParams::default(), &Patch::Merge(&renew))
                .await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let error = release_finalizers::<Agent>(&s.client, &s.plan(&[], Duration::from_secs(2)))
        .await
        .expect_err("a held Lease must fail the run");
    renewer.abort();
    assert!(
        error.to_string().contains("still held by old-pod_1234"),
        "{error}"
    );
    assert_eq!(
        s.finalizers("default", "held").await,
        Some(vec![OURS.to_string()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_namespaces_limit_the_release_and_a_missing_controller_is_no_error() {
    let s = setup();
    s.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n");
    s.agent("default", "elsewhere", &[OURS]);
    s.agent("team-a", "watched", &[OURS]);
    // No Deployment and no Lease (already gone, or a manual run after the fact).
    let report =
        release_finalizers::<Agent>(&s.client, &s.plan(&["team-a"], Duration::from_secs(5)))
            .await
            .expect("release");
    assert_eq!(report.released, ["team-a/watched"]);
    assert_eq!(s.finalizers("team-a", "watched").await, Some(vec![]));
    assert_eq!(
        s.finalizers("default", "elsewhere").await,
        Some(vec![OURS.to_string()])
    );
}

#[tokio::test]
async fn by_default_it_stops_the_deployment_the_chart_names_and_waits_on_the_lease() {
    use clap::Parser;
    use kaos_runtime::ControllerId;
    use kaos_runtime::uninstall::{ReleaseArgs, plan};
    let id = ControllerId {
        name: "agent",
        lease: "kaos-agent-controller",
        kinds: &[],
    };
    let s = setup();
    let args =
        ReleaseArgs::try_parse_from(["release-finalizers", "--namespace", SYSTEM]).expect("flags");
    let defaults = plan(&args, id, OURS, &s.client);
    assert_eq!(
        defaults.deployment.as_deref(),
        Some("kaos-agent-controller-manager")
    );
    assert_eq!(defaults.lease.as_deref(), Some("kaos-agent-controller"));
    let args = ReleaseArgs::try_parse_from([
        "release-finalizers",
        "--namespace",
        SYSTEM,
        "--deployment",
        "",
    ])
    .expect("flags");
    assert_eq!(
        plan(&args, id, OURS, &s.client).deployment,
        None,
        "empty: none"
    );
}
