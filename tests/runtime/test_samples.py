"""The eight sample manifests kaos-cli 0.8.4 bundles, deployed unchanged with its own
`kaos samples deploy` (which runs `kubectl apply --server-side`) into the sandbox (`kaosctl dev`:
kaos-testkit, every controller, the deployment simulator), each in its own namespace. Each must
settle as KAOS users expect: every Agent, ModelAPI, MCPServer and MemoryStore Ready, and every
AccessGrant reporting that it is not enforced. The provider API key Secrets a sample reads are
created first, as its user would.

Needs kaos-cli (KAOS_AGENT_RUNTIME: the runtime's venv has it), kubectl (KAOS_KUBECTL, else the
one scripts/control-plane build makes, else PATH's; fails without) and target/debug/kaosctl. See
docs/testing.md.
"""

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KAOSCTL = Path(os.environ.get("KAOSCTL", REPO / "target" / "debug" / "kaosctl"))
RUNTIME_PYTHON = os.environ.get("KAOS_AGENT_RUNTIME")
SETTLE_TIMEOUT = 60
WORKLOADS = ["agents", "modelapis", "mcpservers", "memorystores"]


def kaos_cli():
    return Path(RUNTIME_PYTHON).parent / "kaos"


def samples():
    """The sample names kaos-cli ships, read from the installed package."""
    listing = subprocess.run(
        [RUNTIME_PYTHON, "-c", "import kaos_cli.samples as s, pathlib; "
         "print('\\n'.join(sorted(p.stem for p in (pathlib.Path(s.__file__).parent / 'data').glob('*.yaml'))))"],
        capture_output=True, text=True, check=True)
    return listing.stdout.split()


def kubectl_dir(directory):
    """DIRECTORY, holding `kubectl` for kaos-cli's PATH: KAOS_KUBECTL (scripts/test.sh sets it to the
    one `scripts/control-plane build` makes), else that build's, else the kubectl on PATH. Without
    one the test fails: it never passes by skipping."""
    found = os.environ.get("KAOS_KUBECTL")
    if found:
        assert Path(found).is_file(), f"KAOS_KUBECTL={found} does not exist"
    else:
        cache = Path(os.environ.get("KAOS_CONTROL_PLANE_CACHE", REPO / ".cache" / "control-plane"))
        built = cache / "bin" / "kubectl"
        found = str(built) if built.is_file() else shutil.which("kubectl")
    if not found:
        pytest.fail("no kubectl: kaos-cli runs it. Build it with scripts/control-plane build (needs Go), "
                    "put kubectl on PATH, or set KAOS_KUBECTL", pytrace=False)
    (directory / "kubectl").symlink_to(Path(found).resolve())
    return str(directory)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """`kaosctl dev` with nothing applied: its kubeconfig and an env for kaos-cli and kubectl."""
    assert KAOSCTL.exists(), f"{KAOSCTL} is missing: cargo build -p kaosctl"
    directory = tmp_path_factory.mktemp("samples")
    path = kubectl_dir(tmp_path_factory.mktemp("kubectl"))
    kubeconfig = directory / "kubeconfig"
    nothing = directory / "nothing.yaml"
    nothing.write_text("# the samples are applied by the test\n")
    log = directory / "kaosctl-dev.log"
    process = subprocess.Popen(
        [str(KAOSCTL), "dev", "--listen", f"127.0.0.1:{free_port()}",
         "--write-kubeconfig", str(kubeconfig), "--apply", str(nothing)],
        stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=directory)
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), HOME=str(directory),
               PATH=f"{path}{os.pathsep}{os.environ.get('PATH', '')}")
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"kaosctl dev exited ({process.returncode}):\n{log.read_text()}")
            if kubeconfig.exists() and subprocess.run(
                    ["kubectl", "get", "crd", "memorystores.kaos.tools"], env=env,
                    capture_output=True).returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the sandbox did not come up:\n{log.read_text()}")
            time.sleep(0.3)
        yield env, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def items(env, plural, namespace):
    result = subprocess.run(["kubectl", "get", f"{plural}.kaos.tools", "-n", namespace, "-o", "json"],
                            env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["items"]


def unsettled(env, namespace):
    """What is not yet as expected, one line each (empty: settled)."""
    waiting = []
    for plural in WORKLOADS:
        for item in items(env, plural, namespace):
            status = item.get("status") or {}
            if not status.get("ready"):
                waiting.append(f"{item['kind']} {item['metadata']['name']}: "
                               f"{status.get('phase')} {status.get('message')}")
    for item in items(env, "accessgrants", namespace):
        enforced = [c for c in (item.get("status") or {}).get("conditions", [])
                    if c["type"] == "Enforced"]
        if [(c["status"], c["reason"]) for c in enforced] != [("False", "AuthorizationDisabled")]:
            waiting.append(f"AccessGrant {item['metadata']['name']}: {enforced}")
    return waiting


def secret_references(value, found=None):
    """{Secret name: keys} of every `secretKeyRef` in value."""
    found = {} if found is None else found
    if isinstance(value, dict):
        ref = value.get("secretKeyRef")
        if isinstance(ref, dict) and "name" in ref and not ref.get("optional"):
            found.setdefault(ref["name"], set()).add(ref.get("key", "api-key"))
        for child in value.values():
            secret_references(child, found)
    elif isinstance(value, list):
        for child in value:
            secret_references(child, found)
    return found


@pytest.mark.parametrize("sample", samples() if RUNTIME_PYTHON else [])
def test_a_kaos_cli_sample_deploys_unchanged_and_settles(sandbox, sample):
    env, log = sandbox
    namespace = f"sample-{sample.split('-')[0]}"
    # From a manifest: `kubectl create namespace` sends protobuf, which the testkit refuses.
    manifest = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    subprocess.run(["kubectl", "create", "-f", "-"], input=manifest, env=env, check=True,
                   capture_output=True, text=True)
    objects = [o for o in yaml.safe_load_all(subprocess.run(
        [str(kaos_cli()), "samples", "deploy", sample, "-n", namespace, "--dry-run"],
        env=env, capture_output=True, text=True, check=True).stdout) if o]
    assert {o["kind"] for o in objects} & {"Agent", "ModelAPI", "MCPServer", "MemoryStore"}
    # The provider API keys a sample reads, which its user creates first (as with any cluster).
    for name, keys in secret_references(objects).items():
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                  "stringData": {key: "sk-placeholder" for key in keys}}
        subprocess.run(["kubectl", "create", "-n", namespace, "-f", "-"], input=json.dumps(secret),
                       env=env, check=True, capture_output=True, text=True)
    deployed = subprocess.run([str(kaos_cli()), "samples", "deploy", sample, "-n", namespace],
                              env=env, capture_output=True, text=True)
    assert deployed.returncode == 0, f"{deployed.stdout}\n{deployed.stderr}"
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while (waiting := unsettled(env, namespace)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not waiting, f"{sample} did not settle:\n" + "\n".join(waiting)
