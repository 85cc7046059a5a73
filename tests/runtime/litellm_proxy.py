"""The real LiteLLM proxy as a local process, started as a Proxy ModelAPI's pod starts it, for
test_litellm.py, test_litellm_budgets.py and test_litellm_redis.py: the config, args and env that
`kaosctl render` (the controller's own pure builder) produces, with only the provider's address
rewritten to a local fake upstream (fake_openai.py) and the config's mount path to a local file.
Also the per-agent entry the budget tests add and their calls and /metrics readings.

KAOS_LITELLM is the proxy's `litellm` script (`scripts/python-tool litellm bin litellm`); a missing
tool fails the test, it never skips (docs/testing.md, "The real LiteLLM proxy")."""

import base64
import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KAOSCTL = Path(os.environ.get("KAOSCTL", REPO / "target" / "debug" / "kaosctl"))
LITELLM = os.environ.get("KAOS_LITELLM")
# LiteLLM imports a lot: ~10 s alone, ~40 s on 2 busy cores with three proxies starting at once.
STARTUP_TIMEOUT = 180
UPSTREAM_KEY = "sk-upstream-test-key"
# What the agent runtime 0.8.4 always sends.
AGENT_AUTHORIZATION = "Bearer not-needed"


def need(value, what):
    if not value:
        pytest.fail(f"{what} is not set: scripts/test.sh sets it (see docs/testing.md)")
    return value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exchange(method, url, body=None, headers=None):
    """(status, response headers with lower-case names, parsed JSON body or text) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
            answer = {k.lower(): v for k, v in response.headers.items()}
            try:
                return response.status, answer, json.loads(text or b"null")
            except ValueError:
                return response.status, answer, text.decode(errors="replace")
    except urllib.error.HTTPError as error:
        return (error.code, {k.lower(): v for k, v in error.headers.items()},
                error.read().decode(errors="replace"))


def http(method, url, body=None, headers=None):
    """(status, parsed JSON body or text) of one request."""
    status, _, answer = exchange(method, url, body, headers)
    return status, answer


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def find(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def proxy_modelapi(name, namespace):
    """A Proxy ModelAPI with the generated config: one model (gpt-4o) of the openai provider, the
    upstream key in its Secret."""
    return f"""
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  mode: Proxy
  proxyConfig:
    provider: openai
    models: [gpt-4o]
    apiBase: https://api.openai.com/v1
    apiKey: {{value: {UPSTREAM_KEY}}}
"""


def render(directory, manifest):
    """The objects `kaosctl render` makes of a manifest (a YAML string)."""
    need(LITELLM, "KAOS_LITELLM")
    assert KAOSCTL.exists(), f"{KAOSCTL} is missing: cargo build -p kaosctl"
    path = directory / "manifest.yaml"
    path.write_text(manifest)
    out = subprocess.run([str(KAOSCTL), "render", "-f", str(path)], check=True,
                         capture_output=True, text=True)
    return [o for o in yaml.safe_load_all(out.stdout) if o]


class Proxy:
    """One LiteLLM process started from a rendered ModelAPI's Deployment; `config` (YAML text)
    replaces its ConfigMap's `config.yaml` when given, `env` is added to the container's, and
    `label` names its files in `directory` (default: the ModelAPI's name), so that several proxies
    of one ModelAPI can run side by side."""

    def __init__(self, objects, name, directory, upstream, permit=True, config=None, env=None,
                 label=None):
        deployment = find(objects, "Deployment", f"modelapi-{name}")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        self.container = container
        self.env = {"PATH": os.environ.get("PATH", ""), "HOME": str(directory),
                    # Hermetic: the cost map bundled in the package, not a fetch from GitHub.
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        for var in container.get("env", []):
            if var["name"] in (env or {}):
                continue  # given by the test (a Secret of the user's, not rendered)
            if "value" in var:
                value = var["value"]
            else:
                ref = var["valueFrom"]["secretKeyRef"]
                secret = find(objects, "Secret", ref["name"])
                value = base64.b64decode(secret["data"][ref["key"]]).decode()
            self.env[var["name"]] = value
        # The provider is the fake upstream here, whatever the manifest names.
        self.env["PROXY_API_BASE"] = upstream.url
        if not permit:
            self.env.pop("LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY")
        self.env.update(env or {})
        self.directory = directory
        self.name = f"{label or name}{'' if permit else '-no-permit'}"
        self.config_path = directory / f"{self.name}-config.yaml"
        if config is None:
            config = find(objects, "ConfigMap", f"litellm-config-{name}")["data"]["config.yaml"]
        self.config_path.write_text(config)
        self.args = [str(self.config_path) if a == "/etc/litellm/config.yaml" else a
                     for a in container["args"]]
        self.starts = 0
        self.start()

    def start(self):
        """Start the process on a new port (again after `stop`: a restart with the same config)."""
        self.port = free_port()
        self.args[self.args.index("--port") + 1] = str(self.port)
        self.url = f"http://127.0.0.1:{self.port}"
        self.starts += 1
        self.log = self.directory / f"{self.name}{'' if self.starts == 1 else f'-{self.starts}'}.log"
        self.process = subprocess.Popen([LITELLM, *self.args], env=self.env, cwd=self.directory,
                                        stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def wait_ready(self):
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"LiteLLM exited ({self.process.returncode}):\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health/readiness", timeout=2) as r:
                    return r.status, json.loads(r.read())
            except OSError:
                time.sleep(0.3)
        pytest.fail(f"LiteLLM did not answer within {STARTUP_TIMEOUT}s:\n{self.log.read_text()}")

    def wait_refusal(self):
        """The log line of a refused start (the process may linger after it: it is stopped)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if "refused to start" in text:
                return text
            try:
                with urllib.request.urlopen(f"{self.url}/health/liveliness", timeout=2):
                    pytest.fail("LiteLLM started without a master key and without the permit: "
                                "the check is gone or changed; revisit PERMIT_KEYLESS_ENV "
                                "(crates/modelapi-controller/src/build.rs)")
            except OSError:
                pass
            if self.process.poll() is not None:
                return self.log.read_text()
            time.sleep(0.3)
        pytest.fail(f"LiteLLM neither refused nor started within {STARTUP_TIMEOUT}s:\n{text}")

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def budget_entry(shared, namespace, agent, **limits):
    """The `model_list` entry the ModelAPI controller will add for a budgeted Agent (docs/budgets.md,
    "one alias per budgeted Agent"): the shared entry's upstream and key under the alias
    `kaos.<namespace>.<agent>`, the limits in `litellm_params`, `model_info.id` fixed (the Agent's
    UID; here `uid-<agent>`). The one place the budget tests build it, to be replaced by the entries
    the controller renders."""
    return {"model_name": f"kaos.{namespace}.{agent}",
            "litellm_params": {**shared["litellm_params"], **limits},
            "model_info": {"id": f"uid-{agent}"}}


def call(proxy, model):
    """One chat completion as the agent runtime sends it: (status, headers, body)."""
    return exchange("POST", f"{proxy.url}/v1/chat/completions",
                    {"model": model, "messages": [{"role": "user", "content": "hi"}]},
                    {"Authorization": AGENT_AUTHORIZATION})


def calls(proxy, model, count):
    """`count` calls one after another, as one agent's loop makes them. LiteLLM counts a call's
    tokens and spend after answering it, so each waits briefly for the count of the one before."""
    answers = []
    for _ in range(count):
        answers.append(call(proxy, model))
        time.sleep(0.3)
    return answers


def error(body):
    assert isinstance(body, str), body
    return json.loads(body)["error"]


def statuses(answers):
    return [status for status, _, _ in answers]


def metrics(proxy):
    """{(name, frozenset of labels): value} of the proxy's /metrics."""
    status, _, text = exchange("GET", f"{proxy.url}/metrics/")
    assert status == 200, text
    samples = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match and not line.startswith("#"):
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
            samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def sample(samples, name, **labels):
    """The one sample of `name` whose labels include `labels`."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, (name, labels, [k for k in samples if k[0] == name])
    return found[0]


def start_agent_runtime(python, env, directory, name):
    """The real agent runtime (pydantic-ai-server, `python` its venv's) with the pod env `env`
    on a free loopback port, once it answers `/health`: (process, base URL, log path). The
    caller stops the process."""
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(directory), **env,
           "AGENT_PORT": str(port)}
    log = directory / f"{name}.log"
    agent = subprocess.Popen([python, "-m", "uvicorn", "pais.server:get_app", "--factory",
                              "--host", "127.0.0.1", "--port", str(port)],
                             env=env, cwd=directory, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not http_ok(f"{url}/health"):
        if agent.poll() is not None or time.monotonic() > deadline:
            agent.kill()
            pytest.fail(f"the agent runtime did not start:\n{log.read_text()}")
        time.sleep(0.3)
    return agent, url, log


def stop(process):
    """Stops a local server: SIGTERM, then SIGKILL after 10 s; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
