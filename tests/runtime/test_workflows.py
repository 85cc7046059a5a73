"""AgentWorkflows end to end on the real KAOS 0.8.4 agent runtime (pydantic-ai-server,
`DEBUG_MOCK_RESPONSES` in place of a model, each agent with its own answer), started with the env
our Agent Deployments carry (as in test_real_runtime.py).

- The sandbox (`kaosctl dev`: an in-memory cluster and every controller, the workflow controller
  among them) reaches the runtimes through `--agent-address`. A diamond workflow (a; b and c
  after a; d after both, its input made of their outputs) run by `kaosctl workflow run`
  succeeds; each step's output is its agent's answer; each agent got exactly one task per step
  (ListTasks on each runtime, by the run's idempotency keys), and d's task holds b's and c's
  outputs. A workflow on `* * * * *` starts a run at the next minute boundary, which completes.
- A restart: the sandbox keeps its cluster in memory, so this part runs the workflow-controller
  binary against `kaos-testkit serve` (set up by `kaosctl dev --kubeconfig ... --exit-when-ready`).
  A step made slow by a real MCP tool that waits (the runtime calls it, then answers) is in
  flight when the controller is killed (SIGKILL); another one takes over, and the run completes
  with no step sent twice and none lost.

Needs the runtime's Python (KAOS_AGENT_RUNTIME) and the binaries of `cargo build --workspace`:
kaosctl, kaos-testkit and workflow-controller, in target/debug or KAOS_BIN_DIR (KAOSCTL names
kaosctl alone). About a minute: the scheduled run waits for the next minute boundary, meanwhile
the other tests run. See docs/testing.md.
"""

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from litellm_proxy import stop
from test_real_runtime import REPO, RUNTIME_PYTHON, free_port, http, rendered_env, wait_until_up

BIN_DIR = Path(os.environ.get("KAOS_BIN_DIR", REPO / "target" / "debug"))
KAOSCTL = Path(os.environ.get("KAOSCTL", BIN_DIR / "kaosctl"))
NAMESPACE = "demo"
# What each agent's mocked model answers.
ANSWERS = {"a": "a found three facts", "b": "b weighed the risks", "c": "c listed the options",
           "d": "d wrote the brief"}
SLOW_SECONDS = 4
SLOW_ANSWER = "slow is done waiting"
IDEMPOTENCY_KEY = "kaos.tools/idempotency-key"
FINISHED = ("Succeeded", "Failed", "Canceled")

AGENTS = "".join(f"""
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  modelAPI: llm
  model: mock
  config: {{description: Agent {name}, instructions: Answer briefly.}}
""" for name in [*ANSWERS, "slow"])

CLUSTER = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {{name: llm, namespace: {NAMESPACE}}}
spec: {{mode: Proxy, proxyConfig: {{models: ["*"]}}}}
{AGENTS}
---
apiVersion: kaos.tools/v1alpha1
kind: AgentWorkflow
metadata: {{name: persist, namespace: {NAMESPACE}}}
spec:
  steps:
    - {{name: first, agentRef: a, input: "start"}}
    - {{name: slow, agentRef: slow, dependsOn: [first], input: "wait after {{{{ steps.first.output }}}}"}}
    - {{name: last, agentRef: d, dependsOn: [slow], input: "after {{{{ steps.slow.output }}}}"}}
"""

SANDBOX = CLUSTER + f"""
---
apiVersion: kaos.tools/v1alpha1
kind: AgentWorkflow
metadata: {{name: diamond, namespace: {NAMESPACE}}}
spec:
  input: the workflow's own input
  steps:
    - {{name: a, agentRef: a, input: "Find the facts in {{{{ input }}}}"}}
    - {{name: b, agentRef: b, dependsOn: [a], input: "Risks of: {{{{ steps.a.output }}}}"}}
    - {{name: c, agentRef: c, dependsOn: [a], input: "Options for: {{{{ steps.a.output }}}}"}}
    - name: d
      agentRef: d
      dependsOn: [b, c]
      input: "Brief from {{{{ steps.b.output }}}} and {{{{ steps.c.output }}}}"
---
apiVersion: kaos.tools/v1alpha1
kind: AgentWorkflow
metadata: {{name: every-minute, namespace: {NAMESPACE}}}
spec:
  schedule: "* * * * *"
  successfulRunsHistoryLimit: 5
  steps:
    - {{name: tick, agentRef: c, input: tick}}
"""

# A FastMCP server whose tool waits: a real tool call that makes the real runtime slow.
CLOCK_SERVER = '''
import asyncio, sys
from fastmcp import FastMCP

mcp = FastMCP("clock")

@mcp.tool
async def wait(seconds: float) -> str:
    """Waits this many seconds."""
    await asyncio.sleep(seconds)
    return f"waited {seconds}s"

mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]))
'''


def poll(what, look, timeout=30, interval=0.2):
    """look()'s first truthy value, within timeout seconds (else fails naming the last one)."""
    deadline = time.monotonic() + timeout
    while True:
        value = look()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s (last: {value!r})")
        time.sleep(interval)


class Api:
    """The kaos.tools resources of a cluster, read with its kubeconfig's token."""

    def __init__(self, kubeconfig):
        config = yaml.safe_load(Path(kubeconfig).read_text())
        self.server = config["clusters"][0]["cluster"]["server"].rstrip("/")
        self.token = config["users"][0]["user"].get("token")

    def get(self, path):
        request = urllib.request.Request(f"{self.server}{path}")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def runs(self):
        return self.get(f"/apis/kaos.tools/v1alpha1/namespaces/{NAMESPACE}/agentworkflowruns")["items"]

    def run(self, name):
        return self.get(f"/apis/kaos.tools/v1alpha1/namespaces/{NAMESPACE}/agentworkflowruns/{name}")

    def workflow(self, name):
        return self.get(f"/apis/kaos.tools/v1alpha1/namespaces/{NAMESPACE}/agentworkflows/{name}")

    def finished(self, name, timeout=30):
        """The run once it is over."""
        def look():
            run = self.run(name)
            return run if (run.get("status") or {}).get("phase") in FINISHED else None
        return poll(f"run {name} to finish", look, timeout)


def kaosctl(*args):
    """kaosctl's stdout; fails with its stderr."""
    done = subprocess.run([str(KAOSCTL), *args], capture_output=True, text=True)
    assert done.returncode == 0, f"kaosctl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def tasks_of(url, run):
    """The tasks a runtime holds for the steps of one run: their idempotency keys are
    `<run uid>/<step>/<attempt>`. (The two clusters share the runtimes, and kaos-testkit's uids
    are a counter, so the uid alone may name a run of each; the step names differ.)"""
    status, body = http("POST", f"{url}/", {"jsonrpc": "2.0", "id": 1, "method": "ListTasks"})
    assert status == 200 and "result" in body, body
    uid = run["metadata"]["uid"]
    prefixes = tuple(f"{uid}/{step['name']}/" for step in run["status"]["plan"])
    return [t for t in body["result"]["tasks"]
            if (t.get("metadata") or {}).get(IDEMPOTENCY_KEY, "").startswith(prefixes)]


def keys(tasks):
    return sorted(t["metadata"][IDEMPOTENCY_KEY] for t in tasks)


def asked(task):
    """The text a task was sent."""
    return next(m["parts"][0]["text"] for m in task["history"] if m["role"] == "user")


def steps_of(run):
    return {s["name"]: s for s in run["status"]["steps"]}


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory):
    """A real runtime per agent on a local port, and the clock MCP server `slow` calls:
    {agent: url}."""
    for binary in [KAOSCTL, BIN_DIR / "kaos-testkit", BIN_DIR / "workflow-controller"]:
        assert binary.exists(), f"{binary} is missing: cargo build --workspace (or set KAOS_BIN_DIR)"
    directory = tmp_path_factory.mktemp("workflow-runtimes")
    manifest = directory / "agents.yaml"
    manifest.write_text(CLUSTER)
    rendered = subprocess.run([str(KAOSCTL), "render", "-f", str(manifest)], check=True,
                              capture_output=True, text=True)
    objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    ports = {name: free_port() for name in [*ANSWERS, "slow", "clock"]}
    # The runtime refills its mocked answers at each request's start, in one list per process:
    # spare copies keep two requests at once (a scheduled tick beside a step) both answered.
    mocks = {name: [answer] * 4 for name, answer in ANSWERS.items()}
    # Per request: the slow tool call, then the answer.
    mocks["slow"] = [json.dumps({"tool_calls": [{"name": "wait", "arguments": {"seconds": SLOW_SECONDS}}]}),
                     SLOW_ANSWER]
    processes, waits = [], []

    def start(name, command, env, url):
        log = directory / f"{name}.log"
        process = subprocess.Popen(command, env=env, stdout=log.open("w"),
                                   stderr=subprocess.STDOUT, cwd=directory)
        processes.append(process)
        waits.append((url, process, log))

    try:
        script = directory / "clock.py"
        script.write_text(CLOCK_SERVER)
        start("clock", [RUNTIME_PYTHON, str(script), str(ports["clock"])], dict(os.environ),
              f"http://127.0.0.1:{ports['clock']}/mcp")
        for name in [*ANSWERS, "slow"]:
            env = {"PATH": os.environ.get("PATH", ""), "HOME": str(directory),
                   **rendered_env(objects, f"agent-{name}"),
                   "AGENT_PORT": str(ports[name]), "DEBUG_MOCK_RESPONSES": json.dumps(mocks[name])}
            if name == "slow":
                # What an Agent with `mcpServers: [clock]` carries, at the local server.
                env.update(MCP_SERVERS="clock", MCP_SERVER_clock_URL=f"http://127.0.0.1:{ports['clock']}")
            command = [RUNTIME_PYTHON, "-m", "uvicorn", "pais.server:get_app", "--factory",
                       "--host", "127.0.0.1", "--port", str(ports[name])]
            start(name, command, env, f"http://127.0.0.1:{ports[name]}/health")
        for url, process, log in waits:
            wait_until_up(url, process, log)
        yield {name: f"http://127.0.0.1:{port}" for name, port in ports.items() if name != "clock"}
    finally:
        for process in processes:
            stop(process)


def agent_addresses(runtimes):
    return [f"{NAMESPACE}/{name}={url.removeprefix('http://')}" for name, url in runtimes.items()]


@pytest.fixture(scope="module")
def sandbox(runtimes, tmp_path_factory):
    """`kaosctl dev` with the agents, the diamond and the scheduled workflow, its steps sent to
    the runtimes: (Api, a function returning its output so far, its kubeconfig)."""
    directory = tmp_path_factory.mktemp("workflow-sandbox")
    manifest = directory / "workflows.yaml"
    manifest.write_text(SANDBOX)
    kubeconfig = directory / "kubeconfig"
    log = directory / "kaosctl-dev.log"
    command = [str(KAOSCTL), "dev", "--listen", "127.0.0.1:0", "--write-kubeconfig", str(kubeconfig),
               "--apply", str(manifest)]
    for address in agent_addresses(runtimes):
        command += ["--agent-address", address]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=directory)
    try:
        def ready():
            if process.poll() is not None:
                pytest.fail(f"kaosctl dev exited ({process.returncode}):\n{log.read_text()}")
            return "all resources are Ready" in log.read_text()
        poll("the sandbox to be Ready", ready, timeout=60)
        yield Api(kubeconfig), log.read_text, kubeconfig
    finally:
        stop(process)


def test_a_diamond_runs_on_the_real_runtimes(sandbox, runtimes):
    api, output, kubeconfig = sandbox
    for workflow in ["diamond", "every-minute", "persist"]:
        assert re.search(rf"^AgentWorkflow\s+{workflow}\s+Ready$", output(), re.M), output()

    name = kaosctl("workflow", "run", "diamond", "-n", NAMESPACE, "--input", "the notes of week 12",
                   "--kubeconfig", str(kubeconfig)).strip()
    assert name.startswith("diamond-manual-"), name
    run = api.finished(name)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert run["spec"] == {"workflowRef": "diamond", "trigger": "Manual", "input": "the notes of week 12"}
    steps = steps_of(run)
    assert {n: (s["phase"], s["attempt"], s["output"]) for n, s in steps.items()} == \
        {n: ("Succeeded", 1, answer) for n, answer in ANSWERS.items()}

    # One task per step, each on its own agent, sent what its template says.
    uid = run["metadata"]["uid"]
    tasks = {agent: tasks_of(runtimes[agent], run) for agent in ANSWERS}
    assert {agent: keys(t) for agent, t in tasks.items()} == {a: [f"{uid}/{a}/1"] for a in ANSWERS}
    assert all(t[0]["status"]["state"] == "completed" for t in tasks.values())
    assert asked(tasks["a"][0]) == "Find the facts in the notes of week 12"
    assert asked(tasks["b"][0]) == f"Risks of: {ANSWERS['a']}"
    assert asked(tasks["c"][0]) == f"Options for: {ANSWERS['a']}"
    assert asked(tasks["d"][0]) == f"Brief from {ANSWERS['b']} and {ANSWERS['c']}"
    # d's runtime kept the exchange in its memory, as with any A2A task.
    status, events = http("GET", f"{runtimes['d']}/memory/events")
    assert status == 200, events
    contents = [e["content"] for e in events["events"]]
    assert f"Brief from {ANSWERS['b']} and {ANSWERS['c']}" in contents, contents

    # What the user sees: `kaosctl dev` follows the run, `kaosctl workflow runs` lists it.
    line = f"run {NAMESPACE}/{name}  Succeeded  a Succeeded, b Succeeded, c Succeeded, d Succeeded"
    poll("kaosctl dev to show the run", lambda: line in output(), timeout=10)
    listed = kaosctl("workflow", "runs", "diamond", "-n", NAMESPACE, "--kubeconfig", str(kubeconfig))
    assert re.search(rf"^{name}\s+Succeeded\s+Manual\s", listed, re.M), listed


def test_a_step_in_flight_survives_a_workflow_controller_restart(runtimes, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    testkit = subprocess.Popen(
        [str(BIN_DIR / "kaos-testkit"), "serve", "--listen", "127.0.0.1:0", "--simulate-deployments",
         "100", "--kubeconfig", str(kubeconfig)],
        stdout=(tmp_path / "testkit.log").open("w"), stderr=subprocess.STDOUT)
    controllers = []
    try:
        poll("kaos-testkit to serve", kubeconfig.exists, timeout=30)
        manifest = tmp_path / "cluster.yaml"
        manifest.write_text(CLUSTER)
        # The CRDs, the agents Ready and the workflow validated, by kaosctl's controllers; they
        # stop (handing their Leases over) once all is Ready.
        kaosctl("dev", "--kubeconfig", str(kubeconfig), "--install-crds", "--apply", str(manifest),
                "--exit-when-ready", "--timeout", "60")
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), POD_NAMESPACE="default",
                   AGENT_ADDRESS_OVERRIDES=",".join(agent_addresses(runtimes)),
                   # A killed leader's Lease is taken over once it expires.
                   LEASE_DURATION="3s", RENEW_DEADLINE="2s", RETRY_PERIOD="500ms")

        def start_controller():
            number = len(controllers) + 1
            controllers.append(subprocess.Popen(
                [str(BIN_DIR / "workflow-controller")],
                env=dict(env, POD_NAME=f"workflow-controller-{number}",
                         METRICS_BIND_ADDRESS=f"127.0.0.1:{free_port()}",
                         HEALTH_PROBE_BIND_ADDRESS=f"127.0.0.1:{free_port()}"),
                stdout=(tmp_path / f"workflow-controller-{number}.log").open("w"),
                stderr=subprocess.STDOUT))
            return controllers[-1]

        first = start_controller()
        api = Api(kubeconfig)
        name = kaosctl("workflow", "run", "persist", "-n", NAMESPACE, "--kubeconfig", str(kubeconfig)).strip()
        def planned():
            run = api.run(name)
            return run if (run.get("status") or {}).get("plan") else None
        started = poll("the run to start", planned)
        uid = started["metadata"]["uid"]
        # The slow step's task is on its agent, working (its tool call takes SLOW_SECONDS).
        poll("the slow step's task", lambda: [t for t in tasks_of(runtimes["slow"], started)
                                              if t["status"]["state"] == "working"])
        before = steps_of(api.run(name))["slow"]
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert before["phase"] in ("Dispatching", "Running"), before
        assert [t["status"]["state"] for t in tasks_of(runtimes["slow"], started)] == ["working"], \
            "killed while the step was in flight"

        start_controller()
        run = api.finished(name)
        assert run["status"]["phase"] == "Succeeded", run["status"]
        steps = steps_of(run)
        assert {n: (s["phase"], s["attempt"], s["output"]) for n, s in steps.items()} == {
            "first": ("Succeeded", 1, ANSWERS["a"]),
            "slow": ("Succeeded", 1, SLOW_ANSWER),
            "last": ("Succeeded", 1, ANSWERS["d"]),
        }
        # Sent once each, none lost: the new controller found the slow task by its key.
        assert keys(tasks_of(runtimes["a"], run)) == [f"{uid}/first/1"]
        slow = tasks_of(runtimes["slow"], run)
        assert keys(slow) == [f"{uid}/slow/1"]
        assert asked(slow[0]) == f"wait after {ANSWERS['a']}"
        last = tasks_of(runtimes["d"], run)
        assert keys(last) == [f"{uid}/last/1"]
        assert asked(last[0]) == f"after {SLOW_ANSWER}"
    finally:
        for process in [*controllers, testkit]:
            stop(process)


def test_a_scheduled_workflow_runs_at_the_next_minute(sandbox, runtimes):
    api, output, _ = sandbox
    created = datetime.fromisoformat(api.workflow("every-minute")["metadata"]["creationTimestamp"])
    due = created.replace(second=0, microsecond=0) + timedelta(minutes=1)
    wait = (due - datetime.now(due.tzinfo)).total_seconds()

    def scheduled():
        runs = [r for r in api.runs() if r["spec"]["workflowRef"] == "every-minute"]
        return sorted(runs, key=lambda r: r["spec"]["scheduledTime"])
    runs = poll("the scheduled run", scheduled, timeout=max(wait, 0) + 15, interval=0.5)
    first = runs[0]
    assert first["spec"]["trigger"] == "Schedule"
    assert datetime.fromisoformat(first["spec"]["scheduledTime"]) == due, (created, first["spec"])
    started = datetime.fromisoformat(first["metadata"]["creationTimestamp"])
    assert timedelta(0) <= started - due <= timedelta(seconds=5), (due, started)

    run = api.finished(first["metadata"]["name"])
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert steps_of(run)["tick"]["output"] == ANSWERS["c"]
    uid = run["metadata"]["uid"]
    assert keys(tasks_of(runtimes["c"], run)) == [f"{uid}/tick/1"]
    # A line it follows, or its summary's runs when the run was over before it was Ready.
    line = f"{first['metadata']['name']}  Succeeded  tick Succeeded\n"
    poll("kaosctl dev to show the scheduled run", lambda: line in output(), timeout=10)
