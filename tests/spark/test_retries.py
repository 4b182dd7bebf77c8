"""Crash safety with task retries (local[2,4], in a subprocess): executor consumers whose worker dies hold no
item hostage, and a sink task that dies and is retried adds no copies with dedupe (and copies without)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from zkqueue.formats import framing
from zkqueue.spark import put_partition
from zkqueue.server.testing import make_client, unique_chroot

from spark_helpers import handled

pytestmark = pytest.mark.spark

HERE = Path(__file__).resolve().parent
ITEMS = [f"item-{i:04d}".encode() for i in range(300)]


@pytest.fixture(scope="module")
def retry_run(zk_server, tmp_path_factory):
    """Fill a queue, run retry_job.py once, and hand the tests its output and a client on its chroot."""
    pytest.importorskip("pyspark")
    chroot = unique_chroot()
    root = make_client(zk_server.connect_string)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    hosts = zk_server.connect_string + chroot
    workdir = tmp_path_factory.mktemp("retry")
    (workdir / "handled").mkdir()
    put_partition(({"v": item} for item in ITEMS), hosts, "/work", value_column="v", items_per_node=3)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, str(HERE / "retry_job.py"), hosts, str(workdir)],
        capture_output=True, text=True, timeout=240, env=env, cwd=str(HERE),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"retry_job failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    client = make_client(hosts)
    yield json.loads(lines[-1][len("RESULT "):]), workdir, client
    client.stop()
    client.close()


def _queued(client: KazooClient, path: str) -> Counter:
    out: Counter = Counter()
    for name in client.get_children(path):
        out.update(framing.decode_items(client.get(f"{path}/{name}")[0]))
    return out


def test_consumer_crash_loses_nothing(retry_run):
    result, workdir, client = retry_run
    assert (workdir / "handled" / "crashed").exists(), "the poison item never reached a handler"
    seen = handled(workdir / "handled")
    assert set(seen) == set(ITEMS)  # every item was handled, the ones the dead worker held included
    assert client.get_children("/work") == []
    assert client.get_children("/work-locks") == []
    assert 1 in result["consume"]["attempts"]  # Spark retried the task whose worker died
    # Only successful attempts report counts; items the dead attempt acked are not in them.
    assert result["consume"]["processed"] <= len(seen)


def test_retried_sink_task_adds_no_copies_with_dedupe(retry_run):
    result, _workdir, client = retry_run
    assert result["sink"] == "ok"
    rows = Counter(f"row-{i}".encode() for i in range(400))
    assert _queued(client, "/sink-dedupe") == rows
    plain = _queued(client, "/sink-plain")
    assert set(plain) == set(rows)
    assert sum(plain.values()) > len(rows)  # at-least-once: the retry re-put the chunks the first attempt wrote
    assert client.get_children("/sink-dedupe-dedupe") == []  # the write's markers were removed at commit
