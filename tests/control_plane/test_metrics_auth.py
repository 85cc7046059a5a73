"""Secure metrics against the real kube-apiserver: one controller run out of cluster with the
chart's arguments (`--metrics-secure=true`, its self-signed certificate) under the chart's RBAC,
scraped over HTTPS by ServiceAccounts of the plane. The TokenReviews and SubjectAccessReviews
are answered by the real authenticator and RBAC authorizer.

Needs KAOS_CONTROL_PLANE=1 (see docs/testing.md) and the debug controller binaries."""

import http.client
import json
import ssl

import pytest

from controllers import Controllers, http_get, parse_metrics
from plane import CONTROLLERS, install_chart, remove_chart, requires_plane, wait_until

pytestmark = requires_plane

NAMESPACE = "kaos-metrics"
# The chart's reader role (release kaos), bound to the scraper as a Prometheus would be.
READER_ROLE = "kaos-metrics-reader"
BINDING = "kaos-test-metrics-scraper"


@pytest.fixture(scope="module")
def agent(plane, tmp_path_factory):
    """The chart installed (secure metrics are its default) with no pod of its own, and one
    agent-controller running out of cluster with its Deployment's arguments and environment."""
    install_chart(plane, NAMESPACE, *[f"{c}.replicas=0" for c in CONTROLLERS],
                  "global.controllerLogFormat=text")
    running = Controllers(plane, NAMESPACE, tmp_path_factory.mktemp("metrics-auth"))
    try:
        (replica,) = running.start("agent-controller", 1)
        wait_until("the agent controller ready", lambda: replica.probe("/readyz") == 200)
        yield replica
    finally:
        running.stop_all()
        plane.kubectl("delete", "clusterrolebinding", BINDING, "--ignore-not-found")
        remove_chart(plane, NAMESPACE)


@pytest.fixture(scope="module")
def tokens(plane, agent):
    """Tokens (`kubectl create token`) of a ServiceAccount bound to the chart's reader role and
    of one bound to nothing."""
    for name in ["scraper", "stranger"]:
        plane.kubectl("create", "serviceaccount", name, "-n", NAMESPACE)
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": BINDING},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": READER_ROLE},
               "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": NAMESPACE}]}
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(binding))
    return {name: plane.kubectl("create", "token", name, "-n", NAMESPACE).stdout.strip()
            for name in ["scraper", "stranger"]}


def scrape(port, token=None, context=None):
    """(status, body) of GET /metrics over HTTPS, the certificate not verified unless context."""
    context = context or ssl._create_unverified_context()
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


def test_the_chart_renders_the_reader_role(plane, agent):
    role = plane.json("get", "clusterrole", READER_ROLE)
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    deployment = plane.json("get", "deployment", "kaos-agent-controller-manager", "-n", NAMESPACE)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-secure=true" in args and "--metrics-bind-address=:8443" in args


def test_a_bound_service_account_scrapes(agent, tokens):
    code, body = scrape(agent.metrics_port, tokens["scraper"])
    assert code == 200, body
    names = {name for name, _, _ in parse_metrics(body)}
    assert "controller_runtime_reconcile_total" in names
    # The controller's own reviews were allowed by the chart's RBAC on the real authorizer.
    forbidden = sum(v for n, labels, v in parse_metrics(body)
                    if n == "rest_client_requests_total" and labels.get("code") == "403")
    assert forbidden == 0, body


def test_no_token_or_a_bad_one_is_401(agent, tokens):
    assert scrape(agent.metrics_port) == (401, "Unauthorized")
    assert scrape(agent.metrics_port, "not-a-token")[0] == 401
    # A token the API server issued, then tampered with, is no better.
    assert scrape(agent.metrics_port, tokens["scraper"][:-4] + "AAAA")[0] == 401


def test_an_unbound_service_account_is_403(agent, tokens):
    code, body = scrape(agent.metrics_port, tokens["stranger"])
    assert code == 403
    assert body == f"Authorization denied for user system:serviceaccount:{NAMESPACE}:stranger"
    assert tokens["stranger"] not in body


def test_repeated_scrapes_cost_no_reviews(agent, tokens):
    def reviews():
        # Every POST of this replica once started: the Lease's creation and the reviews.
        code, body = scrape(agent.metrics_port, tokens["scraper"])
        assert code == 200, body
        return sum(v for n, labels, v in parse_metrics(body)
                   if n == "rest_client_requests_total" and labels.get("method") == "POST")

    for token in tokens.values():
        scrape(agent.metrics_port, token)
    before = reviews()
    for _ in range(5):
        for token in tokens.values():
            scrape(agent.metrics_port, token)
    assert reviews() == before


def test_the_self_signed_certificate_is_for_localhost_and_the_probes_stay_plain(agent, tokens):
    pem = ssl.get_server_certificate(("127.0.0.1", agent.metrics_port))
    context = ssl.create_default_context(cadata=pem)
    # A self-signed leaf is its own trust anchor; Python's strict mode wants CA extensions on it.
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    connection = http.client.HTTPSConnection("localhost", agent.metrics_port, timeout=10,
                                             context=context)
    try:
        connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {tokens['scraper']}"})
        assert connection.getresponse().status == 200
    finally:
        connection.close()
    assert http_get(agent.probe_port, "/healthz")[0] == 200
    assert http_get(agent.probe_port, "/readyz")[0] == 200
