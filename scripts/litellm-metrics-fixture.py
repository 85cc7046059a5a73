#!/usr/bin/env python3
"""Writes crates/agent-controller/tests/fixtures/litellm-<version>-metrics.txt: the `/metrics/` of
the real LiteLLM proxy (scripts/python-tool litellm), as the agent controller's usage collector reads
it, for the collector's parser tests. One proxy on a config like the one the ModelAPI controller
generates for budgeted agents (docs/budgets.md), in front of tests/runtime/fake_openai.py (100
prompt and 50 completion tokens a call, $0.00075 at gpt-4o's price):

  kaos.demo.worker   tpd 400          5 calls: 3 answered, 2 refused (429, TPD)
  kaos.demo.spender  max_budget 0.002 4 calls: 3 answered, 1 refused (spend: model_id "")
  kaos.demo.minute   rpm 2            3 calls: 2 answered, 1 refused (429, RPM)
  gpt-4o             the shared entry 1 call

Usage: scripts/litellm-metrics-fixture.py (run it again when the pinned LiteLLM changes)."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "runtime"))
from fake_openai import FakeOpenAI  # noqa: E402

CALLS = [("kaos.demo.worker", 5), ("kaos.demo.spender", 4), ("kaos.demo.minute", 3), ("gpt-4o", 1)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url, model):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Bearer not-needed"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def main():
    litellm = subprocess.run([str(REPO / "scripts" / "python-tool"), "litellm", "bin", "litellm"],
                             check=True, capture_output=True, text=True).stdout.strip()
    version = subprocess.run([str(Path(litellm).parent / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('litellm'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    shared = {"model": "openai/gpt-4o", "api_base": "os.environ/PROXY_API_BASE",
              "api_key": "os.environ/PROXY_API_KEY"}

    def entry(agent, **limits):
        return {"model_name": f"kaos.demo.{agent}", "litellm_params": {**shared, **limits},
                "model_info": {"id": f"uid-{agent}"}}

    config = {"model_list": [{"model_name": "gpt-4o", "litellm_params": shared}, entry("worker", tpd=400),
                             entry("spender", max_budget=0.002, budget_duration="1d"), entry("minute", rpm=2)],
              "router_settings": {"optional_pre_call_checks": ["enforce_model_rate_limits"]},
              "litellm_settings": {"drop_params": True, "callbacks": ["prometheus"]}}
    with tempfile.TemporaryDirectory() as directory, FakeOpenAI() as upstream:
        path = Path(directory) / "config.yaml"
        path.write_text(json.dumps(config))  # JSON is YAML
        port = free_port()
        env = {"PATH": os.environ["PATH"], "HOME": directory, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "PROXY_API_BASE": upstream.url, "PROXY_API_KEY": "sk-upstream",
               "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"}
        log = open(Path(directory) / "litellm.log", "w")
        proxy = subprocess.Popen([litellm, "--config", str(path), "--port", str(port)], env=env, cwd=directory,
                                 stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"{url}/health/readiness", timeout=2)
                    break
                except OSError:
                    time.sleep(0.3)
            answered = {}
            for model, count in CALLS:
                for _ in range(count):
                    answered.setdefault(model, []).append(call(url, model))
                    time.sleep(0.3)  # LiteLLM counts a call after answering it
            assert answered == {"kaos.demo.worker": [200, 200, 200, 429, 429], "kaos.demo.spender": [200, 200, 200, 429],
                                "kaos.demo.minute": [200, 200, 429], "gpt-4o": [200]}, answered
            time.sleep(1)
            with urllib.request.urlopen(f"{url}/metrics/") as response:
                text = response.read().decode()
        finally:
            proxy.terminate()
            proxy.wait()
    header = (f"# The /metrics/ of the real LiteLLM {version} proxy, written by scripts/litellm-metrics-fixture.py\n"
              "# (its docstring says which calls were made). Read by crates/agent-controller/src/usage tests.\n")
    out = REPO / "crates" / "agent-controller" / "tests" / "fixtures" / f"litellm-{version}-metrics.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + text)
    print(out)


if __name__ == "__main__":
    main()
