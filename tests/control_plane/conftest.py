"""Fixtures of the real-plane suites: one control plane for the whole session (test_helm.py and
test_operator.py share it; bringing one up costs ~8 s), brought down at the end.

test_control_plane.py brings up its own plane instead, because it tests `up` and `down`
themselves and ends with the plane down; pytest finishes that module (and tears its plane down)
before the first test that asks for the session plane, so only one plane runs at a time.
"""

import pytest

from plane import down, up


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
