"""The Helm charts, rendered and linted with the real Helm v4 SDK, and every rendered built-in
object validated strictly against the Kubernetes 1.33 and 1.37 schemas."""

import importlib.util
import json
import re
from pathlib import Path

import helm_python
import kubernetes_validate
import pytest
import yaml

from chart import (NAMESPACE, PROMETHEUS_OPERATOR, REPO, SUBCHARTS, UMBRELLA, default_manifest, is_hook, notes,
                   render)

KUBERNETES_VERSIONS = ["1.33.0", "1.37.0"]
# Custom resources the validator has no schema for.
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
CONTROLLERS = ["agent-controller", "modelapi-controller", "mcpserver-controller", "memorystore-controller",
               "authz-controller", "workflow-controller"]
# The controllers that generate pods (agents, ModelAPIs, MCP servers, MemoryStores), and so take
# the NetworkPolicy settings; the authz and workflow controllers generate none.
WORKLOAD_CONTROLLERS = ["agent-controller", "modelapi-controller", "mcpserver-controller", "memorystore-controller"]


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
    assert names(objects, "CustomResourceDefinition") == ["accessgrants.kaos.tools", "agents.kaos.tools",
                                                           "agentworkflowruns.kaos.tools", "agentworkflows.kaos.tools",
                                                           "mcpservers.kaos.tools", "memorystores.kaos.tools",
                                                           "modelapis.kaos.tools", "thirdpartyservices.kaos.tools"]
    for crd in by_kind(objects, "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        # Helm renders the CRDs of deploy/crds unchanged: a `{{` in a description (a workflow
        # step's `{{ input }}`) is escaped in the chart's templates, not read as an action.
        plural = crd["spec"]["names"]["plural"]
        committed = yaml.safe_load((REPO / "deploy" / "crds" / f"kaos.tools_{plural}.yaml").read_text())
        committed["metadata"].setdefault("annotations", {})["helm.sh/resource-policy"] = "keep"
        assert crd == committed, plural
    expected = [f"kaos-{c}" for c in sorted(CONTROLLERS)]
    for kind in ["ServiceAccount", "ClusterRoleBinding", "PodDisruptionBudget"]:
        assert names(objects, kind) == expected, kind
    # The Deployments (and so their pods) alone say `controller-manager`: see
    # test_kaos_cli_recognises_the_installation.
    assert names(objects, "Deployment") == [f"{n}-manager" for n in expected]
    assert names(objects, "ClusterRole") == sorted(expected + ["kaos-metrics-reader"])
    assert names(objects, "Role") == [f"{n}-leader-election" for n in expected]
    assert names(objects, "Service") == [f"{n}-metrics" for n in expected]
    assert names(objects, "ConfigMap") == ["kaos-mcp-runtimes"]
    assert not by_kind(objects, "ServiceMonitor") and not by_kind(objects, "PrometheusRule")
    for deployment in by_kind(objects, "Deployment"):
        spec = deployment["spec"]
        assert spec["replicas"] == 2
        pod = spec["template"]["spec"]
        # No runAsUser: the images' user (65532) applies, and OpenShift's restricted SCC may assign one.
        assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
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
    assert env["kaos-agent-controller-manager"]["DEFAULT_AGENT_IMAGE"] == "axsauze/kaos-agent:latest"
    assert env["kaos-agent-controller-manager"]["GATEWAY_DEFAULT_AGENT_TIMEOUT"] == "120s"
    # The usage collector of budgeted agents (docs/budgets.md), its own only.
    usage = {k: v for k, v in env["kaos-agent-controller-manager"].items() if k.startswith("USAGE_")}
    assert usage == {"USAGE_SCRAPE_INTERVAL_SECONDS": "60", "USAGE_STATUS_INTERVAL_SECONDS": "300",
                     "USAGE_SCRAPE_TIMEOUT_SECONDS": "10", "USAGE_SCRAPES_IN_FLIGHT": "8"}
    assert not [k for d, e in env.items() if d != "kaos-agent-controller-manager" for k in e if k.startswith("USAGE_")]
    tuned = {d["metadata"]["name"]: {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
             for d in by_kind(render({"agent-controller": {"usage": {"scrapeIntervalSeconds": 15, "statusIntervalSeconds": 0}}}),
                              "Deployment")}["kaos-agent-controller-manager"]
    assert (tuned["USAGE_SCRAPE_INTERVAL_SECONDS"], tuned["USAGE_STATUS_INTERVAL_SECONDS"]) == ("15", "0")
    # It reads the pods of ModelAPIs from their EndpointSlices.
    (role,) = [r for r in by_kind(render(), "ClusterRole") if r["metadata"]["name"] == "kaos-agent-controller"]
    assert {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]} in role["rules"]
    assert env["kaos-modelapi-controller-manager"]["DEFAULT_LITELLM_IMAGE"] == "ghcr.io/berriai/litellm:main-stable"
    assert env["kaos-modelapi-controller-manager"]["DEFAULT_OLLAMA_IMAGE"] == "ollama/ollama:latest"
    assert env["kaos-mcpserver-controller-manager"]["SYSTEM_NAMESPACE"] == NAMESPACE
    assert env["kaos-memorystore-controller-manager"]["DEFAULT_MEMORY_SERVICE_IMAGE"] == "axsauze/kaos-memory-service:latest"
    assert env["kaos-memorystore-controller-manager"]["GATEWAY_DEFAULT_MEMORY_TIMEOUT"] == "30s"
    assert "DEFAULT_AGENT_IMAGE" not in env["kaos-modelapi-controller-manager"], "each reads only what its kind needs"
    assert "SYSTEM_NAMESPACE" not in env["kaos-memorystore-controller-manager"], "no MCP runtime registry to find"
    # The authz controller reads the shared settings only: no image, no route timeout of its own.
    assert not [k for k in env["kaos-authz-controller-manager"] if k.startswith(("DEFAULT_", "GATEWAY_DEFAULT_"))
                and k not in ("DEFAULT_LOG_LEVEL",)], env["kaos-authz-controller-manager"]
    assert "SYSTEM_NAMESPACE" not in env["kaos-authz-controller-manager"]
    # The workflow controller: its A2A call deadline and poll interval, no image and no route
    # timeout (it generates no pods and no routes), and no agent address override unless set.
    workflow = env["kaos-workflow-controller-manager"]
    assert (workflow["A2A_CALL_TIMEOUT"], workflow["WORKFLOW_POLL_INTERVAL"]) == ("10s", "2s")
    assert "AGENT_ADDRESS_OVERRIDES" not in workflow
    assert not [k for k in workflow if k.startswith(("DEFAULT_", "GATEWAY_DEFAULT_", "NETWORK_POLICY_"))
                and k not in ("DEFAULT_LOG_LEVEL",)], workflow
    assert "SYSTEM_NAMESPACE" not in workflow
    for name, settings in env.items():
        if name != "kaos-workflow-controller-manager":
            assert not {"A2A_CALL_TIMEOUT", "WORKFLOW_POLL_INTERVAL", "AGENT_ADDRESS_OVERRIDES"} & set(settings), name
    for settings in env.values():
        assert settings["DEFAULT_LOG_LEVEL"] == "INFO"
        assert settings["GATEWAY_API_ENABLED"] == "false"
    # The protocol checks of the two controllers that check their workloads, on by default.
    checks = ("PROTOCOL_CHECKS", "PROTOCOL_CHECK_TIMEOUT_SECONDS", "PROTOCOL_CHECKS_IN_FLIGHT")
    for name, settings in env.items():
        if name in ("kaos-modelapi-controller-manager", "kaos-mcpserver-controller-manager"):
            assert tuple(settings[k] for k in checks) == ("true", "5", "8"), name
        else:
            assert not set(checks) & set(settings), name
    values = {"protocolChecks": {"enabled": False, "timeoutSeconds": 30, "inFlight": 2}}
    env = {d["metadata"]["name"]: {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
           for d in by_kind(render({"modelapi-controller": values, "mcpserver-controller": values}), "Deployment")}
    for name in ("kaos-modelapi-controller-manager", "kaos-mcpserver-controller-manager"):
        assert tuple(env[name][k] for k in checks) == ("false", "30", "2"), name


def test_the_sandbox_and_render_use_the_charts_default_images():
    defaults = (REPO / "crates" / "kaosctl" / "src" / "defaults.rs").read_text()
    values = yaml.safe_load((UMBRELLA / "values.yaml").read_text())["global"]["images"]
    for image in values.values():
        assert f'"{image}"' in defaults, image


@pytest.mark.parametrize("disabled", CONTROLLERS)
def test_each_controller_can_be_disabled_alone(disabled):
    objects = render({disabled: {"enabled": False}})
    deployments = names(objects, "Deployment")
    assert f"kaos-{disabled}-manager" not in deployments
    assert len(deployments) == len(CONTROLLERS) - 1
    assert len(by_kind(objects, "CustomResourceDefinition")) == len(list((REPO / "deploy" / "crds").glob("*.yaml")))


def test_namespaced_mode_uses_roles_in_each_watched_namespace():
    objects = render({"global": {"watchNamespaces": ["team-a", "team-b"]}})
    # Cluster-wide, only what secure metrics need: the reviews (cluster-scoped) and the reader role.
    assert names(objects, "ClusterRole") == sorted([f"kaos-{c}-metrics-auth" for c in CONTROLLERS] + ["kaos-metrics-reader"])
    for role in by_kind(objects, "ClusterRole"):
        assert role["rules"] in (METRICS_AUTH_RULES, [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    assert names(objects, "ClusterRoleBinding") == sorted(f"kaos-{c}-metrics-auth" for c in CONTROLLERS)
    plain = render({"global": {"watchNamespaces": ["team-a"], "metrics": {"secure": False}}})
    assert not by_kind(plain, "ClusterRole") and not by_kind(plain, "ClusterRoleBinding")
    roles = [(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(objects, "Role")]
    for ns in ["team-a", "team-b"]:
        for controller in CONTROLLERS:
            assert (ns, f"kaos-{controller}") in roles
    for deployment in by_kind(objects, "Deployment"):
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["WATCH_NAMESPACES"] == "team-a,team-b"


METRICS_AUTH_RULES = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]


def metrics_endpoint(deployment):
    """(the metrics flags, container port, volume mounts) of a controller's Deployment."""
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    flags = [a for a in container["args"] if a.startswith("--metrics-")]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
    return flags, port, container.get("volumeMounts"), pod.get("volumes")


def test_metrics_are_secure_by_default():
    objects = render({"global": {"serviceMonitor": {"enabled": True}}})
    for deployment in by_kind(objects, "Deployment"):
        assert metrics_endpoint(deployment) == (["--metrics-bind-address=:8443", "--metrics-secure=true"], 8443, None, None)
    for service in by_kind(objects, "Service"):
        assert service["spec"]["ports"] == [{"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}]
    # Each controller may ask the API server who scrapes it, and nothing more than before.
    for role in [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith("-controller")]:
        assert role["rules"][-2:] == METRICS_AUTH_RULES
    (reader,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == "kaos-metrics-reader"]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert "kaos-metrics-reader" not in names(objects, "ClusterRoleBinding"), "no reader is bound unless asked"
    for monitor in by_kind(objects, "ServiceMonitor"):
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint == {"port": "metrics", "interval": "30s", "honorLabels": True, "scheme": "https",
                            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
                            "tlsConfig": {"insecureSkipVerify": True}}


def test_plain_metrics_when_secure_is_off():
    objects = render({"global": {"metrics": {"secure": False}, "serviceMonitor": {"enabled": True}}})
    for deployment in by_kind(objects, "Deployment"):
        assert metrics_endpoint(deployment) == (["--metrics-bind-address=:8080"], 8080, None, None)
    assert [s["spec"]["ports"][0]["port"] for s in by_kind(objects, "Service")] == [8080] * len(CONTROLLERS)
    assert names(objects, "ClusterRole") == [f"kaos-{c}" for c in sorted(CONTROLLERS)]
    for role in by_kind(objects, "ClusterRole"):
        assert not [r for r in role["rules"] if r in METRICS_AUTH_RULES]
    for monitor in by_kind(objects, "ServiceMonitor"):
        assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s", "honorLabels": True}]


def test_a_metrics_certificate_secret_and_its_ca():
    ca = {"secret": {"name": "kaos-metrics-cert", "key": "ca.crt"}}
    objects = render({"global": {"metrics": {"certSecret": "kaos-metrics-cert"},
                                 "serviceMonitor": {"enabled": True, "ca": ca}}})
    for deployment in by_kind(objects, "Deployment"):
        flags, port, mounts, volumes = metrics_endpoint(deployment)
        assert flags == ["--metrics-bind-address=:8443", "--metrics-secure=true",
                         "--metrics-cert-dir=/tmp/k8s-metrics-server/metrics-certs"]
        assert mounts == [{"name": "metrics-certs", "mountPath": "/tmp/k8s-metrics-server/metrics-certs", "readOnly": True}]
        assert volumes == [{"name": "metrics-certs", "secret": {"secretName": "kaos-metrics-cert"}}]
    for monitor in by_kind(objects, "ServiceMonitor"):
        (endpoint,) = monitor["spec"]["endpoints"]
        name = monitor["metadata"]["name"]
        # Verified: the CA, and the Service's name the certificate must carry.
        assert endpoint["tlsConfig"] == {"serverName": f"{name}-metrics.kaos-system.svc", "ca": ca}


def test_metrics_readers_are_bound_to_the_reader_role():
    readers = [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}, {"kind": "Group", "name": "ops"}]
    objects = render({"global": {"metrics": {"readers": readers}}}, release="prod")
    (binding,) = [b for b in by_kind(objects, "ClusterRoleBinding") if b["metadata"]["name"] == "prod-kaos-metrics-reader"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "prod-kaos-metrics-reader"}
    assert binding["subjects"] == readers


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
    assert sorted(c["metadata"]["name"] for c in dashboards) == [
        "kaos-dashboard-agents", "kaos-dashboard-controllers", "kaos-dashboard-resources"]
    selected, exprs_of_controller_dashboards = [], []
    for config_map in dashboards:
        (text,) = config_map["data"].values()
        dashboard = json.loads(text)
        exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
        if dashboard["uid"] == "kaos-controllers":
            for metric in ["controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
                           "controller_runtime_reconcile_time_seconds_bucket", "controller_runtime_active_workers",
                           "leader_election_master_status", "process_resident_memory_bytes", "process_cpu_seconds_total",
                           "workqueue_depth", "workqueue_retries_total", "workqueue_queue_duration_seconds_bucket",
                           "workqueue_longest_running_processor_seconds"]:
                assert metric in exprs, metric
        elif dashboard["uid"] == "kaos-resources":
            assert "kaos_resources" in exprs
        else:
            # The workloads' dashboard (test_the_agents_dashboard): not the controllers'.
            assert dashboard["uid"] == "kaos-agents"
            continue
        exprs_of_controller_dashboards += [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
        selected += re.findall(r'controller=~"([^"]*)"', exprs)
    assert len(by_kind(objects, "ServiceMonitor")) == len(CONTROLLERS)
    (rule,) = by_kind(objects, "PrometheusRule")
    assert [g["name"] for g in rule["spec"]["groups"]] == ["kaos-controllers", "kaos-workflows", "kaos-budgets"], \
        "the workloads' alerts are opt-in"
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == ["KaosReconcileErrors", "KaosNoLeader"] + ["KaosControllerAbsent"] * len(CONTROLLERS) + [
        "KaosResourcesFailed", "KaosWorkflowRunsFailing", "KaosAgentBudgetNearlyExhausted", "KaosAgentBudgetExceeded"]
    # Every panel and alert that selects controllers by their metrics' `controller` label selects
    # them all (the dashboards are plain JSON, kept by hand).
    selected += re.findall(r'controller=~"([^"]*)"', " ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]))
    assert len(selected) > 10 and set(selected) == {"|".join(c.removesuffix("-controller") for c in CONTROLLERS)}, selected
    # They select controllers by that label and by Lease name, never by pod or Deployment name
    # (the Deployments are `<full name>-manager`, not the Lease's name).
    every = exprs_of_controller_dashboards + [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert not [e for e in every if re.search(r'\b(pod|deployment)=~?"', e)], every
    # The alerts' behaviour is tested with promtool (tests/alerts); that the controllers export
    # every series the dashboards and alerts query, by tests/e2e.rs; that every query names known
    # series, by test_every_query_names_series_that_exist.


# The series the dashboards and alerts may query, by who exports them.
def controller_metrics():
    """The controllers' (docs/metrics.md, whose table tests/e2e.rs holds them to): a histogram's
    series are its _bucket, _sum and _count."""
    found = set()
    for name, kind in re.findall(r"^\| `([a-z_]+)` \| (counter|gauge|histogram) \|", (REPO / "docs" / "metrics.md").read_text(), re.M):
        found |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
    return found


# kube-state-metrics v2 (docs/metrics/workload/{deployment,pod,horizontalpodautoscaler}-metrics.md
# of github.com/kubernetes/kube-state-metrics): labels namespace and deployment, pod and container,
# horizontalpodautoscaler.
KUBE_STATE_METRICS = {
    "kube_deployment_spec_replicas", "kube_deployment_status_replicas_ready", "kube_deployment_status_replicas_available",
    "kube_pod_container_status_restarts_total", "kube_horizontalpodautoscaler_status_current_replicas",
    "kube_horizontalpodautoscaler_status_desired_replicas", "kube_horizontalpodautoscaler_spec_max_replicas",
    "kube_horizontalpodautoscaler_spec_min_replicas",
}
# LiteLLM's `prometheus` callback (DEFINED_PROMETHEUS_METRICS in litellm/types/integrations/prometheus.py
# of github.com/BerriAI/litellm; docs.litellm.ai/docs/proxy/prometheus), as Python's prometheus_client
# exposes them: a counter with `_total` appended, a histogram as _bucket, _sum and _count (LiteLLM's
# own dashboards, cookbook/litellm_proxy_server/grafana_dashboard, query those names). Labels:
# requested_model on the proxy request counters, model on tokens, spend and latencies; the
# PodMonitor adds namespace, pod and modelapi.
LITELLM_METRICS = {
    "litellm_proxy_total_requests_metric_total", "litellm_proxy_failed_requests_metric_total",
    "litellm_input_tokens_metric_total", "litellm_output_tokens_metric_total", "litellm_spend_metric_total", "litellm_request_total_latency_metric_bucket", "litellm_llm_api_latency_metric_bucket",
}
# The agent controller's per budgeted agent (docs/metrics.md, "The agent controller's").
BUDGET_METRICS = {"kaos_agent_usage_tokens", "kaos_agent_usage_requests", "kaos_agent_usage_cost_dollars",
                  "kaos_agent_budget_used_ratio"}
PROMQL_FUNCTIONS = {"sum", "max", "min", "avg", "count", "rate", "increase", "histogram_quantile", "label_replace",
                    "vector", "absent"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool"}


def queried_series(expr):
    """The metric names a PromQL expression selects (every function it calls must be a known one)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (regexes, label_replace's)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)  # label matchers, ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1 ", expr)  # label lists
    expr = re.sub(r"\b(by|without)\s+(?=\()", "", expr)  # `max by (l) (x)`: max's argument
    series = set()
    for word, call in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr):
        if word in PROMQL_KEYWORDS:
            continue
        if call:
            assert word in PROMQL_FUNCTIONS, f"unknown function {word} in {expr}"
        else:
            series.add(word)
    return series


def test_every_query_names_series_that_exist():
    everything = {"dashboards": {"enabled": True}, "prometheusRule": {"enabled": True},
                  "global": {"workloadMonitoring": {"enabled": True}}}
    objects = render(everything)
    known = controller_metrics() | KUBE_STATE_METRICS | LITELLM_METRICS
    assert {"controller_runtime_reconcile_time_seconds_bucket", "kaos_resources", "workqueue_depth"} <= known
    used = {}
    for config_map in [c for c in by_kind(objects, "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]]:
        dashboard = json.loads(next(iter(config_map["data"].values())))
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        # Template variables: label_values(<selector>, <label>).
        exprs += [re.sub(r"^label_values\((.*), *\w+\)$", r"\1", v["query"]["query"])
                  for v in dashboard["templating"]["list"] if v["type"] == "query"]
        used["dashboard", dashboard["uid"]] = set().union(*(queried_series(e) for e in exprs))
    (rule,) = by_kind(objects, "PrometheusRule")
    for group in rule["spec"]["groups"]:
        used["rules", group["name"]] = set().union(*(queried_series(r["expr"]) for r in group["rules"]))
    for source, series in used.items():
        assert series and series <= known, (source, sorted(series - known))
    # The controllers' dashboards and alerts read the controllers only; the workloads', never them.
    for source in [("dashboard", "kaos-controllers"), ("dashboard", "kaos-resources"), ("rules", "kaos-controllers"),
                   ("rules", "kaos-workflows")]:
        assert used[source] <= controller_metrics(), source
    # The workflow alerts read the workflow controller's own families only; the budgets', the
    # agent controller's.
    assert used["rules", "kaos-workflows"] == {"kaos_workflow_runs_total"}
    assert used["rules", "kaos-budgets"] == {"kaos_agent_budget_used_ratio"}
    assert used["dashboard", "kaos-agents"] == KUBE_STATE_METRICS - {"kube_horizontalpodautoscaler_spec_min_replicas"} | \
        LITELLM_METRICS | BUDGET_METRICS
    assert BUDGET_METRICS <= controller_metrics()
    assert used["rules", "kaos-workloads"] == KUBE_STATE_METRICS - {
        "kube_deployment_status_replicas_ready", "kube_horizontalpodautoscaler_status_desired_replicas"} | {
        "litellm_proxy_total_requests_metric_total", "litellm_proxy_failed_requests_metric_total"}


def rules(values, **kwargs):
    (rule,) = by_kind(render({**values, "prometheusRule": {"enabled": True, **values.get("prometheusRule", {})}},
                             **kwargs), "PrometheusRule")
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def test_alerts_link_the_runbooks_at_a_configurable_address():
    base = "https://docs.example.com/kaos/runbooks.html"
    alerts = rules({"prometheusRule": {"runbookUrl": base}, "global": {"workloadMonitoring": {"enabled": True}}})
    assert len(alerts) == 16, "the controllers', the workflows', the budgets' and the workloads'"
    for rule in alerts:
        assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"


def test_lease_alerts_watch_the_installed_controllers_leases_only():
    exprs = [r["expr"] for r in rules({"agent-controller": {"enabled": False},
                                        "modelapi-controller": {"controller": {"lease": "models-lease"}}}, release="prod")]
    assert ('max by (name) (leader_election_master_status{name=~"models-lease|prod-kaos-mcpserver-controller|'
            'prod-kaos-memorystore-controller|prod-kaos-authz-controller|prod-kaos-workflow-controller"}) < 1') in exprs
    absent = [e for e in exprs if e.startswith("absent(")]
    assert absent == ['absent(leader_election_master_status{name="models-lease"})',
                      'absent(leader_election_master_status{name="prod-kaos-mcpserver-controller"})',
                      'absent(leader_election_master_status{name="prod-kaos-memorystore-controller"})',
                      'absent(leader_election_master_status{name="prod-kaos-authz-controller"})',
                      'absent(leader_election_master_status{name="prod-kaos-workflow-controller"})']
    none = rules({name: {"enabled": False} for name in CONTROLLERS})
    assert [r["alert"] for r in none] == ["KaosReconcileErrors", "KaosResourcesFailed"]


def test_the_workflow_alerts_come_with_the_workflow_controller():
    (rule,) = by_kind(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")
    (group,) = [g for g in rule["spec"]["groups"] if g["name"] == "kaos-workflows"]
    (alert,) = group["rules"]
    assert alert["alert"] == "KaosWorkflowRunsFailing"
    # Any run that ended Failed in the last hour: it fires at once and resolves an hour later.
    assert alert["expr"] == 'sum(increase(kaos_workflow_runs_total{outcome="Failed"}[1h])) > 0'
    assert "for" not in alert and alert["labels"] == {"severity": "warning"}
    # A Failed run is history kept by failedRunsHistoryLimit: KaosResourcesFailed leaves it out
    # (it would fire for as long as the run is kept).
    (failed,) = [r for r in rule["spec"]["groups"][0]["rules"] if r["alert"] == "KaosResourcesFailed"]
    assert failed["expr"] == 'sum by (kind) (kaos_resources{phase="Failed",kind!="AgentWorkflowRun"}) > 0'
    # Without the workflow controller, no workflow group (and the controllers' alerts stay).
    (rule,) = by_kind(render({"prometheusRule": {"enabled": True}, "workflow-controller": {"enabled": False}}),
                      "PrometheusRule")
    assert [g["name"] for g in rule["spec"]["groups"]] == ["kaos-controllers", "kaos-budgets"]
    exprs = " ".join(r["expr"] for r in rule["spec"]["groups"][0]["rules"])
    assert "kaos-workflow-controller" not in exprs


# The workloads' monitoring (global.workloadMonitoring; docs/metrics.md, "Monitoring the workloads").
WORKLOAD_MONITORING = {
    "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True},
    "global": {"workloadMonitoring": {"enabled": True, "podMonitor": {
        "labels": {"release": "prom"}, "annotations": {"team": "platform"}, "interval": "15s"}}},
}
WORKLOAD_ALERTS = ["KaosWorkloadNotReady", "KaosWorkloadRestarting", "KaosWorkloadAtMaxReplicas", "KaosModelAPIErrorRate"]


def modelapi_controller_env(objects):
    return dict(container_env(deployments(objects)["kaos-modelapi-controller-manager"]))


def workload_rules(values, **kwargs):
    (rule,) = by_kind(render({**values, "prometheusRule": {"enabled": True}}, **kwargs), "PrometheusRule")
    return [r for g in rule["spec"]["groups"] if g["name"] == "kaos-workloads" for r in g["rules"]]


def test_workload_monitoring_is_off_by_default():
    for api_versions in [(), PROMETHEUS_OPERATOR]:
        objects = render({"prometheusRule": {"enabled": True}}, api_versions=api_versions)
        assert not by_kind(objects, "PodMonitor")
        assert "LITELLM_PROMETHEUS_METRICS" not in modelapi_controller_env(objects)
        assert not workload_rules({}, api_versions=api_versions)
    assert "Workload" not in notes({"prometheusRule": {"enabled": True}}, api_versions=PROMETHEUS_OPERATOR)


def test_the_pod_monitor_needs_the_prometheus_operator():
    # Enabled where the Prometheus Operator's CRDs are not served (`helm template` without
    # --api-versions, a cluster without them): no PodMonitor, which could not be applied; LiteLLM
    # serves its metrics all the same, and the NOTES say why there is no PodMonitor.
    objects = render(WORKLOAD_MONITORING)
    assert not by_kind(objects, "PodMonitor")
    assert modelapi_controller_env(objects)["LITELLM_PROMETHEUS_METRICS"] == "true"
    assert "Workload monitoring: no PodMonitor" in notes(WORKLOAD_MONITORING)
    # The PodMonitor API alone is enough (helm template --api-versions monitoring.coreos.com/v1/PodMonitor).
    assert names(render(WORKLOAD_MONITORING, api_versions=["monitoring.coreos.com/v1/PodMonitor"]), "PodMonitor") == [
        "kaos-modelapis"]


def test_the_pod_monitor_scrapes_the_litellm_of_proxy_modelapis():
    objects = render(WORKLOAD_MONITORING, api_versions=PROMETHEUS_OPERATOR)
    (monitor,) = by_kind(objects, "PodMonitor")
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"] == {"release": "prom", "app.kubernetes.io/part-of": "kaos", "app.kubernetes.io/instance": "kaos",
                                             "app.kubernetes.io/component": "workload-monitoring"}
    assert monitor["metadata"]["annotations"] == {"team": "platform"}
    spec = monitor["spec"]
    # The pods of every ModelAPI (the labels the modelapi controller gives them), in any namespace.
    assert spec["selector"] == {"matchLabels": {"app": "modelapi"}}
    assert spec["namespaceSelector"] == {"any": True}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("http", "/metrics/", "15s")
    # LiteLLM's port only (Proxy mode): Hosted ModelAPIs' pods run Ollama on 11434, which has no
    # metrics, under the same labels. Each series names its ModelAPI.
    assert endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_container_port_number"], "regex": "8000", "action": "keep"},
        {"sourceLabels": ["__meta_kubernetes_pod_label_modelapi"], "targetLabel": "modelapi", "action": "replace"},
    ]
    # LiteLLM's prometheus callback: the modelapi controller alone is told.
    for name, deployment in deployments(objects).items():
        env = dict(container_env(deployment))
        assert env.get("LITELLM_PROMETHEUS_METRICS") == ("true" if name == "kaos-modelapi-controller-manager" else None), name
    assert 'the PodMonitor kaos-modelapis scrapes LiteLLM\'s /metrics/ in Proxy ModelAPIs (labels {"release":"prom"})' in notes(
        WORKLOAD_MONITORING, api_versions=PROMETHEUS_OPERATOR)


def test_the_pod_monitor_matches_what_the_modelapi_controller_generates():
    # Read-only check of the generator: its pods' labels, LiteLLM's port and the port's name.
    build = (REPO / "crates" / "modelapi-controller" / "src" / "build.rs").read_text()
    assert '("app".to_string(), "modelapi".to_string())' in build
    assert '("modelapi".to_string(), name.to_string())' in build
    assert "pub const PROXY_PORT: i32 = 8000;" in build and "pub const OLLAMA_PORT: i32 = 11434;" in build
    assert 'name: Some("http".into())' in build


def test_the_pod_monitor_namespaces():
    def selector(value):
        values = {"global": {"workloadMonitoring": {"enabled": True, "podMonitor": {"namespaceSelector": value}}}}
        (monitor,) = by_kind(render(values, api_versions=PROMETHEUS_OPERATOR), "PodMonitor")
        return monitor["spec"]["namespaceSelector"]
    # Helm merges the map with its default, so matchNames alone still has `any: true`: the list wins.
    assert selector({"matchNames": ["team-a", "team-b"]}) == {"matchNames": ["team-a", "team-b"]}
    assert selector({"any": False, "matchNames": ["team-a"]}) == {"matchNames": ["team-a"]}
    assert selector({"any": True}) == {"any": True}


def test_workload_monitoring_of_modelapis_can_be_turned_off():
    values = {"global": {"workloadMonitoring": {"enabled": True, "modelAPIs": False}}}
    objects = render(values, api_versions=PROMETHEUS_OPERATOR)
    assert not by_kind(objects, "PodMonitor")
    assert "LITELLM_PROMETHEUS_METRICS" not in modelapi_controller_env(objects)
    assert [r["alert"] for r in workload_rules(values)] == WORKLOAD_ALERTS[:3]
    # Without the modelapi controller, no ModelAPI is scraped nor alerted on.
    without = {**WORKLOAD_MONITORING, "modelapi-controller": {"enabled": False}}
    assert not by_kind(render(without, api_versions=PROMETHEUS_OPERATOR), "PodMonitor")
    assert [r["alert"] for r in workload_rules(without)] == WORKLOAD_ALERTS[:3]


def test_workload_alerts_select_the_generated_workloads():
    on = {"global": {"workloadMonitoring": {"enabled": True}}}
    alerts = workload_rules(on)
    assert [r["alert"] for r in alerts] == WORKLOAD_ALERTS
    assert {r["alert"]: r.get("for") for r in alerts} == {
        "KaosWorkloadNotReady": "10m", "KaosWorkloadRestarting": None, "KaosWorkloadAtMaxReplicas": "15m", "KaosModelAPIErrorRate": "10m"}
    assert all(r["labels"] == {"severity": "warning"} for r in alerts)
    exprs = {r["alert"]: r["expr"] for r in alerts}
    # The Deployments, pods and autoscalers the controllers generate: `<kind>-<name>`.
    workloads = '"(agent|modelapi|mcpserver|memorystore)-.+"'
    assert f"kube_deployment_status_replicas_available{{deployment=~{workloads}}}) == 0" in exprs["KaosWorkloadNotReady"]
    assert f"kube_pod_container_status_restarts_total{{pod=~{workloads}}}[15m])) > 3" in exprs["KaosWorkloadRestarting"]
    assert (f"kube_horizontalpodautoscaler_status_current_replicas{{horizontalpodautoscaler=~{workloads}}})\n"
            f"  >= max by (namespace, horizontalpodautoscaler) (kube_horizontalpodautoscaler_spec_max_replicas") in exprs["KaosWorkloadAtMaxReplicas"]
    assert exprs["KaosModelAPIErrorRate"] == (
        'sum by (namespace, modelapi) (rate(litellm_proxy_failed_requests_metric_total{modelapi!=""}[5m]))\n'
        '/ sum by (namespace, modelapi) (rate(litellm_proxy_total_requests_metric_total{modelapi!=""}[5m]))\n'
        '> 0.05')
    # Namespaced mode: the watched namespaces only; and the installed controllers' kinds only.
    namespaced = workload_rules({"global": {"workloadMonitoring": {"enabled": True}, "watchNamespaces": ["team-a", "team-b"]},
                                 "agent-controller": {"enabled": False}})
    selectors = re.findall(r"\{([^}]*)\}", " ".join(r["expr"] for r in namespaced))
    assert len(selectors) == 9 and all(s.startswith('namespace=~"team-a|team-b",') for s in selectors), selectors
    assert not [s for s in selectors if "agent" in s]
    assert all('"(modelapi|mcpserver|memorystore)-.+"' in s for s in selectors if "=~\"(" in s.split(",", 1)[1])
    # No controller that generates workloads: no group.
    assert not workload_rules({**on, **{c: {"enabled": False} for c in WORKLOAD_CONTROLLERS}})


def test_the_agents_dashboard():
    (config_map,) = [c for c in by_kind(render({"dashboards": {"enabled": True}}), "ConfigMap")
                     if c["metadata"]["name"] == "kaos-dashboard-agents"]
    dashboard = json.loads(config_map["data"]["agents.json"])
    assert (dashboard["uid"], dashboard["title"]) == ("kaos-agents", "KAOS / Agents")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"] == {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"}
    namespace = variables["namespace"]
    assert namespace["multi"] and namespace["includeAll"] and namespace["allValue"] == ".*"
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    titles = []
    for panel in dashboard["panels"]:
        titles.append(panel["title"])
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            # Every selector is filtered by the namespace variable; LiteLLM's are the ModelAPIs'.
            selectors = re.findall(r"(\w+)\{([^}]*)\}", target["expr"])
            assert selectors, target["expr"]
            for metric, matchers in selectors:
                assert f"{matchers},".startswith('namespace=~"$namespace",'), target["expr"]
                if metric.startswith("litellm_"):
                    assert matchers.endswith('modelapi!=""'), target["expr"]
                if panel["title"].startswith("Agents:"):
                    assert matchers.endswith('deployment=~"agent-.+"'), target["expr"]
    assert titles == ["Agents: ready and desired replicas", "Agents: readiness (ready of desired replicas)",
                      "Workloads without an available replica", "Container restarts per workload (last 15 minutes)",
                      "Autoscalers: current, desired and maximum replicas", "Model requests per second",
                      "Model requests failing (of all requests)", "Tokens per second per model (input, output)",
                      "Spend per model (last hour)", "Request latency per model (p50, p95)", "Provider latency per model (p95)",
                      "Budgeted agents: tokens in the day window", "Budgeted agents: model requests in the day window",
                      "Budgeted agents: spend in the day window", "Budgeted agents: budget used (of each day or cost limit)"]


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


PLACEMENT = {
    "global": {
        "nodeSelector": {"pool": "system", "zone": "global"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app.kubernetes.io/part-of": "kaos"}}}],
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"team": "platform", "scope": "global"},
        "podLabels": {"cost-center": "42", "scope": "global"},
        "serviceAccount": {"annotations": {"iam": "global-role", "scope": "global"}},
        "imagePullSecrets": [{"name": "global-pull"}],
        "extraArgs": ["--global-flag=1"],
        "extraEnv": [{"name": "RUST_BACKTRACE", "value": "1"}],
        "runAsUser": 1001, "runAsGroup": 1002,
    },
    "agent-controller": {
        "nodeSelector": {"zone": "agent"},
        "tolerations": [{"key": "agents", "operator": "Exists"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "agent-controller"}}}}]}},
        "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "agent-controller"}}}],
        "priorityClassName": "agents-critical",
        "podAnnotations": {"scope": "agent"},
        "podLabels": {"scope": "agent", "app.kubernetes.io/name": "not-the-selector"},
        "serviceAccount": {"annotations": {"scope": "agent"}},
        "imagePullSecrets": [{"name": "agent-pull"}],
        "extraArgs": ["--agent-flag=2"],
        "extraEnv": [{"name": "GATEWAY_DEFAULT_AGENT_TIMEOUT", "value": "5s"}],
        "controller": {"image": {"digest": "sha256:" + "a" * 64, "tag": "ignored"}},
    },
}


def deployments(objects):
    return {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment")}


def container_env(deployment):
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return [(e["name"], e.get("value")) for e in env]


def test_placement_and_pod_metadata_have_global_defaults_and_per_controller_overrides():
    objects = render(PLACEMENT)
    pods = {name: d["spec"]["template"] for name, d in deployments(objects).items()}
    agent, modelapi = pods["kaos-agent-controller-manager"], pods["kaos-modelapi-controller-manager"]
    glob, own = PLACEMENT["global"], PLACEMENT["agent-controller"]

    # Maps: merged, the controller's keys win.
    assert modelapi["spec"]["nodeSelector"] == glob["nodeSelector"]
    assert agent["spec"]["nodeSelector"] == {"pool": "system", "zone": "agent"}
    assert modelapi["metadata"]["annotations"] == glob["podAnnotations"]
    assert agent["metadata"]["annotations"] == {"team": "platform", "scope": "agent"}
    assert modelapi["metadata"]["labels"]["cost-center"] == "42" and modelapi["metadata"]["labels"]["scope"] == "global"
    assert agent["metadata"]["labels"]["scope"] == "agent"
    assert agent["metadata"]["labels"]["app.kubernetes.io/name"] == "agent-controller", "the selector's labels win"
    # Lists and affinity: the controller's when set, else global's.
    for key in ["tolerations", "affinity", "topologySpreadConstraints", "priorityClassName"]:
        assert modelapi["spec"][key] == glob[key], key
        assert agent["spec"][key] == own[key], key
    # Concatenated: global's, then the controller's.
    assert modelapi["spec"]["imagePullSecrets"] == [{"name": "global-pull"}]
    assert agent["spec"]["imagePullSecrets"] == [{"name": "global-pull"}, {"name": "agent-pull"}]
    assert modelapi["spec"]["containers"][0]["args"][-1] == "--global-flag=1"
    assert agent["spec"]["containers"][0]["args"][-2:] == ["--global-flag=1", "--agent-flag=2"]
    agent_env = container_env(deployments(objects)["kaos-agent-controller-manager"])
    assert agent_env[-2:] == [("RUST_BACKTRACE", "1"), ("GATEWAY_DEFAULT_AGENT_TIMEOUT", "5s")], "last, so they override"
    assert container_env(deployments(objects)["kaos-modelapi-controller-manager"])[-1] == ("RUST_BACKTRACE", "1")
    # ServiceAccount annotations.
    accounts = {a["metadata"]["name"]: a["metadata"].get("annotations") for a in by_kind(objects, "ServiceAccount")}
    assert accounts["kaos-modelapi-controller"] == glob["serviceAccount"]["annotations"]
    assert accounts["kaos-agent-controller"] == {"iam": "global-role", "scope": "agent"}
    # The user and group, and the rest of the restricted profile.
    for pod in pods.values():
        assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1001, "runAsGroup": 1002,
                                                  "seccompProfile": {"type": "RuntimeDefault"}}
    # The digest wins over the tag.
    assert agent["spec"]["containers"][0]["image"] == "ghcr.io/kaos-rs/agent-controller@sha256:" + "a" * 64
    assert modelapi["spec"]["containers"][0]["image"] == "ghcr.io/kaos-rs/modelapi-controller:0.1.0"


def test_unset_pod_settings_render_nothing():
    objects = render()
    pod = by_kind(objects, "Deployment")[0]["spec"]["template"]
    for key in ["nodeSelector", "tolerations", "affinity", "topologySpreadConstraints", "priorityClassName", "imagePullSecrets"]:
        assert key not in pod["spec"], key
    assert "annotations" not in pod["metadata"]
    assert all("annotations" not in a["metadata"] for a in by_kind(objects, "ServiceAccount"))


def test_images_from_registry_tag_and_digest():
    cases = [
        ({}, "ghcr.io/kaos-rs/agent-controller:0.1.0"),
        ({"global": {"imageTag": "1.2.3"}}, "ghcr.io/kaos-rs/agent-controller:1.2.3"),
        ({"global": {"imageTag": "1.2.3", "imageRegistry": ""}}, "agent-controller:1.2.3"),
        ({"agent-controller": {"controller": {"image": {"tag": "9"}}}}, "ghcr.io/kaos-rs/agent-controller:9"),
        ({"global": {"imageRegistry": "r.example"}, "agent-controller": {"controller": {"image": {"digest": "sha256:" + "b" * 64}}}},
         "r.example/agent-controller@sha256:" + "b" * 64),
    ]
    for values, image in cases:
        deployment = deployments(render(values))["kaos-agent-controller-manager"]
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image, values


def test_controller_log_level_and_concurrency():
    env = {name: dict(container_env(d)) for name, d in deployments(render()).items()}
    for settings in env.values():
        assert settings["MAX_CONCURRENT_RECONCILES"] == "4"
        assert "CONTROLLER_LOG_LEVEL" not in settings, "unset: the binary's default (info)"
    values = {"global": {"controllerLogLevel": "kaos=debug,kube=info", "maxConcurrentReconciles": 8},
              "mcpserver-controller": {"controllerLogLevel": "trace", "maxConcurrentReconciles": 2}}
    env = {name: dict(container_env(d)) for name, d in deployments(render(values)).items()}
    for name in ["kaos-agent-controller-manager", "kaos-modelapi-controller-manager"]:
        assert (env[name]["CONTROLLER_LOG_LEVEL"], env[name]["MAX_CONCURRENT_RECONCILES"]) == ("kaos=debug,kube=info", "8")
    assert (env["kaos-mcpserver-controller-manager"]["CONTROLLER_LOG_LEVEL"], env["kaos-mcpserver-controller-manager"]["MAX_CONCURRENT_RECONCILES"]) == ("trace", "2")


def test_generated_pods_are_restricted_unless_a_kind_is_relaxed():
    env = {name: dict(container_env(d)) for name, d in deployments(render()).items()}
    assert {name: e["POD_SECURITY"] for name, e in env.items()} == {f"kaos-{c}-manager": "restricted" for c in CONTROLLERS}
    values = {"modelapi-controller": {"podSecurity": "baseline"}}
    env = {name: dict(container_env(d)) for name, d in deployments(render(values)).items()}
    assert env["kaos-modelapi-controller-manager"]["POD_SECURITY"] == "baseline"
    assert env["kaos-agent-controller-manager"]["POD_SECURITY"] == "restricted"
    values = {"global": {"podSecurity": "baseline"}, "agent-controller": {"podSecurity": "restricted"}}
    env = {name: dict(container_env(d)) for name, d in deployments(render(values)).items()}
    assert env["kaos-agent-controller-manager"]["POD_SECURITY"] == "restricted"
    assert env["kaos-mcpserver-controller-manager"]["POD_SECURITY"] == "baseline"


def test_monitoring_objects_take_extra_labels_and_annotations():
    objects = render({
        "global": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}, "annotations": {"a": "global"}}},
        "agent-controller": {"serviceMonitor": {"labels": {"release": "other", "team": "agents"}, "annotations": {"a": "agent"}}},
        "prometheusRule": {"enabled": True, "labels": {"release": "prom"}, "annotations": {"note": "x"}},
        "dashboards": {"enabled": True, "labels": {"grafana": "main"}, "annotations": {"folder": "KAOS"}},
    })
    monitors = {m["metadata"]["name"]: m["metadata"] for m in by_kind(objects, "ServiceMonitor")}
    assert monitors["kaos-modelapi-controller"]["labels"]["release"] == "prom"
    assert monitors["kaos-modelapi-controller"]["annotations"] == {"a": "global"}
    assert monitors["kaos-agent-controller"]["labels"]["release"] == "other"
    assert monitors["kaos-agent-controller"]["labels"]["team"] == "agents"
    assert monitors["kaos-agent-controller"]["annotations"] == {"a": "agent"}
    assert monitors["kaos-agent-controller"]["labels"]["app.kubernetes.io/name"] == "agent-controller"
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["metadata"]["labels"] == {"release": "prom", "app.kubernetes.io/part-of": "kaos", "app.kubernetes.io/instance": "kaos"}
    assert rule["metadata"]["annotations"] == {"note": "x"}
    for dashboard in [c for c in by_kind(objects, "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]]:
        assert dashboard["metadata"]["labels"]["grafana"] == "main"
        assert dashboard["metadata"]["annotations"] == {"folder": "KAOS"}


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}
EVERYTHING = {"dashboards": {"enabled": True, "namespace": "monitoring"}, "prometheusRule": {"enabled": True},
              "global": {"serviceMonitor": {"enabled": True}, "workloadMonitoring": {"enabled": True}}}


def object_names(objects):
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in objects if o["kind"] != "CustomResourceDefinition"}


def test_names_derive_from_the_release():
    objects = render(EVERYTHING, release="prod", namespace="team-prod", api_versions=PROMETHEUS_OPERATOR)
    for kind, _, name in object_names(objects):
        assert name.startswith("prod-kaos-") or name == "prod-kaos" or name == "kaos-mcp-runtimes", (kind, name)
    assert names(objects, "Deployment") == [f"prod-kaos-{c}-manager" for c in sorted(CONTROLLERS)]
    assert names(objects, "PrometheusRule") == ["prod-kaos"]
    assert names(objects, "PodMonitor") == ["prod-kaos-modelapis"]
    for deployment in by_kind(objects, "Deployment"):
        # The Deployment is its controller's full name plus `-manager`; everything else, the full name.
        name = deployment["metadata"]["name"].removesuffix("-manager")
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == name
        env = dict(container_env(deployment))
        assert env["LEADER_ELECTION_ID"] == name, "the Lease follows the name"
    for role in [r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-leader-election")]:
        assert role["rules"][0]["resourceNames"] == [role["metadata"]["name"].removesuffix("-leader-election")]
    (rule,) = by_kind(objects, "PrometheusRule")
    exprs = " ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"])
    assert 'name=~"prod-kaos-agent-controller|prod-kaos-modelapi-controller|prod-kaos-mcpserver-controller|' \
        'prod-kaos-memorystore-controller|prod-kaos-authz-controller|prod-kaos-workflow-controller"' in exprs, \
        "the no-leader alert watches this release's Leases"
    # A release whose name contains kaos is the prefix itself.
    assert "kaos-staging-agent-controller-manager" in names(render(release="kaos-staging"), "Deployment")


def test_default_names_are_unchanged():
    # The binaries' default Lease names and the tests that run them rely on these.
    objects = render(EVERYTHING, api_versions=PROMETHEUS_OPERATOR)
    assert names(objects, "PrometheusRule") == ["kaos"]
    assert names(objects, "PodMonitor") == ["kaos-modelapis"]
    assert sorted(c["metadata"]["name"] for c in by_kind(objects, "ConfigMap")) == [
        "kaos-dashboard-agents", "kaos-dashboard-controllers", "kaos-dashboard-resources", "kaos-mcp-runtimes"]
    for deployment in by_kind(objects, "Deployment"):
        lease = dict(container_env(deployment))["LEADER_ELECTION_ID"]
        assert deployment["metadata"]["name"] == f"{lease}-manager"
        assert lease == deployment["spec"]["template"]["spec"]["serviceAccountName"]


def test_two_releases_in_different_namespaces_do_not_collide():
    first = object_names(render(EVERYTHING, release="kaos", namespace="kaos-a", api_versions=PROMETHEUS_OPERATOR))
    second = object_names(render(EVERYTHING, release="kaos-b", namespace="kaos-b", api_versions=PROMETHEUS_OPERATOR))
    assert not first & second
    assert ("PodMonitor", "kaos-b", "kaos-b-modelapis") in second
    # Cluster-scoped objects have no namespace, and the dashboards share one (dashboards.namespace).
    shared = [(k, n) for k, _, n in second if k in CLUSTER_SCOPED or "dashboard" in n]
    # A ClusterRole and its binding per controller, the metrics reader role, three dashboards.
    assert len(shared) == 2 * len(CONTROLLERS) + 4 and not {(k, n) for k, _, n in first} & set(shared)


def test_name_overrides():
    objects = render({**EVERYTHING, "global": {**EVERYTHING["global"], "fullnameOverride": "ops"},
                      "agent-controller": {"fullnameOverride": "agents", "controller": {"lease": "agents-lease"}}})
    # A full name not ending in `-controller` gets the whole suffix, so kaos-cli still finds it.
    assert names(objects, "Deployment") == ["agents-controller-manager", "ops-authz-controller-manager",
                                            "ops-mcpserver-controller-manager", "ops-memorystore-controller-manager",
                                            "ops-modelapi-controller-manager", "ops-workflow-controller-manager"]
    assert names(objects, "ClusterRole") == ["agents", "ops-authz-controller", "ops-mcpserver-controller",
                                             "ops-memorystore-controller", "ops-metrics-reader", "ops-modelapi-controller",
                                             "ops-workflow-controller"]
    assert "agents-metrics" in names(objects, "Service")
    assert names(objects, "PrometheusRule") == ["ops"]
    assert dict(container_env(deployments(objects)["agents-controller-manager"]))["LEADER_ELECTION_ID"] == "agents-lease"
    assert deployments(objects)["agents-controller-manager"]["spec"]["template"]["spec"]["serviceAccountName"] == "agents"
    (lease_role,) = [r for r in by_kind(objects, "Role") if r["metadata"]["name"] == "agents-leader-election"]
    assert lease_role["rules"][0]["resourceNames"] == ["agents-lease"]
    renamed = render({"global": {"nameOverride": "agents"}}, release="prod")
    assert "prod-agents-agent-controller-manager" in names(renamed, "Deployment")
    # Long names are cut so `-metrics` still fits a Service name (63), and the Deployments stay
    # distinct, within 63 and recognisable.
    long = render({"global": {"fullnameOverride": "x" * 50}})
    assert all(len(n) <= 63 for n in names(long, "Service"))
    long_deployments = names(long, "Deployment")
    assert len(set(long_deployments)) == len(CONTROLLERS)
    assert all(len(n) <= 63 and n.endswith("-controller-manager") for n in long_deployments), long_deployments


# The NetworkPolicies of the generated workloads (global.networkPolicy; docs/network-policy.md,
# "Chart values"): the NETWORK_POLICY_* environment of the controllers that generate workloads
# (WORKLOAD_CONTROLLERS).
OTLP_EGRESS = [{
    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
            "podSelector": {"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In",
                                                  "values": ["opentelemetry-collector"]}]}},
           {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
    "ports": [{"port": 4317, "protocol": "TCP"}, {"port": 4318, "endPort": 4319}],
}]
NETWORK_POLICY = {"global": {"networkPolicy": {
    "enabled": True, "namespaces": ["team-a", "team-b"],
    "clusterCIDRs": ["10.244.0.0/16", "10.96.0.0/12", "fd00::/8"],
    "external": {"cidrs": ["0.0.0.0/0", "::/0"], "ports": [443, "8000-8100/TCP"]},
    # "" drops a default label (Helm brings back a key set to null in a subchart's global).
    "dns": {"podLabels": {"k8s-app": "", "app.kubernetes.io/name": "coredns"}, "ports": ["53/UDP"]},
    "gateway": {"namespaceLabels": {"kubernetes.io/metadata.name": "gateways"},
                "podLabels": {"gateway.envoyproxy.io/owning-gateway-name": "kaos-gateway", "app": "envoy"}},
    # An empty map keeps the default labels (Helm merges maps).
    "scraper": {"namespaceLabels": {"kubernetes.io/metadata.name": "", "team": "obs"}, "podLabels": {}},
    "apiServer": {"cidrs": ["172.18.0.2/32"], "ports": ["6443/TCP"]},
    "database": {"cidrs": ["10.50.0.0/24"], "ports": []},
    "deniedCIDRs": ["169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32"],
    "mcpEgress": {"*": [], "slack": ["external"]},
    "extraEgress": OTLP_EGRESS,
}}}
NETWORK_POLICY_RULE = {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                       "verbs": ["list", "watch", "get", "create", "patch", "delete"]}


def network_policy_env(values, **kwargs):
    """{Deployment name: [(name, value)] of its NETWORK_POLICY_* variables, in order}; kwargs as
    render's."""
    return {name: [(k, v) for k, v in container_env(d) if k.startswith("NETWORK_POLICY_")]
            for name, d in deployments(render(values, **kwargs)).items()}


def controllers_network_policy_defaults():
    """{variable: default} of the controllers' NetworkPolicy settings (read-only: settings.rs)."""
    source = (REPO / "crates" / "kaos-workload" / "src" / "build" / "network_policy" / "settings.rs").read_text()
    variables = dict(re.findall(r'pub const (\w+_ENV): &str = "(NETWORK_POLICY_\w+)";', source))
    constants = {name: plain or raw for name, plain, raw in
                 re.findall(r'^const (DEFAULT_\w+): &str = (?:"([^"]*)"|r#"(.*)"#);', source, re.M)}
    defaults = {}
    for arg in re.findall(r"#\[arg\((.*?)\n\s*\)\]", source, re.S):
        variable = variables[re.search(r"env = (\w+_ENV)", arg).group(1)]
        default = re.search(r'default_value(?:_t)? = (DEFAULT_\w+|"[^"]*"|false)', arg).group(1)
        defaults[variable] = constants[default] if default in constants else default.strip('"')
    assert len(defaults) == len(variables) == 23, defaults
    return defaults


def test_network_policies_are_off_by_default_and_set_nothing():
    # Off, no variable at all: the controllers' default is off (and they delete the policies
    # they made while it was on).
    assert network_policy_env({}) == {f"kaos-{c}-manager": [] for c in CONTROLLERS}
    assert "NETWORK_POLICY_" not in default_manifest()
    assert controllers_network_policy_defaults()["NETWORK_POLICY_ENABLED"] == "false"


# The workflow controller's pods as the agents' policies admit them (docs/workflows.md, "Network
# policies"): this release's, in the release namespace.
WORKFLOW_PEER = [
    ("NETWORK_POLICY_WORKFLOW_NAMESPACE_LABELS", "kubernetes.io/metadata.name=kaos-system"),
    ("NETWORK_POLICY_WORKFLOW_POD_LABELS", "app.kubernetes.io/instance=kaos,app.kubernetes.io/name=workflow-controller"),
]
# The operator's controllers as the policies admit them to what they check (docs/network-policy.md):
# this release's, in the release namespace; each policy adds the names of the controllers.
CONTROLLER_PEER = [
    ("NETWORK_POLICY_CONTROLLER_NAMESPACE_LABELS", "kubernetes.io/metadata.name=kaos-system"),
    ("NETWORK_POLICY_CONTROLLER_POD_LABELS", "app.kubernetes.io/instance=kaos,app.kubernetes.io/part-of=kaos"),
]


def test_the_network_policy_defaults_are_the_controllers_own():
    # Turned on with the chart's defaults, every variable says what the controllers assume
    # without it: the values' defaults change nothing but `enabled`, and the workflow
    # controller's pods, which the controllers admit nowhere unless told (the chart tells them
    # where this release's are).
    defaults = controllers_network_policy_defaults()
    assert defaults["NETWORK_POLICY_WORKFLOW_NAMESPACE_LABELS"] == defaults["NETWORK_POLICY_WORKFLOW_POD_LABELS"] == ""
    assert defaults["NETWORK_POLICY_CONTROLLER_NAMESPACE_LABELS"] == defaults["NETWORK_POLICY_CONTROLLER_POD_LABELS"] == ""
    want = {**defaults, "NETWORK_POLICY_ENABLED": "true", **dict(WORKFLOW_PEER), **dict(CONTROLLER_PEER)}
    env = network_policy_env({"global": {"networkPolicy": {"enabled": True}}})
    for controller in WORKLOAD_CONTROLLERS:
        assert dict(env[f"kaos-{controller}-manager"]) == want, controller
    assert want["NETWORK_POLICY_MCP_EGRESS"] == '{"*":["external"],"kubernetes":["apiserver"]}'
    # The authz and workflow controllers generate no pods: no NetworkPolicy settings.
    for controller in set(CONTROLLERS) - set(WORKLOAD_CONTROLLERS):
        assert env[f"kaos-{controller}-manager"] == [], controller


def test_network_policy_values_reach_the_controllers_converted():
    env = network_policy_env(NETWORK_POLICY)
    extra = json.dumps(OTLP_EGRESS, sort_keys=True, separators=(",", ":"))
    assert extra.startswith('[{"ports":[{"port":4317,"protocol":"TCP"},{"endPort":4319,"port":4318}],"to":')
    want = [
        ("NETWORK_POLICY_ENABLED", "true"),
        ("NETWORK_POLICY_NAMESPACES", "team-a,team-b"),
        ("NETWORK_POLICY_CLUSTER_CIDRS", "10.244.0.0/16,10.96.0.0/12,fd00::/8"),
        ("NETWORK_POLICY_EXTERNAL_CIDRS", "0.0.0.0/0,::/0"),
        ("NETWORK_POLICY_EXTERNAL_PORTS", "443,8000-8100/TCP"),
        ("NETWORK_POLICY_DNS_NAMESPACE_LABELS", "kubernetes.io/metadata.name=kube-system"),
        ("NETWORK_POLICY_DNS_POD_LABELS", "app.kubernetes.io/name=coredns"),
        ("NETWORK_POLICY_DNS_PORTS", "53/UDP"),
        ("NETWORK_POLICY_GATEWAY_NAMESPACE_LABELS", "kubernetes.io/metadata.name=gateways"),
        ("NETWORK_POLICY_GATEWAY_POD_LABELS", "app=envoy,gateway.envoyproxy.io/owning-gateway-name=kaos-gateway"),
        ("NETWORK_POLICY_SCRAPER_NAMESPACE_LABELS", "team=obs"),
        ("NETWORK_POLICY_SCRAPER_POD_LABELS", "app.kubernetes.io/name=prometheus"),
        *WORKFLOW_PEER,
        *CONTROLLER_PEER,
        ("NETWORK_POLICY_APISERVER_CIDRS", "172.18.0.2/32"),
        ("NETWORK_POLICY_APISERVER_PORTS", "6443/TCP"),
        ("NETWORK_POLICY_DATABASE_CIDRS", "10.50.0.0/24"),
        ("NETWORK_POLICY_DATABASE_PORTS", ""),
        # Helm merges the map with its default: `kubernetes` stays.
        ("NETWORK_POLICY_MCP_EGRESS", '{"*":[],"kubernetes":["apiserver"],"slack":["external"]}'),
        ("NETWORK_POLICY_EXTRA_EGRESS", extra),
        ("NETWORK_POLICY_DENIED_CIDRS", "169.254.169.254/32,fd00:ec2::254/128,100.100.100.200/32"),
    ]
    for controller in WORKLOAD_CONTROLLERS:
        assert env[f"kaos-{controller}-manager"] == want, controller
    assert env["kaos-authz-controller-manager"] == env["kaos-workflow-controller-manager"] == []
    # A controller's extraEnv still overrides one of them (it comes last).
    values = {**NETWORK_POLICY, "agent-controller": {"extraEnv": [{"name": "NETWORK_POLICY_DNS_PORTS", "value": "53"}]}}
    agent = container_env(deployments(render(values))["kaos-agent-controller-manager"])
    assert agent[-1] == ("NETWORK_POLICY_DNS_PORTS", "53")


def test_agents_admit_this_releases_workflow_controller():
    # The release namespace and the labels the workflow controller's pods carry.
    env = network_policy_env({"global": {"networkPolicy": {"enabled": True}}}, release="prod", namespace="ops")
    for controller in WORKLOAD_CONTROLLERS:
        settings = dict(env[f"prod-kaos-{controller}-manager"])
        assert settings["NETWORK_POLICY_WORKFLOW_NAMESPACE_LABELS"] == "kubernetes.io/metadata.name=ops"
        assert settings["NETWORK_POLICY_WORKFLOW_POD_LABELS"] == \
            "app.kubernetes.io/instance=prod,app.kubernetes.io/name=workflow-controller"
    objects = render({}, release="prod", namespace="ops")
    pod = deployments(objects)["prod-kaos-workflow-controller-manager"]["spec"]["template"]
    assert {"app.kubernetes.io/instance": "prod", "app.kubernetes.io/name": "workflow-controller"}.items() <= \
        pod["metadata"]["labels"].items()
    assert deployments(objects)["prod-kaos-workflow-controller-manager"]["metadata"]["namespace"] == "ops"


def test_every_workload_controller_may_manage_its_network_policies():
    # Granted even with the policies off (the default): the controllers watch their policies
    # always, so the ones left from when they were on are deleted. Also the autoscalers and
    # budgets of the workloads (docs/scaling.md); MemoryStores have budgets but no autoscaler.
    autoscalers = {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
                   "verbs": ["list", "watch", "get", "create", "patch", "delete"]}
    budgets = {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
               "verbs": ["list", "watch", "get", "create", "patch", "delete"]}
    for values in [{}, {"global": {"watchNamespaces": ["team-a"]}}]:
        objects = render(values)
        for controller in CONTROLLERS:
            roles = [r for r in by_kind(objects, "ClusterRole") + by_kind(objects, "Role")
                     if r["metadata"]["name"] == f"kaos-{controller}"]
            assert len(roles) == 1, (controller, values)
            rules = roles[0]["rules"]
            workloads = controller in WORKLOAD_CONTROLLERS
            assert (NETWORK_POLICY_RULE in rules) == workloads, controller
            assert (budgets in rules) == workloads, controller
            assert (autoscalers in rules) == (controller in AUTOSCALED), controller
            assert not [r for r in rules if "networking.k8s.io" in r["apiGroups"] and r != NETWORK_POLICY_RULE]


BAD_VALUES = [
    # (values, the key the message must name)
    ({"global": {"imageTagg": "1.0"}}, "imageTagg"),
    ({"global": {"serviceMonitor": {"lables": {"release": "prom"}}}}, "lables"),
    ({"agent-controller": {"nodeSelectr": {"a": "b"}}}, "nodeSelectr"),
    ({"mcpserver-controller": {"controller": {"image": {"digets": "sha256:x"}}}}, "digets"),
    ({"memorystore-controller": {"gatewayDefaultTimeout": "soon"}}, "/gatewayDefaultTimeout"),
    ({"modelapi-controller": {"protocolChecks": {"timeoutSeconds": "5s"}}}, "/protocolChecks/timeoutSeconds"),
    ({"mcpserver-controller": {"protocolChecks": {"inFlight": 0}}}, "/protocolChecks/inFlight"),
    ({"agent-controller": {"protocolChecks": {"enabled": False}}}, "protocolChecks"),
    ({"global": {"images": {"memoryService": ""}}}, "/global/images/memoryService"),
    # The authz controller generates no pods and no routes: no such setting of its own.
    ({"authz-controller": {"podSecurity": "baseline"}}, "podSecurity"),
    ({"authz-controller": {"gatewayDefaultTimeout": "30s"}}, "gatewayDefaultTimeout"),
    # Nor the workflow controller; its own settings are durations and `namespace/agent=host:port` lists.
    ({"workflow-controller": {"podSecurity": "baseline"}}, "podSecurity"),
    ({"workflow-controller": {"gatewayDefaultTimeout": "30s"}}, "gatewayDefaultTimeout"),
    ({"workflow-controller": {"a2aCallTimeout": "soon"}}, "/a2aCallTimeout"),
    ({"workflow-controller": {"workflowPollInterval": 2}}, "/workflowPollInterval"),
    ({"workflow-controller": {"agentAddressOverrides": "writer=localhost:8000"}}, "/agentAddressOverrides"),
    ({"workflow-controller": {"agentAddressOverrides": "team-a/writer=localhost"}}, "/agentAddressOverrides"),
    ({"workflow-controller": {"agentAddressOverrides": "team-a/writer=http://localhost:8000"}}, "/agentAddressOverrides"),
    ({"workflow-controller": {"agentAdressOverrides": "team-a/writer=localhost:8000"}}, "agentAdressOverrides"),
    ({"prometheusRule": {"enabeld": True}}, "enabeld"),
    ({"prometheusRule": {"runbookUrl": "docs/runbooks.md"}}, "/prometheusRule/runbookUrl"),
    ({"dashbords": {"enabled": True}}, "dashbords"),
    ({"global": {"maxConcurrentReconciles": "many"}}, "/global/maxConcurrentReconciles"),
    ({"global": {"telemetry": {"enabled": "yes"}}}, "/global/telemetry/enabled"),
    ({"agent-controller": {"replicas": "two"}}, "/replicas"),
    ({"global": {"runAsUser": "root"}}, "/global/runAsUser"),
    ({"global": {"reconcileDebounce": "soon"}}, "/global/reconcileDebounce"),
    ({"modelapi-controller": {"tolerations": {"key": "x"}}}, "/tolerations"),
    ({"global": {"metrics": {"secure": "yes"}}}, "/global/metrics/secure"),
    ({"global": {"metrics": {"certSecrets": "x"}}}, "certSecrets"),
    ({"global": {"metrics": {"readers": [{"kind": "Robot", "name": "x"}]}}}, "/global/metrics/readers/0/kind"),
    ({"global": {"serviceMonitor": {"ca": {"secret": {"name": "x"}}}}}, "/global/serviceMonitor/ca/secret"),
    ({"global": {"podSecurity": "privileged"}}, "/global/podSecurity"),
    ({"agent-controller": {"podSecurity": "none"}}, "/podSecurity"),
    ({"global": {"uninstall": {"releaseFinalizer": False}}}, "releaseFinalizer"),
    ({"global": {"uninstall": {"releaseFinalizers": "no"}}}, "/global/uninstall/releaseFinalizers"),
    ({"global": {"workloadMonitoring": {"enabeld": True}}}, "enabeld"),
    ({"global": {"workloadMonitoring": {"modelAPIs": "yes"}}}, "/global/workloadMonitoring/modelAPIs"),
    ({"global": {"workloadMonitoring": {"podMonitor": {"interval": "often"}}}}, "/global/workloadMonitoring/podMonitor/interval"),
    ({"global": {"workloadMonitoring": {"podMonitor": {"namespaceSelector": {"matchName": ["a"]}}}}}, "matchName"),
    ({"global": {"workloadMonitoring": {"podMonitor": {"labels": {"release": 1}}}}},
     "/global/workloadMonitoring/podMonitor/labels/release"),
    ({"global": {"networkPolicy": {"clusterCidrs": ["10.0.0.0/8"]}}}, "clusterCidrs"),
    ({"global": {"networkPolicy": {"dns": {"ports": [70000]}}}}, "/global/networkPolicy/dns/ports/0"),
    ({"global": {"networkPolicy": {"gateway": {"podLabels": {"app": 1}}}}}, "/global/networkPolicy/gateway/podLabels/app"),
    ({"global": {"networkPolicy": {"mcpEgress": {"slack": ["everywhere"]}}}}, "/global/networkPolicy/mcpEgress/slack/0"),
    ({"global": {"networkPolicy": {"extraEgress": [{"to": [{"podSelectr": {}}]}]}}}, "podSelectr"),
]


@pytest.mark.parametrize("values,key", BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_the_schema_rejects_unknown_keys_and_wrong_types(values, key):
    with pytest.raises(helm_python.HelmValuesError) as error:
        render(values)
    assert key in str(error.value)
    result = helm_python.lint(str(UMBRELLA), values, strict=True, kube_version="v1.33.0")
    assert any(key in e for e in result.get("errors") or []), result


def test_every_value_set_in_the_tests_passes_the_schema_and_lint():
    for values in [PLACEMENT, EVERYTHING, {"global": {"runAsUser": None, "runAsGroup": None}},
                   {"global": {"metrics": {"secure": False}}}, WORKLOAD_MONITORING, NETWORK_POLICY,
                   {"global": {"metrics": {"certSecret": "c", "readers": [{"kind": "Group", "name": "ops"}]},
                               "serviceMonitor": {"enabled": True, "ca": {"configMap": {"name": "ca", "key": "ca.crt"}}}}}]:
        result = helm_python.lint(str(UMBRELLA), values, strict=True, kube_version="v1.33.0")
        assert not result.get("errors"), result


def blocks(path):
    """The `global` block of a values file: everything before its first blank line."""
    text = path.read_text()
    return text[: text.index("\n\n")]


def test_every_chart_shares_the_same_global_values_and_schema():
    umbrella_values = blocks(UMBRELLA / "values.yaml")
    umbrella_schema = json.loads((UMBRELLA / "values.schema.json").read_text())
    for name in SUBCHARTS:
        schema = json.loads((UMBRELLA / "charts" / name / "values.schema.json").read_text())
        assert schema["$defs"]["global"] == umbrella_schema["$defs"]["global"], name
        if name != "kaos-crds":
            assert blocks(UMBRELLA / "charts" / name / "values.yaml") == umbrella_values, name
    schemas = {n: json.loads((UMBRELLA / "charts" / n / "values.schema.json").read_text())["properties"] for n in CONTROLLERS}
    agent = schemas.pop("agent-controller")
    # The authz controller generates no pods and no routes: neither setting (nor, having no
    # Agents, the agent controller's usage collector's).
    authz = schemas.pop("authz-controller")
    assert authz == {k: v for k, v in agent.items() if k not in ("podSecurity", "gatewayDefaultTimeout", "usage")}
    # Nor does the workflow controller, which has its A2A settings instead.
    workflow = schemas.pop("workflow-controller")
    own = {"agentAddressOverrides", "a2aCallTimeout", "workflowPollInterval"}
    assert {k: v for k, v in workflow.items() if k not in own} == authz
    assert workflow["a2aCallTimeout"] == workflow["workflowPollInterval"] == agent["gatewayDefaultTimeout"], "durations"
    agent.pop("usage")
    # The modelapi and mcpserver controllers check their workloads' protocol, the same way.
    checks = {n: schemas[n].pop("protocolChecks") for n in ("modelapi-controller", "mcpserver-controller")}
    assert checks["modelapi-controller"] == checks["mcpserver-controller"]
    for name, properties in schemas.items():
        # Only the mcpserver controller has a value of its own (its runtime registry).
        assert {k: v for k, v in properties.items() if k != "extraRuntimes"} == agent, name


def test_notes_say_what_was_installed_and_how_to_check_it():
    text = notes()
    assert "release kaos in namespace kaos-system" in text
    for controller in CONTROLLERS:
        assert f"logs deployment/kaos-{controller}-manager" in text
    assert "Controller Deployments: " + ", ".join(f"kaos-{c}-manager" for c in CONTROLLERS) in text
    assert "kaos-agent-controller-metrics" in text, "the Services keep the full name"
    assert "docs/install.md" in text and "charts/kaos/README.md" in text
    text = notes({"agent-controller": {"enabled": False}, "prometheusRule": {"enabled": True, "labels": {"release": "prom"}}},
                 release="prod")
    assert "prod-kaos-agent-controller" not in text and "logs deployment/prod-kaos-modelapi-controller-manager" in text
    assert 'PrometheusRule: prod-kaos (labels {"release":"prom"})' in text
    assert "Metrics: https, port 8443" in text and "ClusterRole prod-kaos-metrics-reader" in text
    assert "Metrics: port 8080" in notes({"global": {"metrics": {"secure": False}}})
    text = notes(WORKLOAD_MONITORING, release="prod", api_versions=PROMETHEUS_OPERATOR)
    assert "Workload alerts: the group kaos-workloads of the PrometheusRule prod-kaos" in text
    assert "the PodMonitor prod-kaos-modelapis scrapes" in text


def chart_readme():
    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "scripts" / "chart-readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_chart_readme_is_generated_from_the_values():
    module = chart_readme()
    current = module.README.read_text()
    assert current == module.generated(current), "run scripts/chart-readme.py and commit charts/kaos/README.md"
    assert module.undocumented() == [], "every value needs a comment above it in its values.yaml"
    for key in ["global.serviceMonitor.labels", "agent-controller.nodeSelector", "global.runAsUser",
                "global.fullnameOverride", "mcpserver-controller.extraRuntimes", "prometheusRule.labels"]:
        assert f"| `{key}` |" in current, key


def test_install_docs_mention_every_global_value():
    docs = (REPO / "docs" / "install.md").read_text()
    values = yaml.safe_load((UMBRELLA / "values.yaml").read_text())["global"]
    missing = [key for key in values if f"global.{key}" not in docs and f".{key}`" not in docs]
    assert not missing, f"docs/install.md does not mention {missing}"


VARIATIONS = {
    "default": {},
    "placement": PLACEMENT,
    "renamed": {**EVERYTHING, "global": {**EVERYTHING["global"], "fullnameOverride": "ops"}},
    "namespaced": {"global": {"watchNamespaces": ["team-a"]}},
    "gateway": {"global": {"gateway": {"enabled": True}}},
    "dashboards": {"dashboards": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "plain-metrics": {"global": {"metrics": {"secure": False}}},
    "metrics-certificate": {"global": {"metrics": {"certSecret": "kaos-metrics-cert", "readers": [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]}}},
    "namespaced-secure": {"global": {"watchNamespaces": ["team-a"], "metrics": {"readers": [{"kind": "Group", "name": "ops"}]}}},
    "workload-monitoring": WORKLOAD_MONITORING,
    "network-policy": NETWORK_POLICY,
}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("variation", sorted(VARIATIONS))
def test_rendered_objects_validate_strictly(variation, version):
    # As installed where the Prometheus Operator's CRDs exist (its objects are custom kinds).
    for obj in render(VARIATIONS[variation], hooks=True, api_versions=PROMETHEUS_OPERATOR):
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)


def test_plain_manifests_equal_the_default_rendering():
    committed = (REPO / "deploy" / "kaos.yaml").read_text()
    assert committed == default_manifest(), "run scripts/render-deploy.py and commit deploy/kaos.yaml"


# The uninstall hooks (global.uninstall.releaseFinalizers, docs/install.md "Uninstall"): one per
# controller that adds a finalizer, and its kind. The memorystore and authz controllers add none;
# the workflow controller's is on the runs (AgentWorkflows carry none).
KINDS = {"agent-controller": "agents", "modelapi-controller": "modelapis", "mcpserver-controller": "mcpservers",
         "workflow-controller": "agentworkflowruns"}
# The controllers whose kinds may be autoscaled (docs/scaling.md).
AUTOSCALED = ["agent-controller", "modelapi-controller", "mcpserver-controller"]
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]}}


def hooks(values=None, **kwargs):
    return [o for o in render(values, hooks=True, **kwargs) if is_hook(o)]


def test_uninstall_hooks_release_each_controllers_finalizers():
    objects = render(hooks=True)
    hooked = [o for o in objects if is_hook(o)]
    deployments = {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment")}
    assert names(hooked, "Job") == [f"kaos-{c}-uninstall" for c in sorted(KINDS)]
    assert names(hooked, "ServiceAccount") == [f"kaos-{c}-uninstall" for c in sorted(KINDS)]
    # MemoryStores, AccessGrants and ThirdPartyServices carry no finalizer: nothing to release, no
    # hook object at all.
    assert not [o for o in hooked if "memorystore" in o["metadata"]["name"] or "authz" in o["metadata"]["name"]]
    for obj in hooked:
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete", obj["metadata"]["name"]
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        # Its ServiceAccount and RBAC exist before the Job runs (helm creates hooks by weight).
        want = "0" if obj["kind"] == "Job" else "-10"
        assert annotations["helm.sh/hook-weight"] == want, (obj["kind"], obj["metadata"]["name"])
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "uninstall"
    for controller, plural in KINDS.items():
        name = f"kaos-{controller}-uninstall"
        deployment = deployments[f"kaos-{controller}-manager"]
        (job,) = [j for j in by_kind(hooked, "Job") if j["metadata"]["name"] == name]
        pod = job["spec"]["template"]["spec"]
        assert job["spec"]["backoffLimit"] == 1 and job["spec"]["activeDeadlineSeconds"] < 300
        assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == name
        # Restricted Pod Security, as the controllers' own pods.
        assert pod["securityContext"] == RESTRICTED_POD == deployment["spec"]["template"]["spec"]["securityContext"]
        (container,) = pod["containers"]
        assert container["securityContext"] == RESTRICTED_CONTAINER
        # The controller's own image, in its release-finalizers mode.
        controller_container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == controller_container["image"]
        assert container["args"][0] == "release-finalizers"
        env = {e["name"]: e.get("value") for e in container["env"]}
        # The Deployment to scale is named explicitly: release-finalizers' default is the Lease name.
        assert env == {"POD_NAMESPACE": None, "CONTROLLER_DEPLOYMENT": f"kaos-{controller}-manager",
                       "LEADER_ELECTION_ID": f"kaos-{controller}", "LOG_FORMAT": "json"}
        # The controller's Deployment and metrics Service never select the hook's pod.
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= labels.items(), labels
        # RBAC: its kind's objects, list and patch only; its own Deployment and Lease by name.
        (role,) = [r for r in by_kind(hooked, "ClusterRole") if r["metadata"]["name"] == name]
        assert role["rules"] == [{"apiGroups": ["kaos.tools"], "resources": [plural], "verbs": ["list", "patch"]}]
        (stop,) = [r for r in by_kind(hooked, "Role") if r["metadata"]["name"] == f"{name}-stop"]
        assert stop["metadata"]["namespace"] == NAMESPACE
        assert stop["rules"] == [
            {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [f"kaos-{controller}-manager"],
             "verbs": ["get", "patch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [f"kaos-{controller}"], "verbs": ["get"]},
        ]
        for kind, role_kind, role_name in [("ClusterRoleBinding", "ClusterRole", name), ("RoleBinding", "Role", f"{name}-stop")]:
            (binding,) = [b for b in by_kind(hooked, kind) if b["metadata"]["name"] == role_name]
            assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]


def test_uninstall_hooks_follow_the_release_settings():
    values = {"global": {"watchNamespaces": ["team-a", "team-b"], "runAsUser": 1000, "imageTag": "1.2.3",
                         "nodeSelector": {"pool": "system"}, "imagePullSecrets": [{"name": "regcred"}]},
              "agent-controller": {"controller": {"lease": "agents-lease"}}}
    hooked = hooks(values, release="prod")
    assert not by_kind(hooked, "ClusterRole") and not by_kind(hooked, "ClusterRoleBinding")
    roles = [(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(hooked, "Role")]
    assert ("team-a", "prod-kaos-agent-controller-uninstall") in roles
    assert ("team-b", "prod-kaos-agent-controller-uninstall") in roles
    assert (NAMESPACE, "prod-kaos-agent-controller-uninstall-stop") in roles
    (job,) = [j for j in by_kind(hooked, "Job") if j["metadata"]["name"] == "prod-kaos-agent-controller-uninstall"]
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["WATCH_NAMESPACES"] == "team-a,team-b"
    assert env["LEADER_ELECTION_ID"] == "agents-lease"
    assert env["CONTROLLER_DEPLOYMENT"] == "prod-kaos-agent-controller-manager"
    assert pod["containers"][0]["image"] == "ghcr.io/kaos-rs/agent-controller:1.2.3"
    assert pod["securityContext"]["runAsUser"] == 1000
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    (stop,) = [r for r in by_kind(hooked, "Role") if r["metadata"]["name"] == "prod-kaos-agent-controller-uninstall-stop"]
    assert stop["rules"][1]["resourceNames"] == ["agents-lease"]
    # A long name still fits a Job's 63 characters.
    long = hooks({"global": {"fullnameOverride": "x" * 40}})
    assert all(len(j["metadata"]["name"]) <= 63 for j in by_kind(long, "Job"))


def test_uninstall_hooks_can_be_turned_off_and_never_reach_deploy():
    assert not hooks({"global": {"uninstall": {"releaseFinalizers": False}}})
    # A controller installed alone brings its own hook, if it has one.
    alone = {c: {"enabled": False} for c in CONTROLLERS}
    assert names(hooks({**alone, "agent-controller": {"enabled": True}}), "Job") == ["kaos-agent-controller-uninstall"]
    assert not hooks({**alone, "memorystore-controller": {"enabled": True}})
    assert not hooks({**alone, "authz-controller": {"enabled": True}})
    assert names(hooks({**alone, "workflow-controller": {"enabled": True}}), "Job") == ["kaos-workflow-controller-uninstall"]
    # deploy/kaos.yaml (kubectl apply) must not run the Job at install.
    assert "release-finalizers" not in default_manifest()


# What the memorystore controller is granted, exactly: tests/chart_rbac.rs proves it enough and
# every grant used. No write of the MemoryStores themselves: they carry no finalizer.
MEMORYSTORE_RULES = [
    {"apiGroups": ["kaos.tools"], "resources": ["memorystores"], "verbs": ["list", "watch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["memorystores/status"], "verbs": ["patch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["modelapis"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch", "get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "watch", "get", "create", "patch"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch", "get", "create", "patch", "delete"]},
    {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"],
     "verbs": ["list", "watch", "get", "create", "patch", "delete"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": ["list", "watch", "get", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]


def test_the_memorystore_controller_is_granted_exactly_what_it_uses():
    objects = render()
    (role,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == "kaos-memorystore-controller"]
    assert role["rules"] == MEMORYSTORE_RULES + METRICS_AUTH_RULES
    # Its own Lease only, in the release namespace; no release-namespace rules of its own.
    (lease_role,) = [r for r in by_kind(objects, "Role") if r["metadata"]["name"] == "kaos-memorystore-controller-leader-election"]
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kaos-memorystore-controller"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    namespaced = render({"global": {"watchNamespaces": ["team-a"]}})
    (team_role,) = [r for r in by_kind(namespaced, "Role")
                    if r["metadata"]["name"] == "kaos-memorystore-controller" and r["metadata"]["namespace"] == "team-a"]
    assert team_role["rules"] == MEMORYSTORE_RULES


# What the authz controller is granted, exactly: tests/chart_rbac.rs proves it enough and every
# grant used. Status only: no child of any kind, no write of its resources but their status, and
# Secrets by name only (a ThirdPartyService's client Secret is checked to exist).
AUTHZ_RULES = [
    {"apiGroups": ["kaos.tools"], "resources": ["accessgrants", "thirdpartyservices"], "verbs": ["list", "watch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["accessgrants/status", "thirdpartyservices/status"], "verbs": ["patch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["agents", "mcpservers", "modelapis", "memorystores"],
     "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]


def test_the_authz_controller_is_granted_exactly_what_it_uses():
    objects = render()
    (role,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == "kaos-authz-controller"]
    assert role["rules"] == AUTHZ_RULES + METRICS_AUTH_RULES
    groups = {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert not groups & {"apps", "policy", "autoscaling", "gateway.networking.k8s.io", "networking.k8s.io"}, "no children"
    (lease_role,) = [r for r in by_kind(objects, "Role") if r["metadata"]["name"] == "kaos-authz-controller-leader-election"]
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kaos-authz-controller"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    namespaced = render({"global": {"watchNamespaces": ["team-a"]}})
    (team_role,) = [r for r in by_kind(namespaced, "Role")
                    if r["metadata"]["name"] == "kaos-authz-controller" and r["metadata"]["namespace"] == "team-a"]
    assert team_role["rules"] == AUTHZ_RULES
    # No uninstall hook (its kinds carry no finalizer), and its name is not one kaos-cli reads as
    # KAOS's policy decision point (`kaos system status`: a Deployment named `*access-control*`).
    assert not [o for o in render(hooks=True) if is_hook(o) and "authz" in o["metadata"]["name"]]
    assert not [o for o in objects if "access-control" in o["metadata"]["name"]]


# What the workflow controller is granted, exactly (its contract, issue 23): the workflows (read,
# their status written), the runs it creates, deletes and patches, the Agents it reads, events.
# Its only children are the runs: no Deployments, Services, Secrets, ConfigMaps or policies, and
# the agents are called over A2A, never written.
WORKFLOW_RULES = [
    {"apiGroups": ["kaos.tools"], "resources": ["agentworkflows"], "verbs": ["list", "watch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["agentworkflows/status"], "verbs": ["patch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["agentworkflows/finalizers"], "verbs": ["update"]},
    {"apiGroups": ["kaos.tools"], "resources": ["agentworkflowruns"],
     "verbs": ["list", "watch", "create", "delete", "patch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["agentworkflowruns/status"], "verbs": ["patch"]},
    {"apiGroups": ["kaos.tools"], "resources": ["agents"], "verbs": ["list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]


def test_the_workflow_controller_is_granted_exactly_what_it_uses():
    objects = render()
    (role,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == "kaos-workflow-controller"]
    assert role["rules"] == WORKFLOW_RULES + METRICS_AUTH_RULES
    groups = {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert not groups & {"", "apps", "policy", "autoscaling", "gateway.networking.k8s.io", "networking.k8s.io"}, \
        "no children but its runs"
    # The Agents are read, never written; nothing of the other kinds at all.
    kaos = {r for rule in role["rules"] if rule["apiGroups"] == ["kaos.tools"] for r in rule["resources"]}
    assert kaos == {"agentworkflows", "agentworkflows/status", "agentworkflows/finalizers", "agentworkflowruns",
                    "agentworkflowruns/status", "agents"}
    (lease_role,) = [r for r in by_kind(objects, "Role") if r["metadata"]["name"] == "kaos-workflow-controller-leader-election"]
    assert lease_role["metadata"]["namespace"] == NAMESPACE
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kaos-workflow-controller"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    (binding,) = [b for b in by_kind(objects, "ClusterRoleBinding") if b["metadata"]["name"] == "kaos-workflow-controller"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kaos-workflow-controller", "namespace": NAMESPACE}]
    namespaced = render({"global": {"watchNamespaces": ["team-a", "team-b"]}})
    for namespace in ["team-a", "team-b"]:
        (team_role,) = [r for r in by_kind(namespaced, "Role")
                        if r["metadata"]["name"] == "kaos-workflow-controller" and r["metadata"]["namespace"] == namespace]
        assert team_role["rules"] == WORKFLOW_RULES
    assert "kaos-workflow-controller" not in names(namespaced, "ClusterRole")
    # Its uninstall hook releases the runs' finalizer, and touches nothing else of the kinds
    # (test_uninstall_hooks_release_each_controllers_finalizers checks the rest of it).
    hooked = [o for o in render(hooks=True) if is_hook(o) and "workflow" in o["metadata"]["name"]]
    (hook_role,) = by_kind(hooked, "ClusterRole")
    assert hook_role["rules"] == [{"apiGroups": ["kaos.tools"], "resources": ["agentworkflowruns"], "verbs": ["list", "patch"]}]


def test_the_workflow_controller_settings():
    values = {"workflow-controller": {"a2aCallTimeout": "30s", "workflowPollInterval": "500ms",
                                      "agentAddressOverrides": "team-a/writer=10.1.2.3:8000,team-b/critic=critic.example:9000",
                                      "extraEnv": [{"name": "WORKFLOW_POLL_INTERVAL", "value": "5s"}]},
              "global": {"watchNamespaces": ["team-a", "team-b"], "networkPolicy": {"enabled": True}}}
    deployment = deployments(render(values))["kaos-workflow-controller-manager"]
    env = container_env(deployment)
    assert ("A2A_CALL_TIMEOUT", "30s") in env
    assert ("AGENT_ADDRESS_OVERRIDES", "team-a/writer=10.1.2.3:8000,team-b/critic=critic.example:9000") in env
    # The chart's value, then extraEnv last, so it wins.
    assert [v for k, v in env if k == "WORKFLOW_POLL_INTERVAL"] == ["500ms", "5s"]
    settings = dict(env)
    assert settings["WATCH_NAMESPACES"] == "team-a,team-b"
    assert settings["LEADER_ELECTION_ID"] == "kaos-workflow-controller"
    assert not [k for k in settings if k.startswith("NETWORK_POLICY_")], "it generates no pods"
    # Its own image, probes and restricted security, as every controller.
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/kaos-rs/workflow-controller:0.1.0"
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "workflow-controller"
    assert container["securityContext"] == RESTRICTED_CONTAINER
    assert deployment["spec"]["template"]["spec"]["securityContext"] == RESTRICTED_POD
    assert (container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]) == (
        {"path": "/healthz", "port": "health"}, {"path": "/readyz", "port": "health"})
    # An empty override list sets nothing (the controller's own default).
    empty = deployments(render({"workflow-controller": {"agentAddressOverrides": ""}}))["kaos-workflow-controller-manager"]
    assert "AGENT_ADDRESS_OVERRIDES" not in dict(container_env(empty))


def kaos_cli_operator(deployments):
    """The Deployment kaos-cli 0.8.4's `kaos system status` takes for the installed operator
    (kaos_cli/system/status.py: `kubectl get deployment --all-namespaces -o json`, the first one
    whose lower-cased name contains `kaos-operator` or `controller-manager`; "sync service ready"
    when its readyReplicas >= replicas > 0)."""
    names = [d["metadata"]["name"].lower() for d in deployments]
    return next((n for n in names if "kaos-operator" in n or "controller-manager" in n), None)


@pytest.mark.parametrize("values,release", [
    ({}, "kaos"), ({}, "prod"), ({"global": {"fullnameOverride": "ops"}}, "kaos"),
    ({"agent-controller": {"fullnameOverride": "agents"}}, "kaos"),
    ({c: {"enabled": False} for c in CONTROLLERS if c != "authz-controller"}, "kaos"),
])
def test_kaos_cli_recognises_the_installation(values, release):
    """One Deployment per controller, each named so that `kaos system status` finds it, and none
    that it would take for KAOS's policy decision point (a Deployment named `*access-control*`)."""
    objects = render(values, release=release)
    ours = by_kind(objects, "Deployment")
    enabled = [c for c in CONTROLLERS if (values.get(c) or {}).get("enabled", True)]
    assert len(ours) == len(enabled), "one Deployment per controller"
    # Whatever the order `kubectl get` lists them in, the first match is one of ours, running.
    for order in (ours, ours[::-1]):
        found = kaos_cli_operator(order)
        assert found in {d["metadata"]["name"] for d in ours}, [d["metadata"]["name"] for d in ours]
    assert all(kaos_cli_operator([d]) for d in ours), "each controller alone is recognised"
    assert all(d["spec"]["replicas"] > 0 for d in ours)
    assert not [o for o in render(values, release=release, hooks=True) if "access-control" in o["metadata"]["name"]]
