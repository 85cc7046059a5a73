"""The controller binaries run out of cluster (against the real plane or kaos-testkit), as the
chart runs them in it: each replica with a kubeconfig holding a token of its chart
ServiceAccount (so only the chart's RBAC applies), the arguments and environment of the chart's
Deployment, and its own metrics and probe ports on 127.0.0.1. Only the processes started here
are ever signalled (by their pid).

As a kubelet would, a supervisor starts again a replica that exits because it lost its Lease
(a controller does, by design, and short Leases on a loaded machine can cost one its Lease at
any moment), after a delay that doubles while it keeps exiting soon after starting. Unlike a
kubelet it leaves down a replica that exits for any other reason (a panic, an error), so that a
crash fails the test instead of being hidden; `test_operator.py` checks there was none. A
replica the test kills or stops stays down until the test starts it.
"""

import http.client
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from plane import CONTROLLERS, REPO

BIN_DIR = Path(os.environ.get("KAOS_BIN_DIR", REPO / "target" / "debug"))
BUILD = "cargo build --workspace"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# The supervisor's restart delay: 0.5 s after a replica that ran for a while exits, doubled for
# each exit in a row within CRASH_LOOP_RUN of starting, up to RESTART_DELAY_MAX (the kubelet's
# CrashLoopBackOff, on a test's time scale).
RESTART_DELAY = 0.5
RESTART_DELAY_MAX = 8.0
CRASH_LOOP_RUN = 10.0
SUPERVISE_EVERY = 0.25
# What a controller logs when it exits because it lost its Lease (kaos_runtime's leader and
# runner).
LOST_LEASE = "lost leadership"


def controller_label(binary):
    """The `controller` label of a binary's metrics: agent, modelapi, mcpserver, memorystore."""
    return binary.removesuffix("-controller")


def lease_name(binary):
    return f"kaos-{binary}"


def deployment_name(binary):
    """The chart's Deployment of a binary (release kaos): the full name plus `-manager`, e.g.
    kaos-agent-controller-manager; its ServiceAccount and Lease are kaos-agent-controller."""
    return f"kaos-{binary}-manager"


_next_port = None


def free_port():
    """A loopback port free now, below the kernel's ephemeral range, as kaos_testkit::free_port:
    a port-0 bind elsewhere on the machine (the plane's components, a parallel test) can never be
    given it before the controller binds it; successive calls never repeat a port."""
    global _next_port
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            highest = int(ports.read().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        highest = 32767
    span = highest - 10_000
    if _next_port is None:
        _next_port = (os.getpid() * 2654435761 + time.time_ns()) % span
    for _ in range(span):
        port = 10_000 + _next_port % span
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def http_get(port, path):
    """(status code, body) of GET path on 127.0.0.1:port; None when nothing answers."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    except OSError:
        return None
    finally:
        connection.close()


def parse_metrics(text):
    """[(name, {label: value}, value)] of a Prometheus text scrape."""
    samples = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            labels = dict(LABEL.findall(match.group(2) or ""))
            samples.append((match.group(1), labels, float(match.group(3))))
    return samples


class Replica:
    """One controller process. Started again with start() after a kill (as a kubelet would),
    appending to the same log; `Controllers`' supervisor starts it again when it exits on its
    own."""

    def __init__(self, binary, name, command, env, log):
        self.binary, self.name, self.command, self.env, self.log = binary, name, command, env, log
        self.process = None
        self.starts = 0
        # Whether it should run: start() sets it, kill() and stop() clear it.
        self.wanted = False
        self.started_at = 0.0
        self.quick_exits = 0
        self.restart_at = None
        # The exit code of an exit that was not for a lost Lease (the replica is left down).
        self.crashed_with = None
        # Start, kill, stop and the supervisor's restart, one at a time.
        self.lock = threading.RLock()

    def start(self):
        """Starts the process on fresh ports (the chart's `:8080`/`:8081` would collide)."""
        with self.lock:
            self.metrics_port, self.probe_port = free_port(), free_port()
            addresses = {"--metrics-bind-address": f"127.0.0.1:{self.metrics_port}",
                         "--health-probe-bind-address": f"127.0.0.1:{self.probe_port}"}
            command = [f"{flag}={addresses[flag]}" if (flag := arg.split("=", 1)[0]) in addresses
                       else arg for arg in self.command]
            env = dict(self.env, METRICS_BIND_ADDRESS=addresses["--metrics-bind-address"],
                       HEALTH_PROBE_BIND_ADDRESS=addresses["--health-probe-bind-address"])
            self.log_start = self.log.stat().st_size if self.log.exists() else 0
            with open(self.log, "a") as log:
                self.process = subprocess.Popen(command, env=env, stdout=log,
                                                stderr=subprocess.STDOUT)
            self.starts += 1
            self.wanted, self.started_at, self.restart_at = True, time.monotonic(), None
            self.crashed_with = None

    def restart_if_exited(self, now):
        """The supervisor's step: when the process exited because it lost its Lease, notes the
        exit (in its log too) and, once its delay has passed, starts it again; the exit code
        when it did. Any other exit is noted (`crashed_with`) and the replica left down."""
        with self.lock:
            if not self.wanted or self.running or self.crashed_with is not None:
                return None
            code = self.process.returncode
            if self.restart_at is None:
                ran = now - self.started_at
                if LOST_LEASE not in self.log_since_start():
                    self.crashed_with = code
                    with open(self.log, "a") as log:
                        log.write(f"--- the test's supervisor: exited with {code} after "
                                  f"{ran:.1f} s, not for a lost Lease: left down\n")
                    return None
                self.quick_exits = self.quick_exits + 1 if ran < CRASH_LOOP_RUN else 0
                delay = min(RESTART_DELAY * 2 ** self.quick_exits, RESTART_DELAY_MAX)
                self.restart_at = now + delay
                with open(self.log, "a") as log:
                    log.write(f"--- the test's supervisor: exited with {code} after {ran:.1f} s; "
                              f"starting again in {delay:.1f} s\n")
                return None
            if now < self.restart_at:
                return None
            self.start()
            return code

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def kill(self):
        """SIGKILL: no chance to release the Lease, as when a node dies. It stays down."""
        with self.lock:
            self.wanted = False
            if self.running:
                self.process.kill()
            if self.process:
                self.process.wait(timeout=30)

    def stop(self):
        """SIGTERM, as when its pod is deleted. It stays down."""
        with self.lock:
            self.wanted = False
            if self.running:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=30)

    def probe(self, path):
        """The status code of /readyz or /healthz, None when nothing answers."""
        answer = http_get(self.probe_port, path) if self.running else None
        return answer[0] if answer else None

    def metrics(self):
        answer = http_get(self.metrics_port, "/metrics") if self.running else None
        return parse_metrics(answer[1]) if answer and answer[0] == 200 else []

    def sample(self, metric, **labels):
        """The sum of a metric's samples whose labels include labels (0 when absent)."""
        return sum(value for name, have, value in self.metrics()
                   if name == metric and labels.items() <= have.items())

    def reconciles(self):
        return self.sample("controller_runtime_reconcile_total",
                           controller=controller_label(self.binary))

    def log_text(self):
        if not self.log.exists():
            return ""
        return ANSI.sub("", self.log.read_text(errors="replace"))

    def log_since_start(self):
        """What the process logged since it was last started."""
        with open(self.log, "rb") as log:
            log.seek(self.log_start)
            return ANSI.sub("", log.read().decode(errors="replace"))

    def log_tail(self, lines=40):
        return "\n".join(self.log_text().splitlines()[-lines:])


class Controllers:
    """Every replica started against one chart release (its namespace holds the
    ServiceAccounts, the Leases and the MCP runtime registry), on a plane.Cluster: the real
    plane or kaos-testkit."""

    def __init__(self, plane, namespace, workdir):
        self.plane, self.namespace, self.workdir = plane, namespace, workdir
        self.replicas = []
        missing = [b for b in CONTROLLERS if not (BIN_DIR / b).exists()]
        if missing:
            pytest.fail(f"{', '.join(missing)} not built in {BIN_DIR}: run `{BUILD}` (or set "
                        "KAOS_BIN_DIR to a directory holding them)")
        # (replica name, exit code) of every restart the supervisor made, in order.
        self.restarts = []
        self.stopping = threading.Event()
        self.supervisor = threading.Thread(target=self.supervise, name="kubelet", daemon=True)
        self.supervisor.start()

    def supervise(self):
        """Starts again, as a kubelet would, every replica that exits on its own."""
        while not self.stopping.wait(SUPERVISE_EVERY):
            for replica in list(self.replicas):
                code = replica.restart_if_exited(time.monotonic())
                if code is not None:
                    self.restarts.append((replica.name, code))

    def kubeconfig_for(self, binary, replica):
        """A kubeconfig with the cluster's server (and CA) and a token of the chart's
        ServiceAccount kaos-<binary> (nothing of the admin's credentials)."""
        token = self.plane.token(self.namespace, f"kaos-{binary}")
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "plane", "cluster": self.plane.cluster}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "plane", "user": "sa"}}],
        }
        path = self.workdir / f"{replica}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    def start(self, binary, count, extra_env=None):
        """Starts count replicas of binary with what the chart's Deployment gives its pod."""
        deployment = self.plane.get(
            f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{deployment_name(binary)}")
        assert deployment, f"the chart did not install Deployment {deployment_name(binary)}"
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        started = []
        for index in range(count):
            name = f"{controller_label(binary)}-{index}"
            fields = {"metadata.name": name, "metadata.namespace": self.namespace}
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                   "KUBECONFIG": str(self.kubeconfig_for(binary, name)),
                   "CONTROLLER_LOG_LEVEL": os.environ.get("KAOS_TEST_LOG", "info")}
            for var in container.get("env", []):
                field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                # kube-apiserver leaves out an empty value: the variable is set, to "".
                env[var["name"]] = fields[field] if field else var.get("value", "")
            env.update(extra_env or {})
            command = [str(BIN_DIR / binary), *container.get("args", [])]
            replica = Replica(binary, name, command, env, self.workdir / f"{name}.log")
            replica.start()
            self.replicas.append(replica)
            started.append(replica)
        return started

    def of(self, binary):
        return [r for r in self.replicas if r.binary == binary]

    def running(self):
        return [r for r in self.replicas if r.running]

    def crashes(self):
        """(replica name, exit code) of every replica that exited for another reason than a
        lost Lease (left down by the supervisor)."""
        return [(r.name, r.crashed_with) for r in self.replicas if r.crashed_with is not None]

    def holder(self, binary):
        """The Lease holder's identity (`<POD_NAME>_<suffix>`), None when nobody holds it."""
        lease = self.plane.get(f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}"
                               f"/leases/{lease_name(binary)}")
        return (lease or {}).get("spec", {}).get("holderIdentity") or None

    def leader(self, binary):
        """The replica holding binary's Lease, None when none of ours does."""
        holder = self.holder(binary)
        for replica in self.of(binary):
            if holder and holder.startswith(f"{replica.name}_"):
                return replica
        return None

    def reconciles(self):
        """{replica name: reconciles so far (every result)} of the running replicas."""
        return {r.name: r.reconciles() for r in self.running()}

    def log_tails(self, lines=40):
        return "\n\n".join(f"--- {r.name} ({r.log})\n{r.log_tail(lines)}" for r in self.replicas)

    def stop_all(self):
        """Stops the supervisor, then every replica."""
        self.stopping.set()
        self.supervisor.join()
        for replica in self.replicas:
            replica.stop()
