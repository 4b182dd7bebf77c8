"""Code the Spark tests ship to executor processes (importable there: conftest puts this folder on PYTHONPATH)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

_fds: dict[tuple[int, str], int] = {}


def _append(directory: str, line: bytes) -> None:
    key = (os.getpid(), directory)
    fd = _fds.get(key)
    if fd is None:
        fd = os.open(os.path.join(directory, f"handled-{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        _fds[key] = fd
    os.write(fd, line)  # unbuffered: survives os._exit


class Recorder:
    """A consume() handler writing every item (hex) to a per-process file in ``directory``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, item: bytes) -> None:
        _append(self.directory, item.hex().encode() + b"\n")


class CrashOnce(Recorder):
    """Records items, but the first process to meet ``poison`` dies at once (os._exit), holding its locks."""

    def __init__(self, directory: str, poison: bytes) -> None:
        super().__init__(directory)
        self.poison = poison

    def __call__(self, item: bytes) -> None:
        if item == self.poison:
            try:
                fd = os.open(os.path.join(self.directory, "crashed"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os._exit(3)
        super().__call__(item)


class FailOn(Recorder):
    """Raises for ``bad`` items (every time); records the others."""

    def __init__(self, directory: str, bad: bytes) -> None:
        super().__init__(directory)
        self.bad = bad

    def __call__(self, item: bytes) -> None:
        if item == self.bad:
            raise ValueError("handler refuses this item")
        super().__call__(item)


def handled(directory: str | Path) -> list[bytes]:
    """Every item the handlers recorded, across processes."""
    out: list[bytes] = []
    for path in Path(directory).glob("handled-*.log"):
        out.extend(bytes.fromhex(line) for line in path.read_text().split())
    return out


class CrashingSerializer:
    """Sink serializer (``serializer=spark_helpers:CrashingSerializer``): in the first attempt of partition 0 it
    kills the worker at the row given by env ZKQ_CRASH_AT_ROW, after earlier chunks were committed."""

    def __init__(self) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        self.armed = ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0
        self.crash_at = int(os.environ.get("ZKQ_CRASH_AT_ROW", "-1"))
        self.count = 0

    def serialize(self, item: Any) -> bytes:
        if self.armed and self.count == self.crash_at:
            os._exit(4)
        self.count += 1
        return str(item).encode()

    def deserialize(self, data: bytes) -> Any:
        return data.decode()
