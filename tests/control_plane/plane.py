"""What the real-plane suites share: bringing `scripts/control-plane` up and down (Plane) or
serving kaos-testkit (Testkit), kubectl, helm and plain API reads against either, and waiting
for a condition with a clear message.

Fixtures live in conftest.py; this module holds the helpers so test modules can import them.
"""

import http.client
import json
import os
import ssl
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "control-plane"
CHART = REPO / "charts" / "kaos"
NODES = 3
RELEASE = "kaos"
CONTROLLERS = ["agent-controller", "modelapi-controller", "mcpserver-controller", "memorystore-controller",
               "authz-controller", "workflow-controller"]
# The kinds KAOS 0.8.4 has too (a KAOS install holds these CRDs), then kaos-rs's own.
KAOS_CRDS = ["agents.kaos.tools", "mcpservers.kaos.tools", "memorystores.kaos.tools", "modelapis.kaos.tools",
             "accessgrants.kaos.tools", "thirdpartyservices.kaos.tools"]
CRDS = KAOS_CRDS + ["agentworkflows.kaos.tools", "agentworkflowruns.kaos.tools"]
KAOS_API = "/apis/kaos.tools/v1alpha1"
RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"
# `up` may build everything first; after that it takes seconds.
UP_TIMEOUT = int(os.environ.get("KAOS_CONTROL_PLANE_UP_TIMEOUT", "3600"))
KUBECTL_TIMEOUT = 60
WAIT = 120
# kubectl and helm built with the plane (scripts/control-plane build); the testkit's clusters
# use them too.
BIN = Path(os.environ.get("KAOS_CONTROL_PLANE_CACHE", REPO / ".cache" / "control-plane")) / "bin"
TESTKIT = Path(os.environ.get("KAOS_BIN_DIR", REPO / "target" / "debug")) / "kaos-testkit"

requires_plane = pytest.mark.skipif(
    os.environ.get("KAOS_CONTROL_PLANE") != "1",
    reason="set KAOS_CONTROL_PLANE=1 to build and start the loopback control plane "
    "(first build takes 10-20 minutes; see docs/testing.md)",
)


# The clusters a test taking the `cluster` fixture runs on, as its pytest id: the same body
# twice. Only the real plane needs KAOS_CONTROL_PLANE=1; the testkit half always runs.
CLUSTERS = ["testkit", "kube-apiserver"]


def only_on(cluster, reason):
    """Runs a test on one cluster only; reason says why the other one cannot show it. The
    other variant is not generated at all (not skipped), so nothing is left out silently: the
    reason is in the code, next to the test."""
    assert cluster in CLUSTERS, cluster
    return pytest.mark.only_on(cluster, reason=reason)


def read_env(directory):
    """The variables `up` wrote to DIR/env."""
    env = {}
    for line in (directory / "env").read_text().splitlines():
        if "=" in line and not line.startswith(("#", "export ")):
            key, value = line.split("=", 1)
            env[key] = value
    return env


class Cluster:
    """What the suites drive a cluster through, as its admin: kubectl, helm, plain API reads and
    writes, ServiceAccount tokens and the chart. Subclasses say how to reach it."""

    def __init__(self, kubeconfig, bin_dir):
        self.kubeconfig = Path(kubeconfig)
        self.bin = Path(bin_dir)
        kubectl = self.bin / "kubectl"
        self.kubectl_path = str(kubectl) if kubectl.exists() else "kubectl"
        self._config = yaml.safe_load(self.kubeconfig.read_text())

    def kubectl(self, *args, stdin=None, check=True, timeout=KUBECTL_TIMEOUT):
        return run([self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args],
                   stdin=stdin, check=check, timeout=timeout)

    def helm(self, *args, check=True, timeout=300):
        """The helm built with the plane (helm.sh/helm/v4), as cluster-admin."""
        return run([str(self.bin / "helm"), "--kubeconfig", str(self.kubeconfig), *args],
                   check=check, timeout=timeout)

    def json(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    @staticmethod
    def json_of(result):
        return json.loads(result.stdout)

    @property
    def cluster(self):
        """The admin kubeconfig's cluster entry: server (and CA)."""
        return self._config["clusters"][0]["cluster"]

    def _connection(self):
        raise NotImplementedError

    def _request(self, method, path, body=None, query=None):
        """(status, body) of one request as the admin."""
        connection = self._connection()
        try:
            url = path + ("?" + urllib.parse.urlencode(query) if query else "")
            headers = {"Accept": "application/json"}
            data = None
            if body is not None:
                data, headers["Content-Type"] = json.dumps(body), "application/json"
            connection.request(method, url, body=data, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def get(self, path, **query):
        """GET an API path as cluster-admin; None when it is not found. Cheaper than kubectl
        in polling loops (no process, no discovery)."""
        status, body = self._request("GET", path, query=query)
        if status == 404:
            return None
        if status != 200:
            raise AssertionError(f"GET {path}: {status} {body[:500]!r}")
        return json.loads(body)

    def post(self, path, body):
        """POST a JSON body as cluster-admin; the created object."""
        status, answer = self._request("POST", path, body)
        if status not in (200, 201):
            raise AssertionError(f"POST {path}: {status} {answer[:500]!r}")
        return json.loads(answer)

    def items(self, path, **query):
        return (self.get(path, **query) or {}).get("items", [])

    def kwok_nodes(self):
        return {n["metadata"]["name"] for n in self.items("/api/v1/nodes")
                if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"}

    def token(self, namespace, service_account, seconds=7200):
        """A token of a ServiceAccount, from the TokenRequest API (what `kubectl create token`
        calls; sent as JSON, which both clusters take)."""
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"expirationSeconds": seconds}}
        answer = self.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/"
                           f"{service_account}/token", request)
        return answer["status"]["token"]

    def strip_finalizers(self):
        """Removes every finalizer from the kaos.tools objects a failed test may have left, so
        their CRDs can go."""
        for plural in ("agents", "modelapis", "mcpservers", "memorystores", "agentworkflowruns"):
            for obj in self.items(f"{KAOS_API}/{plural}"):
                meta = obj["metadata"]
                if meta.get("finalizers"):
                    self.kubectl("patch", plural, meta["name"], "-n", meta["namespace"],
                                 "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                                 check=False)

    def delete_crds(self, *extra):
        """Deletes the kaos.tools CRDs (and the extra ones named) with everything they hold and
        waits until they are gone, so a suite leaves the cluster as it found it, or fails itself
        rather than the next suite.

        Each CRD's resources are listed first, until that answers: kube-apiserver starts a CRD's
        storage at the first request for it, and a CRD deleted while that storage starts fails
        its cleanup finalizer ("storage is (re)initializing") and can stay Terminating for
        minutes (seen on CI with a CRD no test had touched)."""
        for crd in (*CRDS, *extra):
            found = self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
            if found is None:
                continue
            spec = found["spec"]
            path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{spec['names']['plural']}"
            wait_until(f"the storage of {crd} to answer",
                       lambda: self._request("GET", path)[0] == 200, timeout=60, interval=0.2)
        self.kubectl("delete", "crd", *CRDS, *extra, "--ignore-not-found", "--wait",
                     "--timeout=120s", timeout=150)

    def install_chart(self, namespace, values):
        """`helm install --wait` of charts/kaos as release kaos (values: `--set` pairs)."""
        self.helm("install", RELEASE, str(CHART), "-n", namespace, "--wait", "--timeout", "3m",
                  *[a for v in values for a in ("--set", v)])

    def uninstall_chart(self, namespace):
        self.helm("uninstall", RELEASE, "-n", namespace, "--wait", check=False)


class Plane(Cluster):
    """A control plane brought up by scripts/control-plane, driven as cluster-admin (client
    certificate)."""

    def __init__(self, directory):
        self.dir = directory
        self.env = read_env(directory)
        super().__init__(directory / "kubeconfig", self.env["KAOS_CONTROL_PLANE_BIN"])

    def pids(self):
        pid_dir = self.dir / "kwok" / "clusters" / self.env["KAOS_CONTROL_PLANE_NAME"] / "pids"
        return {int(p.read_text().strip()) for p in pid_dir.glob("*.pid") if p.read_text().strip()}

    def _connection(self):
        user = self._config["users"][0]["user"]
        context = ssl.create_default_context(cafile=self.cluster["certificate-authority"])
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        server = urllib.parse.urlsplit(self.cluster["server"])
        return http.client.HTTPSConnection(server.hostname, server.port, context=context,
                                           timeout=KUBECTL_TIMEOUT)


class Testkit(Cluster):
    """`kaos-testkit serve` on a free loopback port: RBAC on, Deployments settled by the
    simulator, and the admin anonymous, since client-go (kubectl, helm) sends no credentials
    over plain HTTP; clients with a token (the controllers) are held to RBAC. No CRD is
    applied: the chart brings them, as on the real plane."""

    def __init__(self, directory):
        missing = [str(p) for p in (TESTKIT, BIN / "helm") if not p.exists()]
        if missing:
            pytest.fail(f"{', '.join(missing)} missing: run `cargo build -p kaos-testkit` and "
                        "`scripts/control-plane build` (kubectl and helm)")
        try:
            self.server = TestkitProcess(directory, "--rbac", "--anonymous-admin",
                                         "--simulate-deployments", "100")
        except RuntimeError as error:
            pytest.fail(str(error))
        super().__init__(self.server.kubeconfig, BIN)

    def _connection(self):
        server = urllib.parse.urlsplit(self.cluster["server"])
        return http.client.HTTPConnection(server.hostname, server.port,
                                          timeout=KUBECTL_TIMEOUT)

    def install_chart(self, namespace, values):
        """The chart rendered by `helm template` with the same values and applied with kubectl:
        the same objects as `helm install`, without the release record, which helm stores as a
        protobuf Secret that the testkit (JSON only) refuses (docs/testkit.md), and without the
        hooks (helm runs them at their event; applied now, the uninstall Job would run at once)."""
        rendered = self.helm("template", RELEASE, str(CHART), "-n", namespace, "--no-hooks",
                             *[a for v in values for a in ("--set", v)]).stdout
        self.kubectl("apply", "-n", namespace, "-f", "-", stdin=rendered)

    def uninstall_chart(self, namespace):
        """Nothing to uninstall: no release was recorded, and the testkit is thrown away."""

    def set_faults(self, faults):
        """Sets fault injection (PUT /kaos-testkit/faults, docs/testkit.md); {} turns it off."""
        status, body = self._request("PUT", "/kaos-testkit/faults", faults)
        assert status == 200, f"PUT /kaos-testkit/faults: {status} {body[:500]!r}"

    def audit(self):
        """Every request so far (GET /kaos-testkit/audit): user, verb, path, code, ..."""
        return self.get("/kaos-testkit/audit")

    def stop(self):
        self.server.stop()


class TestkitProcess:
    """`kaos-testkit serve FLAGS` on a free loopback port, its kubeconfig and log in directory."""

    def __init__(self, directory, *flags):
        self.kubeconfig = Path(directory) / "kubeconfig"
        self.log = open(Path(directory) / "kaos-testkit.log", "w")
        self.process = subprocess.Popen(
            [str(TESTKIT), "serve", *flags, "--listen", "127.0.0.1:0",
             "--kubeconfig", str(self.kubeconfig)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self.kubeconfig.exists():  # written once it listens
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kaos-testkit did not start; see {self.log.name}")
            time.sleep(0.05)

    def stop(self):
        """Stops the process this object started (by its pid)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def run(command, stdin=None, check=True, timeout=KUBECTL_TIMEOUT):
    """Runs a command; with check, a failure shows the command and its output."""
    result = subprocess.run(command, input=stdin, capture_output=True, text=True,
                            timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(command[:4])} ... failed ({result.returncode}):\n"
                    f"{result.stdout}\n{result.stderr}")
    return result


def up(directory, nodes=NODES):
    """Brings a plane up in directory (building the binaries first if needed)."""
    started = time.monotonic()
    result = subprocess.run([str(SCRIPT), "up", str(directory), "--nodes", str(nodes)],
                            capture_output=True, text=True, timeout=UP_TIMEOUT)
    assert result.returncode == 0, f"up failed:\n{result.stdout}\n{result.stderr}"
    print(f"up took {time.monotonic() - started:.0f}s:\n{result.stderr}")
    plane = Plane(directory)
    plane.pids_when_up = plane.pids()
    return plane


def down(directory):
    return subprocess.run([str(SCRIPT), "down", str(directory)], capture_output=True,
                          text=True, timeout=120)


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


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


def wait_until(what, check, timeout=WAIT, interval=1.0):
    """Polls check() every interval seconds until it is done and returns its value; fails after
    timeout showing the last value. Done means truthy, except a tuple (False, detail): not done,
    and detail (what is still missing) shows in the failure."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = check()
        if last and not (isinstance(last, tuple) and not last[0]):
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def create_namespace(plane, name, labels=()):
    """Creates a namespace (with labels "key=value", e.g. a Pod Security level) for one suite,
    from a manifest: `kubectl create namespace` sends protobuf, which the testkit refuses."""
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": name, "labels": dict(l.split("=", 1) for l in labels)}}
    plane.kubectl("create", "-f", "-", stdin=json.dumps(namespace))


def delete_namespace(plane, name):
    """Starts deleting a namespace; callers wait for it (or not) themselves."""
    plane.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


def install_chart(plane, namespace, *values):
    """`helm install --wait` of charts/kaos as release kaos into namespace, created first and
    labelled to enforce the `restricted` Pod Security level; values are `--set` pairs."""
    create_namespace(plane, namespace, [RESTRICTED])
    plane.install_chart(namespace, values)


def remove_chart(plane, namespace):
    """Uninstalls the release and deletes the CRDs and the namespace, leaving the plane as
    found. The CRDs outlive `helm uninstall` by design, and their Helm ownership annotations
    would stop a release in another namespace from adopting them."""
    plane.uninstall_chart(namespace)
    plane.delete_crds()
    delete_namespace(plane, namespace)


def env_of(deployment):
    """The first container's environment as {name: value} (None for valueFrom)."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def rolled_out(deployment):
    """Every replica of the Deployment's current generation is updated, ready and available."""
    status = deployment.get("status", {})
    want = deployment["spec"].get("replicas", 1)
    return (status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("replicas", 0) == status.get("updatedReplicas", 0) == want
            and status.get("availableReplicas", 0) == status.get("readyReplicas", 0) == want)
