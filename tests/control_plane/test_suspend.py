"""An Agent's `spec.suspend`, each test body run on kaos-testkit and on the real kube-apiserver of
scripts/control-plane, with the real binaries under the chart's ServiceAccounts (as
test_operator.py): suspending scales the Deployment to zero pods and keeps the Service, the
Agent shows `Suspended` in `kubectl get agents`; resuming gives back its replicas, or without
`spec.replicas` the API server's default of one pod (the controller lets go of the field).

Needs what test_operator.py needs; a missing tool fails the test, it never skips
(docs/testing.md)."""

import json
import textwrap

from plane import Plane, create_namespace, delete_namespace, wait_until

SUSPEND = "suspend"
KAOS = "/apis/kaos.tools/v1alpha1"



def agent(cluster, name):
    return cluster.get(f"{KAOS}/namespaces/{SUSPEND}/agents/{name}") or {}


def deployment(cluster, name):
    return cluster.get(f"/apis/apps/v1/namespaces/{SUSPEND}/deployments/agent-{name}") or {}


def suspend(cluster, name, value):
    cluster.kubectl("patch", "agent", name, "-n", SUSPEND, "--type", "merge",
                    "-p", json.dumps({"spec": {"suspend": value}}))


def until_replicas(cluster, name, wanted):
    def asked():
        spec = deployment(cluster, name).get("spec", {})
        replicas = spec.get("replicas")
        # kube-apiserver defaults an unset field to one; kaos-testkit leaves it unset.
        if replicas is None and not isinstance(cluster, Plane):
            replicas = 1
        return replicas == wanted, spec
    wait_until(f"Deployment agent-{name} asking for {wanted} pods", asked)


def until_phase(cluster, name, phase):
    def shown():
        status = agent(cluster, name).get("status", {})
        return status.get("phase") == phase, status
    return wait_until(f"Agent {name} {phase}", shown)[1]


def columns(cluster, name):
    """The row `kubectl get agents` prints for agent `name`, by column."""
    shown = cluster.kubectl("get", "agents", "-n", SUSPEND, name).stdout
    header, row = (line.split() for line in shown.strip().splitlines())
    return dict(zip(header, row))


def test_a_suspended_agent_is_at_zero_pods_shown_suspended_and_resumes(cluster, controllers):
    create_namespace(cluster, SUSPEND)
    try:
        # kwok's pods serve nothing: no model check could succeed here.
        controllers.start("modelapi-controller", 1, {"PROTOCOL_CHECKS": "false"})
        controllers.start("agent-controller", 1, {})
        cluster.kubectl("apply", "-n", SUSPEND, "-f", "-", stdin=textwrap.dedent(f"""
            apiVersion: kaos.tools/v1alpha1
            kind: ModelAPI
            metadata: {{name: llm, namespace: {SUSPEND}}}
            spec:
              mode: Proxy
              proxyConfig: {{provider: openai, models: [gpt-4o], apiKey: {{value: sk-test}}}}
            ---
            apiVersion: kaos.tools/v1alpha1
            kind: Agent
            metadata: {{name: researcher, namespace: {SUSPEND}}}
            spec: {{modelAPI: llm, model: gpt-4o, replicas: 2}}
            ---
            apiVersion: kaos.tools/v1alpha1
            kind: Agent
            metadata: {{name: writer, namespace: {SUSPEND}}}
            spec: {{modelAPI: llm, model: gpt-4o}}
            """))
        for name in ("researcher", "writer"):
            until_phase(cluster, name, "Ready")

        for name in ("researcher", "writer"):
            suspend(cluster, name, True)
        until_replicas(cluster, "researcher", 0)
        until_replicas(cluster, "writer", 0)
        status = until_phase(cluster, "researcher", "Suspended")
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "Suspended")
        assert (conditions["Suspended"]["status"], conditions["Suspended"]["reason"]) == \
            ("True", "ScaledToZero")
        assert "in-pod memory" in conditions["Suspended"]["message"]
        cells = columns(cluster, "researcher")
        assert (cells["READY"], cells["PHASE"]) == ("false", "Suspended"), cells
        # Its Service (callers keep their URL) and disruption budget are kept.
        assert cluster.get(f"/api/v1/namespaces/{SUSPEND}/services/agent-researcher")
        assert cluster.get(
            f"/apis/policy/v1/namespaces/{SUSPEND}/poddisruptionbudgets/agent-researcher")
        assert agent(cluster, "researcher")["spec"]["suspend"] is True

        for name in ("researcher", "writer"):
            suspend(cluster, name, False)
        until_replicas(cluster, "researcher", 2)
        until_replicas(cluster, "writer", 1)
        for name in ("researcher", "writer"):
            status = until_phase(cluster, name, "Ready")
            assert "Suspended" not in {c["type"] for c in status.get("conditions", [])}, status
        assert columns(cluster, "writer")["PHASE"] == "Ready"
    finally:
        # While the controllers still run: only they remove their finalizers.
        delete_namespace(cluster, SUSPEND)
        wait_until(f"namespace {SUSPEND} to be deleted",
                   lambda: cluster.get(f"/api/v1/namespaces/{SUSPEND}") is None)
