"""A budgeted Agent on a cluster, each test body run on kaos-testkit and on the real kube-apiserver
of scripts/control-plane, with the real binaries under the chart's ServiceAccounts (as
test_operator.py) and the real LiteLLM proxy (pinned litellm==1.110.2) as a local process:

1. the ModelAPI controller writes the agent's entry into the LiteLLM config (its alias, its limit,
   `model_info.id` the Agent's UID);
2. that config, read back from the cluster, is what LiteLLM runs (kwok's pods serve nothing, so
   the proxy runs here, in front of a fake OpenAI upstream answering 150 tokens a call);
3. the agent controller's usage collector reads that proxy's /metrics/ (USAGE_ADDRESS_OVERRIDES
   stands for the pod addresses) and writes `status.usage` and `BudgetExceeded`, which
   `kubectl get agents` shows in its Tokens and Budget columns.

Needs what test_operator.py needs, and KAOS_LITELLM (`scripts/python-tool litellm bin litellm`);
a missing tool fails the test, it never skips (docs/testing.md)."""

import os
import sys
import textwrap

import yaml

from plane import REPO, create_namespace, delete_namespace, wait_until

sys.path.insert(0, str(REPO / "tests" / "runtime"))
from fake_openai import FakeOpenAI  # noqa: E402
from litellm_proxy import Proxy, calls, need, statuses  # noqa: E402

BUDGETS = "budgets"
KAOS = "/apis/kaos.tools/v1alpha1"
ALIAS = f"kaos.{BUDGETS}.researcher"
TOKENS_PER_DAY = 400  # the fourth call of 150 tokens is refused



def apply(cluster, text):
    cluster.kubectl("apply", "-n", BUDGETS, "-f", "-", stdin=textwrap.dedent(text))


def get(cluster, path):
    return cluster.get(f"/api/v1/namespaces/{BUDGETS}/{path}")


def test_a_budgeted_agent_is_stopped_and_its_usage_shown(cluster, controllers, tmp_path):
    litellm = need(os.environ.get("KAOS_LITELLM"), "KAOS_LITELLM")
    assert litellm
    create_namespace(cluster, BUDGETS)
    try:
        # kwok's pods serve nothing: no model check could succeed here.
        controllers.start("modelapi-controller", 1, {"PROTOCOL_CHECKS": "false"})
        apply(cluster, f"""
            apiVersion: kaos.tools/v1alpha1
            kind: ModelAPI
            metadata: {{name: llm, namespace: {BUDGETS}}}
            spec:
              mode: Proxy
              proxyConfig:
                provider: openai
                models: [gpt-4o]
                apiBase: https://api.openai.com/v1
                apiKey: {{value: sk-upstream-test-key}}
            ---
            apiVersion: kaos.tools/v1alpha1
            kind: Agent
            metadata: {{name: researcher, namespace: {BUDGETS}}}
            spec:
              modelAPI: llm
              model: gpt-4o
              budget: {{tokensPerDay: {TOKENS_PER_DAY}}}
            """)
        agent = cluster.get(f"{KAOS}/namespaces/{BUDGETS}/agents/researcher")
        uid = agent["metadata"]["uid"]

        def entry_written():
            config_map = get(cluster, "configmaps/litellm-config-llm") or {}
            text = config_map.get("data", {}).get("config.yaml", "")
            entries = {e["model_name"]: e for e in (yaml.safe_load(text) or {}).get("model_list", [])}
            return ALIAS in entries and entries[ALIAS]["model_info"]["id"] == uid, entries
        wait_until("the agent's entry, keyed on its UID, in the LiteLLM config", entry_written)

        # The proxy runs the config and env the cluster holds (its Secret, its Deployment).
        objects = [cluster.get(f"/apis/apps/v1/namespaces/{BUDGETS}/deployments/modelapi-llm"),
                   get(cluster, "configmaps/litellm-config-llm"),
                   get(cluster, "secrets/modelapi-llm-api-key")]
        with FakeOpenAI() as upstream:
            proxy = Proxy(objects, "llm", tmp_path, upstream)
            try:
                proxy.wait_ready()
                controllers.start("agent-controller", 1, {
                    "USAGE_ADDRESS_OVERRIDES": f"{BUDGETS}/llm=127.0.0.1:{proxy.port}",
                    "USAGE_SCRAPE_INTERVAL_SECONDS": "1",
                    "USAGE_STATUS_INTERVAL_SECONDS": "1",
                })
                assert statuses(calls(proxy, ALIAS, 4)) == [200, 200, 200, 429]

                def exceeded():
                    status = (cluster.get(f"{KAOS}/namespaces/{BUDGETS}/agents/researcher") or {}).get("status", {})
                    conditions = {c["type"]: c for c in status.get("conditions", [])}
                    budget = conditions.get("BudgetExceeded", {})
                    reported = conditions.get("UsageReported", {})
                    done = (status.get("usage", {}).get("totalTokens") == 450
                            and (budget.get("status"), budget.get("reason")) == ("True", "TokensPerDay")
                            and reported.get("status") == "True")
                    return done, status
                status = wait_until("the agent's usage and BudgetExceeded in its status",
                                    exceeded)[1]
                # What `kubectl get agents` shows: the Tokens and Budget columns.
                shown = cluster.kubectl("get", "agents", "-n", BUDGETS, "researcher").stdout
                header, row = (line.split() for line in shown.strip().splitlines())
                cells = dict(zip(header, row))
                assert (cells["TOKENS"], cells["BUDGET"]) == ("450", "TokensPerDay"), (shown, status)
            finally:
                proxy.stop()
    finally:
        # While the controllers still run: only they remove their finalizers.
        delete_namespace(cluster, BUDGETS)
        wait_until(f"namespace {BUDGETS} to be deleted",
                   lambda: cluster.get(f"/api/v1/namespaces/{BUDGETS}") is None)
