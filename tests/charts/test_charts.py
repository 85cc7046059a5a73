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

from chart import NAMESPACE, REPO, SUBCHARTS, UMBRELLA, default_manifest, is_hook, notes, render

KUBERNETES_VERSIONS = ["1.33.0", "1.37.0"]
# Custom resources the validator has no schema for.
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
CONTROLLERS = ["agent-controller", "modelapi-controller", "mcpserver-controller", "memorystore-controller",
               "authz-controller"]


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
    assert names(objects, "CustomResourceDefinition") == ["accessgrants.kaos.tools", "agents.kaos.tools", "mcpservers.kaos.tools",
                                                           "memorystores.kaos.tools", "modelapis.kaos.tools",
                                                           "thirdpartyservices.kaos.tools"]
    for crd in by_kind(objects, "CustomResourceDefinition"):
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
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
    assert f"kaos-{disabled}-manager" not in deployments
    assert len(deployments) == len(CONTROLLERS) - 1
    assert len(by_kind(objects, "CustomResourceDefinition")) == 6


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
        assert endpoint == {"port": "metrics", "interval": "30s", "scheme": "https",
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
        assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]


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
    assert sorted(c["metadata"]["name"] for c in dashboards) == ["kaos-dashboard-controllers", "kaos-dashboard-resources"]
    selected, exprs_of_dashboards = [], []
    for config_map in dashboards:
        (text,) = config_map["data"].values()
        dashboard = json.loads(text)
        exprs_of_dashboards += [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
        exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
        if dashboard["uid"] == "kaos-controllers":
            for metric in ["controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
                           "controller_runtime_reconcile_time_seconds_bucket", "controller_runtime_active_workers",
                           "leader_election_master_status", "process_resident_memory_bytes", "process_cpu_seconds_total",
                           "workqueue_depth", "workqueue_retries_total", "workqueue_queue_duration_seconds_bucket",
                           "workqueue_longest_running_processor_seconds"]:
                assert metric in exprs, metric
        else:
            assert "kaos_resources" in exprs
        selected += re.findall(r'controller=~"([^"]*)"', exprs)
    assert len(by_kind(objects, "ServiceMonitor")) == len(CONTROLLERS)
    (rule,) = by_kind(objects, "PrometheusRule")
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == ["KaosReconcileErrors", "KaosNoLeader"] + ["KaosControllerAbsent"] * len(CONTROLLERS) + ["KaosResourcesFailed"]
    # Every panel and alert that selects controllers by their metrics' `controller` label selects
    # them all (the dashboards are plain JSON, kept by hand).
    selected += re.findall(r'controller=~"([^"]*)"', " ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]))
    assert len(selected) > 10 and set(selected) == {"|".join(c.removesuffix("-controller") for c in CONTROLLERS)}, selected
    # They select controllers by that label and by Lease name, never by pod or Deployment name
    # (the Deployments are `<full name>-manager`, not the Lease's name).
    every = exprs_of_dashboards + [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert not [e for e in every if re.search(r'\b(pod|deployment)=~?"', e)], every
    # The alerts' behaviour is tested with promtool (tests/alerts); that the controllers export
    # every series the dashboards and alerts query, by tests/e2e.rs.


def rules(values, **kwargs):
    (rule,) = by_kind(render({**values, "prometheusRule": {"enabled": True, **values.get("prometheusRule", {})}},
                             **kwargs), "PrometheusRule")
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def test_alerts_link_the_runbooks_at_a_configurable_address():
    base = "https://docs.example.com/kaos/runbooks.html"
    for rule in rules({"prometheusRule": {"runbookUrl": base}}):
        assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"


def test_lease_alerts_watch_the_installed_controllers_leases_only():
    exprs = [r["expr"] for r in rules({"agent-controller": {"enabled": False},
                                        "modelapi-controller": {"controller": {"lease": "models-lease"}}}, release="prod")]
    assert ('max by (name) (leader_election_master_status{name=~"models-lease|prod-kaos-mcpserver-controller|'
            'prod-kaos-memorystore-controller|prod-kaos-authz-controller"}) < 1') in exprs
    absent = [e for e in exprs if e.startswith("absent(")]
    assert absent == ['absent(leader_election_master_status{name="models-lease"})',
                      'absent(leader_election_master_status{name="prod-kaos-mcpserver-controller"})',
                      'absent(leader_election_master_status{name="prod-kaos-memorystore-controller"})',
                      'absent(leader_election_master_status{name="prod-kaos-authz-controller"})']
    none = rules({name: {"enabled": False} for name in CONTROLLERS})
    assert [r["alert"] for r in none] == ["KaosReconcileErrors", "KaosResourcesFailed"]


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
              "global": {"serviceMonitor": {"enabled": True}}}


def object_names(objects):
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in objects if o["kind"] != "CustomResourceDefinition"}


def test_names_derive_from_the_release():
    objects = render(EVERYTHING, release="prod", namespace="team-prod")
    for kind, _, name in object_names(objects):
        assert name.startswith("prod-kaos-") or name == "prod-kaos" or name == "kaos-mcp-runtimes", (kind, name)
    assert names(objects, "Deployment") == [f"prod-kaos-{c}-manager" for c in sorted(CONTROLLERS)]
    assert names(objects, "PrometheusRule") == ["prod-kaos"]
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
        'prod-kaos-memorystore-controller|prod-kaos-authz-controller"' in exprs, \
        "the no-leader alert watches this release's Leases"
    # A release whose name contains kaos is the prefix itself.
    assert "kaos-staging-agent-controller-manager" in names(render(release="kaos-staging"), "Deployment")


def test_default_names_are_unchanged():
    # The binaries' default Lease names and the tests that run them rely on these.
    objects = render(EVERYTHING)
    assert names(objects, "PrometheusRule") == ["kaos"]
    assert sorted(c["metadata"]["name"] for c in by_kind(objects, "ConfigMap")) == [
        "kaos-dashboard-controllers", "kaos-dashboard-resources", "kaos-mcp-runtimes"]
    for deployment in by_kind(objects, "Deployment"):
        lease = dict(container_env(deployment))["LEADER_ELECTION_ID"]
        assert deployment["metadata"]["name"] == f"{lease}-manager"
        assert lease == deployment["spec"]["template"]["spec"]["serviceAccountName"]


def test_two_releases_in_different_namespaces_do_not_collide():
    first = object_names(render(EVERYTHING, release="kaos", namespace="kaos-a"))
    second = object_names(render(EVERYTHING, release="kaos-b", namespace="kaos-b"))
    assert not first & second
    # Cluster-scoped objects have no namespace, and the dashboards share one (dashboards.namespace).
    shared = [(k, n) for k, _, n in second if k in CLUSTER_SCOPED or "dashboard" in n]
    # A ClusterRole and its binding per controller, the metrics reader role, two dashboards.
    assert len(shared) == 2 * len(CONTROLLERS) + 3 and not {(k, n) for k, _, n in first} & set(shared)


def test_name_overrides():
    objects = render({**EVERYTHING, "global": {**EVERYTHING["global"], "fullnameOverride": "ops"},
                      "agent-controller": {"fullnameOverride": "agents", "controller": {"lease": "agents-lease"}}})
    # A full name not ending in `-controller` gets the whole suffix, so kaos-cli still finds it.
    assert names(objects, "Deployment") == ["agents-controller-manager", "ops-authz-controller-manager",
                                            "ops-mcpserver-controller-manager", "ops-memorystore-controller-manager",
                                            "ops-modelapi-controller-manager"]
    assert names(objects, "ClusterRole") == ["agents", "ops-authz-controller", "ops-mcpserver-controller",
                                             "ops-memorystore-controller", "ops-metrics-reader", "ops-modelapi-controller"]
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


BAD_VALUES = [
    # (values, the key the message must name)
    ({"global": {"imageTagg": "1.0"}}, "imageTagg"),
    ({"global": {"serviceMonitor": {"lables": {"release": "prom"}}}}, "lables"),
    ({"agent-controller": {"nodeSelectr": {"a": "b"}}}, "nodeSelectr"),
    ({"mcpserver-controller": {"controller": {"image": {"digets": "sha256:x"}}}}, "digets"),
    ({"memorystore-controller": {"gatewayDefaultTimeout": "soon"}}, "/gatewayDefaultTimeout"),
    ({"global": {"images": {"memoryService": ""}}}, "/global/images/memoryService"),
    # The authz controller generates no pods and no routes: no such setting of its own.
    ({"authz-controller": {"podSecurity": "baseline"}}, "podSecurity"),
    ({"authz-controller": {"gatewayDefaultTimeout": "30s"}}, "gatewayDefaultTimeout"),
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
                   {"global": {"metrics": {"secure": False}}},
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
    # The authz controller generates no pods and no routes: neither setting.
    authz = schemas.pop("authz-controller")
    assert authz == {k: v for k, v in agent.items() if k not in ("podSecurity", "gatewayDefaultTimeout")}
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
}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("variation", sorted(VARIATIONS))
def test_rendered_objects_validate_strictly(variation, version):
    for obj in render(VARIATIONS[variation], hooks=True):
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, version, strict=True)


def test_plain_manifests_equal_the_default_rendering():
    committed = (REPO / "deploy" / "kaos.yaml").read_text()
    assert committed == default_manifest(), "run scripts/render-deploy.py and commit deploy/kaos.yaml"


# The uninstall hooks (global.uninstall.releaseFinalizers, docs/install.md "Uninstall"): one per
# controller that adds a finalizer, and its kind. The memorystore and authz controllers add none.
KINDS = {"agent-controller": "agents", "modelapi-controller": "modelapis", "mcpserver-controller": "mcpservers"}
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
    assert not groups & {"apps", "policy", "gateway.networking.k8s.io"}, "no children"
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
