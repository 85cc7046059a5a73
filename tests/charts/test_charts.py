"""The Helm charts, rendered and linted with the real Helm v4 SDK, and every rendered built-in
object validated strictly against the Kubernetes 1.33 and 1.37 schemas."""

import json
from pathlib import Path

import helm_python
import kubernetes_validate
import pytest
import yaml

from chart import NAMESPACE, REPO, SUBCHARTS, UMBRELLA, default_manifest, render

KUBERNETES_VERSIONS = ["1.33.0", "1.37.0"]
# Custom resources the validator has no schema for.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
CONTROLLERS = ["agent-controller", "modelapi-controller", "mcpserver-controller"]


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def names(objects, kind):
    return sorted(o["metadata"]["name"] for o in by_kind(objects, kind))


def test_every_declared_subchart_is_present():
    # A declared subchart missing from charts/ would be skipped silently.
    statuses = {d["name"]: d["status"] for d in helm_python.dependency_list(str(UMBRELLA))}
    assert statuses == {name: "unpacked" for name in SUBCHARTS + ["kaos-lib"]}


@pytest.mark.parametrize("chart", [UMBRELLA] + [UMBRELLA / "charts" / name for name in SUBCHARTS])
def test_charts_lint_strictly(chart):
    result = helm_python.lint(str(chart), {}, strict=True, kube_version="v1.33.0")
    assert not result.get("errors"), result
    # Helm's severities: 1 info (e.g. "icon is recommended"), 2 warning, 3 error.
    problems = [m for m in result.get("messages") or [] if int(m.get("severity", 0)) >= 2]
    assert not problems, problems


def test_default_rendering():
    objects = render()
    assert names(objects, "CustomResourceDefinition") == ["agents.kaos.tools", "mcpservers.kaos.tools", "modelapis.kaos.tools"]
    for crd in by_kind(objects, "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    expected = ["kaos-agent-controller", "kaos-mcpserver-controller", "kaos-modelapi-controller"]
    for kind in ["Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "PodDisruptionBudget"]:
        assert names(objects, kind) == expected, kind
    assert names(objects, "Role") == [f"{n}-leader-election" for n in expected]
    assert names(objects, "Service") == [f"{n}-metrics" for n in expected]
    assert names(objects, "ConfigMap") == ["kaos-mcp-runtimes"]
    assert not by_kind(objects, "ServiceMonitor") and not by_kind(objects, "PrometheusRule")
    for deployment in by_kind(objects, "Deployment"):
        spec = deployment["spec"]
        assert spec["replicas"] == 2
        pod = spec["template"]["spec"]
        assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
        container = pod["containers"][0]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
        }
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert "--leader-elect=true" in container["args"]
        assert container["resources"]["requests"] and container["resources"]["limits"]


def test_each_controller_reads_its_own_settings():
    env = {d["metadata"]["name"]: {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
           for d in by_kind(render(), "Deployment")}
    assert env["kaos-agent-controller"]["DEFAULT_AGENT_IMAGE"] == "axsauze/kaos-agent:latest"
    assert env["kaos-agent-controller"]["GATEWAY_DEFAULT_AGENT_TIMEOUT"] == "120s"
    assert env["kaos-modelapi-controller"]["DEFAULT_LITELLM_IMAGE"] == "ghcr.io/berriai/litellm:main-stable"
    assert env["kaos-modelapi-controller"]["DEFAULT_OLLAMA_IMAGE"] == "ollama/ollama:latest"
    assert env["kaos-mcpserver-controller"]["SYSTEM_NAMESPACE"] == NAMESPACE
    assert "DEFAULT_AGENT_IMAGE" not in env["kaos-modelapi-controller"], "each reads only what its kind needs"
    for settings in env.values():
        assert settings["DEFAULT_LOG_LEVEL"] == "INFO"
        assert settings["GATEWAY_API_ENABLED"] == "false"


def test_the_sandbox_and_render_use_the_charts_default_images():
    defaults = (REPO / "crates" / "kaosctl" / "src" / "defaults.rs").read_text()
    values = yaml.safe_load((UMBRELLA / "values.yaml").read_text())["global"]["images"]
    for image in values.values():
        assert f'"{image}"' in defaults, image


@pytest.mark.parametrize("disabled", CONTROLLERS)
def test_each_controller_can_be_disabled_alone(disabled):
    objects = render({disabled: {"enabled": False}})
    deployments = names(objects, "Deployment")
    assert f"kaos-{disabled}" not in deployments
    assert len(deployments) == 2
    assert len(by_kind(objects, "CustomResourceDefinition")) == 3


def test_namespaced_mode_uses_roles_in_each_watched_namespace():
    objects = render({"global": {"watchNamespaces": ["team-a", "team-b"]}})
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    roles = [(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(objects, "Role")]
    for ns in ["team-a", "team-b"]:
        for controller in CONTROLLERS:
            assert (ns, f"kaos-{controller}") in roles
    for deployment in by_kind(objects, "Deployment"):
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["WATCH_NAMESPACES"] == "team-a,team-b"


def test_the_reconcile_debounce_reaches_every_controller():
    for values, want in [({}, "200ms"), ({"global": {"reconcileDebounce": "1s"}}, "1s")]:
        for deployment in by_kind(render(values), "Deployment"):
            env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
            assert env["RECONCILE_DEBOUNCE"] == want, deployment["metadata"]["name"]


def test_gateway_settings_reach_every_controller():
    objects = render({"global": {"gateway": {"enabled": True, "name": "public", "namespace": "gateways"}}})
    for deployment in by_kind(objects, "Deployment"):
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert (env["GATEWAY_API_ENABLED"], env["GATEWAY_NAME"], env["GATEWAY_NAMESPACE"]) == ("true", "public", "gateways")


def test_dashboards_and_alerts():
    objects = render({"dashboards": {"enabled": True}, "prometheusRule": {"enabled": True}, "global": {"serviceMonitor": {"enabled": True}}})
    dashboards = [c for c in by_kind(objects, "ConfigMap") if c["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    assert sorted(c["metadata"]["name"] for c in dashboards) == ["kaos-dashboard-controllers", "kaos-dashboard-resources"]
    for config_map in dashboards:
        (text,) = config_map["data"].values()
        dashboard = json.loads(text)
        exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
        if dashboard["uid"] == "kaos-controllers":
            for metric in ["controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
                           "controller_runtime_reconcile_time_seconds_bucket", "controller_runtime_active_workers",
                           "leader_election_master_status", "process_resident_memory_bytes", "process_cpu_seconds_total"]:
                assert metric in exprs, metric
        else:
            assert "kaos_resources" in exprs
    assert len(by_kind(objects, "ServiceMonitor")) == 3
    (rule,) = by_kind(objects, "PrometheusRule")
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == ["KaosReconcileErrors", "KaosNoLeader", "KaosResourcesFailed"]


def test_one_replica_has_no_disruption_budget():
    objects = render({name: {"replicas": 1} for name in CONTROLLERS})
    assert not by_kind(objects, "PodDisruptionBudget")


def test_the_registry_has_the_default_runtimes_and_extras():
    chart_copy = (UMBRELLA / "charts" / "mcpserver-controller" / "default-runtimes.yaml").read_text()
    crate_copy = (REPO / "crates" / "mcpserver-controller" / "src" / "default-runtimes.yaml").read_text()
    assert chart_copy == crate_copy, "the chart ships the controller's default registry"
    extra = {"github": {"image": "ghcr.io/github/github-mcp-server:1", "args": ["http"]}}
    (registry,) = by_kind(render({"mcpserver-controller": {"extraRuntimes": extra}}), "ConfigMap")
    runtimes = yaml.safe_load(registry["data"]["runtimes.yaml"])["runtimes"]
    assert sorted(runtimes) == ["github", "kubernetes", "python-string", "slack"]
    assert runtimes["slack"]["requiredEnv"] == ["SLACK_BOT_TOKEN", "SLACK_TEAM_ID"]


VARIATIONS = {
    "default": {},
    "namespaced": {"global": {"watchNamespaces": ["team-a"]}},
    "gateway": {"global": {"gateway": {"enabled": True}}},
    "dashboards": {"dashboards": {"enabled": True}, "prometheusRule": {"enabled": True}},
}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("variation", sorted(VARIATIONS))
def test_rendered_objects_validate_strictly(variation, version):
    for obj in render(VARIATIONS[variation]):
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)


def test_plain_manifests_equal_the_default_rendering():
    committed = (REPO / "deploy" / "kaos.yaml").read_text()
    assert committed == default_manifest(), "run scripts/render-deploy.py and commit deploy/kaos.yaml"
