"""The app of ``zkqueue demo``: two tasks that its two ``zkqueue worker zkqueue.ops.demo_app:app`` processes run.

* ``demo.resize`` makes a thumbnail of an image-like payload (``{"id", "format", "width", "height"}``); a payload
  whose format is not an image format raises :class:`UnsupportedImageError` on every attempt, so that job ends in
  the dead letters after its ``max_attempts``.
* ``demo.notify`` "sends" a notification; a job added with ``flaky=True`` fails its first run with
  :class:`TransientSendError` (a busy mail server) and completes on its retry.

Each handler run writes to a side log (``runs.log`` in ``$ZKQUEUE_DEMO_DIR``): a ``start`` line when it begins and
``done`` or ``fail`` when it ends, with the job id, the worker's pid and the time. One ``os.write`` of a short line to a file
opened with ``O_APPEND`` is atomic among processes, so the demo counts handler runs from it: what it reports as
"run twice" is measured, not inferred from the job records.

The connect string comes from ``$ZKQUEUE_CONNECT`` (the demo sets it for the workers); nothing connects on import.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from zkqueue.jobs.retry import RetryPolicy
from zkqueue.tasks import App
from zkqueue.tasks.connection import CONNECT_ENV

log = logging.getLogger("zkqueue.ops.demo_app")

#: The app's namespace: its queues are under ``/zkqueue-demo/queues``, its workers under ``/zkqueue-demo/workers``.
NAMESPACE = "zkqueue-demo"
#: The environment variable naming the folder of the side log and of the flaky jobs' markers.
DIR_ENV = "ZKQUEUE_DEMO_DIR"
RUN_LOG = "runs.log"
RESIZE, NOTIFY = "demo.resize", "demo.notify"
#: Three attempts, short backoffs: a transient failure is retried within a second.
RETRY = RetryPolicy(max_attempts=3, backoff=0.2, max_backoff=1.0)
#: Session timeout of the workers' ZooKeeper clients (kazoo's default is 10 s): a SIGKILLed worker's leases lapse
#: this long after its death, and its jobs run again on the other worker.
SESSION_TIMEOUT = 6.0
#: Seconds one run of each task takes (sleep, standing for I/O), so that a worker is killed mid-run.
RESIZE_SECONDS, NOTIFY_SECONDS = 0.04, 0.02
IMAGE_FORMATS = frozenset({"PNG", "JPEG", "WEBP"})


class UnsupportedImageError(ValueError):
    """The payload is not an image this task can resize (permanent: it fails every attempt)."""


class TransientSendError(ConnectionError):
    """The notification server was busy (transient: the next attempt goes through)."""


def demo_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or Path(tempfile.gettempdir()) / "zkqueue-demo")


def _log_run(event: str, job_id: str) -> None:
    """Append ``<event> <job id> <pid> <unix time>`` to the side log in one write."""
    fd = os.open(demo_dir() / RUN_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{event} {job_id} {os.getpid()} {time.time():.3f}\n".encode())
    finally:
        os.close(fd)


def resize(image: dict[str, Any], size: int = 128) -> dict[str, Any]:
    """A thumbnail of ``image`` that fits in ``size`` x ``size`` pixels (its name, dimensions and a checksum)."""
    _log_run("start", image["id"])
    try:
        if image["format"] not in IMAGE_FORMATS:
            raise UnsupportedImageError(f"{image['id']}: {image['format']!r} is not an image format "
                                        f"({', '.join(sorted(IMAGE_FORMATS))})")
        time.sleep(RESIZE_SECONDS)
        scale = size / max(image["width"], image["height"])
        width, height = max(1, round(image["width"] * scale)), max(1, round(image["height"] * scale))
        digest = hashlib.sha256(f"{image['id']}:{width}x{height}".encode()).hexdigest()[:12]
    except BaseException:
        _log_run("fail", image["id"])
        raise
    _log_run("done", image["id"])
    return {"thumbnail": f"{image['id']}-{width}x{height}.{image['format'].lower()}", "sha256": digest}


def notify(job_id: str, user: str, text: str, flaky: bool = False) -> dict[str, Any]:
    """Send ``text`` to ``user``. With ``flaky`` the first run fails with :class:`TransientSendError` (a marker
    file, created exclusively, tells the first run from the next ones, whichever worker runs them)."""
    _log_run("start", job_id)
    try:
        if flaky:
            markers = demo_dir() / "failed-once"
            markers.mkdir(exist_ok=True)
            try:
                os.close(os.open(markers / job_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except FileExistsError:
                pass  # failed once already: this run goes through
            else:
                raise TransientSendError(f"mail server busy sending {job_id} to {user} (transient)")
        time.sleep(NOTIFY_SECONDS)
    except BaseException:
        _log_run("fail", job_id)
        raise
    _log_run("done", job_id)
    return {"sent_to": user, "chars": len(text)}


def make_app(connect: str | None = None) -> App:
    """The demo's app on ``connect`` (default: ``$ZKQUEUE_CONNECT``, else a local server), with both tasks."""
    connect = connect or os.environ.get(CONNECT_ENV) or "127.0.0.1:2181"
    demo = App(connect, namespace=NAMESPACE, retry=RETRY, client_options={"timeout": SESSION_TIMEOUT})
    demo.task(name=RESIZE, queue="images")(resize)
    demo.task(name=NOTIFY, queue="notify")(notify)
    return demo


#: What ``zkqueue worker zkqueue.ops.demo_app:app`` runs (it connects on first use, not on import).
app = make_app()

__all__ = ["NAMESPACE", "NOTIFY", "RESIZE", "RETRY", "RUN_LOG", "TransientSendError", "UnsupportedImageError",
           "app", "make_app"]
