"""scripts/control-plane: a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) on loopback with kwok's fake nodes. Brings one up in a temporary directory,
checks nodes, scheduling, RBAC'd PodSecurity admission, then brings it down and checks that no
process is left.

The first run builds the binaries from the Go module proxy (about 10 to 20 minutes on 2 cores),
so these tests run only with KAOS_CONTROL_PLANE=1. See docs/testing.md.
"""

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "control-plane"
NODES = 3
# `up` may build everything first; after that it takes seconds.
UP_TIMEOUT = int(os.environ.get("KAOS_CONTROL_PLANE_UP_TIMEOUT", "3600"))
KUBECTL_TIMEOUT = 60
WAIT = 120

pytestmark = pytest.mark.skipif(
    os.environ.get("KAOS_CONTROL_PLANE") != "1",
    reason="set KAOS_CONTROL_PLANE=1 to build and start the loopback control plane "
    "(first build takes 10-20 minutes; see docs/testing.md)",
)


def read_env(directory):
    env = {}
    for line in (directory / "env").read_text().splitlines():
        if "=" in line and not line.startswith(("#", "export ")):
            key, value = line.split("=", 1)
            env[key] = value
    return env


class Plane:
    def __init__(self, directory):
        self.dir = directory
        self.env = read_env(directory)
        self.kubeconfig = directory / "kubeconfig"
        kubectl = Path(self.env["KAOS_CONTROL_PLANE_BIN"]) / "kubectl"
        self.kubectl_path = str(kubectl) if kubectl.exists() else "kubectl"

    def kubectl(self, *args, stdin=None, check=True, timeout=KUBECTL_TIMEOUT):
        return subprocess.run(
            [self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def json(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def pids(self):
        pid_dir = self.dir / "kwok" / "clusters" / self.env["KAOS_CONTROL_PLANE_NAME"] / "pids"
        return {int(p.read_text().strip()) for p in pid_dir.glob("*.pid") if p.read_text().strip()}


def processes_mentioning(text):
    """Pids of live processes whose command line mentions text (the plane's directory)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.add(int(proc.name))
    return found


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def down(directory):
    return subprocess.run(
        [str(SCRIPT), "down", str(directory)], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    directory = tmp_path_factory.mktemp("plane")
    started = time.monotonic()
    up = subprocess.run(
        [str(SCRIPT), "up", str(directory), "--nodes", str(NODES)],
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT,
    )
    assert up.returncode == 0, f"up failed:\n{up.stdout}\n{up.stderr}"
    print(f"up took {time.monotonic() - started:.0f}s:\n{up.stderr}")
    p = Plane(directory)
    p.pids_when_up = p.pids()
    yield p
    if (directory / "kwok").exists():  # the last test did not get to bring it down
        down(directory)


def wait_until(what, check, timeout=WAIT):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1)
    pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


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
