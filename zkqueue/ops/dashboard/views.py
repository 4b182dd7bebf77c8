"""The dashboard's pages, JSON and actions."""

from __future__ import annotations

import logging
from typing import Any

from kazoo.exceptions import KazooException
from flask import Blueprint, abort, current_app, flash, jsonify, redirect, render_template, request, url_for

from zkqueue.errors import ZkQueueError
from zkqueue.ops.dashboard.charts import rate_chart
from zkqueue.ops.dashboard.data import DashboardData
from zkqueue.ops.items import SERIALIZERS

log = logging.getLogger("zkqueue.ops.dashboard.views")

views = Blueprint("zkq", __name__)


def _data() -> DashboardData:
    return current_app.config["ZKQ_DATA"]


#: Most head items a queue's page shows (``n`` is clamped to it).
MAX_PEEK = 500
#: Most queued jobs a job queue's page lists (in run order; the counts have them all).
MAX_LISTED = 50


def _path() -> str:
    """The request's ``path``: 400 without one, 404 if it is not the root or under it (the dashboard shows and
    acts on what is under its ``--root`` only)."""
    path = request.values.get("path", "")
    if not path.startswith("/"):
        abort(400, "a path is required")
    if not _data().under_root(path):
        abort(404, f"{path} is outside the dashboard root {_data().root}: only what is under it is shown")
    return path


def _count() -> int:
    """The request's ``n`` (head items to show), clamped to 1..:data:`MAX_PEEK`."""
    try:
        n = int(request.args.get("n", 10))
    except ValueError:
        abort(400, "n must be a whole number")
    return max(1, min(n, MAX_PEEK))


@views.app_context_processor
def _globals() -> dict[str, Any]:
    return {"allow_actions": current_app.config["ZKQ_ALLOW_ACTIONS"], "auth_user": current_app.config["ZKQ_AUTH_USER"],
            "token": current_app.config["ZKQ_TOKEN"], "root": _data().root}


def _row(sample: Any) -> dict[str, Any]:
    d = sample.depth.as_dict()
    d.update(puts_per_s=round(sample.puts_per_s, 2), takes_per_s=round(sample.takes_per_s, 2))
    return d


@views.route("/")
def index() -> str:
    samples = _data().overview()
    charts = {s.depth.path: rate_chart(_data().history.series(s.depth.path), s.depth.path) for s in samples}
    return render_template("index.html", rows=[_row(s) for s in samples], charts=charts, workers=_data().workers())


@views.route("/api/workers")
def api_workers() -> Any:
    return jsonify(_data().workers())


@views.route("/api/overview")
def api_overview() -> Any:
    return jsonify([_row(s) for s in _data().overview()])


@views.route("/chart.svg")
def chart() -> Any:
    path = _path()
    return current_app.response_class(rate_chart(_data().history.series(path), path), mimetype="image/svg+xml")


@views.route("/queue")
def queue() -> str:
    path = _path()
    data = _data()
    kind = data.kind(path)
    if kind is None:
        abort(404, f"no node {path}")
    serializer = request.args.get("serializer", "str")
    if serializer not in SERIALIZERS:
        abort(400, f"unknown serializer {serializer!r}")
    context: dict[str, Any] = {"path": path, "kind": kind, "serializer": serializer, "serializers": sorted(SERIALIZERS),
                               "chart": rate_chart(data.history.series(path), path)}
    if kind == "flow":
        context["flow_counts"] = data.flow_counts(path)
    else:
        context["head"] = data.peek(path, _count(), serializer)
        context["quarantine"] = data.quarantine(path, serializer)
    if kind == "jobs":
        context["job_counts"] = data.job_counts(path)
        context["paused"] = data.paused(path)
        context["running"] = data.running(path)
        context["queued"] = data.queued(path, MAX_LISTED)
        context["max_listed"] = MAX_LISTED
        context["dead"] = data.dead_letters(path)
    return render_template("queue.html", **context)


@views.route("/job")
def job() -> str:
    path = _path()
    job_id = request.args.get("id", "")
    if _data().kind(path) not in ("jobs", "flow"):
        abort(404, f"no job queue or flow at {path}")
    record = _data().job(path, job_id) if job_id else None
    if record is None:
        abort(404, f"no job {job_id!r} in {path}")
    return render_template("job.html", path=path, job=record)


def _action_allowed() -> None:
    if not current_app.config["ZKQ_ALLOW_ACTIONS"]:
        abort(403, "actions are off: start the dashboard with --allow-actions")
    if request.form.get("token") != current_app.config["ZKQ_TOKEN"]:
        abort(403, "this form does not come from this dashboard")


def _after(path: str, message: str) -> Any:
    flash(message)
    return redirect(url_for("zkq.queue", path=path))


def _act(what: str, run: Any, done: str, kinds: tuple[str, ...] = ("jobs",)) -> Any:
    """Run one action on the queue at the form's path (an existing queue of one of ``kinds`` under the root, else
    404: an action never creates a queue) and tell the outcome on its page."""
    _action_allowed()
    path = _path()
    kind = _data().kind(path)
    if kind not in kinds or path == _data().root:
        abort(404, f"no {' or '.join(_KIND_NAMES[k] for k in kinds)} at {path}: nothing to {what}")
    try:
        n = run(path)
    except (ZkQueueError, KazooException) as exc:
        return _after(path, f"{what} failed: {exc!r}")
    return _after(path, done.format(n=n))


_KIND_NAMES = {"jobs": "job queue", "queue": "queue", "flow": "flow"}


@views.route("/action/retry", methods=["POST"])
def retry() -> Any:
    job_id = request.form.get("job_id")
    return _act("retry", lambda path: _data().retry_dead(path, [job_id] if job_id else None),
                "requeued {n} dead job(s)")


@views.route("/action/purge-dead", methods=["POST"])
def purge_dead() -> Any:
    return _act("purge", _data().purge_dead, "purged {n} dead job(s)")


@views.route("/action/pause", methods=["POST"])
def pause() -> Any:
    return _act("pause", _data().pause, "{n}: no job starts until it is resumed")


@views.route("/action/resume", methods=["POST"])
def resume() -> Any:
    return _act("resume", _data().resume, "{n}: workers start jobs again")


@views.route("/action/cancel", methods=["POST"])
def cancel() -> Any:
    job_id = request.form.get("job_id", "")
    if not job_id:
        _action_allowed()
        abort(400, "a job_id is required")
    return _act("cancel", lambda path: f"job {job_id}: {_data().cancel(path, job_id)}", "{n}", kinds=("jobs", "flow"))


@views.route("/action/redrive", methods=["POST"])
def redrive() -> Any:
    return _act("redrive", _data().redrive, "redrove {n} quarantined node(s)", kinds=("queue", "jobs"))
