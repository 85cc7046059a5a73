"""Rendering the kaos Helm chart with the real Helm v4 SDK (helm-python-sdk)."""

import json
from pathlib import Path

import helm_python
import yaml
from helm_python import _native

REPO = Path(__file__).resolve().parents[2]
UMBRELLA = REPO / "charts" / "kaos"
SUBCHARTS = ["kaos-crds", "agent-controller", "modelapi-controller", "mcpserver-controller",
             "memorystore-controller", "authz-controller", "workflow-controller"]
RELEASE, NAMESPACE = "kaos", "kaos-system"


# What a cluster with the Prometheus Operator's CRDs serves: `helm template --api-versions` of
# each, so `.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PodMonitor"` is true.
PROMETHEUS_OPERATOR = ["monitoring.coreos.com/v1", "monitoring.coreos.com/v1/PodMonitor",
                       "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"]


def render_templates(values=None, chart=UMBRELLA, release=RELEASE, namespace=NAMESPACE, api_versions=()):
    """{template path: rendered text}, NOTES.txt included. api_versions: the API versions the
    chart sees besides the built-in ones (`helm template --api-versions`), e.g.
    PROMETHEUS_OPERATOR."""
    # render() mutates the loaded chart (disabled subcharts are dropped): load it every time.
    loaded = helm_python.Chart.load(str(chart))
    if not api_versions:
        return loaded.render(values or {}, name=release, namespace=namespace, is_install=True)
    # Chart.render() has no api_versions; the helm-c call it wraps takes them (`api_versions`).
    options = {"name": release, "namespace": namespace, "is_install": True, "api_versions": list(api_versions)}
    return json.loads(_native.call_string("helm_render", loaded._raw(), json.dumps(values or {}), json.dumps(options)))


def notes(values=None, **kwargs):
    """What `helm install` prints after installing (templates/NOTES.txt)."""
    (text,) = [t for p, t in render_templates(values, **kwargs).items() if p.endswith("/NOTES.txt")]
    return text


def render(values=None, chart=UMBRELLA, release=RELEASE, namespace=NAMESPACE, hooks=False, api_versions=()):
    """Every object the release installs with `values`, in template order; with hooks, the Helm
    hooks too (helm runs those at their event only, e.g. the pre-delete uninstall Jobs);
    api_versions as render_templates'."""
    templates = render_templates(values, chart, release, namespace, api_versions)
    objects = []
    for path in sorted(templates):
        if path.endswith("/NOTES.txt"):
            continue
        for document in yaml.safe_load_all(templates[path]):
            if document and (hooks or not is_hook(document)):
                objects.append(document)
    return objects


def is_hook(obj):
    """A Helm hook (e.g. the pre-delete uninstall Job): run by helm at its event, never applied
    with the release."""
    return "helm.sh/hook" in (obj.get("metadata", {}).get("annotations") or {})


def default_manifest():
    """The default rendering as one YAML stream: what deploy/kaos.yaml holds. Without the Helm
    hooks: `kubectl apply` would run the uninstall Job at once (docs/install.md)."""
    header = (
        "# Generated from charts/kaos with default values (release kaos, namespace kaos-system)\n"
        "# by scripts/render-deploy.py; a test keeps it equal to the chart. Do not edit.\n"
    )
    objects = [o for o in render() if o["kind"] != "CustomResourceDefinition"]
    return header + "".join("---\n" + yaml.safe_dump(o, sort_keys=True) for o in objects)
