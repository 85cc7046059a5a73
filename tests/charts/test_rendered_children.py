"""The children the controllers write, as `kaosctl render` prints them (the same pure builders),
validate strictly against the Kubernetes versions the chart supports: autoscalers, disruption
budgets and graph-derived NetworkPolicies included (docs/scaling.md, docs/network-policy.md).
Needs target/debug/kaosctl (`cargo build -p kaosctl`; scripts/test.sh builds it first)."""

import os
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from test_charts import KUBERNETES_VERSIONS

REPO = Path(__file__).resolve().parents[2]
KAOSCTL = Path(os.environ.get("KAOSCTL", REPO / "target" / "debug" / "kaosctl"))

MANIFESTS = """\
apiVersion: kaos.tools/v1alpha1
kind: ModelAPI
metadata: {name: llm}
spec: {mode: Proxy, proxyConfig: {models: ['*']}, replicas: 2}
---
apiVersion: kaos.tools/v1alpha1
kind: MCPServer
metadata: {name: tools}
spec:
  runtime: python-string
  params: 'x = 1'
  autoscaling: {maxReplicas: 3}
  podDisruptionBudget: {minAvailable: 50%}
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {name: coordinator}
spec:
  modelAPI: llm
  model: gpt-4o
  mcpServers: [tools]
  agentNetwork: {access: [worker]}
  autoscaling:
    minReplicas: 2
    maxReplicas: 6
    metrics:
      - type: External
        external:
          metric: {name: queue_depth}
          target: {type: AverageValue, averageValue: "30"}
---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {name: worker}
spec: {modelAPI: llm, model: gpt-4o}
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    assert KAOSCTL.is_file(), f"{KAOSCTL} is missing: run `cargo build -p kaosctl`"
    manifests = tmp_path_factory.mktemp("render") / "manifests.yaml"
    manifests.write_text(MANIFESTS)
    env = dict(os.environ, NETWORK_POLICY_ENABLED="true")
    result = subprocess.run([str(KAOSCTL), "render", "-f", str(manifests)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def test_every_kind_of_child_is_rendered(rendered):
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    assert {("HorizontalPodAutoscaler", "agent-coordinator"),
            ("HorizontalPodAutoscaler", "mcpserver-tools"),
            ("PodDisruptionBudget", "agent-coordinator"),
            ("PodDisruptionBudget", "modelapi-llm"),
            ("PodDisruptionBudget", "mcpserver-tools"),
            ("NetworkPolicy", "agent-coordinator"),
            ("NetworkPolicy", "agent-worker"),
            ("NetworkPolicy", "modelapi-llm"),
            ("NetworkPolicy", "mcpserver-tools")} <= kinds, sorted(kinds)
    assert ("PodDisruptionBudget", "agent-worker") not in kinds, "one pod: no budget"
    deployment = next(o for o in rendered if o["kind"] == "Deployment"
                      and o["metadata"]["name"] == "agent-coordinator")
    assert deployment["spec"]["replicas"] == 2, "an autoscaled Deployment starts at minReplicas"
    worker = next(o for o in rendered if o["kind"] == "NetworkPolicy"
                  and o["metadata"]["name"] == "agent-worker")
    admitted = [peer["podSelector"].get("matchLabels", {}).get("agent")
                for rule in worker["spec"]["ingress"] for peer in rule.get("from", [])
                if "podSelector" in peer]
    assert "coordinator" in admitted, worker["spec"]["ingress"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_children_validate_strictly(rendered, version):
    for obj in rendered:
        kubernetes_validate.validate(obj, version, strict=True)
