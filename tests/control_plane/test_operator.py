"""The controllers on a cluster, each test body run twice: on kaos-testkit (served on loopback,
fast) and on the real kube-apiserver of scripts/control-plane (the session plane). On both the
chart is installed (CRDs, RBAC, ServiceAccounts; its in-cluster Deployments at 0 replicas) and
the real binaries run out of cluster, each under a token of its own chart ServiceAccount, so the
chart's RBAC is proven sufficient. Two agent-controller replicas (a leader and a standby), one of
each other controller.

Covers: /readyz once synced; the quickstart Ready (with pods Running on kwok nodes, on the real
plane, in a namespace enforcing the restricted Pod Security Standard); an inline API key kept in
an owned Secret; a spec edit rolls the Deployment once; drift restored; leader failover; a peer
pair and a mesh converge and go quiet; MemoryStores get their memory service, claim and
disruption budget, and no finalizer; AccessGrants and ThirdPartyServices get their status (not
enforced, references resolved), and no finalizer; no request was forbidden; namespace deletion completes; on the
testkit, convergence through injected faults; on the real plane, a terminating namespace that
took a resource's children first is no reconcile error. A test that only one cluster can show is
marked `only_on` with the reason.

The testkit half runs as is (`python3 -m pytest tests/control_plane/test_operator.py -k
testkit`); the real-plane half only with KAOS_CONTROL_PLANE=1. Both need the debug binaries
(`cargo build --workspace`: kaos-testkit and the controllers) and the plane's kubectl and helm
(`scripts/control-plane build`); see docs/testing.md.
"""

import json
import textwrap
import time

import pytest

from controllers import Controllers, controller_label, lease_name
from plane import (CONTROLLERS, REPO, WAIT, create_namespace, delete_namespace, env_of,
                   install_chart, only_on, remove_chart, rolled_out, wait_until)

NAMESPACE = "kaos-system"
# Every generated pod meets the restricted Pod Security Standard (docs/security.md); the
# quickstart runs where kube-apiserver enforces it (the testkit has no Pod Security admission).
RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"
KAOS = "/apis/kaos.tools/v1alpha1"
KINDS = {"Agent": "agents", "ModelAPI": "modelapis", "MCPServer": "mcpservers"}
# Short leases, as the Rust e2e uses: a standby takes over within seconds.
LEASE = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}
IDLE_WINDOW = 10


@pytest.fixture(scope="module")
def release(cluster):
    """The chart, with the in-cluster controllers scaled to 0 so only our processes reconcile."""
    values = [f"{b}.replicas=0" for b in CONTROLLERS]
    values += [f"global.leaderElection.{k}={v}" for k, v in LEASE.items()]
    values += ["global.controllerLogFormat=text"]
    # The tests read the replicas' metrics in plain HTTP; secure metrics: test_metrics_auth.py.
    values += ["global.metrics.secure=false"]
    # Graph-derived NetworkPolicies in one namespace only (test_autoscaling_scale_budgets_...).
    values += ["global.networkPolicy.enabled=true",
               f"global.networkPolicy.namespaces={{{SCALING_NAMESPACE}}}"]
    install_chart(cluster, NAMESPACE, *values)
    yield
    remove_chart(cluster, NAMESPACE)


@pytest.fixture(scope="module")
def controllers(cluster, release, tmp_path_factory):
    """Two agent-controller replicas (leader and standby, for the failover), one of the others."""
    running = Controllers(cluster, NAMESPACE, tmp_path_factory.mktemp("controllers"))
    try:
        running.start("agent-controller", 2)
        # kwok's pods serve nothing: a protocol check (the ModelAPIs' model list, the MCP
        # handshake) could never succeed here and its retries would wake the controllers in the
        # idle windows these tests assert.
        running.start("modelapi-controller", 1, {"PROTOCOL_CHECKS": "false"})
        running.start("mcpserver-controller", 1, {"PROTOCOL_CHECKS": "false"})
        running.start("memorystore-controller", 1)
        running.start("authz-controller", 1)
        running.start("workflow-controller", 1)
        yield running
    finally:
        running.stop_all()
    # The supervisor restarts only what a lost Lease stopped; anything else is a crash.
    assert not running.crashes(), f"replicas exited, not for a lost Lease: {running.crashes()}"


class Namespaces:
    """Namespaces the tests create; deleted (and waited for) while the controllers still run,
    since only they can remove their finalizers (a replica that exits meanwhile, as one that
    lost its Lease to a fault still in flight when the faults test cleared them, is started
    again by the controllers' supervisor)."""

    def __init__(self, cluster, controllers):
        self.cluster, self.controllers, self.names = cluster, controllers, []

    def create(self, name, *labels):
        create_namespace(self.cluster, name, labels)
        self.names.append(name)
        return name

    def delete_all(self):
        for name in self.names:
            delete_namespace(self.cluster, name)
        for name in self.names:
            def deleted():
                if self.cluster.get(f"/api/v1/namespaces/{name}") is None:
                    return True
                left = [(kind, o["metadata"]["name"], o["metadata"].get("finalizers"))
                        for kind, o in resources(self.cluster, name)]
                return False, {"left": left, "restarts": self.controllers.restarts}
            wait_until(f"namespace {name} to be deleted", deleted)


@pytest.fixture(scope="module")
def namespaces(cluster, controllers):
    created = Namespaces(cluster, controllers)
    yield created
    created.delete_all()


def apply(cluster, namespace, yaml_text):
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml_text)


def resources(cluster, namespace):
    """Every Agent, ModelAPI and MCPServer in namespace, as (kind, object)."""
    return [(kind, o) for kind, plural in KINDS.items()
            for o in cluster.items(f"{KAOS}/namespaces/{namespace}/{plural}")]


def deployments(cluster, namespace):
    return {d["metadata"]["name"]: d
            for d in cluster.items(f"/apis/apps/v1/namespaces/{namespace}/deployments")}


def child_name(kind, obj):
    return f"{kind.lower()}-{obj['metadata']['name']}"


def not_converged(cluster, namespace):
    """What is not converged yet in namespace (empty when done): every resource Ready at its
    generation, its Deployment rolled out, and the status mirroring that Deployment."""
    waiting = []
    children = deployments(cluster, namespace)
    for kind, obj in resources(cluster, namespace):
        status, meta = obj.get("status", {}), obj["metadata"]
        name = f"{kind} {meta['name']}"
        if not status.get("ready") or status.get("observedGeneration") != meta["generation"]:
            waiting.append(f"{name}: {status.get('phase')} {status.get('message')}")
            continue
        child = children.get(child_name(kind, obj))
        if not child or not rolled_out(child):
            waiting.append(f"{name}: Deployment not rolled out: {child and child.get('status')}")
            continue
        mirror, actual = status.get("deployment", {}), child["status"]
        counts = ["replicas", "readyReplicas", "availableReplicas", "updatedReplicas"]
        if any(mirror.get(c, 0) != actual.get(c, 0) for c in counts):
            waiting.append(f"{name}: status.deployment {mirror} lags {actual}")
    return waiting


def wait_converged(cluster, namespace, timeout=WAIT):
    """Waits for everything in namespace to converge."""
    def check():
        left = not_converged(cluster, namespace)
        return not left, left
    wait_until(f"everything in {namespace} to converge", check, timeout=timeout)


# The Secret the quickstart's ModelAPI reads its provider key from, created first as its
# header says (a placeholder key: kwok runs no containers).
CREDENTIALS = textwrap.dedent("""\
    apiVersion: v1
    kind: Secret
    metadata: {name: openai-credentials}
    stringData: {api-key: sk-test}
    """)


def quickstart_yaml():
    """examples/quickstart.yaml after the Secret it reads."""
    return CREDENTIALS + "---\n" + (REPO / "examples" / "quickstart.yaml").read_text()


@pytest.fixture(scope="module")
def quickstart(cluster, namespaces):
    """examples/quickstart.yaml applied as is into its own namespace, converged."""
    namespace = namespaces.create("quickstart", RESTRICTED)
    apply(cluster, namespace, quickstart_yaml())
    wait_converged(cluster, namespace)
    return namespace


def agent(name, peers=()):
    return textwrap.dedent(f"""\
        ---
        apiVersion: kaos.tools/v1alpha1
        kind: Agent
        metadata: {{name: {name}}}
        spec:
          modelAPI: llm-proxy
          model: openai/gpt-4o-mini
          agentNetwork: {{access: {json.dumps(list(peers))}}}
        """)


def model_api():
    """The quickstart's ModelAPI (the first document) and its Secret, for namespaces of our own."""
    first = (REPO / "examples" / "quickstart.yaml").read_text().split("\n---\n")[0]
    return CREDENTIALS + "---\n" + first + "\n"


def test_every_replica_turns_ready_once_synced_and_one_leads(controllers):
    wait_ready_and_one_leading(controllers)


def wait_ready_and_one_leading(controllers):
    """Every replica answers 200 on /readyz and /healthz, and each Lease is held by one of
    ours, the only replica of its controller whose metrics say it leads."""
    for replica in controllers.replicas:
        def ready():
            codes = (replica.probe("/readyz"), replica.probe("/healthz"))
            return codes == (200, 200), codes
        wait_until(f"{replica.name} /readyz and /healthz to answer 200", ready)
    for binary in CONTROLLERS:
        def one_leads():
            """The Lease holder is one of ours, and the only replica whose metrics say so."""
            leader = controllers.leader(binary)
            leading = {r.name: r.sample("leader_election_master_status",
                                        name=lease_name(binary)) for r in controllers.of(binary)}
            says = [name for name, value in leading.items() if value == 1.0]
            return leader is not None and says == [leader.name], (
                controllers.holder(binary), leading)

        wait_until(f"one replica to lead {lease_name(binary)}", one_leads, interval=0.5)


def test_quickstart_reaches_ready_with_its_children(cluster, quickstart):
    namespace = quickstart
    for kind, obj in resources(cluster, namespace):
        name = obj["metadata"]["name"]
        assert obj["status"]["phase"] == "Ready", (kind, name, obj["status"])
        assert obj["status"]["endpoint"] == (
            f"http://{child_name(kind, obj)}.{namespace}.svc.cluster.local:8000"), (kind, name)
        assert "kaos.tools/" in " ".join(obj["metadata"].get("finalizers", [])), (kind, name)
        service = cluster.get(f"/api/v1/namespaces/{namespace}/services/{child_name(kind, obj)}")
        assert service, f"{kind} {name} has no Service"
        assert service["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]

    children = deployments(cluster, namespace)
    assert sorted(children) == ["agent-coordinator", "agent-worker", "mcpserver-echo-tools",
                                "modelapi-llm-proxy"]
    coordinator, worker = env_of(children["agent-coordinator"]), env_of(children["agent-worker"])
    assert coordinator["PEER_AGENTS"] == "worker"
    assert coordinator["PEER_AGENT_WORKER_CARD_URL"] == (
        f"http://agent-worker.{namespace}.svc.cluster.local:8000")
    assert coordinator["MODEL_API_URL"] == (
        f"http://modelapi-llm-proxy.{namespace}.svc.cluster.local:8000")
    assert worker["MCP_SERVERS"] == "echo-tools"
    assert worker["MCP_SERVER_echo-tools_URL"] == (
        f"http://mcpserver-echo-tools.{namespace}.svc.cluster.local:8000")


@only_on("kube-apiserver", "the testkit runs no pods (its simulator only writes Deployment "
         "status)")
def test_quickstart_pods_run_on_kwok_nodes(cluster, quickstart):
    namespace = quickstart
    kwok_nodes = cluster.kwok_nodes()
    for name, deployment in deployments(cluster, namespace).items():
        selector = ",".join(f"{k}={v}" for k, v in
                            deployment["spec"]["selector"]["matchLabels"].items())
        pods = cluster.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)
        assert len(pods) == 1, f"{name}: {[p['metadata']['name'] for p in pods]}"
        pod = pods[0]
        assert pod["status"].get("phase") == "Running", f"{name}: {pod['status']}"
        assert pod["spec"].get("nodeName") in kwok_nodes, f"{name}: {pod['spec'].get('nodeName')}"
        assert pod["status"].get("podIP"), name
    # They were admitted under `restricted`, which the namespace does enforce:
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    refused = cluster.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(bare),
                              check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr


def replica_sets_of(cluster, namespace, deployment):
    return [rs["metadata"]["name"]
            for rs in cluster.items(f"/apis/apps/v1/namespaces/{namespace}/replicasets")
            if any(o["uid"] == deployment["metadata"]["uid"]
                   for o in rs["metadata"].get("ownerReferences", []))]


def edit_worker(cluster, namespace, instructions):
    """Edits the worker's spec.config.instructions and waits for it to converge: the worker's
    Deployment (before, after)."""
    before = deployments(cluster, namespace)["agent-worker"]
    cluster.kubectl("patch", "agent", "worker", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"config": {"instructions": instructions}}}))
    def reached():
        return env_of(deployments(cluster, namespace)["agent-worker"]).get("AGENT_INSTRUCTIONS") == instructions
    wait_until("the edit to reach the worker's Deployment", reached)
    wait_converged(cluster, namespace)
    return before, deployments(cluster, namespace)["agent-worker"]


def test_spec_edit_rolls_the_deployment_once(cluster, quickstart):
    before, after = edit_worker(cluster, quickstart, "Edited once.")
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1, (
        "one edit, one Deployment write")


@only_on("kube-apiserver", "the testkit has no ReplicaSets (no Deployment controller)")
def test_spec_edit_makes_one_new_replica_set(cluster, quickstart):
    namespace = quickstart
    sets_before = replica_sets_of(cluster, namespace,
                                  deployments(cluster, namespace)["agent-worker"])
    before, after = edit_worker(cluster, namespace, "Edited twice.")
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    sets_after = replica_sets_of(cluster, namespace, after)
    assert len(sets_after) == len(sets_before) + 1, (sets_before, sets_after)


def test_drift_is_restored(cluster, quickstart):
    namespace = quickstart
    service_path = f"/api/v1/namespaces/{namespace}/services/agent-worker"
    old_uid = cluster.get(service_path)["metadata"]["uid"]
    cluster.kubectl("delete", "service", "agent-worker", "-n", namespace)
    service = wait_until("the deleted Service to come back", lambda: (
        (s := cluster.get(service_path)) and s["metadata"]["uid"] != old_uid and s))
    assert service["metadata"]["ownerReferences"][0]["name"] == "worker"

    want = env_of(deployments(cluster, namespace)["agent-worker"])["MODEL_NAME"]
    cluster.kubectl("set", "env", "deployment/agent-worker", "-n", namespace,
                    "MODEL_NAME=tampered", "EXTRA=added-by-hand")
    env = wait_until("the Deployment's MODEL_NAME to be restored", lambda: (
        (env := env_of(deployments(cluster, namespace)["agent-worker"])).get("MODEL_NAME") == want
        and env))
    # A variable only another field manager set is not drift (docs/reconcile.md): it stays.
    assert env.get("EXTRA") == "added-by-hand", env
    wait_converged(cluster, namespace)


def ready_agents(cluster):
    return {(a["metadata"]["namespace"], a["metadata"]["name"]): a.get("status", {})
            for a in cluster.items(f"{KAOS}/agents") if a.get("status", {}).get("ready")}


def test_leader_failover_keeps_agents_ready_and_reconciles_new_ones(cluster, controllers,
                                                                    quickstart):
    namespace = quickstart
    binary = "agent-controller"
    leader = wait_until("an agent-controller leader", lambda: controllers.leader(binary))
    holder = controllers.holder(binary)
    was_ready = set(ready_agents(cluster))
    assert was_ready, "nothing Ready to watch during the failover"

    leader.kill()
    killed = time.monotonic()
    apply(cluster, namespace, agent("after-failover"))

    def taken_over():
        now = cluster.items(f"{KAOS}/agents")
        left = [f"{a['metadata']['namespace']}/{a['metadata']['name']}: {a.get('status')}"
                for a in now if (a["metadata"]["namespace"], a["metadata"]["name"]) in was_ready
                and not a.get("status", {}).get("ready")]
        assert not left, f"Ready agents left Ready during the failover: {left}"
        new = [a for a in now if a["metadata"]["name"] == "after-failover"]
        return bool(new and new[0].get("status", {}).get("ready")), new and new[0].get("status")

    wait_until("the standby to make the new Agent Ready", taken_over, timeout=60, interval=0.25)
    print(f"failover: new Agent Ready {time.monotonic() - killed:.1f}s after the kill")
    new_leader = controllers.leader(binary)
    assert new_leader and new_leader is not leader, (
        f"the Lease did not move to the standby: {holder} before, {controllers.holder(binary)} "
        "after")

    # Restart it, as the Deployment would: it comes back as the standby.
    leader.start()
    wait_until(f"{leader.name} to be ready again", lambda: leader.probe("/readyz") == 200)
    assert controllers.leader(binary) is new_leader
    wait_converged(cluster, namespace)


def wait_settled(controllers, what):
    """Waits until the reconcile counters of every replica stand still for one 2 s poll."""
    last = {}

    def unchanged():
        now = controllers.reconciles()
        same, last["counts"] = now == last.get("counts"), now
        return same, now

    wait_until(what, unchanged, timeout=60, interval=2)


INLINE_KEY = textwrap.dedent("""\
    apiVersion: kaos.tools/v1alpha1
    kind: ModelAPI
    metadata: {name: inline}
    spec: {mode: Proxy, proxyConfig: {models: ["*"], apiKey: {value: sk-inline-4e1b}}}
    """)


def test_an_inline_api_key_is_kept_in_an_owned_secret(cluster, controllers, namespaces):
    """The chart's RBAC and server-side apply of a Secret, then its deletion once the key is
    referenced instead (docs/security.md)."""
    namespace = namespaces.create("inline-key", RESTRICTED)
    apply(cluster, namespace, INLINE_KEY)
    wait_converged(cluster, namespace)
    secret = cluster.get(f"/api/v1/namespaces/{namespace}/secrets/modelapi-inline-api-key")
    model_api_uid = cluster.get(f"{KAOS}/namespaces/{namespace}/modelapis/inline")["metadata"]["uid"]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == model_api_uid
    assert secret["data"]["api-key"] == "c2staW5saW5lLTRlMWI="  # base64 of the key
    deployment = deployments(cluster, namespace)["modelapi-inline"]
    assert "sk-inline-4e1b" not in json.dumps(deployment)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    key = next(e for e in container["env"] if e["name"] == "PROXY_API_KEY")
    assert key["valueFrom"] == {"secretKeyRef": {"name": "modelapi-inline-api-key", "key": "api-key"}}

    referenced = {"spec": {"proxyConfig": {"apiKey": {
        "value": None, "valueFrom": {"secretKeyRef": {"name": "mine", "key": "k"}}}}}}
    cluster.kubectl("patch", "-n", namespace, "modelapi", "inline", "--type=merge",
                    "-p", json.dumps(referenced))
    wait_until("the owned Secret to be deleted", lambda: cluster.get(
        f"/api/v1/namespaces/{namespace}/secrets/modelapi-inline-api-key") is None)

    # The referenced Secret does not exist yet: a condition and a Warning event say so, and the
    # ModelAPI recovers by itself once it is created.
    def ready_condition():
        status = cluster.get(f"{KAOS}/namespaces/{namespace}/modelapis/inline").get("status", {})
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
        return status.get("phase"), ready.get("reason"), ready.get("message", "")

    _, (phase, reason, message) = wait_until(
        "the missing Secret to be reported",
        lambda: ((found := ready_condition())[1] == "SecretNotFound", found))
    assert phase == "Failed" and message.startswith(
        f"Secret mine does not exist in namespace {namespace} (env PROXY_API_KEY of container "
        "model-api reads its key k)"), message
    warnings = [e for e in cluster.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
                if e.get("reason") == "SecretNotFound" and e.get("type") == "Warning"]
    assert warnings and warnings[0]["regarding"]["name"] == "inline", warnings
    apply(cluster, namespace, "apiVersion: v1\nkind: Secret\nmetadata: {name: mine}\n"
                              "stringData: {k: sk-mine}\n")
    wait_until("the ModelAPI to recover", lambda: (ready_condition()[0] == "Ready", None),
               timeout=90)


def test_peer_pair_and_mesh_converge_then_go_quiet(cluster, controllers, namespaces):
    namespace = namespaces.create("peers")
    mesh = [f"mesh-{i}" for i in range(1, 6)]
    manifests = model_api() + agent("pair-a", ["pair-b"]) + agent("pair-b", ["pair-a"])
    manifests += "".join(agent(me, [p for p in mesh if p != me]) for me in mesh)
    apply(cluster, namespace, manifests)
    wait_converged(cluster, namespace)

    children = deployments(cluster, namespace)
    peers_of = {"pair-a": ["pair-b"], "pair-b": ["pair-a"]}
    peers_of.update({me: [p for p in mesh if p != me] for me in mesh})
    for me, peers in peers_of.items():
        env = env_of(children[f"agent-{me}"])
        assert sorted(env.get("PEER_AGENTS", "").split(",")) == peers, (me, env)
        for peer in peers:
            variable = f"PEER_AGENT_{peer.upper().replace('-', '_')}_CARD_URL"
            assert env.get(variable) == (
                f"http://agent-{peer}.{namespace}.svc.cluster.local:8000"), (me, variable)

    assert_idle(controllers)
    assert not not_converged(cluster, namespace)


def assert_idle(controllers):
    """Settled (no reconcile for 2 s), then an idle window with no reconcile at all."""
    wait_settled(controllers, "the controllers to stop reconciling")
    before = controllers.reconciles()
    time.sleep(IDLE_WINDOW)  # the window itself: nothing may happen in it
    after = controllers.reconciles()
    moved = {name: after.get(name, 0) - count for name, count in before.items()
             if after.get(name, 0) != count}
    assert not moved, f"reconciles in a {IDLE_WINDOW} s idle window: {moved}"


# An `external` store (two pods by default) with its DSN Secret, and a `local` one (one pod and a
# claim), both on the quickstart's ModelAPI.
MEMORY_STORES = textwrap.dedent("""\
    ---
    apiVersion: v1
    kind: Secret
    metadata: {name: memory-dsn}
    stringData: {dsn: "postgresql://memory@db.invalid/memory"}
    ---
    apiVersion: kaos.tools/v1alpha1
    kind: MemoryStore
    metadata: {name: shared}
    spec:
      storage: {type: external, external: {connectionSecretRef: {name: memory-dsn, key: dsn}}}
      models:
        summarization: {modelAPI: llm-proxy, model: openai/gpt-4o-mini}
        embedding: {modelAPI: llm-proxy, model: openai/text-embedding-3-small}
    ---
    apiVersion: kaos.tools/v1alpha1
    kind: MemoryStore
    metadata: {name: local}
    spec:
      storage: {type: local}
      models:
        summarization: {modelAPI: llm-proxy, model: openai/gpt-4o-mini}
        embedding: {modelAPI: llm-proxy, model: openai/text-embedding-3-small}
    """)


def test_memory_stores_get_their_service_claim_and_budget(cluster, controllers, namespaces):
    """The memorystore controller under the chart's RBAC, its pods admitted where `restricted`
    is enforced. The `local` store's pod cannot start on the real plane (no volume provisioner
    binds its claim), so only its children are checked, not its readiness."""
    namespace = namespaces.create("memory", RESTRICTED)
    apply(cluster, namespace, model_api() + MEMORY_STORES)
    stores = f"{KAOS}/namespaces/{namespace}/memorystores"
    claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/memorystore-local-data"
    budgets = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"

    def owned(obj, store):
        return obj["metadata"]["ownerReferences"][0]["uid"] == store["metadata"]["uid"]

    def ready():
        store = cluster.get(f"{stores}/shared")
        status = store.get("status", {})
        current = status.get("observedGeneration") == store["metadata"]["generation"]
        deployment = deployments(cluster, namespace).get("memorystore-shared")
        rolled = deployment is not None and rolled_out(deployment)
        return bool(status.get("ready") and current and rolled), status

    wait_until("the external MemoryStore to be Ready", ready)
    shared = cluster.get(f"{stores}/shared")
    assert shared["status"]["endpoint"] == (
        f"http://memorystore-shared.{namespace}.svc.cluster.local:8080"), shared["status"]
    deployment = deployments(cluster, namespace)["memorystore-shared"]
    assert deployment["spec"]["replicas"] == 2 and owned(deployment, shared)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "axsauze/kaos-memory-service:latest", "the chart's default"
    dsn = next(e for e in container["env"] if e["name"] == "KAOS_MEMORY_EXTERNAL_DSN")
    assert dsn["valueFrom"] == {"secretKeyRef": {"name": "memory-dsn", "key": "dsn"}}
    assert owned(cluster.get(f"/api/v1/namespaces/{namespace}/services/memorystore-shared"),
                 shared)
    budget = cluster.get(f"{budgets}/memorystore-shared")
    assert budget["spec"]["minAvailable"] == 1 and owned(budget, shared)

    local = wait_until("the local MemoryStore's claim and Deployment", lambda: (
        (store := cluster.get(f"{stores}/local")) and cluster.get(claim_path)
        and "memorystore-local" in deployments(cluster, namespace) and store))
    assert owned(cluster.get(claim_path), local)
    strategy = deployments(cluster, namespace)["memorystore-local"]["spec"]["strategy"]
    assert strategy["type"] == "Recreate", "one pod at a time on the claim"
    assert cluster.get(f"{budgets}/memorystore-local") is None, "one pod: no budget"
    for store in cluster.items(stores):
        assert not store["metadata"].get("finalizers"), store["metadata"]

    # Down to one pod: the budget goes, so a drain is never blocked.
    cluster.kubectl("patch", "memorystore", "shared", "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"replicas": 1}}))
    wait_until("the budget to be deleted at one pod",
               lambda: cluster.get(f"{budgets}/memorystore-shared") is None)
    wait_until("the external MemoryStore Ready on one pod", ready)


# An autoscaled agent next to a coordinator/worker pair (the namespace where the release turns
# graph-derived NetworkPolicies on).
SCALING_NAMESPACE = "scaling"
AUTOSCALED = textwrap.dedent("""\
    ---
    apiVersion: kaos.tools/v1alpha1
    kind: Agent
    metadata: {name: elastic}
    spec:
      modelAPI: llm-proxy
      model: openai/gpt-4o-mini
      autoscaling: {minReplicas: 2, maxReplicas: 4}
    """)


def agents_selected(policy, direction, side):
    """The `agent` pod labels a NetworkPolicy's ingress (from) or egress (to) peers select."""
    return sorted(peer["podSelector"]["matchLabels"]["agent"]
                  for rule in policy["spec"].get(direction, [])
                  for peer in rule.get(side, [])
                  if "agent" in peer.get("podSelector", {}).get("matchLabels", {}))


def test_autoscaling_scale_budgets_and_network_policies(cluster, controllers, namespaces):
    """What docs/scaling.md and docs/network-policy.md promise, under the chart's RBAC and
    accepted by the API server: an autoscaled agent's HorizontalPodAutoscaler and budget, its
    Deployment created at minReplicas; `kubectl scale agent` through the scale subresource; a
    NetworkPolicy per workload admitting exactly the agents that list it, on a peer cycle; then
    no reconcile in an idle window."""
    namespace = namespaces.create(SCALING_NAMESPACE, RESTRICTED)
    # A peer cycle: each admits the other, and their policies settle.
    apply(cluster, namespace, model_api() + agent("coordinator", ["worker"])
          + agent("worker", ["coordinator"]) + AUTOSCALED)
    wait_converged(cluster, namespace)
    base = f"/apis/%s/namespaces/{namespace}/%s"
    elastic = cluster.get(f"{KAOS}/namespaces/{namespace}/agents/elastic")
    hpa = cluster.get(base % ("autoscaling/v2", "horizontalpodautoscalers/agent-elastic"))
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == elastic["metadata"]["uid"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "agent-elastic"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 4)
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu", "memory"]
    assert deployments(cluster, namespace)["agent-elastic"]["spec"]["replicas"] == 2
    budget = cluster.get(base % ("policy/v1", "poddisruptionbudgets/agent-elastic"))
    assert budget["spec"]["maxUnavailable"] == 1
    assert cluster.get(base % ("policy/v1", "poddisruptionbudgets/agent-worker")) is None

    cluster.kubectl("scale", "agent", "worker", "-n", namespace, "--replicas=2")
    wait_until("the worker's Deployment at two pods and its budget", lambda: (
        deployments(cluster, namespace)["agent-worker"]["spec"]["replicas"] == 2
        and cluster.get(base % ("policy/v1", "poddisruptionbudgets/agent-worker"))))
    wait_converged(cluster, namespace)
    worker = cluster.get(f"{KAOS}/namespaces/{namespace}/agents/worker")
    assert worker["spec"]["replicas"] == 2
    assert worker["status"]["selector"] == "agent=worker,app=agent"

    policies = {p["metadata"]["name"]: p for p in
                cluster.items(base % ("networking.k8s.io/v1", "networkpolicies"))}
    assert set(policies) >= {"agent-coordinator", "agent-worker", "agent-elastic",
                             "modelapi-llm-proxy"}, sorted(policies)
    for me, peer in [("worker", "coordinator"), ("coordinator", "worker")]:
        assert agents_selected(policies[f"agent-{me}"], "ingress", "from") == [peer]
        assert agents_selected(policies[f"agent-{me}"], "egress", "to") == [peer]
    assert agents_selected(policies["agent-elastic"], "ingress", "from") == []
    for policy in policies.values():
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"], policy
    # Quiet with autoscalers, budgets and policies in place (on the real plane the autoscaler
    # controller keeps writing its status: that wakes nothing).
    assert_idle(controllers)


# An AccessGrant and a ThirdPartyService naming an Agent and the quickstart's ModelAPI, the
# service's client Secret being the ModelAPI's (any Secret will do: only its existence is checked).
AUTHZ = textwrap.dedent("""\
    ---
    apiVersion: kaos.tools/v1alpha1
    kind: AccessGrant
    metadata: {name: researchers}
    spec:
      subjects: [{kind: Group, name: researchers}, {kind: Agent, name: researcher}]
      resources: [{kind: ModelAPI, name: llm-proxy}, {kind: Agent, name: researcher}]
    ---
    apiVersion: kaos.tools/v1alpha1
    kind: ThirdPartyService
    metadata: {name: github}
    spec:
      clientID: kaos
      clientSecretRef: {name: openai-credentials, key: api-key}
      issuerURI: https://github.com/login/oauth
      scopes: [{name: repo}]
      protectedResources: [https://api.github.com]
      routeRef: {name: github-egress}
      access: [{agent: researcher, scopes: [repo]}]
    """)


def test_access_grants_and_third_party_services_get_their_status(cluster, controllers, namespaces):
    """The authz controller under the chart's RBAC: it writes only the status (KAOS's words for
    an authorization that is off) and a Warning event, and follows what the resources name."""
    namespace = namespaces.create("authz")
    apply(cluster, namespace, model_api() + AUTHZ)
    path = f"{KAOS}/namespaces/{namespace}"

    def conditions(plural, name):
        obj = cluster.get(f"{path}/{plural}/{name}") or {}
        found = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
        return {t: (c["status"], c["reason"]) for t, c in found.items()}, obj

    # The Agent they name does not exist yet.
    wait_until("the AccessGrant's missing Agent reported", lambda: (
        (found := conditions("accessgrants", "researchers")[0]).get("ResolvedRefs")
        == ("False", "ReferenceNotFound"), found))
    apply(cluster, namespace, agent("researcher"))
    grant = wait_until("the AccessGrant's status", lambda: (
        (found := conditions("accessgrants", "researchers"))[0] == {
            "Enforced": ("False", "AuthorizationDisabled"),
            "ResolvedRefs": ("True", "ReferencesResolved")}, found))[1][1]
    service = wait_until("the ThirdPartyService's status", lambda: (
        (found := conditions("thirdpartyservices", "github"))[0] == {
            "Ready": ("False", "FeatureDisabled"),
            "ResolvedRefs": ("True", "ReferencesResolved")}, found))[1][1]
    for obj in (grant, service):
        meta = obj["metadata"]
        assert not meta.get("finalizers"), meta
        assert {c["observedGeneration"] for c in obj["status"]["conditions"]} == {meta["generation"]}
        # The authz controller's server-side apply wrote the status, not the spec or metadata.
        owned = [m["fieldsV1"] for m in meta["managedFields"] if m["manager"] == "kaos-authz-controller"]
        assert owned and all("f:status" in f and "f:spec" not in f
                             and set(f.get("f:metadata", {})) <= {"f:name"} for f in owned), owned
    warnings = [e for e in cluster.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
                if e.get("reason") == "AuthorizationDisabled" and e.get("type") == "Warning"]
    assert warnings and warnings[0]["regarding"]["name"] == "researchers", warnings


def rbac_denials(controllers):
    """Log lines of any replica (killed ones too) reporting an RBAC denial: kube-apiserver's
    `... is forbidden: User "system:serviceaccount:..." cannot <verb> resource ...`."""
    return [f"{r.name}: {line}" for r in controllers.replicas
            for line in r.log_text().splitlines()
            if 'is forbidden: User "system:serviceaccount:' in line]


# What a restart of a converged cluster must leave as it was: every object the controllers
# write or own in the test namespaces (Events included), by resourceVersion. Leases live in the
# chart's namespace.
SNAPSHOT_PATHS = [f"{KAOS}/namespaces/{{ns}}/{plural}" for plural in
                  ["agents", "modelapis", "mcpservers", "memorystores", "accessgrants",
                   "thirdpartyservices", "agentworkflows", "agentworkflowruns"]] + [
    "/apis/apps/v1/namespaces/{ns}/deployments", "/api/v1/namespaces/{ns}/services",
    "/api/v1/namespaces/{ns}/configmaps", "/api/v1/namespaces/{ns}/secrets",
    "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "/apis/events.k8s.io/v1/namespaces/{ns}/events"]


def ours(obj):
    """Whether we wrote the object, for an Event: one our controllers report (their field
    manager, `kaos-...-controller`). kube-controller-manager keeps updating its own Events (a
    claim's binding on kwok nodes, say) whatever our controllers do; every other object counts."""
    reporter = obj.get("reportingController")
    return "regarding" not in obj or (reporter or "").startswith("kaos-")


def versions(cluster, names):
    """{(namespace, resource, name): resourceVersion} of every object SNAPSHOT_PATHS lists (the
    Events ours only)."""
    return {(ns, path.split("/")[-1], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
            for ns in names for path in SNAPSHOT_PATHS
            for o in cluster.items(path.format(ns=ns)) if ours(o)}


def test_a_graceful_restart_of_every_controller_writes_nothing(cluster, controllers, quickstart,
                                                               namespaces):
    """SIGTERM to every replica (as a rollout of the chart does), then every one started again:
    with nothing changed meanwhile, no object and no Event in any test namespace is written
    (issue 49, item 4). After the tests above, so every kind of child is there."""
    names = [quickstart, *[n for n in namespaces.names if n != quickstart]]
    for namespace in names:
        wait_converged(cluster, namespace)
    wait_settled(controllers, "the controllers to stop reconciling")
    before = versions(cluster, names)
    running = controllers.running()
    for replica in running:
        replica.stop()
    for replica in running:
        replica.start()
    wait_ready_and_one_leading(controllers)
    wait_settled(controllers, "the restarted controllers to stop reconciling")
    after = versions(cluster, names)
    changed = {key: (before.get(key), version) for key, version in after.items()
               if before.get(key) != version}
    assert not changed, f"written by a restart (namespace, resource, name): (before, after): {changed}"


def test_no_request_was_forbidden(controllers):
    """Every request so far was allowed by the chart's RBAC. Runs before any namespace is
    deleted: creating in a terminating namespace is a 403 too (see the tests below)."""
    for replica in controllers.running():
        ok = sum(replica.sample("rest_client_requests_total", code=c) for c in ("200", "201"))
        assert ok > 0, f"{replica.name} made no successful request"
        assert replica.sample("rest_client_requests_total", code="403") == 0, (
            f"{replica.name} was forbidden something")
    assert not rbac_denials(controllers)


def test_namespace_deletion_completes(cluster, controllers, namespaces):
    namespace = namespaces.create("doomed")
    apply(cluster, namespace, quickstart_yaml())
    apply(cluster, namespace, agent("extra", ["worker"]))
    wait_converged(cluster, namespace)
    held = [(kind, o["metadata"]["name"]) for kind, o in resources(cluster, namespace)
            if not o["metadata"].get("finalizers")]
    assert not held, f"resources without the controllers' finalizer: {held}"

    delete_namespace(cluster, namespace)

    def gone():
        ns = cluster.get(f"/api/v1/namespaces/{namespace}")
        if ns is None:
            return True
        left = [(kind, o["metadata"]["name"], o["metadata"].get("finalizers"))
                for kind, o in resources(cluster, namespace)]
        return False, {"conditions": ns.get("status", {}).get("conditions"), "left": left}

    wait_until(f"namespace {namespace} to disappear", gone, timeout=WAIT)
    assert not rbac_denials(controllers), "releasing the finalizers needs no more rights"


# Denies deleting the three kinds in namespaces labelled kaos-test/hold=true, so the namespace
# controller deletes their Deployments, Services and ConfigMaps but not them: the namespace stays
# Terminating with live resources whose children are gone, every time (in an ordinary deletion
# that depends on the random order in which the namespace controller deletes each kind).
HOLD = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: kaos-test-hold}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [kaos.tools]
      apiVersions: ["*"]
      operations: [DELETE]
      resources: [agents, modelapis, mcpservers]
  validations:
  - {expression: "false", message: held by the test}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: kaos-test-hold}
spec:
  policyName: kaos-test-hold
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kaos-test/hold: "true"}}
"""


def reconcile_errors(controllers):
    """{controller: reconcile errors so far} summed over its running replicas."""
    errors = {}
    for r in controllers.running():
        label = controller_label(r.binary)
        errors[label] = errors.get(label, 0) + r.sample(
            "controller_runtime_reconcile_errors_total", controller=label)
    return errors


@only_on("kube-apiserver", "the testkit has no ValidatingAdmissionPolicy to hold the resources, "
         "and deletes a namespace's contents at once, so an owner never outlives its children "
         "(docs/testkit.md)")
def test_a_terminating_namespace_is_not_a_reconcile_error(cluster, controllers, namespaces):
    namespace = namespaces.create("held")
    cluster.kubectl("label", "namespace", namespace, "kaos-test/hold=true")
    apply(cluster, namespace, quickstart_yaml())
    wait_converged(cluster, namespace)
    cluster.kubectl("apply", "-f", "-", stdin=HOLD)
    try:
        wait_until("the hold on deleting kaos resources to take effect", lambda: cluster.kubectl(
            "delete", "modelapi", "llm-proxy", "-n", namespace, "--dry-run=server",
            check=False).returncode != 0)
        before = reconcile_errors(controllers)
        delete_namespace(cluster, namespace)
        wait_until("the namespace controller to delete the children", lambda: (
            not (left := deployments(cluster, namespace)), sorted(left)))
        wait_settled(controllers, "the controllers to react and settle")
        kept = [(kind, o["metadata"]["name"]) for kind, o in resources(cluster, namespace)
                if not o["metadata"].get("deletionTimestamp")]
        assert len(kept) == 4, f"the hold keeps the quickstart's four resources: {kept}"
        after = reconcile_errors(controllers)
        assert after == before, (
            f"reconcile errors because the namespace is terminating: {before} -> {after}")
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", stdin=HOLD)


# For every client but the admin (the test): 500s, 429s, 409s on writes, 410s on watch starts,
# and every watch cut after 3 s.
FAULTS = {"seed": 17, "errorRate": 0.05, "throttleRate": 0.05, "conflictRate": 0.1,
          "goneRate": 0.2, "watchCutAfterMs": 3000, "spareAdmin": True}


@only_on("testkit", "kube-apiserver has no fault injection")
def test_converges_through_injected_faults(cluster, controllers, namespaces):
    namespace = namespaces.create("faulty")
    cluster.set_faults(FAULTS)
    try:
        # Failed Lease renewals may cost a replica its Lease, and so its life (by design): the
        # controllers' supervisor starts it again as the kubelet would.
        apply(cluster, namespace, quickstart_yaml())
        wait_converged(cluster, namespace)
        edit_worker(cluster, namespace, "Edited through faults.")
    finally:
        cluster.set_faults({})
    faulted = [r for r in cluster.audit() if r["user"].startswith("system:serviceaccount:")
               and r["namespace"] == namespace and r["code"] in (409, 429, 500)]
    assert faulted, "no fault reached the controllers"
    # Every controller is back, ready and leading.
    print(f"converged through {len(faulted)} injected faults; restarts (replica, exit code): "
          f"{controllers.restarts}")
    wait_ready_and_one_leading(controllers)
    assert not not_converged(cluster, namespace)
