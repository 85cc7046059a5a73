"""Fixtures of the real-plane suites: one control plane for the whole session (the suites share
it; bringing one up costs ~8 s), brought down at the end; and `cluster`, which runs a test body
on kaos-testkit and on that plane (test_operator.py).

test_control_plane.py brings up its own plane instead, because it tests `up` and `down`
themselves and ends with the plane down; pytest finishes that module (and tears its plane down)
before the first test that asks for the session plane, so only one plane runs at a time.
"""

import pytest

from controllers import Controllers
from plane import CLUSTERS, CONTROLLERS, Testkit, down, install_chart, remove_chart, requires_plane, up


def pytest_configure(config):
    config.addinivalue_line("markers", "only_on(cluster, reason): run on that cluster only "
                            f"(one of {CLUSTERS}), for the reason given")


def pytest_generate_tests(metafunc):
    """Parametrizes every test that uses `cluster` (itself or through a fixture) over
    CLUSTERS, or over the one its only_on marker names."""
    if "cluster" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("only_on")
    names = [marker.args[0]] if marker else CLUSTERS
    metafunc.parametrize(
        "cluster",
        [pytest.param(n, marks=[requires_plane] if n == "kube-apiserver" else []) for n in names],
        indirect=True, scope="module")


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    """The cluster of this test variant: the session's plane, or a fresh kaos-testkit served
    for the module (stopped at its end)."""
    if request.param == "kube-apiserver":
        yield request.getfixturevalue("plane")
        return
    served = Testkit(tmp_path_factory.mktemp("testkit"))
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    """The session's control plane (cluster-admin kubeconfig, kubectl and helm)."""
    directory = tmp_path_factory.mktemp("plane")
    shared = up(directory)
    yield shared
    result = down(directory)
    assert result.returncode == 0, f"down failed:\n{result.stderr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, show the tail of every controller log the test ran with (any fixture that
    has log_tails(), e.g. test_operator's controllers)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            tails = getattr(value, "log_tails", None)
            if callable(tails):
                report.sections.append(("controller logs", tails()))


# The chart in kaos-system with no controller replica, and the controller binaries run out of
# cluster under its ServiceAccounts, each module starting the ones it needs (test_budgets.py,
# test_suspend.py; test_operator.py has its own, with more settings).
@pytest.fixture(scope="module")
def release(cluster):
    values = [f"{b}.replicas=0" for b in CONTROLLERS]
    values += ["global.controllerLogFormat=text", "global.metrics.secure=false"]
    install_chart(cluster, "kaos-system", *values)
    yield
    remove_chart(cluster, "kaos-system")


@pytest.fixture(scope="module")
def controllers(cluster, release, tmp_path_factory):
    running = Controllers(cluster, "kaos-system", tmp_path_factory.mktemp("controllers"))
    try:
        yield running
    finally:
        running.stop_all()
    assert not running.crashes(), f"replicas exited: {running.crashes()}"
