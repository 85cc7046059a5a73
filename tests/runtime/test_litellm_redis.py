"""LiteLLM's limits with Redis, checked on the pinned version (litellm 1.110.2) against a real
redis-server (Debian bookworm's 7.0.15, scripts/redis-server-tool), before issue 42's Redis support
is built on it (docs/budgets.md).

One redis-server with a password on a loopback port, and four real LiteLLM proxies started as a
Proxy ModelAPI's pod starts them (litellm_proxy.py), on the generated config plus the same per-agent
entries (`agent_entries`) and `optional_pre_call_checks: ["enforce_model_rate_limits"]`, in front of
fake_openai.py (150 tokens, $0.00075 a call). They differ only in how Redis is given:
- `environ`: `router_settings.redis_host/redis_port/redis_password: os.environ/KAOS_TEST_REDIS_*`,
  the values in the environment only (names LiteLLM does not read by itself);
- `literal`: the same three written in `router_settings`;
- `env-only`: nothing in the config, `REDIS_HOST`, `REDIS_PORT`, `REDIS_PASSWORD` in the environment;
- `wrong-password`: `literal` with a wrong password.

Asserted, as observed (a LiteLLM that changes any of it fails here first):
- both `router_settings` forms count in Redis (`os.environ/` is resolved there), and so does the
  environment alone: the counters are keys `<model_info.id>:<model>:rpd:<UTC day>`;
- a wrong password does not stop the proxy (ready, healthy): it logs the error and counts in memory;
- two proxies on one Redis enforce one `rpd` and one `tpd` limit together; the spend of a
  `max_budget` is shared too, but each proxy reads the others' spend only at its sync (every second);
- a restart on the same Redis keeps `rpd`, `tpd` and `max_budget` counters (the exhausted entry
  still answers 429), while the exported Prometheus counters start from zero.

Needs KAOS_REDIS_SERVER (scripts/redis-server-tool path), KAOS_LITELLM, KAOS_AGENT_RUNTIME
(conftest.py) and kaosctl; a missing tool fails the test, it never skips. See docs/testing.md
("The real LiteLLM proxy with Redis").
"""

import os
import secrets
import socket
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from fake_openai import FakeOpenAI
from litellm_proxy import (Proxy, budget_entry, call, calls, error, find, free_port, metrics,
                           proxy_modelapi, render, sample, statuses)

NAMESPACE = "demo"
NAME = "redis"
MANIFEST = proxy_modelapi(NAME, NAMESPACE)
MODEL = "openai/gpt-4o"  # the generated entry's litellm_params.model, part of LiteLLM's keys
TOKENS_PER_CALL = 150
COST_PER_CALL = 0.00075  # gpt-4o in LiteLLM's bundled cost map (test_litellm_budgets.py)
REDIS_SERVER = os.environ.get("KAOS_REDIS_SERVER")

# Each agent's limits. Every proxy gets all of them: proxies share a counter by `model_info.id`.
AGENTS = {
    # one per way of giving Redis, exhausted on the proxy given it that way
    "environ": {"rpd": 1},
    "literal": {"rpd": 1},
    "env-only": {"rpd": 1},
    "wrong-password": {"rpd": 1},
    # one limit, two proxies
    "shared-requests": {"rpd": 2},
    "shared-tokens": {"tpd": 2 * TOKENS_PER_CALL},
    "shared-spend": {"max_budget": 0.0012, "budget_duration": "1d"},  # 2 calls
    # a restart
    "restarted-requests": {"rpd": 1},
    "restarted-tokens": {"tpd": TOKENS_PER_CALL},
    "restarted-spend": {"max_budget": 0.001, "budget_duration": "1d"},  # 2 calls
}


def agent_entries(shared):
    """The per-agent entries every proxy here gets, built as the ModelAPI controller will
    (`budget_entry`; to be switched to the entries it renders)."""
    return [budget_entry(shared, NAMESPACE, agent, **limits) for agent, limits in AGENTS.items()]


def alias(agent):
    return f"kaos.{NAMESPACE}.{agent}"


def uid(agent):
    return f"uid-{agent}"


def alternately(proxies, model):
    """One call on each proxy in turn, each after the one before was counted (`calls`)."""
    answers = []
    for proxy in proxies:
        answers.append(call(proxy, model))
        time.sleep(0.3)
    return answers


def utc_day():
    return datetime.now(timezone.utc).strftime("%Y-%m-%d")


def rpd_key(agent):
    return f"{uid(agent)}:{MODEL}:rpd:{utc_day()}"


def tpd_key(agent):
    return f"{uid(agent)}:{MODEL}:tpd:{utc_day()}"


def spend_key(agent):
    return f"deployment_spend:{uid(agent)}:{AGENTS[agent]['budget_duration']}"


class RedisError(Exception):
    pass


def read_reply(stream):
    """One RESP reply: a str, an int, None or a list; an error reply raises RedisError."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise RedisError(f"connection closed: {line!r}")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else stream.read(size + 2)[:-2].decode()
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [read_reply(stream) for _ in range(size)]
    raise RedisError(f"unexpected reply {line!r}")


def redis_server():
    """KAOS_REDIS_SERVER, or the test fails saying how to get it (it never skips)."""
    if not REDIS_SERVER:
        pytest.fail("KAOS_REDIS_SERVER is not set: "
                    "KAOS_REDIS_SERVER=$(scripts/redis-server-tool path) (docs/testing.md)")
    if not Path(REDIS_SERVER).exists():
        pytest.fail(f"KAOS_REDIS_SERVER={REDIS_SERVER} does not exist: scripts/redis-server-tool path")
    return REDIS_SERVER


class RedisServer:
    """A real redis-server on a loopback port with a password, nothing saved to disk."""

    def __init__(self, directory):
        self.port = free_port()
        self.password = secrets.token_hex(16)
        self.log = directory / "redis.log"
        self.process = subprocess.Popen(
            [redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--requirepass", self.password, "--dir", str(directory),
             "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                assert self.command("PING") == "PONG"
                break
            except (OSError, RedisError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = self.log.read_text() if self.log.exists() else ""
                    pytest.fail(f"redis-server did not answer PING on port {self.port}:\n{log}")
                time.sleep(0.1)
        self.version = self.command("INFO", "server")

    def command(self, *args):
        """Authenticate, send one command, return its reply."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as connection:
            stream = connection.makefile("rb")
            reply = None
            for command in (("AUTH", self.password), args):
                parts = [str(a).encode() for a in command]
                connection.sendall(b"*%d\r\n" % len(parts)
                                   + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
                reply = read_reply(stream)
            return reply

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def redis_forms(redis):
    """Each proxy's `router_settings` additions and environment, by name (the module docstring)."""
    literal = {"redis_host": "127.0.0.1", "redis_port": redis.port, "redis_password": redis.password}
    return {
        "environ": ({"redis_host": "os.environ/KAOS_TEST_REDIS_HOST",
                     "redis_port": "os.environ/KAOS_TEST_REDIS_PORT",
                     "redis_password": "os.environ/KAOS_TEST_REDIS_PASSWORD"},
                    {"KAOS_TEST_REDIS_HOST": "127.0.0.1", "KAOS_TEST_REDIS_PORT": str(redis.port),
                     "KAOS_TEST_REDIS_PASSWORD": redis.password}),
        "literal": (literal, {}),
        "env-only": ({}, {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis.port),
                          "REDIS_PASSWORD": redis.password}),
        "wrong-password": ({**literal, "redis_password": "not-the-password"}, {}),
    }


def config_with(objects, router_redis):
    """The generated config plus the agents' entries, the rate-limit check, the Prometheus
    callback and `router_redis` in `router_settings`."""
    config = yaml.safe_load(find(objects, "ConfigMap", f"litellm-config-{NAME}")["data"]["config.yaml"])
    shared = config["model_list"][0]
    assert shared["model_name"] == "gpt-4o" and shared["litellm_params"]["model"] == MODEL, config
    config["model_list"] += agent_entries(shared)
    router_settings = config.setdefault("router_settings", {})
    router_settings["optional_pre_call_checks"] = ["enforce_model_rate_limits"]
    router_settings.update(router_redis)
    config.setdefault("litellm_settings", {})["callbacks"] = ["prometheus"]
    return yaml.safe_dump(config)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Redis, the upstream and one proxy per form, all started at once (~40 s on 2 cores)."""
    redis_server()
    directory = tmp_path_factory.mktemp("litellm-redis")
    objects = render(directory, MANIFEST)
    # The daily counters are keyed on the UTC day: not within 5 minutes of midnight.
    start = datetime.now(timezone.utc)
    if (start.hour, start.minute) >= (23, 55):
        time.sleep((start.replace(hour=0, minute=0, second=5, microsecond=0) + timedelta(days=1)
                    - start).total_seconds())
    redis = RedisServer(directory)
    proxies = {}
    try:
        with FakeOpenAI() as upstream:
            for form, (router_redis, env) in redis_forms(redis).items():
                proxies[form] = Proxy(objects, NAME, directory, upstream, label=form,
                                      config=config_with(objects, router_redis), env=env)
            ready = {form: proxy.wait_ready() for form, proxy in proxies.items()}
            yield SimpleNamespace(redis=redis, upstream=upstream, proxies=proxies, ready=ready)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        redis.stop()


def test_the_server_is_the_pinned_redis(stack):
    assert "redis_version:7.0.15" in stack.redis.version, stack.redis.version


@pytest.mark.parametrize("form", ["literal", "environ"])
def test_router_settings_give_redis_literally_or_as_os_environ(stack, form):
    """`router_settings.redis_host`, `redis_port` and `redis_password`, written literally or as
    `os.environ/NAME` (the whole config's `os.environ/` values are resolved at load, router_settings
    included), make the router count in Redis: the exhausted alias is refused by another proxy
    too. `environ` names variables LiteLLM does not read on its own, and neither its config nor
    its environment has a REDIS_* variable, so the resolution is what connects it."""
    proxy = stack.proxies[form]
    if form == "environ":
        assert stack.redis.password not in proxy.config_path.read_text()
        assert not [name for name in proxy.env if name.startswith("REDIS_")], proxy.env
    assert statuses(calls(proxy, alias(form), 2)) == [200, 429]
    assert stack.redis.command("GET", rpd_key(form)) == "1"
    other = stack.proxies["environ" if form == "literal" else "literal"]
    status, _, body = call(other, alias(form))
    assert status == 429 and "RPD limit=1, current usage=2" in error(body)["message"], body


def test_the_redis_environment_variables_alone_are_used(stack):
    """REDIS_HOST, REDIS_PORT and REDIS_PASSWORD with nothing about Redis in the config: LiteLLM
    builds its "coordination" Redis from them at start and hands it to the router (the proxy's
    `_init_coordination_redis_env_fallback`). Read in its source, not tested here: that fallback
    pings Redis once at start (2 s) and stays in memory, with a warning, when it does not answer;
    an explicit `router_settings` Redis has no such check."""
    proxy = stack.proxies["env-only"]
    router_settings = yaml.safe_load(proxy.config_path.read_text())["router_settings"]
    assert not [key for key in router_settings if "redis" in key], router_settings
    assert statuses(calls(proxy, alias("env-only"), 2)) == [200, 429]
    assert stack.redis.command("GET", rpd_key("env-only")) == "1"
    assert call(stack.proxies["literal"], alias("env-only"))[0] == 429
    proxy.stop()  # no other test uses it: its CPU goes to the rest


def test_a_wrong_password_starts_and_counts_in_memory_only(stack):
    """A Redis that refuses the password does not stop the proxy: it is ready and healthy, logs the
    refusal (then opens a circuit breaker), and enforces the limits in its own memory, as without
    Redis: nothing reaches Redis, so a restart or another replica would not see the count."""
    proxy = stack.proxies["wrong-password"]
    status, health = stack.ready["wrong-password"]
    assert status == 200 and health["status"] == "healthy", health
    assert statuses(calls(proxy, alias("wrong-password"), 2)) == [200, 429]
    assert stack.redis.command("KEYS", f"{uid('wrong-password')}:*") == []
    assert "invalid username-password pair" in proxy.log.read_text()
    # A proxy on Redis has no count for it.
    assert call(stack.proxies["literal"], alias("wrong-password"))[0] == 200
    proxy.stop()  # no other test uses it: its CPU goes to the rest


def test_two_proxies_on_one_redis_enforce_one_limit(stack):
    """Two replicas: calls alternate between two proxies on one Redis. `rpd` is incremented in
    Redis before the call and `tpd` read from it (when the proxy's own count is under the limit),
    so the two enforce one limit: calls 1-2 pass, 3-4 are refused. The spend of `max_budget` is
    added to the proxy's memory and written to Redis in a batch every second, when each proxy also
    reads the others' spend: calls 1-2 pass, and within that second a proxy may still admit a call
    on its own spend (observed: 3, once 4, of the 4 calls admitted against a 2-call budget); once
    synced both refuse, and Redis holds the spend of every admitted call."""
    first, second = stack.proxies["literal"], stack.proxies["environ"]
    before = len(stack.upstream.completions())
    for agent, limit in (("shared-requests", "RPD limit=2, current usage=3"),
                         ("shared-tokens", "TPD limit=300, current usage=300")):
        answers = alternately((first, second, first, second), alias(agent))
        assert statuses(answers) == [200, 200, 429, 429], (agent, answers)
        assert limit in error(answers[3][2])["message"], answers[3]
    assert stack.redis.command("GET", rpd_key("shared-requests")) == "2"
    assert stack.redis.command("GET", tpd_key("shared-tokens")) == str(2 * TOKENS_PER_CALL)
    assert len(stack.upstream.completions()) - before == 4

    answers = alternately((first, second, first, second), alias("shared-spend"))
    assert statuses(answers[:2]) == [200, 200], answers
    admitted = statuses(answers).count(200)
    time.sleep(3)  # both proxies' sync
    late = alternately((first, second), alias("shared-spend"))
    assert statuses(late) == [429, 429], late
    assert "crossed budget" in error(late[1][2])["message"], late
    assert float(stack.redis.command("GET", spend_key("shared-spend"))) == pytest.approx(
        admitted * COST_PER_CALL)
    print(f"shared-spend: {admitted} of 4 calls admitted before the sync: {statuses(answers)}")


def test_a_restart_on_the_same_redis_keeps_the_counters(stack):
    """A restart (a rollout, a crash) of the proxy configured as the controller would
    (`os.environ/` in router_settings) on the same Redis: `rpd`, `tpd` and `max_budget` counters
    survive, so the exhausted aliases still answer 429 and nothing reaches the upstream. The
    spend reaches Redis in the batch written every second: the test waits until Redis holds the
    two calls' spend (over the budget; the refusal itself is test_litellm_budgets.py's, and costs
    seconds: the router retries it) before the restart. The exported Prometheus counters are the
    process's and start from zero: usage over a day cannot be read from one pod's /metrics. Kept
    last: it restarts a proxy the others use."""
    proxy = stack.proxies["environ"]
    assert statuses(calls(proxy, alias("restarted-requests"), 2)) == [200, 429]
    assert statuses(calls(proxy, alias("restarted-tokens"), 2)) == [200, 429]
    assert statuses(calls(proxy, alias("restarted-spend"), 2)) == [200, 200]
    spend = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        spend = stack.redis.command("GET", spend_key("restarted-spend"))
        if spend is not None and float(spend) == pytest.approx(2 * COST_PER_CALL):
            break
        time.sleep(0.2)
    assert spend is not None and float(spend) == pytest.approx(2 * COST_PER_CALL), spend
    assert float(spend) >= AGENTS["restarted-spend"]["max_budget"]
    proxy.stop()
    proxy.start()
    proxy.wait_ready()
    before = len(stack.upstream.completions())
    answers = {agent: call(proxy, alias(agent))
               for agent in ("restarted-requests", "restarted-tokens", "restarted-spend")}
    assert {agent: status for agent, (status, _, _) in answers.items()} == dict.fromkeys(answers, 429)
    assert "RPD limit=1, current usage=2" in error(answers["restarted-requests"][2])["message"]
    assert "TPD limit=150, current usage=150" in error(answers["restarted-tokens"][2])["message"]
    assert error(answers["restarted-spend"][2])["message"].startswith(
        "No deployments available - crossed budget"), answers["restarted-spend"]
    assert len(stack.upstream.completions()) == before
    samples = metrics(proxy)
    for agent in answers:
        assert not [k for k in samples if k[0] in ("litellm_requests_metric_total",
                                                    "litellm_total_tokens_metric_total",
                                                    "litellm_spend_metric_total")
                    and ("model_id", uid(agent)) in k[1]], agent
    assert sample(samples, "litellm_proxy_failed_requests_metric_total",
                  requested_model=alias("restarted-requests"), exception_status="429") == 1


def test_the_config_the_controller_renders_for_redis_keeps_a_budget_across_a_restart(stack):
    """The same on what `kaosctl render` makes of a ModelAPI with `proxyConfig.redis` (host,
    port, a password Secret) and a budgeted Agent, with no hand edit: the pod's `REDIS_PASSWORD`
    (from the Secret) reaches Redis through the config's `os.environ/REDIS_PASSWORD`, the agent's
    `requestsPerDay: 1` is counted there, and a restarted proxy still refuses its second call."""
    directory = stack.redis.log.parent / "rendered"
    directory.mkdir(exist_ok=True)
    manifest = MANIFEST.replace("    apiKey:", f"""    redis:
      host: 127.0.0.1
      port: {stack.redis.port}
      passwordSecretRef: {{name: redis, key: password}}
    apiKey:""") + f"""---
apiVersion: kaos.tools/v1alpha1
kind: Agent
metadata: {{name: rendered, namespace: {NAMESPACE}}}
spec:
  modelAPI: {NAME}
  model: gpt-4o
  budget: {{requestsPerDay: 1}}
"""
    objects = render(directory, manifest)
    config = yaml.safe_load(find(objects, "ConfigMap", f"litellm-config-{NAME}")["data"]["config.yaml"])
    assert config["router_settings"]["redis_password"] == "os.environ/REDIS_PASSWORD"
    env = {v["name"]: v for v in
           find(objects, "Deployment", f"modelapi-{NAME}")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "redis", "key": "password"}
    alias_ = f"kaos.{NAMESPACE}.rendered"
    proxy = Proxy(objects, NAME, directory, stack.upstream, label="rendered",
                  env={"REDIS_PASSWORD": stack.redis.password})
    try:
        proxy.wait_ready()
        assert statuses(calls(proxy, alias_, 2)) == [200, 429]
        # Counted in Redis, under the id the controller gave the entry (render: the alias).
        day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        assert stack.redis.command("GET", f"{alias_}:{MODEL}:rpd:{day}") is not None
        proxy.stop()
        proxy.start()
        proxy.wait_ready()
        status, _, body = call(proxy, alias_)
        assert status == 429, body
        assert "RPD limit=1" in error(body)["message"]
    finally:
        proxy.stop()
