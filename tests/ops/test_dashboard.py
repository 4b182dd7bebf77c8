"""The dashboard in a real headless browser (Debian's chromium, driven over the DevTools protocol), against a real
ZooKeeper: depths change after puts, a click on "retry" queues a dead job again."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from zkqueue import QueueBuilder, StrSerializer
from zkqueue.jobs import JobQueue, JobState, RetryPolicy
from zkqueue.server.testing import wait_for

ZKQUEUE = [sys.executable, "-m", "zkqueue.ops.cli"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str) -> str | None:
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None


class Browser:
    """One chromium page over the DevTools protocol (a websocket of JSON messages)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        wait_for(lambda: self.eval("document.readyState === 'complete' && location.href") == url, timeout=20,
                 interval=0.1, message=f"{url} did not load")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))


@contextlib.contextmanager
def chromium(tmp_path: Path) -> Iterator[Browser]:
    websocket = pytest.importorskip("websocket", reason="the browser test needs websocket-client (dev extra)")
    port = free_port()
    proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--no-first-run", "--no-default-browser-check", f"--remote-debugging-port={port}",
                             "--remote-allow-origins=*", f"--user-data-dir={tmp_path / 'chromium-profile'}",
                             "--window-size=1400,900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        targets = wait_for(lambda: http_get(f"http://127.0.0.1:{port}/json/list"), timeout=30, interval=0.2,
                           message="chromium's DevTools endpoint did not come up")
        page = next(t for t in json.loads(targets) if t.get("type") == "page")
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        try:
            browser = Browser(ws)
            browser.call("Page.enable")
            yield browser
        finally:
            ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def dashboard(hosts: str, *args: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([*ZKQUEUE, "dashboard", "--connect", hosts, "--port", str(port), "--root", "/queues",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_get(url + "/api/overview") is not None or proc.poll() is not None, timeout=30,
                 interval=0.2, message="the dashboard did not come up")
        assert proc.poll() is None, proc.communicate()[1]
        yield url
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
        assert "Traceback" not in err, err


def put(zk_client, path: str, items: list[str]) -> None:
    with QueueBuilder.builder(zk_client, None, StrSerializer(), path).put_in_background(False).build_queue() as q:
        for item in items:
            q.put(item)


def make_dead_job(zk_client, path: str, job_id: str) -> None:
    with JobQueue(zk_client, path, retry=RetryPolicy(max_attempts=1)) as jq:
        jq.add({"to": "someone"}, job_id=job_id)

        def fail(job):
            raise RuntimeError("mail server said no")

        with jq.work(fail):
            wait_for(lambda: jq.counts()["dead"] == 1, timeout=30, message="the job did not die")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make test installs it with apt as root)")
def test_dashboard_in_a_browser_shows_depths_and_retries_a_dead_job(zk_hosts: str, zk_client,
                                                                    tmp_path: Path) -> None:
    put(zk_client, "/queues/mail", ["a", "b"])
    make_dead_job(zk_client, "/queues/jobs", "send-42")
    with dashboard(zk_hosts, "--allow-actions", "--auth", "ops:secret") as url, chromium(tmp_path) as browser:
        browser.open(url + "/")
        cell = "document.querySelector('tr[data-path=\"/queues/mail\"] [data-field=pending]')"
        assert browser.eval(f"{cell}.textContent.trim()") == "2"
        assert "Actions are ON" in browser.eval("document.getElementById('actions-mode').textContent")
        assert browser.eval("document.querySelector('tr[data-path=\"/queues/jobs\"] [data-field=dead]')"
                            ".textContent.trim()") == "1"
        put(zk_client, "/queues/mail", ["c", "d", "e"])
        wait_for(lambda: browser.eval(f"{cell}.textContent.trim()") == "5", timeout=20, interval=0.2,
                 message="the page did not show the new depth")
        browser.screenshot(tmp_path / "overview.png")

        browser.open(url + "/queue?path=/queues/jobs")
        assert "mail server said no" in browser.eval("document.getElementById('dead').textContent")
        browser.eval("document.querySelector('button[data-action=retry][data-job=\"send-42\"]').click()")
        wait_for(lambda: "requeued 1 dead job" in (browser.eval("document.body && document.body.textContent") or ""),
                 timeout=20, interval=0.2, message="the retry did not report back")
        browser.screenshot(tmp_path / "retried.png")
    zk_client.add_auth("digest", "ops:secret")  # the requeued record carries the dashboard user's ACL
    job = JobQueue(zk_client, "/queues/jobs").get("send-42")
    assert job is not None and job.state is JobState.QUEUED
    assert (tmp_path / "overview.png").stat().st_size > 1000
    assert (tmp_path / "retried.png").stat().st_size > 1000


def test_actions_are_refused_unless_allowed(zk_client) -> None:
    from zkqueue.ops.dashboard.app import create_app

    make_dead_job(zk_client, "/queues/jobs", "send-7")
    app = create_app(zk_client, root="/queues", allow_actions=False)
    web = app.test_client()
    page = web.get("/queue?path=/queues/jobs").get_data(as_text=True)
    assert "actions are off" in page and "send-7" in page and 'data-action="retry"' not in page
    refused = web.post("/action/retry", data={"path": "/queues/jobs", "job_id": "send-7",
                                              "token": app.config["ZKQ_TOKEN"]})
    assert refused.status_code == 403
    assert JobQueue(zk_client, "/queues/jobs").get("send-7").state is JobState.DEAD
    record = web.get("/job?path=/queues/jobs&id=send-7").get_data(as_text=True)
    assert "mail server said no" in record and "Traceback" in record  # the job's record, with its traceback
    forged = create_app(zk_client, root="/queues", allow_actions=True).test_client().post(
        "/action/retry", data={"path": "/queues/jobs", "job_id": "send-7", "token": "forged"})
    assert forged.status_code == 403


def test_paths_outside_the_root_are_refused(zk_client) -> None:
    from zkqueue.ops.dashboard.app import create_app

    put(zk_client, "/queues/mail", ["a"])
    put(zk_client, "/elsewhere/secret", ["s3cret"])
    make_dead_job(zk_client, "/elsewhere/jobs", "other-1")
    web = create_app(zk_client, root="/queues").test_client()
    assert web.get("/queue?path=/queues/mail").status_code == 200
    for url in ("/queue?path=/elsewhere/secret", "/queue?path=/queuesX", "/queue?path=/queues/../elsewhere/secret",
                "/job?path=/elsewhere/jobs&id=other-1", "/chart.svg?path=/elsewhere/secret"):
        refused = web.get(url)
        assert refused.status_code == 404, url
        assert "outside the dashboard root /queues" in refused.get_data(as_text=True), url
    assert "s3cret" not in web.get("/queue?path=/elsewhere/secret").get_data(as_text=True)


def test_actions_only_on_existing_job_queues_under_the_root(zk_client) -> None:
    from zkqueue.ops.dashboard.app import create_app

    put(zk_client, "/queues/plain", ["a"])
    make_dead_job(zk_client, "/elsewhere/jobs", "other-1")
    app = create_app(zk_client, root="/queues", allow_actions=True, auth_user="app")
    web = app.test_client()
    before = sorted(zk_client.get_children("/queues"))
    token = app.config["ZKQ_TOKEN"]
    outside = web.post("/action/purge-dead", data={"path": "/elsewhere/jobs", "token": token})
    assert outside.status_code == 404
    assert JobQueue(zk_client, "/elsewhere/jobs").get("other-1").state is JobState.DEAD
    for action in ("retry", "purge-dead", "redrive"):
        missing = web.post(f"/action/{action}", data={"path": "/queues/nothing/here", "token": token})
        assert missing.status_code == 404, action
        assert zk_client.exists("/queues/nothing") is None, action  # nothing created
    for action in ("retry", "purge-dead"):
        plain = web.post(f"/action/{action}", data={"path": "/queues/plain", "token": token})
        assert plain.status_code == 404 and "no job queue at /queues/plain" in plain.get_data(as_text=True)
    assert [n for n in zk_client.get_children("/queues/plain") if not n.startswith("queue-")] == []
    assert web.post("/action/redrive", data={"path": "/queues", "token": token}).status_code == 404
    assert sorted(zk_client.get_children("/queues")) == before  # no queue- or -quarantine node created


def test_the_head_peek_is_clamped(zk_client) -> None:
    from zkqueue.ops.dashboard.app import create_app
    from zkqueue.ops.dashboard.views import MAX_PEEK

    put(zk_client, "/queues/big", [str(i) for i in range(MAX_PEEK + 20)])
    web = create_app(zk_client, root="/queues").test_client()

    def rows(n: str) -> int:
        page = web.get(f"/queue?path=/queues/big&n={n}")
        assert page.status_code == 200
        head = page.get_data(as_text=True).split('<table id="head">')[1].split("</table>")[0]
        return head.count("<tr><td><code>")

    assert len(zk_client.get_children("/queues/big")) == MAX_PEEK + 20
    assert rows("3") == 3
    assert rows("100000") == MAX_PEEK
    assert rows("0") == 1
    assert web.get("/queue?path=/queues/big&n=lots").status_code == 400


def test_allow_actions_without_auth_is_a_usage_error() -> None:
    from click.testing import CliRunner

    from zkqueue.ops.cli import main

    out = CliRunner().invoke(main, ["dashboard", "--connect", "127.0.0.1:1", "--allow-actions"],
                             env={"ZKQUEUE_AUTH": ""})
    assert out.exit_code == 2, out.output
    assert "--allow-actions needs --auth" in out.output and "Traceback" not in out.output


def test_the_dashboard_lists_live_task_workers(zk_client) -> None:
    """A registered zkqueue worker shows on the overview page and in /api/workers with its queues, pool and running
    jobs; its row goes when its node does."""
    from zkqueue.ops.dashboard.app import create_app
    from zkqueue.tasks.live import Registration

    registration = Registration(zk_client, "/zkqueue/workers", queues=["mail", "fetch"], pool="process",
                                concurrency=8)
    registration.update(["job-1", "job-2"])
    web = create_app(zk_client, root="/zkqueue/queues").test_client()
    page = web.get("/").get_data(as_text=True)
    assert f'data-worker="{registration.info.name}"' in page and "mail, fetch" in page and "job-1, job-2" in page
    (row,) = web.get("/api/workers").get_json()
    assert (row["pool"], row["concurrency"], row["running"], row["pid"]) == ("process", 8, ["job-1", "job-2"],
                                                                             registration.info.pid)
    registration.close()
    assert web.get("/api/workers").get_json() == []
    assert "no live workers" in web.get("/").get_data(as_text=True)
