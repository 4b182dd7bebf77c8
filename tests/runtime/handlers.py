"""Handlers the process-pool tests send to child processes (importable by name: a child unpickles them)."""

from __future__ import annotations

import os
import time


def square(job):
    return job.params["n"] ** 2


def crash_first(job):
    """Kills its child process on the job's first attempt; succeeds after."""
    if job.attempts == 1:
        os._exit(3)
    return "survived"


def hang_first(job):
    """Hangs on the first attempt (past any timeout the test gives); quick after."""
    if job.attempts == 1:
        time.sleep(60)
    return "quick"
