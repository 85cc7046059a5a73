"""The real LiteLLM proxy (the version the default image tag tracks, pinned in
litellm.requirements.txt) started exactly as our Proxy ModelAPI pods start it: the config, args
and env that `kaosctl render` (the controller's own pure builder) produces, with only the
provider's address rewritten to a local fake upstream (fake_openai.py) and the config's mount
path to a local file.

Asserted, for the generated config and for a user's `configYaml`: the proxy starts, the
rendered probes' paths (readiness `/health/readiness`, liveness `/health/liveliness`) answer
without calling the upstream, and a chat completion sent the way the agent
runtime sends it (`Authorization: Bearer not-needed`) reaches the upstream with the provider key
from the ModelAPI's Secret. Then the whole chain: the real agent runtime (pydantic-ai-server
0.8.4, no mock) answers an A2A task through that LiteLLM. And the reason for the env we add:
without it this LiteLLM refuses to start on the same config, so a LiteLLM that drops or changes
the check shows up here first.

Needs KAOS_LITELLM (the proxy's `litellm` script: `scripts/python-tool litellm bin litellm`),
KAOS_AGENT_RUNTIME (`scripts/python-tool agent-runtime python`) and target/debug/kaosctl. A missing
tool fails the test; it never skips. See docs/testing.md ("The real LiteLLM proxy").
"""

import os
import time

import pytest

from fake_openai import FakeOpenAI
from litellm_proxy import (AGENT_AUTHORIZATION, UPSTREAM_KEY, Proxy, find, http, need,
                           proxy_modelapi, render, start_agent_runtime, stop)

RUNTIME_PYTHON = os.environ.get("KAOS_AGENT_RUNTIME")
NAMESPACE = "demo"

MANIFEST = proxy_modelapi("generated", NAMESPACE) + f"""---
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {{name: custom, namespace: {NAMESPACE}}}
spec:
  mode: Proxy
  proxyConfig:
    models: ["openai/*"]
    apiKey: {{value: {UPSTREAM_KEY}}}
    configYaml:
      fromString: |
        model_list:
          - model_name: openai/gpt-4o
            litellm_params:
              model: openai/gpt-4o
              api_base: os.environ/PROXY_API_BASE
              api_key: os.environ/PROXY_API_KEY
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {{name: assistant, namespace: {NAMESPACE}}}
spec:
  modelAPI: generated
  model: gpt-4o
  config: {{description: Answers questions, instructions: Answer briefly.}}
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    directory = tmp_path_factory.mktemp("litellm")
    return directory, render(directory, MANIFEST)


@pytest.fixture(scope="module")
def proxies(rendered):
    """The generated and the custom config served by LiteLLM, and the same generated config
    without our permit, all started at once (each start takes tens of seconds)."""
    directory, objects = rendered
    with FakeOpenAI(reply="the upstream says hi") as upstream:
        started = {
            "generated": Proxy(objects, "generated", directory, upstream),
            "custom": Proxy(objects, "custom", directory, upstream),
            "no-permit": Proxy(objects, "generated", directory, upstream, permit=False),
        }
        try:
            yield upstream, started
        finally:
            for proxy in started.values():
                proxy.stop()


def test_without_the_permit_this_litellm_refuses_to_start(proxies):
    _, started = proxies
    text = started["no-permit"].wait_refusal()
    assert "no master key is set" in text, text


@pytest.mark.parametrize("name,model", [("generated", "gpt-4o"), ("custom", "openai/gpt-4o")])
def test_the_proxy_starts_and_a_completion_reaches_the_upstream(proxies, name, model):
    upstream, started = proxies
    proxy = started[name]
    status, body = proxy.wait_ready()
    assert status == 200 and body["status"] == "healthy", body
    before_probes = len(upstream.completions())
    # The rendered probes, asked of the real proxy (readiness never `/health`, which calls every
    # model upstream).
    probes = {kind: proxy.container[f"{kind}Probe"]["httpGet"]["path"]
              for kind in ["liveness", "readiness"]}
    assert probes == {"liveness": "/health/liveliness", "readiness": "/health/readiness"}, probes
    for kind, path in probes.items():
        assert http("GET", f"{proxy.url}{path}")[0] == 200, (kind, path)
    assert upstream.completions()[before_probes:] == [], "a probe called the model upstream"
    before = len(upstream.completions())
    status, body = http("POST", f"{proxy.url}/v1/chat/completions",
                        {"model": model, "messages": [{"role": "user", "content": "hi"}]},
                        {"Authorization": AGENT_AUTHORIZATION})
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == "the upstream says hi"
    assert body["usage"]["total_tokens"] == 150
    reached = upstream.completions()[before:]
    assert len(reached) == 1, reached
    headers = {k.lower(): v for k, v in reached[0]["headers"].items()}
    assert headers["authorization"] == f"Bearer {UPSTREAM_KEY}", "the provider key from the Secret"
    assert reached[0]["body"]["model"] == "gpt-4o"


def test_the_real_agent_runtime_answers_through_it(rendered, proxies):
    """The whole chain of a Proxy ModelAPI: an A2A task to the real runtime (no mock), its model
    call through the real LiteLLM with the key it can present, the upstream's answer back."""
    python = need(RUNTIME_PYTHON, "KAOS_AGENT_RUNTIME")
    directory, objects = rendered
    upstream, started = proxies
    litellm = started["generated"]
    litellm.wait_ready()
    deployment = find(objects, "Deployment", "agent-assistant")
    env = {}
    service = f"http://modelapi-generated.{NAMESPACE}.svc.cluster.local:8000"
    for var in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
        env[var["name"]] = var["value"].replace(service, litellm.url)
    assert env["MODEL_API_URL"] == litellm.url, "the agent is wired to the ModelAPI's Service"
    agent, url, log = start_agent_runtime(python, env, directory, "assistant")
    try:
        before = len(upstream.completions())
        status, sent = http("POST", f"{url}/", {
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"role": "user", "parts": [{"type": "text", "text": "hello"}]}}})
        assert status == 200 and "result" in sent, sent
        deadline = time.monotonic() + 60
        while True:
            status, got = http("POST", f"{url}/", {
                "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": sent["result"]["id"]}})
            assert status == 200 and "result" in got, got
            state = got["result"]["status"]["state"]
            if state in ("completed", "failed", "canceled") or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert state == "completed", f"{got}\n{log.read_text()}\n{litellm.log.read_text()[-3000:]}"
        answers = [p["text"] for m in got["result"]["history"] if m["role"] == "agent"
                   for p in m["parts"] if p.get("type") == "text"]
        assert answers[-1] == "the upstream says hi", got
        reached = upstream.completions()[before:]
        assert reached and reached[0]["body"]["model"] == "gpt-4o", reached
    finally:
        stop(agent)
