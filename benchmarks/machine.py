"""Describe the machine a benchmark ran on (stored in the JSON and shown in the README)."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any


def _mem_total_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _java_version() -> str | None:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (done.stderr or done.stdout).splitlines()
    return first[0].strip() if first else None


def _zookeeper_version() -> str | None:
    try:
        from zkqueue.server.jars import zookeeper_classpath  # noqa: PLC0415

        cp = zookeeper_classpath()
    except Exception:  # noqa: BLE001 - a description, never a failure
        return None
    m = re.search(r"zookeeper-(\d+\.\d+\.\d+)\.jar", cp)
    return m.group(1) if m else None


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def describe(*, servers: int | None, force_sync: bool | None, connect: str | None) -> dict[str, Any]:
    """Cores, RAM, CPU, OS, Python, Java, ZooKeeper, kazoo and the ensemble set-up."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gb": _mem_total_gb(),
        "cpu": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "java": _java_version(),
        "zookeeper": _zookeeper_version(),
        "curator": "5.9.0",
        "kazoo": _version("kazoo"),
        "ensemble": "external (--connect)" if connect else f"embedded {servers} node(s) on loopback",
        "fsync": None if connect else ("on (forceSync=yes)" if force_sync else "off (forceSync=no)"),
        "load_at_start": load,
    }


@contextlib.contextmanager
def ensemble_hosts(hosts: str | None) -> Iterator[str]:
    """``hosts`` when given, else the connect string of a fresh embedded 3-node ensemble for the block (a section
    run on its own: ``python -m benchmarks.<section>``)."""
    if hosts:
        yield hosts
        return
    from zkqueue.server.embedded import ZooKeeperEnsemble  # noqa: PLC0415

    with ZooKeeperEnsemble(size=3) as zk:
        yield zk.connect_string
