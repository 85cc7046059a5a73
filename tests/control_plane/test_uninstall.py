"""Uninstall never hangs (issue 21): the chart's pre-delete hook on a real kube-apiserver.

Every Agent, ModelAPI and MCPServer carries its controller's finalizer; once the controllers are
gone nothing would remove it, and deleting the kept CRDs or a namespace holding such objects
would stay Terminating. Before `helm uninstall` deletes anything, a hook Job per controller that
adds a finalizer runs `<controller> release-finalizers` (docs/install.md, "Uninstall"). A
MemoryStore carries none (its children go by garbage collection), nor do AccessGrants (they have
no children): their controllers have no hook, and their objects are deleted with their namespace
and CRD all the same.

kwok runs no containers (it reports a Job's pod Succeeded without running it), so the mode runs
here out of cluster, as the hook Job would run it: the real binary, with the Job's arguments and
environment, and a kubeconfig holding a token of the hook's own ServiceAccount, bound by the
hook's own RBAC (created from the chart's rendering), so the real authorizer judges it. Real
controllers (chart ServiceAccounts) add the finalizers and hold the Leases first.

Runs only with KAOS_CONTROL_PLANE=1; see docs/testing.md.
"""

import json
import os
import subprocess

import pytest
import yaml

from controllers import BIN_DIR, Controllers
from plane import (CHART, CONTROLLERS, CRDS, RELEASE, create_namespace, delete_namespace,
                   install_chart, remove_chart, requires_plane, wait_until)

pytestmark = requires_plane

NAMESPACE = "kaos-uninstall"
# One namespace is deleted with its objects; the other's objects go with the CRDs.
DELETED, KEPT = "kaos-uninstall-ns", "kaos-uninstall-crd"
FOREIGN = "example.com/keep"
# The controllers with a finalizer, hence a hook, and the object of each kind in a namespace.
FINALIZERS = {"agent-controller": "kaos.tools/agent-finalizer",
              "modelapi-controller": "kaos.tools/modelapi-finalizer",
              "mcpserver-controller": "kaos.tools/mcpserver-finalizer",
              "workflow-controller": "kaos.tools/workflow-run-finalizer"}
PLURALS = {"agent-controller": "agents", "modelapi-controller": "modelapis",
           "mcpserver-controller": "mcpservers", "memorystore-controller": "memorystores",
           "authz-controller": "accessgrants", "workflow-controller": "agentworkflowruns"}
NAMES = {"agent-controller": "worker", "modelapi-controller": "llm", "mcpserver-controller": "tools",
         "memorystore-controller": "memory", "authz-controller": "grant", "workflow-controller": "once"}


def objects(namespace):
    return f"""\
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {{name: llm, namespace: {namespace}}}
spec: {{mode: Proxy, proxyConfig: {{models: ["*"]}}}}
---
apiVersion: kaos.tools/v1alpha1
kind: MCPServer
metadata: {{name: tools, namespace: {namespace}}}
spec: {{runtime: python-string, params: "def echo(x: str) -> str: return x"}}
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {{name: worker, namespace: {namespace}}}
spec: {{modelAPI: llm, model: m, mcpServers: [tools]}}
---
apiVersion: kaos.tools/v1alpha1
kind: MemoryStore
metadata: {{name: memory, namespace: {namespace}}}
spec:
  storage: {{type: local}}
  models: {{summarization: {{modelAPI: llm, model: m}}, embedding: {{modelAPI: llm, model: e}}}}
---
apiVersion: kaos.tools/v1alpha1
kind: AccessGrant
metadata: {{name: grant, namespace: {namespace}}}
spec: {{subjects: [{{kind: Agent, name: worker}}], resources: [{{kind: MCPServer, name: tools}}]}}
---
apiVersion: kaos.tools/v1alpha1
kind: AgentWorkflow
metadata: {{name: flow, namespace: {namespace}}}
spec: {{steps: [{{name: ask, agentRef: worker}}]}}
---
apiVersion: kaos.tools/v1alpha1
kind: AgentWorkflowRun
metadata: {{name: once, namespace: {namespace}}}
spec: {{workflowRef: flow}}
"""


def finalizers(plane, controller, namespace, name):
    obj = plane.get(f"/apis/kaos.tools/v1alpha1/namespaces/{namespace}/"
                    f"{PLURALS[controller]}/{name}")
    return None if obj is None else obj["metadata"].get("finalizers", [])


def hook_objects(plane):
    """The chart's pre-delete hook objects, rendered for this release as helm would create
    them."""
    rendered = plane.helm("template", RELEASE, str(CHART), "-n", NAMESPACE).stdout
    return [d for d in yaml.safe_load_all(rendered)
            if d and "helm.sh/hook" in (d["metadata"].get("annotations") or {})]


def kubeconfig(plane, path, service_account):
    token = plane.token(NAMESPACE, service_account)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "plane", "cluster": plane.cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "plane", "user": "sa"}}]}))
    return path


def start_hook(plane, job, workdir):
    """The hook Job's container, run out of cluster with its ServiceAccount's token."""
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    binary = container["image"].rsplit("/", 1)[1].split(":")[0].split("@")[0]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "KUBECONFIG": str(kubeconfig(plane, workdir / f"{binary}-hook.kubeconfig",
                                        pod["serviceAccountName"]))}
    for var in container.get("env", []):
        env[var["name"]] = var["value"] if "value" in var else NAMESPACE  # the pod's namespace
    log = open(workdir / f"{binary}-hook.log", "w")
    process = subprocess.Popen([str(BIN_DIR / binary), *container["args"]], env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    return binary, process, workdir / f"{binary}-hook.log"


def can_i(plane, service_account, *args):
    return plane.kubectl("auth", "can-i", *args,
                         f"--as=system:serviceaccount:{NAMESPACE}:{service_account}",
                         check=False).stdout.strip()


@pytest.fixture(scope="module")
def release(plane):
    install_chart(plane, NAMESPACE)
    yield RELEASE
    for namespace in (DELETED, KEPT):
        # Nothing may be left holding a foreign finalizer after a failure.
        for plural in PLURALS.values():
            for obj in plane.items(f"/apis/kaos.tools/v1alpha1/namespaces/{namespace}/{plural}"):
                plane.kubectl("patch", plural, obj["metadata"]["name"], "-n",
                              namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                              check=False)
        delete_namespace(plane, namespace)
    remove_chart(plane, NAMESPACE)


def test_the_hook_releases_the_finalizers_so_namespace_and_crd_deletion_complete(
        plane, release, tmp_path):
    for namespace in (DELETED, KEPT):
        create_namespace(plane, namespace)
        plane.kubectl("apply", "-f", "-", stdin=objects(namespace))
    # Someone else's finalizer on one object: the hook must leave it alone.
    plane.kubectl("patch", "agents", "worker", "-n", KEPT, "--type=json", "-p",
                  json.dumps([{"op": "add", "path": "/metadata/finalizers",
                               "value": [FOREIGN]}]))

    controllers = Controllers(plane, NAMESPACE, tmp_path)
    hooks = []
    try:
        for controller in CONTROLLERS:
            controllers.start(controller, 1)
        for controller in FINALIZERS:
            name = NAMES[controller]
            for namespace in (DELETED, KEPT):
                wait_until(f"{controller}'s finalizer on {namespace}/{name}", lambda: (
                    FINALIZERS[controller] in (finalizers(plane, controller, namespace, name)
                                               or []),
                    finalizers(plane, controller, namespace, name)))
        for controller in CONTROLLERS:
            wait_until(f"{controller} to hold its Lease", lambda: controllers.leader(controller))
        # The MemoryStores are reconciled (a status, their claim), and hold no finalizer.
        for namespace in (DELETED, KEPT):
            store = f"/apis/kaos.tools/v1alpha1/namespaces/{namespace}/memorystores/memory"
            wait_until(f"{namespace}/memory reconciled", lambda: (
                plane.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/"
                          "memorystore-memory-data") is not None
                and (plane.get(store) or {}).get("status", {}).get("phase") is not None,
                (plane.get(store) or {}).get("status")))
            assert finalizers(plane, "memorystore-controller", namespace, "memory") == []
            # The AccessGrants get their status, and hold no finalizer either.
            grant = f"/apis/kaos.tools/v1alpha1/namespaces/{namespace}/accessgrants/grant"
            wait_until(f"{namespace}/grant reconciled", lambda: (
                bool((plane.get(grant) or {}).get("status", {}).get("conditions")),
                (plane.get(grant) or {}).get("status")))
            assert finalizers(plane, "authz-controller", namespace, "grant") == []

        # What helm creates first (weight -10): the hook's ServiceAccounts and RBAC.
        rendered = hook_objects(plane)
        jobs = [d for d in rendered if d["kind"] == "Job"]
        assert sorted(j["metadata"]["name"] for j in jobs) == sorted(
            f"kaos-{c}-uninstall" for c in FINALIZERS), "no hook for the memorystore and authz controllers"
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(
            [d for d in rendered if d["kind"] != "Job"]))
        hooks = [start_hook(plane, job, tmp_path) for job in jobs]

        # Each hook scales its controller to 0, then waits: the Lease is still held.
        for controller in FINALIZERS:
            wait_until(f"kaos-{controller}-manager scaled to 0", lambda: plane.get(
                f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/kaos-{controller}-manager"
            )["spec"]["replicas"] == 0)
        assert all(p.poll() is None for _, p, _ in hooks), "a hook did not wait for the Lease"
        for controller in FINALIZERS:
            assert FINALIZERS[controller] in finalizers(plane, controller, DELETED,
                                                        NAMES[controller])

        # The controllers stop (as their scaled-down pods would) and release their Leases.
        controllers.stop_all()
        for binary, process, log in hooks:
            process.wait(timeout=60)
            text = log.read_text()
            assert process.returncode == 0, f"{binary} release-finalizers failed:\n{text}"
            assert f"scaled Deployment {NAMESPACE}/kaos-{binary}-manager to 0" in text, text
            assert f"Lease {NAMESPACE}/kaos-{binary} is released" in text, text
            assert f"removed {FINALIZERS[binary]} from" in text, text
    finally:
        controllers.stop_all()
        for _, process, _ in hooks:
            if process.poll() is None:
                process.kill()
                process.wait()

    for controller, plural in PLURALS.items():
        for namespace in (DELETED, KEPT):
            for obj in plane.items(f"/apis/kaos.tools/v1alpha1/namespaces/{namespace}/{plural}"):
                have = obj["metadata"].get("finalizers", [])
                want = [FOREIGN] if (plural, namespace) == ("agents", KEPT) else []
                assert have == want, (namespace, plural, obj["metadata"]["name"], have)

    # The hook's grants: what it used, nothing more.
    hook_sa = "kaos-agent-controller-uninstall"
    assert can_i(plane, hook_sa, "patch", "agents.kaos.tools", "--all-namespaces") == "yes"
    assert can_i(plane, hook_sa, "delete", "agents.kaos.tools", "--all-namespaces") == "no"
    assert can_i(plane, hook_sa, "patch", "modelapis.kaos.tools", "--all-namespaces") == "no"
    assert can_i(plane, hook_sa, "patch", "deployments.apps/kaos-agent-controller-manager",
                 "-n", NAMESPACE) == "yes"
    assert can_i(plane, hook_sa, "patch", "deployments.apps/kaos-modelapi-controller-manager",
                 "-n", NAMESPACE) == "no"
    assert can_i(plane, hook_sa, "update", "leases.coordination.k8s.io/kaos-agent-controller",
                 "-n", NAMESPACE) == "no"

    # A namespace holding kaos resources is deleted completely.
    delete_namespace(plane, DELETED)
    wait_until(f"namespace {DELETED} to be gone",
               lambda: plane.get(f"/api/v1/namespaces/{DELETED}") is None, timeout=90)

    # helm uninstall runs the hook Jobs (kwok reports their pods Succeeded; they were admitted
    # under `restricted`) and deletes them after; then the kept CRDs are deleted completely,
    # with their objects, once the foreign finalizer is gone too.
    plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m")
    assert not plane.items(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")
    plane.kubectl("patch", "agents", "worker", "-n", KEPT, "--type=json", "-p",
                  json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
    plane.delete_crds()
    for crd in CRDS:
        assert plane.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}") is None
