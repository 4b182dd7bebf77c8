"""A consumer process killed with SIGKILL before its ack: its message comes back (its lease ends with its session)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import kombu
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_killed_consumer_message_comes_back(connection: kombu.Connection, broker_url: str) -> None:
    # a short session, so the server notices the dead process soon
    url = broker_url + "?session_timeout=4"
    with connection as conn:
        queue = conn.SimpleQueue("work")
        queue.put({"task": 1})
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("consumer_proc.py")), url],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            assert line.strip() == "GOT {'task': 1}"
            with pytest.raises(queue.Empty):
                queue.get_nowait()  # held by the other process
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            message = queue.get(timeout=30)  # back once the dead session expires
            assert message.payload == {"task": 1}
            message.ack()
            with pytest.raises(queue.Empty):
                queue.get_nowait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        queue.close()
