"""The dashboard's job controls against a real ZooKeeper: a job queue's page shows whether it is paused, its
cancelled count, its running jobs with their progress and its queued jobs; Pause/Resume and Cancel act (with the
form token, only with --allow-actions); a job's page shows its progress. One run in a real headless chromium (see
test_dashboard.py for the browser driver)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from test_dashboard import CHROMIUM, chromium, dashboard
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.ops.depth import job_paused
from zkqueue.server.testing import wait_for

PATH = "/queues/jobs"
FAST = RetryPolicy(max_attempts=3, backoff=0.2, max_backoff=1.0, jitter=False)


def section(page: str, table_id: str) -> str:
    return page.split(f'<table id="{table_id}">')[1].split("</table>")[0]


def test_pause_resume_cancel_and_progress_through_the_pages(zk_client) -> None:
    from zkqueue.ops.dashboard.app import create_app

    started = threading.Event()

    def handler(job):
        if job.id != "run":
            return "done"
        job.report_progress({"done": 7, "of": 9})
        started.set()
        deadline = time.monotonic() + 30
        while not job.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)

    app = create_app(zk_client, root="/queues", allow_actions=True, auth_user="ops")
    web = app.test_client()
    token = app.config["ZKQ_TOKEN"]

    def act(action: str, **form: str):
        return web.post(f"/action/{action}", data={"path": PATH, "token": token, **form}, follow_redirects=True)

    with JobQueue(zk_client, PATH, retry=FAST) as jq:
        jq.add("r", job_id="run")
        worker = jq.work(handler, prefetch=0)  # the other jobs stay queued (a prefetch would hold them)
        assert started.wait(10)
        wait_for(lambda: jq.get("run").progress is not None, timeout=10, message="no progress written")
        jq.add("q", job_id="q-1")
        jq.add("q", job_id="q-2")

        page = web.get(f"/queue?path={PATH}").get_data(as_text=True)
        assert 'id="paused" data-paused="no"' in page and 'data-action="pause"' in page
        assert 'data-action="resume"' not in page
        running = section(page, "running")
        assert 'data-job="run"' in running and '<code>{"done": 7, "of": 9}</code>' in running
        assert 'data-action="cancel" data-job="run"' in running
        queued = section(page, "queued")
        assert queued.index('data-job="q-1"') < queued.index('data-job="q-2"')
        assert 'data-action="cancel" data-job="q-1"' in queued
        assert 'data-state="cancelled">0<' in page
        job_page = web.get(f"/job?path={PATH}&id=run").get_data(as_text=True)
        assert "progress" in job_page and "&#39;done&#39;: 7" in job_page

        paused = act("pause")
        assert paused.status_code == 200 and "paused: no job starts until it is resumed" in paused.get_data(
            as_text=True)
        wait_for(lambda: jq.paused, timeout=10, message="the worker's queue did not see the pause")
        page = web.get(f"/queue?path={PATH}").get_data(as_text=True)
        assert 'id="paused" data-paused="yes"' in page and 'data-action="resume"' in page

        assert "job q-1: cancelled" in act("cancel", job_id="q-1").get_data(as_text=True)
        assert jq.get("q-1").state is JobState.CANCELLED
        assert "job run: cancel requested (running)" in act("cancel", job_id="run").get_data(as_text=True)
        assert jq.wait("run", timeout=20).state is JobState.CANCELLED
        assert "job nope: not found or finished" in act("cancel", job_id="nope").get_data(as_text=True)
        assert web.post("/action/cancel", data={"path": PATH, "token": token}).status_code == 400

        page = web.get(f"/queue?path={PATH}").get_data(as_text=True)
        assert 'data-state="cancelled">2<' in page
        assert 'data-job="q-2"' in section(page, "queued") and 'data-job="run"' not in section(page, "running")
        assert jq.get("q-2").state is JobState.QUEUED  # paused: nothing started

        assert "resumed: workers start jobs again" in act("resume").get_data(as_text=True)
        assert jq.wait("q-2", timeout=20).state is JobState.COMPLETED
        worker.stop()
    overview = web.get("/api/overview").get_json()
    (row,) = [r for r in overview if r["path"] == PATH]
    assert row["cancelled"] == 2 and row["paused"] is False


def test_job_controls_are_refused_unless_allowed(zk_client) -> None:
    from zkqueue.ops.dashboard.app import create_app

    with JobQueue(zk_client, PATH) as jq:
        jq.add("q", job_id="q-1")
        app = create_app(zk_client, root="/queues", allow_actions=False)
        web = app.test_client()
        page = web.get(f"/queue?path={PATH}").get_data(as_text=True)
        assert 'data-job="q-1"' in section(page, "queued")
        for action in ("pause", "resume", "cancel"):
            assert f'data-action="{action}"' not in page
        token = app.config["ZKQ_TOKEN"]
        for action in ("pause", "cancel"):
            refused = web.post(f"/action/{action}", data={"path": PATH, "job_id": "q-1", "token": token})
            assert refused.status_code == 403, action
        forged = create_app(zk_client, root="/queues", allow_actions=True).test_client().post(
            "/action/pause", data={"path": PATH, "token": "forged"})
        assert forged.status_code == 403
        assert not job_paused(zk_client, PATH) and not jq.paused
        assert jq.get("q-1").state is JobState.QUEUED
        missing = create_app(zk_client, root="/queues", allow_actions=True)
        gone = missing.test_client().post("/action/pause", data={"path": "/queues/nothing",
                                                                 "token": missing.config["ZKQ_TOKEN"]})
        assert gone.status_code == 404 and zk_client.exists("/queues/nothing") is None


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it with apt as root)")
def test_pause_cancel_and_resume_in_a_browser(zk_hosts: str, zk_client, tmp_path: Path) -> None:
    with JobQueue(zk_client, PATH) as jq:
        jq.add("q", job_id="q-1")
        jq.add("q", job_id="q-2")
    with dashboard(zk_hosts, "--allow-actions", "--auth", "ops:secret") as url, chromium(tmp_path) as browser:
        browser.open(url + f"/queue?path={PATH}")
        paused = "document.getElementById('paused').getAttribute('data-paused')"
        assert browser.eval(paused) == "no"

        def click(selector: str, message: str) -> None:
            browser.eval(f"document.querySelector('{selector}').click()")
            wait_for(lambda: message in (browser.eval("document.body && document.body.textContent") or ""),
                     timeout=20, interval=0.2, message=f"no {message!r} after clicking {selector}")

        click("button[data-action=pause]", "no job starts until it is resumed")
        assert browser.eval(paused) == "yes"
        click('button[data-action=cancel][data-job="q-1"]', "job q-1: cancelled")
        assert browser.eval("document.querySelector('[data-state=cancelled]').textContent.trim()") == "1"
        assert browser.eval("document.querySelector('#queued tr[data-job=\"q-1\"]')") is None
        browser.screenshot(tmp_path / "paused.png")
        click("button[data-action=resume]", "workers start jobs again")
        assert browser.eval(paused) == "no"
    zk_client.add_auth("digest", "ops:secret")  # the cancelled record carries the dashboard user's ACL
    look = JobQueue(zk_client, PATH)  # not started: reads only
    assert look.get("q-1").state is JobState.CANCELLED and look.get("q-2").state is JobState.QUEUED
    assert not job_paused(zk_client, PATH)
    assert (tmp_path / "paused.png").stat().st_size > 1000


def test_a_flow_page_cancels_a_running_flow_job(zk_client) -> None:
    from zkqueue.flows import Flow, FlowState
    from zkqueue.ops.dashboard.app import create_app

    app = create_app(zk_client, root="/queues", allow_actions=True, auth_user="ops")
    web = app.test_client()
    token = app.config["ZKQ_TOKEN"]
    path = "/queues/signup"
    flow = Flow(zk_client, path)
    flow.step("first", lambda job: None)
    with flow:  # no worker: the flow job waits in its first step
        flow.add({}, job_id="f-1")
        page = web.get(f"/queue?path={path}").get_data(as_text=True)
        assert 'id="flow-cancel"' in page and 'data-state="flow-cancelled">0<' in page
        done = web.post("/action/cancel", data={"path": path, "token": token, "job_id": "f-1"},
                        follow_redirects=True).get_data(as_text=True)
        assert "job f-1: cancelled" in done and 'data-state="flow-cancelled">1<' in done
        assert flow.get("f-1").state is FlowState.CANCELLED
        again = web.post("/action/cancel", data={"path": path, "token": token, "job_id": "f-1"},
                         follow_redirects=True).get_data(as_text=True)
        assert "job f-1: not found or finished" in again
