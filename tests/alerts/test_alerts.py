"""The chart's alerts under promtool: `promtool check rules` and `promtool test rules` on the
PrometheusRule the chart renders (default values with the workloads' alerts on, release kaos), so
the tests cannot drift from the chart; and the Grafana dashboards' queries, which must parse.
promtool comes from scripts/promtool (KAOS_PROMTOOL names it; scripts/test.sh sets it).
"""

import json

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "charts"))
from chart import render  # noqa: E402

TESTS = sorted(HERE.glob("*.yaml"))


def promtool():
    path = os.environ.get("KAOS_PROMTOOL")
    if path:
        assert Path(path).is_file(), f"KAOS_PROMTOOL={path} does not exist (scripts/promtool build)"
        return path
    cache = Path(os.environ.get("KAOS_PROMTOOL_CACHE", HERE.parents[1] / ".cache" / "promtool"))
    built = cache / "bin" / "promtool"
    if built.is_file():
        return str(built)
    # Never a skip: a run without promtool must not pass as if the alerts were tested.
    pytest.fail("promtool not built: run scripts/promtool build (needs Go), or set KAOS_PROMTOOL", pytrace=False)


def rendered_groups():
    values = {"prometheusRule": {"enabled": True}, "global": {"workloadMonitoring": {"enabled": True}}}
    (rule,) = [o for o in render(values) if o["kind"] == "PrometheusRule"]
    return rule["spec"]["groups"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The rendered rules as `rules.yaml` next to copies of the test files that read it."""
    directory = tmp_path_factory.mktemp("alerts")
    (directory / "rules.yaml").write_text(yaml.safe_dump({"groups": rendered_groups()}, sort_keys=False))
    for test in TESTS:
        shutil.copy(test, directory / test.name)
    return directory


def run(*args, cwd):
    result = subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def test_the_rendered_rules_pass_promtool_check(workdir):
    output = run("check", "rules", "rules.yaml", cwd=workdir)
    assert "SUCCESS" in output, output


@pytest.mark.parametrize("test", [t.name for t in TESTS])
def test_promtool_unit_tests(workdir, test):
    run("test", "rules", test, cwd=workdir)


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    alerts = {r["alert"] for g in rendered_groups() for r in g["rules"] if "alert" in r}
    fires, quiet = set(), set()
    for test in TESTS:
        for case in yaml.safe_load(test.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts == {"KaosReconcileErrors", "KaosNoLeader", "KaosControllerAbsent", "KaosResourcesFailed",
                      "KaosWorkflowRunsFailing", "KaosAgentBudgetNearlyExhausted", "KaosAgentBudgetExceeded",
                      "KaosWorkloadNotReady", "KaosWorkloadRestarting", "KaosWorkloadAtMaxReplicas", "KaosModelAPIErrorRate"}
    assert alerts <= fires, f"no case where {sorted(alerts - fires)} fire"
    assert alerts <= quiet, f"no case where {sorted(alerts - quiet)} stay quiet"


def test_every_alert_links_its_runbook_section():
    runbooks = (HERE.parents[1] / "docs" / "runbooks.md").read_text()
    for group in rendered_groups():
        for rule in group["rules"]:
            url = rule["annotations"]["runbook_url"]
            base, anchor = url.split("#")
            assert base == "https://github.com/kaos-rs/kaos-rs/blob/main/docs/runbooks.md"
            assert anchor == rule["alert"].lower()
            assert f"\n## {rule['alert']}\n" in runbooks, f"docs/runbooks.md has no section {rule['alert']}"


def test_the_dashboards_queries_parse(tmp_path):
    """Every query of every dashboard, as a recording rule promtool checks (Grafana's variables
    appear only inside label values, where any string parses)."""
    rules = []
    for path in sorted((HERE.parents[1] / "charts" / "kaos" / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                assert "$" not in re.sub(r'"[^"]*"', "", target["expr"]), target["expr"]
                rules.append({"record": f"{dashboard['uid'].replace('-', '_')}:panel{panel['id']}{target['refId']}",
                              "expr": target["expr"]})
    (tmp_path / "dashboards.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    output = run("check", "rules", "dashboards.yaml", cwd=tmp_path)
    assert f"SUCCESS: {len(rules)} rules found" in output, output
