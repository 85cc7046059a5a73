//! `kaosctl migrate` against kaos-testkit set up as KAOS leaves a cluster: the kaos.tools CRDs
//! without Helm's ownership metadata (as Helm installs a chart's `crds/` directory, or `kubectl
//! apply`), a running `kaos-operator` Deployment in kaos-system (from KAOS's Helm release
//! `kaos-operator`, with its registry ConfigMap) and resources whose status KAOS wrote.
//!
//! The CRDs are kaos-rs's own (`kaosctl crds`), which carry no Helm metadata: KAOS's are not
//! vendored here. The real `helm install` over them runs in tests/control_plane/test_migrate.py.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kaos_testkit::auth::Identity;
use kaos_testkit::{ApiServer, TestServer};
use kaosctl::dev::{self, Cluster, Options};
use serde_json::{Value, json};

use super::{Scratch, assert_has_lines, kaosctl, serve};

const KAOS_RELEASE: &str =
    "app.kubernetes.io/managed-by: Helm, app.kubernetes.io/name: kaos-operator";

/// What KAOS 0.8.4 leaves behind, as YAML.
fn kaos_install() -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: kaos-system}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kaos-operator
  namespace: kaos-system
  labels: {{{KAOS_RELEASE}, control-plane: controller-manager}}
  annotations: {{meta.helm.sh/release-name: kaos-operator, meta.helm.sh/release-namespace: kaos-system}}
spec:
  replicas: 1
  selector: {{matchLabels: {{control-plane: controller-manager}}}}
  template:
    metadata: {{labels: {{control-plane: controller-manager}}}}
    spec:
      containers: [{{name: manager, image: "registry.invalid/kaos-operator:v0.8.4"}}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kaos-mcp-runtimes
  namespace: kaos-system
  labels: {{{KAOS_RELEASE}}}
  annotations: {{meta.helm.sh/release-name: kaos-operator, meta.helm.sh/release-namespace: kaos-system}}
data:
  runtimes.yaml: |
    runtimes:
      python-string: {{type: python, image: "axsauze/mcp-python-string:latest", paramsEnvVar: MCP_TOOLS_STRING, transport: http}}
---
apiVersion: v1
kind: Secret
metadata: {{name: openai-credentials, namespace: default}}
stringData: {{api-key: sk-test}}
"#
    )
}

/// A MemoryStore of KAOS 0.8.4 on the quickstart's ModelAPI.
const MEMORY_STORE: &str = "apiVersion: kaos.tools/v1alpha1\nkind: MemoryStore\nmetadata: {name: team-memory, namespace: default}\nspec: {storage: {type: local}, models: {summarization: {modelAPI: llm-proxy, model: openai/gpt-4o-mini}, embedding: {modelAPI: llm-proxy, model: openai/text-embedding-3-small}}}\n";

/// An AccessGrant and a ThirdPartyService (with its client Secret) of KAOS 0.8.4 on the
/// quickstart's agents.
const ACCESS: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: github-oauth, namespace: default}\nstringData: {client-secret: s3cret}\n---\napiVersion: kaos.tools/v1alpha1\nkind: AccessGrant\nmetadata: {name: researchers, namespace: default}\nspec: {subjects: [{kind: Group, name: researchers}], resources: [{kind: Agent, name: worker}]}\n---\napiVersion: kaos.tools/v1alpha1\nkind: ThirdPartyService\nmetadata: {name: github, namespace: default}\nspec: {clientID: kaos, clientSecretRef: {name: github-oauth, key: client-secret}, issuerURI: 'https://github.com', scopes: [{name: repo}], protectedResources: ['https://api.github.com'], routeRef: {name: github-egress}, access: [{agent: worker, scopes: [repo]}]}\n";

struct Kaos {
    server: TestServer,
    scratch: Scratch,
    kubeconfig: PathBuf,
}

impl Kaos {
    fn get(&self, group: &str, version: &str, plural: &str, ns: &str, name: &str) -> Value {
        let cluster = &self.server.api.cluster;
        let rt = cluster.resource(group, version, plural).expect("served");
        cluster.get(&rt, ns, name).expect("exists")
    }

    fn crd(&self, name: &str) -> Value {
        self.get(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "",
            name,
        )
    }

    /// The replicas the KAOS operator's Deployment asks for.
    fn operator_replicas(&self) -> Value {
        let operator = self.get("apps", "v1", "deployments", "kaos-system", "kaos-operator");
        operator["spec"]["replicas"].clone()
    }

    /// The quickstart's worker Agent.
    fn worker(&self) -> Value {
        self.get("kaos.tools", "v1alpha1", "agents", "default", "worker")
    }
}

/// kaos-testkit as KAOS leaves a cluster; `crds` false: none of the CRDs.
async fn kaos_cluster(name: &str, crds: bool) -> Kaos {
    let api = ApiServer::new(kaos_testkit::Cluster::default());
    if crds {
        for (_, crd) in kaos_api::crd::all() {
            let crd = serde_json::to_value(crd).expect("crd");
            assert!(
                crd["metadata"].get("labels").is_none()
                    && crd["metadata"].get("annotations").is_none(),
                "CRDs as KAOS installs them carry no Helm metadata: {}",
                crd["metadata"]
            );
            kaos_testkit::manifests::apply_object(&api.cluster, &crd).expect("crd");
        }
    }
    kaos_testkit::manifests::apply_yaml(&api.cluster, &kaos_install()).expect("kaos");
    if crds {
        kaos_testkit::manifests::apply_yaml(&api.cluster, kaosctl::defaults::QUICKSTART)
            .expect("quickstart");
        kaos_testkit::manifests::apply_yaml(&api.cluster, MEMORY_STORE).expect("memory store");
        kaos_testkit::manifests::apply_yaml(&api.cluster, ACCESS).expect("access");
    }
    let server = serve(api, true).await;
    let scratch = Scratch::new(&format!("migrate-{name}"));
    let kubeconfig = scratch.join("kubeconfig");
    server
        .write_kubeconfig(&kubeconfig, None)
        .expect("kubeconfig");
    Kaos {
        server,
        scratch,
        kubeconfig,
    }
}

/// `kaosctl migrate` on `kaos`'s cluster: (success, stdout, stderr).
async fn migrate(kaos: &Kaos, extra: &[&str]) -> (bool, String, String) {
    migrate_with(&kaos.kubeconfig, extra).await
}

/// `kaosctl migrate --kubeconfig KUBECONFIG`: (success, stdout, stderr).
async fn migrate_with(kubeconfig: &Path, extra: &[&str]) -> (bool, String, String) {
    let kubeconfig = kubeconfig.display().to_string();
    let mut args = vec!["migrate", "--kubeconfig", &kubeconfig];
    args.extend(extra);
    let out = kaosctl(args).await;
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CRDS: [&str; 6] = [
    "agents.kaos.tools",
    "modelapis.kaos.tools",
    "mcpservers.kaos.tools",
    "memorystores.kaos.tools",
    "accessgrants.kaos.tools",
    "thirdpartyservices.kaos.tools",
];

#[tokio::test]
async fn migrate_adopts_kaos_crds_after_stopping_kaos_and_check_sees_kaos_rs_reconcile() {
    let kaos = kaos_cluster("adopt", true).await;
    let before: Vec<Value> = CRDS.iter().map(|c| kaos.crd(c)).collect();
    let worker = kaos.worker();

    // KAOS still runs: the plan, then a refusal naming the flag that stops it.
    let (ok, stdout, stderr) = migrate(&kaos, &[]).await;
    assert!(!ok, "{stdout}");
    assert_has_lines(
        &stdout,
        &[
            "  agents.kaos.tools              no Helm ownership metadata (as KAOS installs it): adopt",
            "  kaos-system/kaos-operator: running (1 replica, 1 pod), Helm release kaos-operator in kaos-system",
            "  2 Agents, 1 ModelAPI, 1 MCPServer, 1 MemoryStore, 1 AccessGrant, 1 ThirdPartyService",
        ],
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "kaosctl: cannot migrate: the KAOS operator is running (kaos-system/kaos-operator): it and kaos-rs would fight over every resource",
            "hint: add --scale-down-kaos to scale it to 0 first (kubectl scale --replicas=N brings it back)",
        ]
    );

    // A dry run changes nothing, and says what would happen.
    let (ok, stdout, stderr) = migrate(&kaos, &["--dry-run", "--scale-down-kaos"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("would scale kaos-system/kaos-operator to 0 (from 1)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("would adopt CRD agents.kaos.tools into release kaos"),
        "{stdout}"
    );
    assert_eq!(kaos.operator_replicas(), 1);
    for (name, old) in CRDS.iter().zip(&before) {
        assert_eq!(&kaos.crd(name)["metadata"], &old["metadata"]);
    }

    // For real: KAOS scaled to 0, the CRDs carry exactly what Helm checks, nothing else changed.
    let (ok, stdout, stderr) = migrate(&kaos, &["--scale-down-kaos"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("scaled kaos-system/kaos-operator to 0 (it had 1 replica; `kubectl scale deployment kaos-operator -n kaos-system --replicas=1` restores it)"),
        "{stdout}"
    );
    // KAOS's registry ConfigMap is in the release namespace: KAOS goes before the install.
    let next = stdout.split("Next:\n").nth(1).expect("next steps");
    let steps: Vec<&str> = next.lines().collect();
    assert_eq!(
        steps[0],
        "  1. remove KAOS first: ConfigMap kaos-system/kaos-mcp-runtimes (Helm release kaos-operator in namespace kaos-system) would stop helm install:"
    );
    assert_eq!(
        steps[1],
        "       helm uninstall kaos-operator -n kaos-system"
    );
    assert!(
        steps[2].starts_with(
            "  2. helm install kaos charts/kaos -n kaos-system --create-namespace --kubeconfig "
        ),
        "{next}"
    );
    assert!(
        steps[3].starts_with("  3. kaosctl migrate --check --release kaos --namespace kaos-system"),
        "{next}"
    );
    assert_eq!(kaos.operator_replicas(), 0);
    for (name, old) in CRDS.iter().zip(&before) {
        let now = kaos.crd(name);
        assert_eq!(
            now["metadata"]["labels"],
            json!({"app.kubernetes.io/managed-by": "Helm"})
        );
        assert_eq!(
            now["metadata"]["annotations"],
            json!({"meta.helm.sh/release-name": "kaos", "meta.helm.sh/release-namespace": "kaos-system"})
        );
        assert_eq!(now["spec"], old["spec"], "{name}: spec changed");
        assert_eq!(now["metadata"]["uid"], old["metadata"]["uid"]);
        assert_eq!(now["metadata"]["generation"], old["metadata"]["generation"]);
    }
    let still = kaos.worker();
    assert_eq!(still["metadata"]["uid"], worker["metadata"]["uid"]);

    // Again: nothing left to adopt.
    let (ok, stdout, _) = migrate(&kaos, &[]).await;
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains("Helm release kaos in namespace kaos-system: already adopted"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kaos-system/kaos-operator: scaled to 0"),
        "{stdout}"
    );

    // --check: the release is not installed and nothing was reconciled by kaos-rs yet.
    let (ok, stdout, stderr) = migrate(&kaos, &["--check"]).await;
    assert!(!ok, "{stdout}");
    assert_has_lines(
        &stdout,
        &[
            "  ok   CRD agents.kaos.tools: Helm release kaos in namespace kaos-system",
            "  FAIL Helm release kaos in kaos-system: not deployed",
            "  ok   KAOS operator kaos-system/kaos-operator: scaled to 0 (remove it: helm uninstall kaos-operator -n kaos-system)",
            "  FAIL 2 Agents: 2 not reconciled by kaos-rs (kaos-agent-controller) yet:",
            "      default/worker: its status was never written by kaos-agent-controller",
            "  FAIL 1 MemoryStore: 1 not reconciled by kaos-rs (kaos-memorystore-controller) yet:",
            "  FAIL 1 AccessGrant: 1 not reconciled by kaos-rs (kaos-authz-controller) yet:",
            "      default/researchers: its status was never written by kaos-authz-controller",
            "  FAIL 1 ThirdPartyService: 1 not reconciled by kaos-rs (kaos-authz-controller) yet:",
        ],
    );
    assert!(
        stderr.starts_with("kaosctl: 7 check(s) failed\n"),
        "{stderr}"
    );

    // The chart installed (its release Secret) and kaos-rs's controllers running: all ok.
    kaos_testkit::manifests::apply_yaml(
        &kaos.server.api.cluster,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: sh.helm.release.v1.kaos.v1\n  namespace: kaos-system\n  labels: {owner: helm, name: kaos, status: deployed, version: \"1\"}\ntype: helm.sh/release.v1\n",
    )
    .expect("release secret");
    let controllers = dev::start(&Options {
        cluster: Cluster::Existing {
            kubeconfig: kaos.kubeconfig.clone(),
            install_crds: false,
        },
        apply: vec![],
        agent_addresses: vec![],
    })
    .await
    .expect("controllers");
    controllers
        .wait_ready(Duration::from_secs(60), false)
        .await
        .expect("Ready");
    let (ok, stdout, stderr) = migrate(&kaos, &["--check"]).await;
    controllers.stop().await;
    assert!(ok, "{stdout}\n{stderr}");
    assert_has_lines(
        &stdout,
        &[
            "  ok   Helm release kaos in kaos-system: deployed (revision 1)",
            "  ok   2 Agents: all reconciled by kaos-rs (kaos-agent-controller)",
            "  ok   1 ModelAPI: all reconciled by kaos-rs (kaos-modelapi-controller)",
            "  ok   1 MCPServer: all reconciled by kaos-rs (kaos-mcpserver-controller)",
            "  ok   1 MemoryStore: all reconciled by kaos-rs (kaos-memorystore-controller)",
            "  ok   1 AccessGrant: all reconciled by kaos-rs (kaos-authz-controller)",
            "  ok   1 ThirdPartyService: all reconciled by kaos-rs (kaos-authz-controller)",
            "the migration is complete: kaos-rs reconciles every resource",
        ],
    );

    // A grant changed while no controller runs: its Enforced condition judged the old spec.
    kaos_testkit::manifests::apply_yaml(
        &kaos.server.api.cluster,
        &ACCESS.replace("name: worker}]}", "name: coordinator}]}"),
    )
    .expect("changed grant");
    let (ok, stdout, _) = migrate(&kaos, &["--check"]).await;
    assert!(!ok, "{stdout}");
    assert_has_lines(
        &stdout,
        &[
            "  FAIL 1 AccessGrant: 1 not reconciled by kaos-rs (kaos-authz-controller) yet:",
            "      default/researchers: the observedGeneration of condition Enforced 1 behind metadata.generation 2",
        ],
    );
    let still = kaos.worker();
    assert_eq!(still["metadata"]["uid"], worker["metadata"]["uid"]);
}

#[tokio::test]
async fn migrate_refuses_crds_of_another_release_unless_forced() {
    let kaos = kaos_cluster("other", true).await;
    let cluster = &kaos.server.api.cluster;
    let rt = cluster
        .resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("crds");
    let mut agents = cluster.get(&rt, "", "agents.kaos.tools").expect("crd");
    agents["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "Helm"});
    agents["metadata"]["annotations"] =
        json!({"meta.helm.sh/release-name": "kaos-rs", "meta.helm.sh/release-namespace": "ops"});
    kaos_testkit::manifests::apply_object(cluster, &agents).expect("owned elsewhere");

    let (ok, stdout, stderr) = migrate(&kaos, &["--scale-down-kaos"]).await;
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("Helm release kaos-rs in namespace ops: belongs to another release: refused without --force"),
        "{stdout}"
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "kaosctl: cannot migrate: CRDs belong to another Helm release: agents.kaos.tools (Helm release kaos-rs in namespace ops)",
            "hint: pass that release's --release and --namespace, or --force to move them to this one",
        ]
    );
    // Nothing was changed, not even KAOS's replicas.
    assert_eq!(kaos.operator_replicas(), 1);

    let (ok, stdout, stderr) = migrate(&kaos, &["--scale-down-kaos", "--force"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    let agents = kaos.crd("agents.kaos.tools");
    assert_eq!(
        agents["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "kaos"
    );
}

#[tokio::test]
async fn migrate_errors_are_one_line_and_a_hint() {
    // No CRDs at all: nothing to migrate.
    let empty = kaos_cluster("empty", false).await;
    let (ok, stdout, stderr) = migrate(&empty, &["--scale-down-kaos"]).await;
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("  agents.kaos.tools              missing: the chart creates it"),
        "{stdout}"
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            format!(
                "kaosctl: cannot migrate: {} has no kaos.tools CRDs: nothing to migrate",
                empty.server.url()
            )
            .as_str(),
            "hint: install kaos-rs directly: helm install kaos charts/kaos -n kaos-system --create-namespace",
        ]
    );

    // Credentials without any RBAC: forbidden, and what migrate needs.
    let token = empty
        .server
        .api
        .auth
        .mint_token(Identity::service_account("default", "nobody"));
    let forbidden = empty.scratch.join("forbidden");
    empty
        .server
        .write_kubeconfig(&forbidden, Some(&token))
        .expect("kubeconfig");
    let (ok, _, stderr) = migrate_with(&forbidden, &[]).await;
    assert!(!ok);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "kaosctl: cannot list the CustomResourceDefinitions on {}: ",
            empty.server.url()
        )) && lines[0].contains("forbidden"),
        "{stderr}"
    );
    assert!(
        lines[1]
            .starts_with("hint: migrate needs to get, list and patch customresourcedefinitions"),
        "{stderr}"
    );

    // No cluster answering.
    let unreachable = empty.scratch.write(
        "unreachable",
        &empty
            .server
            .kubeconfig(None)
            .replace(&empty.server.url(), "http://127.0.0.1:1"),
    );
    let (ok, _, stderr) = migrate_with(&unreachable, &["--check"]).await;
    assert!(!ok);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with(
            "kaosctl: cannot list the CustomResourceDefinitions on http://127.0.0.1:1: "
        ),
        "{stderr}"
    );
    assert_eq!(
        lines[1],
        "hint: check that the cluster answers: kubectl get --raw /version (server http://127.0.0.1:1)"
    );

    // A kubeconfig that is not there.
    let (_, _, stderr) = migrate_with(Path::new("/nonexistent/kubeconfig"), &[]).await;
    assert!(
        stderr.starts_with("kaosctl: cannot use kubeconfig /nonexistent/kubeconfig: "),
        "{stderr}"
    );
}
