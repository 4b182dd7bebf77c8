"""The operations commands (peek, purge, quarantine, watch, metrics) against a real ZooKeeper, with their errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

from click.testing import CliRunner
from kazoo.security import make_digest_acl
from prometheus_client.parser import text_string_to_metric_families

from zkqueue import QueueBuilder, StrSerializer
from zkqueue.engine.parking import parked_count
from zkqueue.formats import framing
from zkqueue.ops.cli import main
from zkqueue.server.testing import wait_for

ZKQUEUE = [sys.executable, "-m", "zkqueue.ops.cli"]


def invoke(*args: str, input: str | None = None):  # noqa: A002
    result = CliRunner().invoke(main, list(args), input=input)
    assert "Traceback" not in result.output
    return result


def put_items(zk_client, path: str, items: list[str]) -> None:
    with QueueBuilder.builder(zk_client, None, StrSerializer(), path).build_queue() as q:
        for item in items:
            q.put(item)
        assert q.flush_puts(timeout=60)


def test_peek_shows_head_items_without_taking_them(zk_hosts: str, zk_client) -> None:
    put_items(zk_client, "/p/q", ["first", "second", "third"])
    out = invoke("peek", "--connect", zk_hosts, "/p/q", "-n", "2")
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert [line.split("\t")[1] for line in lines] == ["first", "second"]
    assert len(zk_client.get_children("/p/q")) == 3


def test_purge_asks_then_deletes_in_batches(zk_hosts: str, zk_client) -> None:
    put_items(zk_client, "/p/big", [str(i) for i in range(2500)])
    zk_client.create("/p/big/not-an-item")
    refused = invoke("purge", "--connect", zk_hosts, "/p/big", input="n\n")
    assert refused.exit_code == 1 and len(zk_client.get_children("/p/big")) == 2501
    out = invoke("purge", "--connect", zk_hosts, "/p/big", "--yes")
    assert out.exit_code == 0, out.output
    assert "purged 2500 item(s)" in out.stdout
    assert zk_client.get_children("/p/big") == ["not-an-item"]


def test_purge_also_deletes_parked_items(zk_hosts: str, zk_client) -> None:
    now = int(time.time() * 1000)
    with QueueBuilder.builder(zk_client, None, StrSerializer(), "/p/delayed").run_mover(False).build_delay_queue() as q:
        q.put("soon", now + 1000)
        for i in range(30):
            q.put(f"later-{i}", now + 3_600_000 + i * 90_000)  # parked, over about 45 minutes
        assert q.flush_puts(timeout=60) and q.stats().parked == 30
    out = invoke("purge", "--connect", zk_hosts, "/p/delayed", "--yes")
    assert out.exit_code == 0, out.output
    assert "purged 31 item(s)" in out.stdout
    assert zk_client.get_children("/p/delayed") == [] and parked_count(zk_client, "/p/delayed") == 0


def test_quarantine_list_redrive_purge(zk_hosts: str, zk_client) -> None:
    zk_client.ensure_path("/p/q2")
    zk_client.create("/p/q2-quarantine/queue-0000000007", framing.encode_items([b"fixed"]), makepath=True)
    zk_client.create("/p/q2-quarantine/queue-0000000009", b"\x00garbage")
    listed = invoke("quarantine", "list", "--connect", zk_hosts, "/p/q2")
    assert listed.exit_code == 0, listed.output
    assert "queue-0000000007" in listed.stdout and "fixed" in listed.stdout
    assert "queue-0000000009" in listed.stdout
    moved = invoke("quarantine", "redrive", "--connect", zk_hosts, "/p/q2", "queue-0000000007")
    assert moved.exit_code == 0 and "redrove 1 node(s)" in moved.stdout
    (name,) = zk_client.get_children("/p/q2")
    assert framing.decode_items(zk_client.get("/p/q2/" + name)[0]) == [b"fixed"]
    purged = invoke("quarantine", "purge", "--connect", zk_hosts, "/p/q2", "--yes")
    assert purged.exit_code == 0 and "purged 1 quarantined" in purged.stdout
    assert zk_client.get_children("/p/q2-quarantine") == []


def test_watch_renders_depths(zk_hosts: str, zk_client) -> None:
    put_items(zk_client, "/w/q", ["a", "b"])
    out = invoke("watch", "--connect", zk_hosts, "/w/q", "--count", "2", "--interval", "0.1")
    assert out.exit_code == 0, out.output
    assert "/w/q" in out.stdout and "pending" in out.stdout


def test_wrong_path_and_acl_refusal_are_one_line_errors(zk_hosts: str, zk_client) -> None:
    missing = invoke("peek", "--connect", zk_hosts, "/no/such/queue")
    assert missing.exit_code == 1
    assert "no queue at /no/such/queue" in missing.output
    zk_client.create("/locked", b"", acl=[make_digest_acl("app", "secret", all=True)])
    refused = invoke("peek", "--connect", zk_hosts, "/locked")
    assert refused.exit_code == 4, refused.output
    assert "not allowed" in refused.output
    allowed = invoke("peek", "--connect", zk_hosts, "--auth", "app:secret", "/locked")
    assert allowed.exit_code == 0, allowed.output


def test_no_server_exits_3_without_traceback() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, ZKQUEUE_CONNECT_TIMEOUT="2")
    out = subprocess.run([*ZKQUEUE, "peek", "--connect", f"127.0.0.1:{port}", "/q"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 3, out.stderr
    assert "cannot connect to ZooKeeper" in out.stderr
    assert "Traceback" not in out.stderr


def test_metrics_exporter_serves_depths(zk_hosts: str, zk_client) -> None:
    put_items(zk_client, "/x/q", ["a", "b", "c"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*ZKQUEUE, "metrics", "--connect", zk_hosts, "--port", str(port), "--addr", "127.0.0.1",
                             "/x/q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def scrape():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                return None

        text = wait_for(scrape, timeout=30, interval=0.2, message="the exporter never answered")
        values = {(s.name, s.labels.get("queue")): s.value
                  for f in text_string_to_metric_families(text) for s in f.samples}
        assert values[("zkqueue_pending", "/x/q")] == 3
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err


def test_a_server_lost_mid_command_exits_3_without_traceback(zk_server, zk_chroot, zk_client, monkeypatch) -> None:
    import threading

    from zkqueue.server.testing_proxy import TcpProxy

    put_items(zk_client, "/w/lost", ["a"])
    monkeypatch.setenv("ZKQUEUE_CONNECT_TIMEOUT", "2")  # how long a command waits for a lost server
    with TcpProxy(zk_server.connect_string.split(",")[0]) as proxy:
        timer = threading.Timer(1.0, proxy.drop)  # the server goes away while watch refreshes
        timer.start()
        try:
            out = invoke("watch", "--connect", proxy.connect_string + zk_chroot, "/w/lost", "--interval", "0.1",
                         "--count", "100000")
        finally:
            timer.cancel()
    assert out.exit_code == 3, (out.output, out.exception)
    assert "lost the connection to ZooKeeper" in out.output
