"""The controllers' supervisor (controllers.py), as the kubelet it stands in for: a replica that
exits because it lost its Lease is started again, sooner after a long run than in a crash loop;
one that exits for another reason, or that the test killed or stopped, stays down. A shell
command stands in for the controller binary, so no cluster is needed."""

import time

from controllers import RESTART_DELAY, RESTART_DELAY_MAX, Replica

# What a controller logs before it exits when its Lease was not renewed (kaos_runtime::leader).
LOSES_ITS_LEASE = ("echo 'ERROR kaos_runtime::runner: lost leadership of lease kaos-x: "
                   "not renewed within 2s'; ")


def replica(tmp_path, script):
    return Replica("stand-in", "stand-in-0", ["sh", "-c", script], {"PATH": "/usr/bin:/bin"},
                   tmp_path / "stand-in-0.log")


def exited(r):
    """Waits for the stand-in to exit (it runs for a moment at most)."""
    r.process.wait(timeout=10)


def test_a_replica_that_lost_its_lease_is_started_again_after_its_delay(tmp_path):
    r = replica(tmp_path, LOSES_ITS_LEASE + "exit 3")
    r.start()
    exited(r)
    ran_long = r.started_at + 60  # as if it had run for a minute, then lost its Lease
    assert r.restart_if_exited(ran_long) is None, "the exit is noted, nothing started yet"
    assert r.restart_if_exited(ran_long + RESTART_DELAY / 2) is None, "too soon"
    assert r.restart_if_exited(ran_long + RESTART_DELAY) == 3, "restarted, with the exit code"
    assert r.starts == 2
    exited(r)
    assert "exited with 3 after 60.0 s; starting again in 0.5 s" in r.log.read_text()


def test_a_crash_loop_waits_longer_each_time_up_to_the_cap(tmp_path):
    r = replica(tmp_path, LOSES_ITS_LEASE + "exit 1")
    r.start()
    delays = []
    for _ in range(6):
        exited(r)
        now = time.monotonic()
        assert r.restart_if_exited(now) is None
        delays.append(round(r.restart_at - now, 3))
        assert r.restart_if_exited(r.restart_at) == 1
    assert delays == [1.0, 2.0, 4.0, RESTART_DELAY_MAX, RESTART_DELAY_MAX, RESTART_DELAY_MAX]


def test_a_killed_or_stopped_replica_stays_down_until_started(tmp_path):
    r = replica(tmp_path, "sleep 60")
    r.start()
    r.kill()
    later = time.monotonic() + 3600
    assert r.restart_if_exited(later) is None and r.restart_if_exited(later + 60) is None
    assert not r.running and r.starts == 1
    r.start()
    assert r.running
    r.stop()
    assert r.restart_if_exited(later) is None and r.restart_if_exited(later + 60) is None
    assert not r.running and r.starts == 2


def test_a_replica_that_exits_for_another_reason_stays_down_as_a_crash(tmp_path):
    r = replica(tmp_path, "echo 'thread main panicked'; exit 101")
    r.start()
    exited(r)
    later = time.monotonic() + 3600
    assert r.restart_if_exited(later) is None and r.restart_if_exited(later + 60) is None
    assert r.crashed_with == 101 and not r.running and r.starts == 1
    assert "exited with 101 after" in r.log.read_text()
    assert "not for a lost Lease: left down" in r.log.read_text()
    r.start()  # the test may start it again by hand
    assert r.crashed_with is None
    r.stop()
