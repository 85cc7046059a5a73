"""Migrating from KAOS on a real kube-apiserver with the real helm (issue 21): `kaosctl migrate`
lets charts/kaos adopt the CRDs KAOS installed, and the resources KAOS managed stay.

The "KAOS install" is faithful in mechanism: a chart named kaos-operator installed with the real
helm as release `kaos-operator` in kaos-system, its CRDs in the chart's `crds/` directory (which
Helm creates once, with no ownership metadata, and never deletes), a `kaos-operator` Deployment
(a kwok pod; nothing runs) and the `kaos-mcp-runtimes` ConfigMap, as KAOS's chart has. The CRDs
are kaos-rs's own deploy/crds/ (no Helm metadata), not KAOS's: KAOS's are not vendored here.

Covers: `helm install` over them fails with Helm's ownership error; `kaosctl migrate` refuses
while KAOS runs, `--scale-down-kaos` stops it and adopts the CRDs (metadata only); `helm install`
then succeeds and the CRDs and the KAOS-era resources keep their uids; `migrate --check` fails
until kaos-rs's controllers (here `kaosctl dev --kubeconfig`, the chart's pods being kwok fakes)
have reconciled every resource, then passes; `helm uninstall kaos-operator` leaves CRDs and
resources in place. Our release is `kaos` in namespace kaos-migrate (test_helm.py's is in
kaos-helm); the suite leaves the plane as found (no CRD, no kaos-system, no namespace of its own).

Runs only with KAOS_CONTROL_PLANE=1, with kaosctl built (`cargo build -p kaosctl`, or KAOSCTL).
"""

import os
import signal
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest
import yaml

from plane import (CHART, CRDS, KAOS_CRDS, REPO, RELEASE, RESTRICTED, create_namespace, delete_namespace,
                   requires_plane, wait_until)

pytestmark = requires_plane

NAMESPACE = "kaos-migrate"      # our release's
KAOS_NAMESPACE = "kaos-system"  # KAOS's
APPS = "migrate-apps"           # the resources KAOS managed
KAOS = "/apis/kaos.tools/v1alpha1"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KAOSCTL = Path(os.environ.get("KAOSCTL", REPO / "target" / "debug" / "kaosctl"))
REGISTRY = REPO / "crates" / "mcpserver-controller" / "src" / "default-runtimes.yaml"


def kaos_chart(directory):
    """A chart installed the way KAOS's operator chart is: CRDs in crds/, the operator and the
    MCP runtime registry as templates."""
    chart = directory / "kaos-operator"
    (chart / "crds").mkdir(parents=True)
    (chart / "templates").mkdir()
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: kaos-operator\nversion: 0.8.4\nappVersion: \"0.8.4\"\n")
    for crd in (REPO / "deploy" / "crds").glob("*.yaml"):
        assert "meta.helm.sh" not in crd.read_text()
        (chart / "crds" / crd.name).write_text(crd.read_text())
    (chart / "templates" / "deployment.yaml").write_text(textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: kaos-operator
          labels: {control-plane: controller-manager, app.kubernetes.io/name: kaos-operator}
        spec:
          replicas: 1
          selector: {matchLabels: {control-plane: controller-manager}}
          template:
            metadata: {labels: {control-plane: controller-manager}}
            spec:
              containers: [{name: manager, image: "registry.invalid/kaos-operator:v0.8.4"}]
        """))
    registry = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kaos-mcp-runtimes"},
                "data": {"runtimes.yaml": REGISTRY.read_text()}}
    (chart / "templates" / "runtimes.yaml").write_text(
        yaml.safe_dump(registry).replace("{{", "{{ `{{` }}"))
    return chart


def kaosctl(*args, timeout=180):
    return subprocess.run([str(KAOSCTL), *args], capture_output=True, text=True, timeout=timeout)


def uids(plane):
    """{path: uid} of the CRDs and every Agent, ModelAPI and MCPServer."""
    found = {f"{CRD_PATH}/{c}": plane.get(f"{CRD_PATH}/{c}")["metadata"]["uid"] for c in KAOS_CRDS}
    for plural in ("agents", "modelapis", "mcpservers"):
        for obj in plane.items(f"{KAOS}/{plural}"):
            found[f"{plural}/{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = \
                obj["metadata"]["uid"]
    return found


@pytest.fixture(scope="module")
def kaos(plane, tmp_path_factory):
    """The plane as KAOS leaves it, the quickstart applied in APPS; yields (kubeconfig for
    kaosctl, with APPS as its context's namespace, the uids before the migration)."""
    if not KAOSCTL.exists():
        pytest.fail(f"{KAOSCTL} is not built: run `cargo build -p kaosctl` (or set KAOSCTL)")
    assert not any(plane.get(f"{CRD_PATH}/{c}") for c in CRDS), \
        "another suite left the kaos.tools CRDs behind"
    directory = tmp_path_factory.mktemp("migrate")
    plane.helm("install", "kaos-operator", str(kaos_chart(directory)), "-n", KAOS_NAMESPACE,
               "--create-namespace", "--wait", "--timeout", "2m")
    for namespace in (NAMESPACE, APPS):
        create_namespace(plane, namespace, [RESTRICTED] if namespace == NAMESPACE else [])
    plane.kubectl("-n", APPS, "create", "secret", "generic", "openai-credentials",
                  "--from-literal=api-key=sk-test")
    plane.kubectl("-n", APPS, "apply", "-f", str(REPO / "examples" / "quickstart.yaml"))
    config = yaml.safe_load(plane.kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = APPS
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    yield kubeconfig, uids(plane)
    # Leave the plane as found.
    plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
    plane.helm("uninstall", "kaos-operator", "-n", KAOS_NAMESPACE, "--wait", check=False)
    plane.strip_finalizers()
    plane.delete_crds()
    for namespace in (NAMESPACE, APPS, KAOS_NAMESPACE):
        delete_namespace(plane, namespace)
    for namespace in (NAMESPACE, APPS, KAOS_NAMESPACE):
        wait_until(f"namespace {namespace} to be deleted",
                   lambda: plane.get(f"/api/v1/namespaces/{namespace}") is None)


def migrate(kubeconfig, *args):
    return kaosctl("migrate", "--kubeconfig", str(kubeconfig), "--release", RELEASE,
                   "--namespace", NAMESPACE, *args)


def test_helm_install_over_kaos_crds_fails_on_ownership(plane, kaos):
    for crd in KAOS_CRDS:
        labels = plane.get(f"{CRD_PATH}/{crd}")["metadata"].get("labels", {})
        assert "app.kubernetes.io/managed-by" not in labels, labels
    result = plane.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, check=False)
    assert result.returncode != 0, result.stdout
    assert "exists and cannot be imported into the current release" in result.stderr, \
        result.stderr
    assert 'missing key "app.kubernetes.io/managed-by": must be set to "Helm"' in result.stderr


def test_migrate_refuses_while_kaos_runs_then_scales_it_down_and_adopts(plane, kaos):
    kubeconfig, before = kaos
    refused = migrate(kubeconfig)
    assert refused.returncode == 1, refused.stdout
    assert "kaos-system/kaos-operator: running (1 replica, 1 pod), Helm release kaos-operator " \
        "in kaos-system" in refused.stdout, refused.stdout
    assert "2 Agents, 1 ModelAPI, 1 MCPServer" in refused.stdout, refused.stdout
    assert refused.stderr.splitlines() == [
        "kaosctl: cannot migrate: the KAOS operator is running (kaos-system/kaos-operator): "
        "it and kaos-rs would fight over every resource",
        "hint: add --scale-down-kaos to scale it to 0 first (kubectl scale --replicas=N brings "
        "it back)"]

    dry = migrate(kubeconfig, "--dry-run", "--scale-down-kaos")
    assert dry.returncode == 0, dry.stderr
    assert "would adopt CRD agents.kaos.tools into release kaos" in dry.stdout, dry.stdout
    assert "meta.helm.sh/release-name" not in str(
        plane.get(f"{CRD_PATH}/agents.kaos.tools")["metadata"])

    done = migrate(kubeconfig, "--scale-down-kaos")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scaled kaos-system/kaos-operator to 0" in done.stdout, done.stdout
    # Our release is in another namespace than KAOS's registry: install first, KAOS goes last.
    assert "  1. helm install kaos charts/kaos -n kaos-migrate" in done.stdout, done.stdout
    assert "once --check passes, remove KAOS: helm uninstall kaos-operator -n kaos-system" \
        in done.stdout, done.stdout
    operator = plane.get(f"/apis/apps/v1/namespaces/{KAOS_NAMESPACE}/deployments/kaos-operator")
    assert operator["spec"]["replicas"] == 0
    wait_until("the KAOS operator's pods to go",
               lambda: not plane.items(f"/api/v1/namespaces/{KAOS_NAMESPACE}/pods",
                                       labelSelector="control-plane=controller-manager"))
    for crd in CRDS:
        meta = plane.get(f"{CRD_PATH}/{crd}")["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert meta["annotations"]["meta.helm.sh/release-name"] == RELEASE
        assert meta["annotations"]["meta.helm.sh/release-namespace"] == NAMESPACE
    assert uids(plane) == before


def test_helm_install_adopts_the_crds_and_the_resources_stay(plane, kaos):
    kubeconfig, before = kaos
    plane.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--wait", "--timeout", "3m")
    status = plane.json_of(plane.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json"))
    assert status["info"]["status"] == "deployed", status["info"]
    manifest = plane.helm("get", "manifest", RELEASE, "-n", NAMESPACE).stdout
    for crd in CRDS:
        assert f"name: {crd}" in manifest, f"{crd} is not part of the release"
        keep = plane.get(f"{CRD_PATH}/{crd}")["metadata"]["annotations"]
        assert keep.get("helm.sh/resource-policy") == "keep", keep
    assert uids(plane) == before


def test_check_passes_once_kaos_rs_reconciles_and_kaos_can_go(plane, kaos):
    kubeconfig, before = kaos
    # The chart's controller pods are kwok fakes: nothing has reconciled the resources yet.
    pending = migrate(kubeconfig, "--check")
    assert pending.returncode == 1, pending.stdout
    assert "  ok   Helm release kaos in kaos-migrate: deployed (revision 1)" in pending.stdout
    assert "  ok   KAOS operator kaos-system/kaos-operator: scaled to 0" in pending.stdout
    assert "  FAIL 2 Agents: 2 not reconciled by kaos-rs (kaos-agent-controller) yet:" \
        in pending.stdout, pending.stdout

    # kaos-rs's controllers, run out of cluster against the plane.
    dev = subprocess.Popen([str(KAOSCTL), "dev", "--kubeconfig", str(kubeconfig)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Its report is read as it comes: the check can pass (kaos-rs wrote every status) a moment
    # before `dev` sees every resource Ready, and Ctrl-C before that ends it with 130.
    report = []
    reader = threading.Thread(target=lambda: report.extend(dev.stdout), daemon=True)
    reader.start()
    try:
        passed = wait_until("migrate --check to pass",
                            lambda: (lambda r: r.returncode == 0 or (False, r.stdout))(
                                migrate(kubeconfig, "--check")), timeout=180, interval=2)
        wait_until("kaosctl dev to report every resource Ready",
                   lambda: any("all resources are Ready" in line for line in report), timeout=120)
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(timeout=60)
        reader.join(timeout=10)
        err = dev.stderr.read()
    assert dev.returncode == 0, err
    assert passed

    plane.helm("uninstall", "kaos-operator", "-n", KAOS_NAMESPACE, "--wait")
    done = migrate(kubeconfig, "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KAOS operator" not in done.stdout, done.stdout
    assert "  ok   2 Agents: all reconciled by kaos-rs (kaos-agent-controller)" in done.stdout
    assert "the migration is complete" in done.stdout
    assert uids(plane) == before
