"""The README's first example, run exactly as written: its blocks are taken from README.md by their
``<!-- quickstart:NAME -->`` markers, written to a fresh directory and run as a user would (two Python programs and
the ``zkqueue worker`` command line) against a real ZooKeeper."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"<!-- quickstart:(?P<name>[\w.]+) -->\n```\w*\n(?P<body>.*?)```", re.S)


def quickstart_blocks() -> dict[str, str]:
    return {m["name"]: m["body"] for m in BLOCK.finditer(README.read_text())}


def test_the_readme_quickstart_runs_as_written(zk_hosts, tmp_path) -> None:
    blocks = quickstart_blocks()
    assert set(blocks) == {"tasks.py", "enqueue.py", "worker.sh", "result.py"}, sorted(blocks)
    for name in ("tasks.py", "enqueue.py", "result.py"):
        (tmp_path / name).write_text(blocks[name])
    env = {**os.environ, "ZKQUEUE_CONNECT": zk_hosts, "PYTHONPATH": str(tmp_path)}
    bindir = Path(sys.executable).parent
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"  # the venv's zkqueue command

    def run(args: list[str]) -> str:
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
        return done.stdout

    job_id = run([sys.executable, "enqueue.py"]).strip()
    assert re.fullmatch(r"[0-9a-f]{32}", job_id), job_id
    (command,) = [line.split("#")[0].strip() for line in blocks["worker.sh"].splitlines() if line.strip()]
    run(shlex.split(command))  # returns by itself: --burst
    assert run([sys.executable, "result.py", job_id]).strip() == "{'sent_to': 'a@example.com', 'subject': 'hi'}"
