"""KAOS's security plane in the chart (`global.security`, KAOS's `security.*` values): off by
default and rendering nothing then; with the PDP on, KAOS's `kaos-pdp` objects (stock OPA with
its Envoy plugin) under the restricted Pod Security Standard, the authz controller's settings in
KAOS's names, and a Role on the policy ConfigMap only."""

import helm_python
import kubernetes_validate
import pytest

from chart import NAMESPACE, UMBRELLA, render

POLICY = {"name": "kaos-authz-policy", "namespace": NAMESPACE}
PDP = {"global": {"security": {"pdp": {"enabled": True},
                               "agentAuth": {"projection": {"policyConfigMap": POLICY}},
                               "userAuth": {"issuer": "http://keycloak.keycloak:8080/realms/kaos", "audience": "kaos"}}}}


def authz_env(objects):
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"
                     and o["metadata"]["name"] == "kaos-authz-controller-manager"]
    return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def pdp_objects(objects):
    return {o["kind"]: o for o in objects if o["metadata"]["name"] == "kaos-pdp"}


def security_env(env):
    return {k: v for k, v in env.items() if k.startswith(("SECURITY_", "AUTHZ_POLICY_"))}


def test_nothing_is_rendered_by_default():
    objects = render()
    assert pdp_objects(objects) == {}
    assert security_env(authz_env(objects)) == {}
    assert not [o for o in objects if o["metadata"]["name"].endswith("-policy")]


def test_the_pdp_is_kaos_s_stock_opa_under_the_restricted_profile():
    objects = render(PDP)
    pdp = pdp_objects(objects)
    assert set(pdp) == {"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    for obj in pdp.values():
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
    pod = pdp["Deployment"]["spec"]["template"]["spec"]
    (opa,) = pod["containers"]
    assert opa["image"] == "openpolicyagent/opa:1.18.1-envoy-static"
    assert opa["args"] == ["run", "--server", "--watch", "--addr=localhost:8181", "--diagnostic-addr=0.0.0.0:8282",
                           "--set=plugins.envoy_ext_authz_grpc.addr=:9191",
                           "--set=plugins.envoy_ext_authz_grpc.path=kaos/authz/result",
                           "/policy/policy.rego", "/policy/data.json"]
    assert opa["readinessProbe"]["httpGet"] == {"path": "/health?plugins", "port": "diagnostic"}
    assert opa["livenessProbe"]["httpGet"] == {"path": "/health?plugins", "port": "diagnostic"}
    assert pod["volumes"] == [{"name": "policy", "configMap": {"name": "kaos-authz-policy"}}]
    # restricted: non-root, RuntimeDefault seccomp, no escalation, no capabilities; no API token.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert opa["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                      "readOnlyRootFilesystem": True}
    assert pod["automountServiceAccountToken"] is False
    assert pdp["Deployment"]["spec"]["replicas"] == 2
    assert [(p["name"], p["port"]) for p in pdp["Service"]["spec"]["ports"]] == [("grpc", 9191), ("diagnostic", 8282)]
    assert pdp["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    # Only the gateway's namespace reaches the decision port.
    (rule,) = pdp["NetworkPolicy"]["spec"]["ingress"]
    assert rule == {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}}],
                    "ports": [{"protocol": "TCP", "port": 9191}]}
    one = render({"global": {"security": {**PDP["global"]["security"], "pdp": {"enabled": True, "replicas": 1}}}})
    assert "PodDisruptionBudget" not in pdp_objects(one)


def test_the_controller_gets_kaos_s_settings_and_a_role_on_the_policy_configmap_only():
    objects = render(PDP)
    assert security_env(authz_env(objects)) == {
        "SECURITY_AGENT_AUTH_EXT_AUTHZ_URL": f"kaos-pdp.{NAMESPACE}.svc:9191",
        "SECURITY_AGENT_AUTH_IDENTITY_PROVIDER": "serviceaccount",
        "SECURITY_PDP_ENABLED": "true",
        "AUTHZ_POLICY_CONFIGMAP_NAME": "kaos-authz-policy",
        "AUTHZ_POLICY_CONFIGMAP_NAMESPACE": NAMESPACE,
        "SECURITY_USER_AUTH_ISSUER": "http://keycloak.keycloak:8080/realms/kaos",
        "SECURITY_USER_AUTH_AUDIENCE": "kaos",
    }
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "kaos-authz-controller-policy"]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kaos-authz-policy"],
         "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    ]
    (binding,) = [o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "kaos-authz-controller-policy"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kaos-authz-controller", "namespace": NAMESPACE}]
    # No other controller gets any of it.
    for deployment in [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] != "kaos-authz-controller-manager"
                       and o["metadata"]["name"] != "kaos-pdp"]:
        env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert not {e for e in env if e.startswith(("SECURITY_", "AUTHZ_POLICY_"))}, deployment["metadata"]["name"]


def test_an_explicit_ext_authz_url_and_a_manual_data_source_are_kaos_s():
    values = {"global": {"security": {
        "agentAuth": {"extAuthzUrl": "custom-authz.custom-system.svc:9002",
                      "identity": {"provider": "aib"}, "issuer": "https://aib.example", "credentialSecretPrefix": "kaos-aib",
                      "authorization": {"policyDataSource": "manual"},
                      "projection": {"policyConfigMap": {"name": "kaos-authz-policy", "namespace": "aib-system"}}}}}}
    objects = render(values)
    assert security_env(authz_env(objects)) == {
        "SECURITY_AGENT_AUTH_EXT_AUTHZ_URL": "custom-authz.custom-system.svc:9002",
        "SECURITY_AGENT_AUTH_IDENTITY_PROVIDER": "aib",
        "SECURITY_AGENT_AUTH_ISSUER": "https://aib.example",
        "SECURITY_AGENT_AUTH_CREDENTIAL_SECRET_PREFIX": "kaos-aib",
        "SECURITY_AUTHORIZATION_POLICY_DATA_SOURCE": "manual",
        "AUTHZ_POLICY_CONFIGMAP_NAME": "kaos-authz-policy",
        "AUTHZ_POLICY_CONFIGMAP_NAMESPACE": "aib-system",
    }
    assert pdp_objects(objects) == {}
    # Manual data, no rego override: the controller writes nothing, so it gets no Role.
    assert not [o for o in objects if o["metadata"]["name"] == "kaos-authz-controller-policy"]
    values["global"]["security"]["agentAuth"]["authorization"]["policyRegoOverride"] = True
    (role,) = [o for o in render(values) if o["kind"] == "Role" and o["metadata"]["name"] == "kaos-authz-controller-policy"]
    assert role["metadata"]["namespace"] == "aib-system"


def test_the_pdp_refuses_a_policy_configmap_it_cannot_mount():
    for policy, message in [
        ({"name": "kaos-authz-policy", "namespace": "other-system"},
         'policyConfigMap namespace "other-system" to match release namespace "kaos-system" because Pods cannot mount ConfigMaps across namespaces'),
        ({"namespace": NAMESPACE}, "global.security.pdp.enabled requires global.security.agentAuth.projection.policyConfigMap.name"),
    ]:
        values = {"global": {"security": {"pdp": {"enabled": True}, "agentAuth": {"projection": {"policyConfigMap": policy}}}}}
        with pytest.raises(Exception) as error:
            render(values)
        assert message in str(error.value)


@pytest.mark.parametrize("values,key", [
    ({"global": {"security": {"agentAuth": {"identity": {"provider": "ldap"}}}}}, "/global/security/agentAuth/identity/provider"),
    ({"global": {"security": {"agentAuth": {"authorization": {"policyDataSource": "external"}}}}},
     "/global/security/agentAuth/authorization/policyDataSource"),
    ({"global": {"security": {"pdp": {"enabeld": True}}}}, "enabeld"),
    ({"global": {"security": {"userAuth": {"issuer": "keycloak"}}}}, "/global/security/userAuth/issuer"),
])
def test_the_schema_rejects_what_kaos_would_not_take(values, key):
    with pytest.raises(helm_python.HelmValuesError) as error:
        render(values)
    assert key in str(error.value)


def test_security_values_pass_lint():
    result = helm_python.lint(str(UMBRELLA), PDP, strict=True, kube_version="v1.33.0")
    assert not result.get("errors"), result
