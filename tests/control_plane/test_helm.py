"""charts/kaos on a real kube-apiserver with the real helm (helm.sh/helm/v4, built with the
plane): install into a namespace that enforces the `restricted` Pod Security level, upgrade with a
changed value, uninstall. The controller pods are kwok fakes (scheduled, reported Running and
Ready; nothing runs), so this proves the chart's objects, CRDs, RBAC and admission, not the
controllers (test_operator.py runs those).

Runs only with KAOS_CONTROL_PLANE=1; see docs/testing.md.
"""

import textwrap

import pytest

from plane import (CHART, CONTROLLERS, CRDS, RELEASE, env_of, install_chart, remove_chart,
                   requires_plane, rolled_out, wait_until)

pytestmark = requires_plane

NAMESPACE = "kaos-helm"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"


def helm_status(plane):
    return plane.json_of(plane.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json"))


@pytest.fixture(scope="module")
def release(plane):
    """The chart installed with its defaults (2 replicas per controller) and `--wait`."""
    install_chart(plane, NAMESPACE)
    yield RELEASE
    remove_chart(plane, NAMESPACE)


def deployment(plane, controller):
    """The controller's Deployment: its full name (kaos-agent-controller, the name of its
    ServiceAccount, RBAC, Service and Lease) plus `-manager`."""
    return plane.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/kaos-{controller}-manager")


def condition(obj, kind):
    found = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0]["status"] if found else None


def controller_pods(plane, controller):
    return plane.items(f"/api/v1/namespaces/{NAMESPACE}/pods",
                       labelSelector=f"app.kubernetes.io/name={controller},{INSTANCE}")


def names(plane, path, **query):
    return sorted(o["metadata"]["name"] for o in plane.items(path, **query))


def can_i(plane, controller, *args):
    sa = f"system:serviceaccount:{NAMESPACE}:kaos-{controller}"
    result = plane.kubectl("auth", "can-i", *args, f"--as={sa}", check=False)
    return result.stdout.strip()


def test_install_establishes_crds_and_rolls_out_restricted_controllers(plane, release):
    status = helm_status(plane)
    assert (status["version"], status["info"]["status"]) == (1, "deployed"), status["info"]

    for crd in CRDS:
        obj = plane.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
        assert obj, f"CRD {crd} not installed"
        assert condition(obj, "Established") == "True", obj["status"]
        assert condition(obj, "NamesAccepted") == "True", obj["status"]
    served = {r["name"] for r in plane.get("/apis/kaos.tools/v1alpha1")["resources"]}
    assert {"agents", "agents/status", "modelapis", "mcpservers", "memorystores",
            "memorystores/status", "accessgrants/status", "thirdpartyservices/status"} <= served, served

    kwok_nodes = plane.kwok_nodes()
    for controller in CONTROLLERS:
        dep = deployment(plane, controller)
        assert dep, f"no Deployment kaos-{controller}-manager"
        assert condition(dep, "Available") == "True", f"kaos-{controller}: {dep['status']}"
        assert dep["status"].get("readyReplicas") == 2, f"kaos-{controller}: {dep['status']}"
        # Admitted under `restricted`: the ReplicaSet could create them, and they run.
        pods = controller_pods(plane, controller)
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
        for pod in pods:
            assert pod["status"].get("phase") == "Running", pod["status"]
            assert pod["spec"]["nodeName"] in kwok_nodes
            assert pod["spec"]["serviceAccountName"] == f"kaos-{controller}"

    # kaos-cli 0.8.4's `kaos system status` (kaos_cli/system/status.py) lists every Deployment
    # and takes the first whose lower-cased name contains `kaos-operator` or `controller-manager`
    # for the operator, "sync service ready" when readyReplicas >= replicas > 0: one of ours.
    listed = plane.items("/apis/apps/v1/deployments")
    found = next((d for d in listed if any(s in d["metadata"]["name"].lower()
                                           for s in ("kaos-operator", "controller-manager"))), None)
    assert found and found["metadata"]["namespace"] == NAMESPACE, [
        f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in listed]
    assert found["status"].get("readyReplicas", 0) >= found["spec"]["replicas"] > 0, found["status"]
    assert not [d["metadata"]["name"] for d in listed if "access-control" in d["metadata"]["name"]]
    assert names(plane, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
                 labelSelector=INSTANCE) == [f"kaos-{c}-manager" for c in sorted(CONTROLLERS)]

    namespaced = f"/api/v1/namespaces/{NAMESPACE}"
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}"
    assert names(plane, f"{namespaced}/serviceaccounts", labelSelector=INSTANCE) == [
        f"kaos-{c}" for c in sorted(CONTROLLERS)]
    assert names(plane, f"{rbac}/roles", labelSelector=INSTANCE) == [
        f"kaos-{c}-leader-election" for c in sorted(CONTROLLERS)]
    assert names(plane, f"{rbac}/rolebindings", labelSelector=INSTANCE) == [
        f"kaos-{c}-leader-election" for c in sorted(CONTROLLERS)]
    cluster_rbac = "/apis/rbac.authorization.k8s.io/v1"
    # With the controllers' roles, the chart's reader role for secure metrics (on by default).
    assert names(plane, f"{cluster_rbac}/clusterroles", labelSelector=INSTANCE) == sorted(
        [f"kaos-{c}" for c in CONTROLLERS] + ["kaos-metrics-reader"])
    bindings = plane.items(f"{cluster_rbac}/clusterrolebindings", labelSelector=INSTANCE)
    assert sorted(b["metadata"]["name"] for b in bindings) == [
        f"kaos-{c}" for c in sorted(CONTROLLERS)]
    for binding in bindings:
        name = binding["metadata"]["name"]
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    assert plane.get(f"{namespaced}/configmaps/kaos-mcp-runtimes"), "the MCP runtime registry"
    assert names(plane, f"{namespaced}/services", labelSelector=INSTANCE) == [
        f"kaos-{c}-metrics" for c in sorted(CONTROLLERS)]

    # The bindings take effect on the real authorizer: what each controller needs, and no more.
    assert can_i(plane, "agent-controller", "patch", "agents.kaos.tools", "--subresource=status",
                 "--all-namespaces") == "yes"
    assert can_i(plane, "agent-controller", "update", "leases.coordination.k8s.io/"
                 "kaos-agent-controller", "-n", NAMESPACE) == "yes"
    assert can_i(plane, "agent-controller", "update", "leases.coordination.k8s.io/"
                 "kaos-modelapi-controller", "-n", NAMESPACE) == "no"
    assert can_i(plane, "agent-controller", "delete", "agents.kaos.tools",
                 "--all-namespaces") == "no"
    assert can_i(plane, "mcpserver-controller", "watch", "configmaps/kaos-mcp-runtimes",
                 "-n", NAMESPACE) == "yes"
    # Secrets by name only (to report a missing one), never listed or watched.
    assert can_i(plane, "mcpserver-controller", "get", "secrets", "-n", NAMESPACE) == "yes"
    assert can_i(plane, "mcpserver-controller", "list", "secrets", "-n", NAMESPACE) == "no"
    assert can_i(plane, "mcpserver-controller", "watch", "secrets", "--all-namespaces") == "no"
    assert can_i(plane, "mcpserver-controller", "update", "secrets", "-n", NAMESPACE) == "no"
    # MemoryStores carry no finalizer: their controller writes only their status, and the claims
    # it creates it never deletes (they go with their MemoryStore); the budgets it does.
    assert can_i(plane, "memorystore-controller", "patch", "memorystores.kaos.tools",
                 "--subresource=status", "--all-namespaces") == "yes"
    assert can_i(plane, "memorystore-controller", "patch", "memorystores.kaos.tools",
                 "--all-namespaces") == "no"
    assert can_i(plane, "memorystore-controller", "create", "persistentvolumeclaims",
                 "--all-namespaces") == "yes"
    assert can_i(plane, "memorystore-controller", "delete", "persistentvolumeclaims",
                 "--all-namespaces") == "no"
    assert can_i(plane, "memorystore-controller", "delete", "poddisruptionbudgets.policy",
                 "--all-namespaces") == "yes"
    assert can_i(plane, "memorystore-controller", "get", "secrets", "-n", NAMESPACE) == "yes"
    assert can_i(plane, "memorystore-controller", "list", "secrets", "-n", NAMESPACE) == "no"
    assert can_i(plane, "memorystore-controller", "watch", "configmaps/kaos-mcp-runtimes",
                 "-n", NAMESPACE) == "no"
    # The authz controller writes only the status of AccessGrants and ThirdPartyServices (no
    # finalizer, no child of any kind), reads what they name and looks Secrets up by name.
    for plural in ("accessgrants", "thirdpartyservices"):
        assert can_i(plane, "authz-controller", "patch", f"{plural}.kaos.tools",
                     "--subresource=status", "--all-namespaces") == "yes"
        assert can_i(plane, "authz-controller", "patch", f"{plural}.kaos.tools",
                     "--all-namespaces") == "no"
        assert can_i(plane, "authz-controller", "watch", f"{plural}.kaos.tools",
                     "--all-namespaces") == "yes"
    for plural in ("agents", "mcpservers", "modelapis", "memorystores"):
        assert can_i(plane, "authz-controller", "watch", f"{plural}.kaos.tools",
                     "--all-namespaces") == "yes"
        assert can_i(plane, "authz-controller", "patch", f"{plural}.kaos.tools",
                     "--subresource=status", "--all-namespaces") == "no"
    assert can_i(plane, "authz-controller", "get", "secrets", "-n", NAMESPACE) == "yes"
    assert can_i(plane, "authz-controller", "list", "secrets", "-n", NAMESPACE) == "no"
    for resource in ("deployments.apps", "services", "configmaps", "persistentvolumeclaims",
                     "poddisruptionbudgets.policy", "httproutes.gateway.networking.k8s.io"):
        assert can_i(plane, "authz-controller", "get", resource, "--all-namespaces") == "no", resource
        assert can_i(plane, "authz-controller", "create", resource, "--all-namespaces") == "no", resource
    assert can_i(plane, "authz-controller", "create", "events.events.k8s.io",
                 "--all-namespaces") == "yes"
    assert can_i(plane, "authz-controller", "update", "leases.coordination.k8s.io/"
                 "kaos-authz-controller", "-n", NAMESPACE) == "yes"
    # Secure metrics: each controller may ask who scrapes it.
    for controller in CONTROLLERS:
        assert can_i(plane, controller, "create", "tokenreviews.authentication.k8s.io") == "yes"
        assert can_i(plane, controller, "create",
                     "subjectaccessreviews.authorization.k8s.io") == "yes"


def test_namespace_really_enforces_restricted(plane, release):
    """The controllers' pods above passed admission because the namespace enforces
    `restricted`, not because nothing was checked: a privileged root pod is refused there."""
    privileged = textwrap.dedent(f"""\
        apiVersion: v1
        kind: Pod
        metadata: {{name: privileged, namespace: {NAMESPACE}}}
        spec:
          containers:
          - name: c
            image: registry.invalid/app:1
            securityContext: {{privileged: true, runAsUser: 0}}
        """)
    refused = plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=privileged, check=False)
    assert refused.returncode != 0, "a privileged pod was admitted in a restricted namespace"
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr


def test_upgrade_applies_changed_values_as_revision_2(plane, release):
    plane.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--wait",
               "--timeout", "3m", "--set", "agent-controller.replicas=1",
               "--set", "global.logLevel=DEBUG")

    status = helm_status(plane)
    assert (status["version"], status["info"]["status"]) == (2, "deployed"), status["info"]
    history = plane.json_of(plane.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json"))
    assert [(h["revision"], h["status"]) for h in history] == [
        (1, "superseded"), (2, "deployed")], history

    agent = deployment(plane, "agent-controller")
    assert agent["spec"]["replicas"] == 1
    wait_until("one agent-controller pod", lambda: (
        len(controller_pods(plane, "agent-controller")) == 1,
        [p["metadata"]["name"] for p in controller_pods(plane, "agent-controller")]))
    # The PodDisruptionBudget is rendered only for more than one replica: the upgrade deletes it.
    pdbs = names(plane, f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets",
                 labelSelector=INSTANCE)
    assert pdbs == [f"kaos-{c}" for c in sorted(CONTROLLERS) if c != "agent-controller"], pdbs
    for controller in CONTROLLERS:
        dep = deployment(plane, controller)
        assert env_of(dep)["DEFAULT_LOG_LEVEL"] == "DEBUG", f"kaos-{controller}"
        assert rolled_out(dep), f"kaos-{controller} not rolled out: {dep['status']}"
    # --reuse-values kept the defaults it was not told to change.
    assert deployment(plane, "modelapi-controller")["spec"]["replicas"] == 2


def test_uninstall_removes_the_release_but_keeps_the_crds(plane, release):
    plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")

    assert plane.json_of(plane.helm("list", "-n", NAMESPACE, "-o", "json")) == []
    namespaced = {
        "deployments": "/apis/apps/v1", "services": "/api/v1", "serviceaccounts": "/api/v1",
        "configmaps": "/api/v1", "roles": "/apis/rbac.authorization.k8s.io/v1",
        "rolebindings": "/apis/rbac.authorization.k8s.io/v1",
        "poddisruptionbudgets": "/apis/policy/v1",
        # The pre-delete hook Jobs (release-finalizers) ran first; on success helm deletes them.
        "jobs": "/apis/batch/v1",
    }
    for resource, prefix in namespaced.items():
        left = names(plane, f"{prefix}/namespaces/{NAMESPACE}/{resource}",
                     labelSelector="app.kubernetes.io/part-of=kaos")
        assert left == [], f"{resource} left after uninstall: {left}"
    for resource in ["clusterroles", "clusterrolebindings"]:
        left = names(plane, f"/apis/rbac.authorization.k8s.io/v1/{resource}",
                     labelSelector=INSTANCE)
        assert left == [], f"{resource} left after uninstall: {left}"
    assert names(plane, f"/api/v1/namespaces/{NAMESPACE}/secrets",
                 labelSelector="owner=helm") == [], "the release's history is gone"
    # The pods go with their ReplicaSets (garbage collection, in the background).
    wait_until("the controller pods to be deleted", lambda: (
        not plane.items(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=INSTANCE),
        names(plane, f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=INSTANCE)))

    # Kept by design: the CRDs carry `helm.sh/resource-policy: keep`, because deleting a CRD
    # deletes every Agent, ModelAPI and MCPServer with it (docs/install.md, "Uninstall").
    for crd in CRDS:
        obj = plane.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
        assert obj, f"CRD {crd} was deleted by helm uninstall"
        assert obj["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep"
