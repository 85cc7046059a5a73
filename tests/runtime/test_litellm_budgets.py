"""What LiteLLM itself enforces, checked on the pinned version (litellm 1.110.2,
litellm.requirements.txt) before the budgets of issue 42 are built on it (docs/budgets.md).

One real LiteLLM proxy is started as a Proxy ModelAPI's pod starts it (`kaosctl render`, see
litellm_proxy.py), on the generated config plus what the ModelAPI controller will add for budgeted
Agents: one `model_list` entry per Agent under a stable alias `kaos.<namespace>.<agent>`, with the
shared entry's upstream and key, the limits in `litellm_params`, `model_info.id` fixed (the Agent's
UID), `router_settings.optional_pre_call_checks: ["enforce_model_rate_limits"]` and the Prometheus
callback; in front of fake_openai.py (150 tokens and, at gpt-4o's price in LiteLLM's bundled cost
map, $0.00075 a call). No database, no Redis, no licence. Each test uses aliases of its own, so
any one of them can run alone; the restart test runs last and restarts the proxy.

Asserted, as observed (a LiteLLM that changes any of it fails here first):
- tpd: the calls under the limit pass, then 429 with the reset time in `llm_provider-retry-after`
  (LiteLLM prefixes the header; there is no plain `retry-after`); the refused call never reaches the
  upstream; other aliases and the shared entry still answer;
- tpd with a `daily_reset_time` still ahead today is NOT enforced (a LiteLLM defect: tokens are
  counted in the UTC calendar day's window, the check reads the shifted window);
- rpm and rpd: the same 429, `llm_provider-retry-after` 60 s or the seconds to the daily reset;
- `max_budget` + `budget_duration`: the call that finds the spend at or over the budget gets 429
  with an `internal_server_error` type body ("No deployments available - crossed budget"), no
  retry-after of either form, and its failure is exported with an empty `model_id`;
- the Prometheus callback exports tokens, requests and spend with `model_id` (no licence);
- a restart without Redis forgets the counters: the exhausted alias answers again and the
  exported counters start from zero. (With Redis: test_litellm_redis.py.)

Needs KAOS_LITELLM, KAOS_AGENT_RUNTIME (conftest.py) and target/debug/kaosctl; a missing tool fails
the test, it never skips. See docs/testing.md ("The real LiteLLM proxy").
"""

import time
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from fake_openai import FakeOpenAI
from litellm_proxy import (Proxy, budget_entry, call, calls, error, find, metrics, proxy_modelapi,
                           render, sample, statuses)

NAMESPACE = "demo"
TOKENS_PER_CALL = 150
# gpt-4o in LiteLLM's bundled cost map: $2.5/M prompt and $10/M completion tokens; the fake
# upstream answers 100 prompt and 50 completion tokens.
COST_PER_CALL = 0.00075
MANIFEST = proxy_modelapi("budgets", NAMESPACE)


def alias(agent):
    return f"kaos.{NAMESPACE}.{agent}"


def uid(agent):
    return f"uid-{agent}"


def budgeted(shared, agent, **limits):
    """The entry the ModelAPI controller will add for a budgeted Agent (`budget_entry`)."""
    entry = budget_entry(shared, NAMESPACE, agent, **limits)
    assert (entry["model_name"], entry["model_info"]["id"]) == (alias(agent), uid(agent))
    return entry


def now():
    return datetime.now(timezone.utc)


def hh_mm(moment):
    return moment.strftime("%H:%M")


def seconds_until_next(reset, at):
    """Seconds from `at` to the next `reset` ("HH:MM", UTC)."""
    hour, minute = map(int, reset.split(":"))
    nxt = at.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if nxt <= at:
        nxt += timedelta(days=1)
    return (nxt - at).total_seconds()


@pytest.fixture(scope="module")
def budgets(tmp_path_factory):
    """The upstream, the proxy and the reset times its config uses."""
    directory = tmp_path_factory.mktemp("litellm-budgets")
    objects = render(directory, MANIFEST)
    # Every window here must stay within one UTC day: not within 10 minutes of midnight.
    start = now()
    if (start.hour, start.minute) >= (23, 50) or (start.hour, start.minute) < (0, 10):
        time.sleep(seconds_until_next("00:10", start))
        start = now()
    # A reset time already passed today (at least an hour ago when it can be) and one still ahead.
    passed = hh_mm(max(start - timedelta(hours=1),
                       start.replace(hour=0, minute=5, second=0, microsecond=0)))
    ahead = hh_mm(min(start + timedelta(hours=2), start.replace(hour=23, minute=59)))
    config = yaml.safe_load(find(objects, "ConfigMap", "litellm-config-budgets")["data"]["config.yaml"])
    shared = config["model_list"][0]
    assert shared["model_name"] == "gpt-4o", config
    config["model_list"] += [
        budgeted(shared, "tokens", tpd=400, daily_reset_time=passed),
        budgeted(shared, "tokens-reset-ahead", tpd=400, daily_reset_time=ahead),
        budgeted(shared, "noisy", tpd=TOKENS_PER_CALL),
        budgeted(shared, "quiet", tpd=TOKENS_PER_CALL),
        budgeted(shared, "requests-minute", rpm=2),
        budgeted(shared, "requests-day", rpd=2),
        budgeted(shared, "spender", max_budget=0.002, budget_duration="1d"),
        budgeted(shared, "metered", rpd=2),
        budgeted(shared, "restarted", rpd=1),
    ]
    config.setdefault("router_settings", {})["optional_pre_call_checks"] = ["enforce_model_rate_limits"]
    config.setdefault("litellm_settings", {})["callbacks"] = ["prometheus"]
    with FakeOpenAI() as upstream:
        proxy = Proxy(objects, "budgets", directory, upstream, config=yaml.safe_dump(config))
        try:
            proxy.wait_ready()
            yield upstream, proxy, {"passed": passed, "ahead": ahead}
        finally:
            proxy.stop()


def test_a_tokens_per_day_limit_passes_the_first_calls_then_answers_429(budgets):
    upstream, proxy, resets = budgets
    before = len(upstream.completions())
    answers = calls(proxy, alias("tokens"), 5)
    # 400 tokens a day at 150 a call: the third call finds 300 < 400 and goes through (the
    # overshoot: a call is checked before its tokens are known), the fourth finds 450.
    assert statuses(answers) == [200, 200, 200, 429, 429], answers
    assert len(upstream.completions()) - before == 3, "a refused call never reaches the upstream"
    status, headers, body = answers[3]
    assert "TPD limit=400, current usage=450" in error(body)["message"], body
    assert error(body)["type"] == "throttling_error", body
    # The window restarts at the entry's daily_reset_time (UTC); LiteLLM sends the wait prefixed.
    assert "retry-after" not in headers, headers
    expected = seconds_until_next(resets["passed"], now())
    assert abs(int(headers["llm_provider-retry-after"]) - expected) <= 60, (headers, expected)


def test_a_tokens_per_day_limit_with_its_reset_time_still_ahead_today_is_not_enforced(budgets):
    """A LiteLLM 1.110.2 defect, asserted so that a fix shows up here: the pre-call check reads the
    window of (now - daily_reset_time), the success callback counts tokens without the offset
    (`daily_reset_time` is dropped from the call's kwargs), so until the reset time of day the
    check reads an empty window. The controller must not rely on `daily_reset_time` for tpd."""
    upstream, proxy, resets = budgets
    assert now().strftime("%H:%M") < resets["ahead"]
    assert statuses(calls(proxy, alias("tokens-reset-ahead"), 5)) == [200] * 5


def test_another_alias_and_the_shared_entry_are_unaffected(budgets):
    upstream, proxy, _ = budgets
    assert statuses(calls(proxy, alias("noisy"), 2)) == [200, 429]
    before = len(upstream.completions())
    for model in (alias("quiet"), "gpt-4o"):
        status, headers, body = call(proxy, model)
        assert status == 200, (model, body)
        assert headers["x-litellm-model-group"] == model, headers
    assert len(upstream.completions()) - before == 2


@pytest.mark.parametrize("agent,kind", [("requests-minute", "RPM"), ("requests-day", "RPD")])
def test_a_request_limit_answers_429_after_it(budgets, agent, kind):
    upstream, proxy, _ = budgets
    if kind == "RPM" and now().second >= 50:
        time.sleep(61 - now().second)  # the rpm window is the UTC minute: use one whole
    before = len(upstream.completions())
    answers = calls(proxy, alias(agent), 4)
    assert statuses(answers) == [200, 200, 429, 429], answers
    assert len(upstream.completions()) - before == 2
    _, headers, body = answers[2]
    assert f"{kind} limit=2, current usage=3" in error(body)["message"], body
    assert "retry-after" not in headers, headers
    if kind == "RPM":
        assert headers["llm_provider-retry-after"] == "60", headers
    else:
        expected = seconds_until_next("00:00", now())  # no daily_reset_time: UTC midnight
        assert abs(int(headers["llm_provider-retry-after"]) - expected) <= 60, (headers, expected)


def test_a_spend_limit_stops_the_calls_once_reached(budgets):
    upstream, proxy, _ = budgets
    before = len(upstream.completions())
    answers = calls(proxy, alias("spender"), 4)
    # $0.002 at $0.00075 a call: spend 0, 0.00075, 0.0015 pass; 0.00225 >= 0.002 is refused.
    assert statuses(answers) == [200, 200, 200, 429], answers
    assert len(upstream.completions()) - before == 3
    assert [float(h["x-litellm-response-cost"]) for _, h, _ in answers[:3]] == [COST_PER_CALL] * 3
    _, headers, body = answers[3]
    refused = error(body)
    assert refused["code"] == "429" and refused["type"] == "internal_server_error", body
    assert refused["message"].startswith("No deployments available - crossed budget: Exceeded "
                                         f"budget for deployment model_name: {alias('spender')}"), body
    assert f"model_id: {uid('spender')}" in refused["message"], body
    assert not [h for h in headers if "retry-after" in h], headers
    # Its failures are exported under the alias, with no model_id.
    assert sample(metrics(proxy), "litellm_proxy_failed_requests_metric_total",
                  requested_model=alias("spender"), model_id="", exception_class="ValueError") == 1


def test_prometheus_exports_tokens_requests_and_spend_by_model_id_without_a_licence(budgets):
    upstream, proxy, _ = budgets
    assert not [k for k in proxy.env if "LICENSE" in k], "no enterprise licence is set"
    assert statuses(calls(proxy, alias("metered"), 3)) == [200, 200, 429]
    samples = metrics(proxy)
    labels = {"model_id": uid("metered"), "requested_model": alias("metered")}
    assert sample(samples, "litellm_total_tokens_metric_total", **labels) == 2 * TOKENS_PER_CALL
    assert sample(samples, "litellm_requests_metric_total", **labels) == 2
    assert sample(samples, "litellm_spend_metric_total", **labels) == pytest.approx(2 * COST_PER_CALL)
    # A rate-limit refusal is a failed request with the model_id and status 429.
    assert sample(samples, "litellm_proxy_failed_requests_metric_total",
                  exception_status="429", **labels) == 1


def test_a_restart_without_redis_forgets_the_counters(budgets):
    """Without Redis the counters live in the process: a restart (a rollout, a crash, an OOM kill)
    gives every alias its whole limit again, and the exported counters start from zero. Kept last:
    it restarts the proxy the other tests use. With Redis they survive: test_litellm_redis.py."""
    upstream, proxy, _ = budgets
    assert statuses(calls(proxy, alias("restarted"), 2)) == [200, 429]
    proxy.stop()
    proxy.start()
    proxy.wait_ready()
    before = len(upstream.completions())
    assert statuses(calls(proxy, alias("restarted"), 2)) == [200, 429]
    assert len(upstream.completions()) - before == 1
    samples = metrics(proxy)
    labels = {"model_id": uid("restarted")}
    assert sample(samples, "litellm_total_tokens_metric_total", **labels) == TOKENS_PER_CALL
    assert sample(samples, "litellm_requests_metric_total", **labels) == 1
