"""`kaosctl dev --kubeconfig` on a real kube-apiserver: the real kaosctl binary runs the
controllers in-process against the plane (as kubebuilder's `make run` does), with a kubeconfig
whose context points at a namespace of its own.

Covers: without the CRDs it stops with one line naming what is missing and a hint; with
`--install-crds` it installs them and the MCP runtime registry, applies examples/quickstart.yaml,
a MemoryStore with an agent bound to it, an AccessGrant and a ThirdPartyService into the
context's namespace and exits once everything is Ready (the AccessGrant and ThirdPartyService,
never Ready: once they say they are not enforced), the pods Running on kwok nodes;
the Leases are in that namespace and released on exit; run again without `--apply` it serves
until Ctrl-C, releases the finalizers of deleted resources meanwhile, and stops cleanly (exit 0,
Leases released). Leaves the plane as found (no CRD, no namespace of its own).

Runs only with KAOS_CONTROL_PLANE=1, with kaosctl built (`cargo build -p kaosctl`).
"""

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from controllers import lease_name
from plane import (CONTROLLERS, CRDS, REPO, create_namespace, delete_namespace, requires_plane,
                   wait_until)

pytestmark = requires_plane

NAMESPACE = "kaosctl-dev"
SYSTEM_NAMESPACE = "kaos-system"
KAOS = "/apis/kaos.tools/v1alpha1"
KAOSCTL = Path(os.environ.get("KAOSCTL", REPO / "target" / "debug" / "kaosctl"))
QUICKSTART = REPO / "examples" / "quickstart.yaml"
# A store on the quickstart's ModelAPI and an agent bound to it. External storage: the plane has
# no volume provisioner, so a pod mounting a `local` store's claim would never be scheduled.
MEMORY = """apiVersion: v1
kind: Secret
metadata: {name: team-memory-db}
stringData: {dsn: "postgresql://memory@db/memory"}
---
apiVersion: kaos.tools/v1alpha1
kind: MemoryStore
metadata: {name: team-memory}
spec:
  storage: {type: external, external: {connectionSecretRef: {name: team-memory-db, key: dsn}}}
  models:
    summarization: {modelAPI: llm-proxy, model: openai/gpt-4o-mini}
    embedding: {modelAPI: llm-proxy, model: openai/text-embedding-3-small}
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {name: recall}
spec:
  modelAPI: llm-proxy
  model: openai/gpt-4o-mini
  config: {memory: {memoryStore: team-memory}}
"""
# A grant on the quickstart's agents and a service they may call, with its client Secret.
ACCESS = """apiVersion: v1
kind: Secret
metadata: {name: github-oauth}
stringData: {client-secret: s3cret}
---
apiVersion: kaos.tools/v1alpha1
kind: AccessGrant
metadata: {name: researchers}
spec:
  subjects: [{kind: Group, name: researchers}, {kind: Agent, name: coordinator}]
  resources: [{kind: Agent, name: worker}, {kind: MCPServer, name: echo-tools}]
---
apiVersion: kaos.tools/v1alpha1
kind: ThirdPartyService
metadata: {name: github}
spec:
  clientID: kaos-dev
  clientSecretRef: {name: github-oauth, key: client-secret}
  issuerURI: https://github.com
  scopes: [{name: repo}]
  protectedResources: [https://api.github.com]
  routeRef: {name: github-egress}
  access: [{agent: worker, scopes: [repo]}]
"""
# (plural, the condition that says it is not enforced, its reason): never Ready on kaos-rs.
NOT_ENFORCED = [("accessgrants", "Enforced", "AuthorizationDisabled"),
                ("thirdpartyservices", "Ready", "FeatureDisabled")]


def table(stdout):
    """{(kind, name): [phase, endpoint]} of `kaosctl dev`'s report."""
    rows = {}
    for line in stdout.split("KIND", 1)[1].split("\n\n", 1)[0].splitlines()[1:]:
        kind, name, *rest = line.split()
        rows[(kind, name)] = rest
    return rows


@pytest.fixture(scope="module")
def kubeconfig(plane, tmp_path_factory):
    """The plane's admin kubeconfig with its context's namespace set to NAMESPACE."""
    if not KAOSCTL.exists():
        pytest.fail(f"{KAOSCTL} is not built: run `cargo build -p kaosctl` (or set KAOSCTL)")
    assert not any(plane.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{c}")
                   for c in CRDS), "another suite left the kaos.tools CRDs behind"
    create_namespace(plane, NAMESPACE)
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = NAMESPACE
    path = tmp_path_factory.mktemp("kaosctl") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    yield path
    # Leave the plane as found. Our resources' finalizers are gone (the Ctrl-C test deletes
    # them while kaosctl runs); strip any left by a failed test, or the CRDs would never go.
    plane.strip_finalizers()
    plane.delete_crds()
    for namespace in (NAMESPACE, SYSTEM_NAMESPACE):
        delete_namespace(plane, namespace)
    for namespace in (NAMESPACE, SYSTEM_NAMESPACE):
        # test_operator.py creates kaos-system itself: wait until it is really gone.
        wait_until(f"namespace {namespace} to be deleted",
                   lambda: plane.get(f"/api/v1/namespaces/{namespace}") is None)


def kaosctl_dev(kubeconfig, *args, timeout=180):
    return subprocess.run([str(KAOSCTL), "dev", "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout)


def lease_holders(plane):
    """{lease name: holder identity or None} of the controllers' Leases in NAMESPACE."""
    holders = {}
    for binary in CONTROLLERS:
        lease = plane.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}"
                          f"/leases/{lease_name(binary)}")
        holders[lease_name(binary)] = lease and (lease["spec"].get("holderIdentity") or None)
    return holders


def test_without_the_crds_it_says_what_is_missing_and_how_to_install_it(plane, kubeconfig):
    result = kaosctl_dev(kubeconfig, "--apply", str(QUICKSTART), "--exit-when-ready")
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("kaosctl: https://127.0.0.1:") and " lacks CRD agents.kaos.tools, " \
        "CRD modelapis.kaos.tools, CRD mcpservers.kaos.tools, CRD memorystores.kaos.tools, " \
        "CRD accessgrants.kaos.tools, CRD thirdpartyservices.kaos.tools, CRD agentworkflows.kaos.tools, " \
        "CRD agentworkflowruns.kaos.tools, the MCP runtime registry " \
        "(ConfigMap kaos-system/kaos-mcp-runtimes)" in lines[0], lines[0]
    assert lines[1].startswith("hint: add --install-crds"), lines[1]


def test_install_crds_brings_the_quickstart_to_ready_on_the_real_plane(plane, kubeconfig,
                                                                     tmp_path):
    # The provider key Secret the quickstart's ModelAPI reads, as its header says to create.
    credentials = tmp_path / "credentials.yaml"
    credentials.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: openai-credentials}\n"
                           "stringData: {api-key: sk-test}\n")
    memory = tmp_path / "memory.yaml"
    memory.write_text(MEMORY)
    access = tmp_path / "access.yaml"
    access.write_text(ACCESS)
    result = kaosctl_dev(kubeconfig, "--install-crds", "--apply", str(credentials),
                         "--apply", str(QUICKSTART), "--apply", str(memory),
                         "--apply", str(access), "--exit-when-ready", "--timeout", "120")
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert f"Leases in namespace {NAMESPACE}" in result.stderr, result.stderr
    assert "all resources are Ready" in result.stdout, result.stdout
    endpoint = f"http://memorystore-team-memory.{NAMESPACE}.svc.cluster.local:8080"
    rows = table(result.stdout)
    for kind, name in [("ModelAPI", "llm-proxy"), ("MCPServer", "echo-tools"),
                       ("Agent", "coordinator"), ("Agent", "worker"), ("Agent", "recall")]:
        assert rows.get((kind, name), [None])[0] == "Ready", f"{kind} {name}:\n{result.stdout}"
    assert rows[("MemoryStore", "team-memory")] == ["Ready", endpoint], result.stdout
    # Never Ready: their table shows the reason they are not enforced, and no endpoint.
    assert rows[("AccessGrant", "researchers")] == ["AuthorizationDisabled"], result.stdout
    assert rows[("ThirdPartyService", "github")] == ["FeatureDisabled"], result.stdout
    for line in [f"Deployment {NAMESPACE}/agent-worker",
                 f"Deployment {NAMESPACE}/memorystore-team-memory",
                 *(f"{binary}: http://" for binary in CONTROLLERS)]:
        assert line in result.stdout, f"missing {line!r} in:\n{result.stdout}"

    for crd in CRDS:
        found = plane.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
        assert found, f"CRD {crd} not installed"
    assert plane.get(f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/configmaps/kaos-mcp-runtimes")
    for plural in ("agents", "modelapis", "mcpservers", "memorystores"):
        for obj in plane.items(f"{KAOS}/namespaces/{NAMESPACE}/{plural}"):
            assert obj["status"]["phase"] == "Ready", obj["status"]
            # MemoryStores carry none, as in KAOS: their children go by garbage collection.
            assert bool(obj["metadata"].get("finalizers")) == (plural != "memorystores"), \
                obj["metadata"]
    for plural, type_, reason in NOT_ENFORCED:
        for obj in plane.items(f"{KAOS}/namespaces/{NAMESPACE}/{plural}"):
            conditions = {c["type"]: c for c in obj["status"]["conditions"]}
            assert (conditions[type_]["status"], conditions[type_]["reason"]) == ("False", reason), \
                obj["status"]
            assert conditions["ResolvedRefs"]["status"] == "True", obj["status"]
            assert not obj["metadata"].get("finalizers"), obj["metadata"]
    agent = plane.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/agent-recall")
    container = agent["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MEMORY_STORE_ENDPOINT"] == endpoint, env
    kwok = plane.kwok_nodes()
    pods = plane.items(f"/api/v1/namespaces/{NAMESPACE}/pods")
    assert {p["metadata"]["labels"].get("app") for p in pods} == {"agent", "modelapi", "mcpserver",
                                                                  "memorystore"}, pods
    for pod in pods:
        assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] in kwok, pod
    # Leases in the context's namespace, handed over on exit.
    assert lease_holders(plane) == {lease_name(b): None for b in CONTROLLERS}


def test_it_runs_until_ctrl_c_and_stops_cleanly(plane, kubeconfig):
    """Without --apply nor --exit-when-ready: the resources already there are reported Ready,
    the controllers keep reconciling (here: the finalizers of deleted resources) until SIGINT."""
    process = subprocess.Popen([str(KAOSCTL), "dev", "--kubeconfig", str(kubeconfig)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr = []
    running = threading.Event()

    def read_stderr():
        for line in process.stderr:
            stderr.append(line)
            if "running until interrupted" in line:
                running.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert running.wait(120), "".join(stderr)
        assert all(lease_holders(plane).values()), lease_holders(plane)
        plane.kubectl("delete", "agents,modelapis,mcpservers,memorystores,accessgrants,"
                      "thirdpartyservices", "--all", "-n", NAMESPACE, "--wait", "--timeout=60s",
                      timeout=90)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        stdout = process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    reader.join(5)
    assert process.returncode == 0, "".join(stderr)
    assert "all resources are Ready" in stdout, stdout
    assert lease_holders(plane) == {lease_name(b): None for b in CONTROLLERS}
