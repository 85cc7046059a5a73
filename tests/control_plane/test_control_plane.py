"""scripts/control-plane: a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) on loopback with kwok's fake nodes. Brings one up in a temporary directory,
checks nodes, scheduling, RBAC'd PodSecurity admission, then brings it down and checks that no
process is left.

The first run builds the binaries from the Go module proxy (about 10 to 20 minutes on 2 cores),
so these tests run only with KAOS_CONTROL_PLANE=1. See docs/testing.md.
"""

import subprocess
import textwrap
import time

import pytest

from plane import (NODES, SCRIPT, WAIT, alive, down, processes_mentioning, requires_plane, up,
                   wait_until)

pytestmark = requires_plane


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    """This module's own plane, not the session one (conftest.py): its last test brings it
    down."""
    directory = tmp_path_factory.mktemp("plane")
    p = up(directory)
    yield p
    if (directory / "kwok").exists():  # the last test did not get to bring it down
        down(directory)


def test_up_writes_kubeconfig_env_and_is_idempotent(plane):
    assert plane.kubeconfig.is_file()
    assert plane.env["KAOS_CONTROL_PLANE_NAME"].startswith("kaos-")
    assert plane.env["KUBECONFIG"] == str(plane.kubeconfig)
    version = plane.json("version")["serverVersion"]
    assert version["gitVersion"] == "v1.37.2"
    assert plane.kubectl("auth", "can-i", "*", "*").stdout.strip() == "yes"  # cluster-admin
    for component in ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                      "kwok-controller"]:
        assert (plane.dir / "kwok" / "clusters" / plane.env["KAOS_CONTROL_PLANE_NAME"] /
                "pids" / f"{component}.pid").is_file(), component
    assert all(alive(pid) for pid in plane.pids_when_up)

    again = subprocess.run(
        [str(SCRIPT), "up", str(plane.dir)], capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stderr
    assert plane.pids() == plane.pids_when_up, "a second up must not restart anything"


def test_nodes_are_ready_kwok_nodes(plane):
    nodes = plane.json("get", "nodes")["items"]
    assert len(nodes) == NODES
    for node in nodes:
        assert node["metadata"]["annotations"].get("kwok.x-k8s.io/node") == "fake"
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
    sa = plane.json("get", "serviceaccount", "default", "-n", "default")
    assert sa["metadata"]["name"] == "default"
    # A /16 for Services: the default /24 runs out past ~250 Services.
    cidr = plane.json("get", "servicecidr", "kubernetes")
    assert cidr["spec"]["cidrs"] == ["10.96.0.0/16"]


def test_deployment_pods_run_on_kwok_nodes(plane):
    plane.kubectl("create", "namespace", "cp-deploy")
    manifest = textwrap.dedent(
        """\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web, namespace: cp-deploy}
        spec:
          replicas: 2
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers:
              - {name: web, image: registry.invalid/web:1}
        """
    )
    plane.kubectl("apply", "-f", "-", stdin=manifest)
    plane.kubectl("rollout", "status", "deployment/web", "-n", "cp-deploy", f"--timeout={WAIT}s",
                  timeout=WAIT + 30)
    nodes = {n["metadata"]["name"] for n in plane.json("get", "nodes")["items"]}

    def running():
        pods = plane.json("get", "pods", "-n", "cp-deploy", "-l", "app=web")["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running"
              and p["spec"].get("nodeName") in nodes and p["status"].get("podIP")]
        return ok if len(ok) == 2 else None

    pods = wait_until("2 Running pods", running)
    assert len({p["metadata"]["ownerReferences"][0]["name"] for p in pods}) == 1  # one ReplicaSet
    deployment = plane.json("get", "deployment", "web", "-n", "cp-deploy")
    assert deployment["status"].get("readyReplicas") == 2


def pod(name, security):
    return textwrap.dedent(
        f"""\
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}, namespace: cp-restricted}}
        spec:
          {security["pod"]}
          containers:
          - name: c
            image: registry.invalid/app:1
            {security["container"]}
        """
    )


def test_restricted_namespace_refuses_privileged_pod_and_admits_compliant_one(plane):
    plane.kubectl("create", "namespace", "cp-restricted")
    plane.kubectl("label", "namespace", "cp-restricted",
                  "pod-security.kubernetes.io/enforce=restricted")

    privileged = pod("privileged", {
        "pod": "securityContext: {runAsUser: 0}",
        "container": "securityContext: {privileged: true, runAsUser: 0}",
    })
    refused = plane.kubectl("apply", "-f", "-", stdin=privileged, check=False)
    assert refused.returncode != 0, "PodSecurity admission must refuse a privileged root pod"
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr
    assert "privileged" in refused.stderr

    compliant = pod("compliant", {
        "pod": "securityContext: {runAsNonRoot: true, runAsUser: 65532, "
               "seccompProfile: {type: RuntimeDefault}}",
        "container": "securityContext: {allowPrivilegeEscalation: false, "
                     "capabilities: {drop: [ALL]}}",
    })
    admitted = plane.kubectl("apply", "-f", "-", stdin=compliant, check=False)
    assert admitted.returncode == 0, admitted.stderr
    wait_until("the compliant pod to run", lambda: plane.json(
        "get", "pod", "compliant", "-n", "cp-restricted")["status"].get("phase") == "Running")


def test_down_stops_every_process_and_removes_data(plane):
    pids = plane.pids() | plane.pids_when_up
    assert pids
    result = down(plane.dir)
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)], "processes left after down"
    assert not processes_mentioning(str(plane.dir)), "a process still uses the plane's directory"
    assert not (plane.dir / "kwok").exists()
    assert not (plane.dir / "kubeconfig").exists()
    again = down(plane.dir)
    assert again.returncode == 0, again.stderr
