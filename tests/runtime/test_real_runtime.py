"""The real KAOS 0.8.4 agent runtime (pydantic-ai-server, `DEBUG_MOCK_RESPONSES` in place of a
model) started with exactly the environment our Agent Deployments carry: what makes "drop-in" a
fact rather than a claim.

An Agent with one MCP server, one peer, memory settings and task budgets is rendered by
`kaosctl render` (the controllers' own pure builders); each runtime gets its container's env with
only the Service URLs rewritten to local ports (and `AGENT_PORT`, which the runtime puts in its
agent card). The MCP server is a real FastMCP tool server, the peer a second runtime. Asserted:
the rendered probes (liveness `/health`, readiness `/.well-known/agent.json`, the MCP server's TCP
port) answer on the real processes; the agent card lists the MCP tool and `delegate_to_<peer>`; an A2A
`SendMessage` then `GetTask` completes; `/v1/chat/completions` answers; the mocked tool call
reaches the MCP server and the mocked delegation reaches the peer.

Needs the runtime's Python (KAOS_AGENT_RUNTIME, `scripts/python-tool agent-runtime python`; without
it every test here fails, see conftest.py) and target/debug/kaosctl (`cargo build -p kaosctl`). See
docs/testing.md.
"""

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KAOSCTL = Path(os.environ.get("KAOSCTL", REPO / "target" / "debug" / "kaosctl"))
RUNTIME_PYTHON = os.environ.get("KAOS_AGENT_RUNTIME")
NAMESPACE = "demo"
STARTUP_TIMEOUT = 60


MANIFEST = f"""
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {{name: llm, namespace: {NAMESPACE}}}
spec: {{mode: Proxy, proxyConfig: {{models: ["*"]}}}}
---
apiVersion: kaos.tools/v1alpha1
kind: MCPServer
metadata: {{name: tools, namespace: {NAMESPACE}}}
spec: {{runtime: custom, container: {{image: example/fastmcp-tools:1}}}}
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {{name: worker, namespace: {NAMESPACE}}}
spec:
  modelAPI: llm
  model: mock
  config: {{description: Answers questions, instructions: Answer briefly.}}
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {{name: coordinator, namespace: {NAMESPACE}}}
spec:
  modelAPI: llm
  model: mock
  mcpServers: [tools]
  agentNetwork: {{access: [worker]}}
  config:
    description: Coordinates the team
    instructions: Use your tools, and delegate to the worker.
    memory: {{contextLimit: 8, maxSessions: 50}}
    taskConfig: {{maxIterations: 4, maxRuntimeSeconds: 60, maxToolCalls: 3}}
"""

# A FastMCP server with one tool that records each call, served over streamable HTTP at /mcp
# (what an MCPServer's Service serves).
MCP_SERVER = '''
import os, sys
from fastmcp import FastMCP

mcp = FastMCP("tools")

@mcp.tool
def echo(text: str) -> str:
    """Echoes the text back."""
    with open(os.environ["CALLS_FILE"], "a") as calls:
        calls.write(text + "\\n")
    return f"echo: {text}"

mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]))
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None):
    """(status, parsed JSON body) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def wait_until_up(url, process, log):
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{url}: the process exited ({process.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers (the MCP endpoint refuses a plain GET)
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{url} did not answer within {STARTUP_TIMEOUT}s:\n{log.read_text()}")


def rendered_env(objects, deployment):
    """The main container's env of a rendered Deployment, as {name: value}."""
    found = next(o for o in objects
                 if o["kind"] == "Deployment" and o["metadata"]["name"] == deployment)
    container = found["spec"]["template"]["spec"]["containers"][0]
    assert all("value" in e for e in container["env"]), "this Agent reads no Secret"
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """The rendered objects, and the runtimes and the MCP server running on local ports."""
    assert KAOSCTL.exists(), f"{KAOSCTL} is missing: cargo build -p kaosctl"
    directory = tmp_path_factory.mktemp("runtime")
    manifest = directory / "team.yaml"
    manifest.write_text(MANIFEST)
    rendered = subprocess.run([str(KAOSCTL), "render", "-f", str(manifest)], check=True,
                              capture_output=True, text=True)
    objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    ports = {"tools": free_port(), "worker": free_port(), "coordinator": free_port()}
    # Where each Service would be, and where it is here.
    local = {f"http://{kind}-{name}.{NAMESPACE}.svc.cluster.local:8000": f"http://127.0.0.1:{ports[name]}"
             for kind, name in [("mcpserver", "tools"), ("agent", "worker"), ("agent", "coordinator")]}
    calls = directory / "calls.txt"
    calls.touch()
    mocks = {
        "worker": ["the worker says hi"],
        # Per request: a call of the MCP tool, a delegation to the peer, then the answer.
        "coordinator": [
            json.dumps({"tool_calls": [{"name": "echo", "arguments": {"text": "hello"}}]}),
            json.dumps({"tool_calls": [{"name": "delegate_to_worker",
                                        "arguments": {"task": "say hi"}}]}),
            "the coordinator is done",
        ],
    }
    processes = []

    def start(name, command, env):
        log = directory / f"{name}.log"
        process = subprocess.Popen(command, env=env, stdout=log.open("w"),
                                   stderr=subprocess.STDOUT, cwd=directory)
        processes.append(process)
        return process, log

    try:
        script = directory / "mcp_server.py"
        script.write_text(MCP_SERVER)
        env = dict(os.environ, CALLS_FILE=str(calls))
        process, log = start("tools", [RUNTIME_PYTHON, str(script), str(ports["tools"])], env)
        wait_until_up(f"http://127.0.0.1:{ports['tools']}/mcp", process, log)
        for name in ["worker", "coordinator"]:
            env = {"PATH": os.environ.get("PATH", ""), "HOME": str(directory)}
            for key, value in rendered_env(objects, f"agent-{name}").items():
                for service, address in local.items():
                    value = value.replace(service, address)
                env[key] = value
            env["AGENT_PORT"] = str(ports[name])
            env["DEBUG_MOCK_RESPONSES"] = json.dumps(mocks[name])
            command = [RUNTIME_PYTHON, "-m", "uvicorn", "pais.server:get_app", "--factory",
                       "--host", "127.0.0.1", "--port", str(ports[name])]
            process, log = start(name, command, env)
            wait_until_up(f"http://127.0.0.1:{ports[name]}/health", process, log)
        yield {"objects": objects, "calls": calls, "directory": directory,
               "url": {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}}
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def test_the_rendered_env_is_what_the_runtime_reads(team):
    env = rendered_env(team["objects"], "agent-coordinator")
    assert env["MCP_SERVERS"] == "tools"
    assert env["MCP_SERVER_tools_URL"] == f"http://mcpserver-tools.{NAMESPACE}.svc.cluster.local:8000"
    assert env["PEER_AGENTS"] == "worker"
    assert env["PEER_AGENT_WORKER_CARD_URL"] == f"http://agent-worker.{NAMESPACE}.svc.cluster.local:8000"
    assert (env["TASK_MAX_ITERATIONS"], env["TASK_MAX_TOOL_CALLS"]) == ("4", "3")
    assert (env["MEMORY_ENABLED"], env["MEMORY_CONTEXT_LIMIT"]) == ("true", "8")


def rendered_probes(objects, deployment):
    """{"liveness"|"readiness": probe} of a rendered Deployment's main container."""
    found = next(o for o in objects
                 if o["kind"] == "Deployment" and o["metadata"]["name"] == deployment)
    container = found["spec"]["template"]["spec"]["containers"][0]
    return {kind: container[f"{kind}Probe"] for kind in ["liveness", "readiness"]}


def test_the_generated_probes_answer_on_the_real_runtime(team):
    """What the kubelet will ask, asked of the real runtime: a path the runtime drops fails here."""
    for name in ["worker", "coordinator"]:
        probes = rendered_probes(team["objects"], f"agent-{name}")
        paths = {kind: probe["httpGet"]["path"] for kind, probe in probes.items()}
        assert paths == {"liveness": "/health", "readiness": "/.well-known/agent.json"}, paths
        for kind, path in paths.items():
            status, body = http("GET", f"{team['url'][name]}{path}")
            assert status == 200 and body["name"] == name, (kind, path, body)


def test_the_generated_tcp_probe_reaches_the_real_mcp_server(team):
    probes = rendered_probes(team["objects"], "mcpserver-tools")
    assert {p["tcpSocket"]["port"] for p in probes.values()} == {8000}, probes
    with socket.create_connection(("127.0.0.1", int(team["url"]["tools"].rsplit(":", 1)[1])),
                                  timeout=5):
        pass


def test_the_agent_card_lists_the_mcp_tool_and_the_peer(team):
    status, card = http("GET", f"{team['url']['coordinator']}/.well-known/agent.json")
    assert status == 200, card
    assert card["name"] == "coordinator"
    assert card["description"] == "Coordinates the team"
    skills = {s["name"] for s in card["skills"]}
    assert {"echo", "delegate_to_worker"} <= skills, skills


def test_an_a2a_task_completes_calling_the_mcp_tool_and_the_peer(team):
    coordinator = team["url"]["coordinator"]
    status, sent = http("POST", f"{coordinator}/", {
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"role": "user", "parts": [{"type": "text", "text": "echo hello"}]}}})
    assert status == 200 and "result" in sent, sent
    task_id = sent["result"]["id"]
    deadline = time.monotonic() + 30
    while True:
        status, got = http("POST", f"{coordinator}/", {
            "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}})
        assert status == 200 and "result" in got, got
        state = got["result"]["status"]["state"]
        if state in ("completed", "failed", "canceled") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state == "completed", got
    answers = [p["text"] for m in got["result"]["history"] if m["role"] == "agent"
               for p in m["parts"] if p.get("type") == "text"]
    assert answers[-1] == "the coordinator is done", got
    assert "hello" in team["calls"].read_text().splitlines(), "the tool call reached the MCP server"
    status, events = http("GET", f"{team['url']['worker']}/memory/events")
    assert status == 200, events
    assert [e["content"] for e in events["events"]] [-2:] == ["say hi", "the worker says hi"], \
        "the delegation reached the peer, which answered"


def test_chat_completions_answer(team):
    status, body = http("POST", f"{team['url']['coordinator']}/v1/chat/completions", {
        "model": "coordinator", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200, body
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "the coordinator is done"
