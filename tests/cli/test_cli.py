"""The zkqueue command, run as a real subprocess against a real ZooKeeper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zkqueue.formats import framing
from zkqueue.server.embedded import find_leftover_servers
from zkqueue.server.testing import make_client, wait_for

ZKQUEUE = [sys.executable, "-m", "zkqueue.ops.cli"]


def run(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ZKQUEUE, *args], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


@pytest.mark.ensemble
def test_server_three_nodes_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*ZKQUEUE, "server", "--nodes", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        connect = proc.stdout.readline().strip()  # first line: the connect string, once the ensemble serves
        assert connect.count(",") == 2, connect
        client = make_client(connect)
        try:
            client.create("/from-kazoo", b"ok")
            assert client.get("/from-kazoo")[0] == b"ok"
        finally:
            client.stop()
            client.close()
        jvms = find_leftover_servers(owner=proc.pid)
        assert len(jvms) == 3
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate(timeout=30)
            raise AssertionError(f"zkqueue server did not stop on Ctrl-C within 90 s; its stderr:\n{err[-4000:]}")
        assert code == 0, proc.stderr.read()
        wait_for(lambda: not set(jvms) & set(find_leftover_servers()), timeout=30, message="JVMs left after Ctrl-C")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_put_consume_stats_round_trip(zk_hosts: str, zk_client) -> None:
    out = run("put", "--connect", zk_hosts, "/q", "alpha", "beta", "gamma")
    assert out.returncode == 0, out.stderr
    names = sorted(zk_client.get_children("/q"))
    assert len(names) == 3
    assert framing.decode_items(zk_client.get("/q/" + names[0])[0]) == [b"alpha"]

    stats = run("stats", "--connect", zk_hosts, "/q")
    assert stats.returncode == 0, stats.stderr
    assert "pending      3" in stats.stdout

    got = run("consume", "--connect", zk_hosts, "/q", "--count", "2", "--timeout", "20")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["alpha", "beta"]
    # The third item was never removed: it is still queued, and no lock is left behind.
    wait_for(lambda: len(zk_client.get_children("/q")) == 1, timeout=20, message="gamma should remain")
    assert not zk_client.get_children("/q-locks")
    rest = run("consume", "--connect", zk_hosts, "/q", "--timeout", "3")
    assert rest.stdout.split() == ["gamma"]


def test_put_multi_makes_one_znode(zk_hosts: str, zk_client) -> None:
    out = run("put", "--connect", zk_hosts, "/m", "--multi", "a", "b")
    assert out.returncode == 0, out.stderr
    (name,) = zk_client.get_children("/m")
    assert framing.decode_items(zk_client.get("/m/" + name)[0]) == [b"a", b"b"]


def test_bad_path_is_a_clear_error(zk_hosts: str) -> None:
    out = run("put", "--connect", zk_hosts, "no-leading-slash", "x")
    assert out.returncode != 0
    assert "Error" in out.stderr and "path" in out.stderr.lower()


def test_bench_finds_the_harness_from_any_directory(tmp_path: Path) -> None:
    """``zkqueue bench`` run outside the checkout (so ``benchmarks`` is not importable from the current directory)
    finds the harness beside the package."""
    out = subprocess.run([*ZKQUEUE, "bench", "--list"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "put_fg_1" in out.stdout


def test_unreachable_server_is_a_clear_error() -> None:
    # The connect timeout (15 s by default) only decides how long the command tries: 2 s show the same error.
    began = time.monotonic()
    out = run("stats", "--connect", "127.0.0.1:1", "/q", timeout=90, env={"ZKQUEUE_CONNECT_TIMEOUT": "2"})
    assert out.returncode != 0
    assert "cannot connect to ZooKeeper" in out.stderr
    assert time.monotonic() - began < 14, "ZKQUEUE_CONNECT_TIMEOUT was not used"


def test_check_java_module_reports_the_version() -> None:
    out = subprocess.run([sys.executable, "-m", "zkqueue.server.check_java"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Java" in out.stdout
    env = dict(os.environ, PATH="/nonexistent")
    bad = subprocess.run(
        [sys.executable, "-m", "zkqueue.server.check_java"], capture_output=True, text=True, timeout=60, env=env
    )
    assert bad.returncode == 1 and "openjdk-17" in bad.stderr


@pytest.mark.slow
def test_demo_runs_and_loses_nothing() -> None:
    out = run("demo", "--items", "600", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "lost" in out.stdout
    lost_line = next(line for line in out.stdout.splitlines() if "│ lost" in line)
    assert lost_line.split("│")[2].strip() == "0"


def test_jobs_commands(zk_hosts: str) -> None:
    path = "/jobs/cli"
    added = run("jobs", "add", "--connect", zk_hosts, path, '{"to": "a@b"}', "--id", "mail-1")
    assert added.returncode == 0 and added.stdout.strip() == "mail-1", added.stderr
    again = run("jobs", "add", "--connect", zk_hosts, path, "{}", "--id", "mail-1")
    assert again.returncode == 1 and "already queued" in again.stderr
    got = run("jobs", "get", "--connect", zk_hosts, path, "mail-1")
    assert got.returncode == 0 and '"state": "QUEUED"' in got.stdout and '"to": "a@b"' in got.stdout
    assert run("jobs", "get", "--connect", zk_hosts, path, "nope").returncode == 1
    counts = run("jobs", "counts", "--connect", zk_hosts, path)
    assert "queued     1" in counts.stdout and "dead       0" in counts.stdout

    from zkqueue.jobs import JobQueue, RetryPolicy  # noqa: PLC0415

    client = make_client(zk_hosts)
    try:
        with JobQueue(client, path, retry=RetryPolicy(max_attempts=1)) as jq, jq.work(lambda job: 1 / 0):
            wait_for(lambda: jq.counts()["dead"] == 1)
    finally:
        client.stop()
        client.close()
    dead = run("jobs", "dead", "--connect", zk_hosts, path)
    assert dead.stdout.startswith("mail-1\tattempts=1\tZeroDivisionError"), dead.stdout
    assert run("jobs", "retry-dead", "--connect", zk_hosts, path).returncode == 2  # ids or --all
    assert run("jobs", "retry-dead", "--connect", zk_hosts, path, "--all").stdout.strip() == "requeued 1"
    assert "queued     1" in run("jobs", "counts", "--connect", zk_hosts, path).stdout
    assert run("jobs", "purge-dead", "--connect", zk_hosts, path, "mail-1").stdout.strip() == "purged 0"
