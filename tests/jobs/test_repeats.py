"""Repeating jobs on a real ZooKeeper: definitions (repeat / repeats / cancel_repeat), cron in a time zone, the
scheduler firing distinct jobs ``<name>@<fire time>``, catch_up after downtime, and no fire time twice."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from zkqueue.errors import ConfigurationError
from zkqueue.jobs import JobQueue, JobState, Repeat
from zkqueue.jobs.names import node_id
from zkqueue.jobs.repeats import GRACE_MS, Schedule
from zkqueue.server.testing import wait_for

PATH = "/jobs/repeats"
ID_TIME = "%Y-%m-%dT%H:%M:%SZ"


def fire_ms(job_id: str) -> int:
    stamp = job_id.rsplit("@", 1)[1]
    return int(datetime.strptime(stamp, ID_TIME).replace(tzinfo=timezone.utc).timestamp() * 1000)


def jobs_of(jq: JobQueue, name: str) -> dict[int, list]:
    """Fire time (ms) -> the jobs of ``name`` found in records/, completed/ and dead/ (a list, to see doubles)."""
    out: dict[int, list] = {}
    client = jq.client
    for parent in (jq.paths.records, jq.paths.completed, jq.paths.dead):
        for node in client.get_children(parent):
            job = jq.get(node)  # the ids in these tests need no escaping
            if job is not None and job.id.startswith(name + "@"):
                out.setdefault(fire_ms(job.id), []).append(job)
    return out


def record_created_ms(jq: JobQueue, job_id: str) -> int:
    from zkqueue.jobs.model import Record  # noqa: PLC0415

    for path in (jq.paths.record(job_id), jq.paths.finished(job_id, JobState.COMPLETED)):
        stat = jq.client.exists(path)
        if stat is not None:
            return Record.decode(jq.client.get(path)[0]).created_ms
    raise AssertionError(f"no record of {job_id}")


def test_repeat_repeats_and_cancel_round_trip(zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        assert jq.repeats() == []
        nightly = jq.repeat("nightly", {"report": "sales"}, cron="0 3 * * *", tz="Europe/Paris")
        assert isinstance(nightly, Repeat) and nightly.schedule == "0 3 * * *" and nightly.last_fired is None
        jq.repeat("tick", [1, 2], every=timedelta(minutes=5), catch_up="all")
        listed = {r.name: r for r in jq.repeats()}
        assert set(listed) == {"nightly", "tick"}
        assert listed["nightly"].params == {"report": "sales"} and listed["nightly"].tz == "Europe/Paris"
        assert listed["nightly"].catch_up == "last" and listed["nightly"].every is None
        assert listed["tick"].every == timedelta(minutes=5) and listed["tick"].cron is None
        assert listed["tick"].catch_up == "all" and listed["tick"].params == [1, 2]
        assert listed["tick"].next_fire.timestamp() % 300 == 0 and listed["tick"].next_fire > datetime.now(timezone.utc)

        replaced = jq.repeat("tick", {"v": 2}, every=60.0, catch_up="none")  # same name: replaced
        assert replaced.every == timedelta(seconds=60) and replaced.params == {"v": 2}
        assert [r.name for r in jq.repeats()] == ["nightly", "tick"]
        assert {r.name: r.catch_up for r in jq.repeats()}["tick"] == "none"

        assert jq.cancel_repeat("tick") is True
        assert jq.cancel_repeat("tick") is False
        assert [r.name for r in jq.repeats()] == ["nightly"]
    reader = JobQueue(zk_client, PATH)  # repeats() needs no start(): what `zkqueue jobs repeats` uses
    assert [r.name for r in reader.repeats()] == ["nightly"]


def test_cron_fires_at_local_time_across_daylight_saving(zk_client) -> None:
    paris = ZoneInfo("Europe/Paris")
    schedule = Schedule.of("0 3 * * *", None, "Europe/Paris")

    def next_after(when: datetime) -> datetime:
        return datetime.fromtimestamp(schedule.next_after(int(when.timestamp() * 1000)) / 1000, timezone.utc)

    # winter (UTC+1) and summer (UTC+2), and the night the clocks go forward (29 March 2026)
    assert next_after(datetime(2026, 1, 10, 12, tzinfo=timezone.utc)) == datetime(2026, 1, 11, 2, tzinfo=timezone.utc)
    assert next_after(datetime(2026, 7, 10, 12, tzinfo=timezone.utc)) == datetime(2026, 7, 11, 1, tzinfo=timezone.utc)
    assert next_after(datetime(2026, 3, 28, 12, tzinfo=timezone.utc)) == datetime(2026, 3, 29, 1, tzinfo=timezone.utc)
    exactly = datetime(2026, 7, 11, 3, tzinfo=paris)  # strictly after: a fire time itself is not next
    assert next_after(exactly) == datetime(2026, 7, 12, 1, tzinfo=timezone.utc)
    with JobQueue(zk_client, PATH) as jq:
        nightly = jq.repeat("nightly", None, cron="0 3 * * *", tz="Europe/Paris")
        local = nightly.next_fire.astimezone(paris)
        assert (local.hour, local.minute, local.second) == (3, 0, 0)
        assert timedelta(0) < nightly.next_fire - datetime.now(timezone.utc) <= timedelta(days=1)


@pytest.mark.parametrize("kwargs", [
    {"cron": "61 * * * *"},
    {"cron": "not a cron"},
    {"cron": "0 3 * * *", "every": 60},
    {},
    {"every": 60, "catch_up": "some"},
    {"cron": "0 3 * * *", "tz": "Mars/Olympus"},
    {"every": 0.5},
    {"every": 1.5},
    {"every": timedelta(0)},
    {"every": 60, "tz": "Europe/Paris"},
])
def test_bad_definitions_raise(zk_client, kwargs) -> None:
    with JobQueue(zk_client, PATH) as jq:
        with pytest.raises(ConfigurationError):
            jq.repeat("bad", None, **kwargs)
        with pytest.raises(ConfigurationError):
            jq.repeat("", None, every=60)
        assert jq.repeats() == []


def test_every_second_fires_distinct_jobs_a_worker_runs(zk_client) -> None:
    ran: list[str] = []
    with JobQueue(zk_client, PATH) as jq:
        jq.repeat("tick", {"n": 1}, every=1)
        with jq.work(lambda job: ran.append(job.id) or job.params["n"]):
            wait_for(lambda: len(ran) >= 3, timeout=15, message=f"ran: {ran}")
        jobs = jobs_of(jq, "tick")
        assert all(len(found) == 1 for found in jobs.values()), jobs
        times = sorted(jobs)
        assert times == list(range(times[0], times[-1] + 1000, 1000))  # every second, none left out
        first = jobs[times[0]][0]
        assert first.id == f"tick@{datetime.fromtimestamp(times[0] / 1000, timezone.utc).strftime(ID_TIME)}"
        assert node_id(first.id) and first.params == {"n": 1}
        assert first.state is JobState.COMPLETED and first.result == 1
        assert jq.repeats()[0].last_fired is not None
        assert jq.stats()["added"] >= 3


def test_completed_firing_is_not_fired_again_after_a_restart(zk_client) -> None:
    with JobQueue(zk_client, PATH) as jq:
        jq.repeat("tick", "p", every=1, catch_up="all")
        with jq.take(max_jobs=1, timeout=10) as jobs:
            first = jobs[0].id
        assert jq.get(first).state is JobState.COMPLETED
    with JobQueue(zk_client, PATH) as jq:  # a new scheduler, elected afresh, reads the repeat's last fire time
        wait_for(lambda: len(jobs_of(jq, "tick")) >= 4, timeout=15)
        jobs = jobs_of(jq, "tick")
        again = jq.get(first)
        assert again.state is JobState.COMPLETED and again.attempts == 1  # not replaced by a second firing
        assert all(len(found) == 1 for found in jobs.values())
        times = sorted(jobs)
        assert times[0] == fire_ms(first)
        assert times == list(range(times[0], times[-1] + 1000, 1000))  # "all": the restart's gap is filled


def test_catch_up_after_downtime(zk_client) -> None:
    """Three repeats every second; every job queue closed for 4-5 s; then one started again. The first look after
    the restart (when its first records were created) decides which fire times were missed: due and older than
    the 1 s grace. "all" fires them all, "last" only the latest, "none" none; then every second fires again.
    (The restart is half-way through a second, so no fire time is within a few ms of the grace's edge.)"""
    policies = ("last", "all", "none")
    with JobQueue(zk_client, PATH) as jq:
        for policy in policies:
            jq.repeat(policy, policy, every=1, catch_up=policy)
        wait_for(lambda: all(r.last_fired is not None for r in jq.repeats()), timeout=15)
        time.sleep(1.2)
    stopped = {r.name: int(r.last_fired.timestamp() * 1000) for r in JobQueue(zk_client, PATH).repeats()}
    time.sleep(4.0 + (1.5 - time.time() % 1.0) % 1.0)  # 4-5 s down; restart at x.5 s
    restart_ms = int(time.time() * 1000)
    with JobQueue(zk_client, PATH) as jq:
        wait_for(lambda: all(max(jobs_of(jq, p)) > restart_ms + 1500 for p in policies), timeout=15)
        for policy in policies:
            jobs = jobs_of(jq, policy)
            assert all(len(found) == 1 for found in jobs.values()), (policy, jobs)
            after = sorted(t for t in jobs if t > stopped[policy])
            look = min(record_created_ms(jq, jobs[t][0].id) for t in after)
            missed = list(range(stopped[policy] + 1000, look - GRACE_MS, 1000))
            assert len(missed) >= 3 and look >= restart_ms, (policy, missed, look, restart_ms)
            assert after == list(range(after[0], after[-1] + 1000, 1000)), (policy, after)  # then every second
            first = {"all": missed[0], "last": missed[-1], "none": missed[-1] + 1000}[policy]
            assert after[0] == first, (policy, after, missed, look)
            assert len(after) >= 3 and after[-1] > restart_ms + 1500, (policy, after)


def test_close_stops_the_scheduler_thread_and_a_standby_takes_over(zk_client_factory) -> None:
    first, second = zk_client_factory(), zk_client_factory()
    a, b = JobQueue(first, PATH), JobQueue(second, PATH)
    a.start()
    b.start()
    try:
        a.repeat("tick", None, every=1, catch_up="all")
        wait_for(lambda: len(jobs_of(a, "tick")) >= 2, timeout=15)
        threads = [t for t in threading.enumerate() if t.name == f"zkqueue-scheduler-{PATH}"]
        assert len(threads) == 2 and all(t.daemon for t in threads)
        election = first.Election(f"{PATH}/scheduler")
        leader = a if election.contenders()[0] == a._scheduler.identifier else b
        standby = b if leader is a else a
        assert sorted(election.contenders()) == sorted([a._scheduler.identifier, b._scheduler.identifier])
        leader.close()
        assert len([t for t in threading.enumerate() if t.name == f"zkqueue-scheduler-{PATH}"]) == 1
        assert election.contenders() == [standby._scheduler.identifier]
        count = len(jobs_of(standby, "tick"))
        wait_for(lambda: len(jobs_of(standby, "tick")) >= count + 2, timeout=15)
        jobs = jobs_of(standby, "tick")
        assert all(len(found) == 1 for found in jobs.values())
        assert sorted(jobs) == list(range(min(jobs), max(jobs) + 1000, 1000))
    finally:
        a.close()
        b.close()
    assert not [t for t in threading.enumerate() if t.name == f"zkqueue-scheduler-{PATH}"]


def test_racing_schedulers_fire_each_time_once(zk_client_factory) -> None:
    """Schedulers that all believe they are active (as after a failover whose old leader has not noticed yet):
    the version check on the repeat node lets exactly one firing of each time commit."""
    from zkqueue.jobs.scheduler import Scheduler  # noqa: PLC0415

    ran: list[str] = []
    queues = [JobQueue(zk_client_factory(), PATH) for _ in range(3)]
    for jq in queues:
        jq.start()
    try:
        queues[0].repeat("tick", None, every=1, catch_up="all")
        racers = [Scheduler(jq.client, jq.paths, jq._engine, None) for jq in queues]  # not elected: fire at will
        stop = threading.Event()

        def race(scheduler: Scheduler) -> None:
            while not stop.is_set():
                scheduler._pass()
                time.sleep(0.002)

        threads = [threading.Thread(target=race, args=(s,)) for s in racers]
        with queues[1].work(lambda job: ran.append(job.id)):
            for t in threads:
                t.start()
            time.sleep(3.0)
            stop.set()
            for t in threads:
                t.join()
            jobs = jobs_of(queues[0], "tick")
            wait_for(lambda: len(ran) >= len(jobs), timeout=10)
        assert sorted(Counter(ran).values())[-1] == 1, Counter(ran).most_common(3)
        assert len(jobs) >= 3 and all(len(found) == 1 for found in jobs.values())
        assert sorted(jobs) == list(range(min(jobs), max(jobs) + 1000, 1000))
        assert sum(s.counts["fired"] for s in racers) <= len(jobs)
    finally:
        for jq in queues:
            jq.close()


def test_a_scheduler_that_lost_the_race_cannot_fire_a_completed_time_again(zk_client) -> None:
    """A scheduler that read a repeat before its firing (a slow old leader, a lost reply) fires from that stale
    read after the job has completed: the version check refuses it, so the completed job is not added again."""
    from zkqueue.jobs.repeats import job_id, load_all  # noqa: PLC0415
    from zkqueue.jobs.scheduler import Scheduler  # noqa: PLC0415

    with JobQueue(zk_client, PATH) as jq:
        jq.repeat("tick", "p", every=1)
        [(before, version)] = load_all(jq.client, jq.paths)
        first = job_id("tick", before.next_ms)
        with jq.take(max_jobs=1, timeout=10) as jobs:
            assert [j.id for j in jobs] == [first]
        done = jq.get(first)
        assert done.state is JobState.COMPLETED
        stale = Scheduler(jq.client, jq.paths, jq._engine, None)
        stale._fire(before, version, before.next_ms + 100)
        assert stale.counts["fired"] == 0
        again = jq.get(first)
        assert again.state is JobState.COMPLETED and again.updated_at == done.updated_at


def test_scheduler_errors_are_retried_with_backoff_and_a_foreign_node_is_left_out(zk_client, caplog) -> None:
    """The repeats folder unreadable (an ACL without READ) for 3 s under the active scheduler: every look fails,
    and is retried with a growing pause (a few WARNING lines, no hot loop, the thread alive); once readable it
    goes on firing and catch_up="all" fills the gap. A node under repeats/ that is not a definition is left out
    without stopping the others."""
    from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions  # noqa: PLC0415

    with JobQueue(zk_client, PATH) as jq:
        folder = f"{PATH}/repeats"
        zk_client.create(f"{folder}/garbage", b"not a definition")
        jq.repeat("tick", None, every=1, catch_up="all")
        assert [r.name for r in jq.repeats()] == ["tick"]
        wait_for(lambda: len(jobs_of(jq, "tick")) >= 2, timeout=15)
        with caplog.at_level("WARNING", logger="zkqueue.jobs.scheduler"):
            zk_client.set_acls(folder, [ACL(Permissions.ALL & ~Permissions.READ, OPEN_ACL_UNSAFE[0].id)])
            time.sleep(3.5)
            zk_client.set_acls(folder, OPEN_ACL_UNSAFE)
            back_ms = int(time.time() * 1000)
            wait_for(lambda: max(jobs_of(jq, "tick")) >= back_ms + 1000, timeout=30)
        retried = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
        assert 2 <= len(retried) <= 8 and "NoAuth" in retried[0], retried
        jobs = jobs_of(jq, "tick")
        assert all(len(found) == 1 for found in jobs.values())
        assert sorted(jobs) == list(range(min(jobs), max(jobs) + 1000, 1000))
        assert [t.name for t in threading.enumerate()].count(f"zkqueue-scheduler-{PATH}") == 1


# ------------------------------------------------------------------------------------------------ by hand
def by_hand(jq: JobQueue, monkeypatch, start_ms: int):
    """Stop ``jq``'s own scheduler and give the test a clock (``clock[0]``, ms) that repeat() and a scheduler of
    the test's see; returns (clock, that scheduler). The scheduler is not elected: the test calls ``_pass``."""
    from zkqueue.jobs import repeats as repeats_module  # noqa: PLC0415
    from zkqueue.jobs import scheduler as scheduler_module  # noqa: PLC0415

    jq._scheduler.stop()
    clock = [start_ms]
    monkeypatch.setattr(repeats_module, "now_ms", lambda: clock[0])
    monkeypatch.setattr(scheduler_module, "now_ms", lambda: clock[0])
    return clock, scheduler_module.Scheduler(jq.client, jq.paths, jq._engine, None)


def next_second_ms() -> int:
    return (int(time.time()) + 1) * 1000


def test_a_fire_time_that_fired_and_finished_never_fires_again(zk_client, monkeypatch) -> None:
    """Fired and completed, then the repeat cancelled and added again from a machine whose clock is 2 s behind the
    scheduler's: its next fire time is one that fired already. The finished job is not replaced: skipped."""
    from zkqueue.jobs.repeats import job_id  # noqa: PLC0415

    with JobQueue(zk_client, PATH) as jq:
        base = next_second_ms()
        clock, scheduler = by_hand(jq, monkeypatch, base - 500)
        jq.repeat("tick", "p", every=1)
        clock[0] = base + 100
        scheduler._pass()
        first = job_id("tick", base)
        with jq.take(max_jobs=1, timeout=10) as jobs:
            assert [j.id for j in jobs] == [first]
        done = jq.get(first)
        assert done.state is JobState.COMPLETED
        assert jq.cancel_repeat("tick") is True
        clock[0] = base + 1500 - 2000  # the caller's clock, 2 s behind
        assert jq.repeat("tick", "p", every=1).next_fire == datetime.fromtimestamp(base / 1000, timezone.utc)
        clock[0] = base + 1600
        scheduler._pass()
        again = jq.get(first)
        assert again.state is JobState.COMPLETED and again.attempts == 1 and again.updated_at == done.updated_at
        jobs = jobs_of(jq, "tick")
        assert sorted(jobs) == [base, base + 1000] and all(len(found) == 1 for found in jobs.values()), jobs
        assert scheduler.counts == {"fired": 2, "skipped": 1}


def test_catch_up_none_fires_times_that_came_due_while_the_scheduler_was_held_up(zk_client, monkeypatch) -> None:
    """The scheduler looked just before a fire time, then its next look came 2.5 s after it (a GC pause, a long
    pass over many repeats): the times that came due meanwhile were on time, not missed; even "none" fires them."""
    with JobQueue(zk_client, PATH) as jq:
        base = next_second_ms()
        clock, scheduler = by_hand(jq, monkeypatch, base - 500)
        jq.repeat("tick", None, every=1, catch_up="none")
        scheduler._pass()  # looks at base - 0.5 s: nothing due
        assert jobs_of(jq, "tick") == {}
        clock[0] = base + 2500
        scheduler._pass()
        assert sorted(jobs_of(jq, "tick")) == [base, base + 1000, base + 2000]
        assert jq.repeats()[0].next_fire == datetime.fromtimestamp((base + 3000) / 1000, timezone.utc)


def test_missed_is_judged_from_the_last_clean_look(zk_client, monkeypatch) -> None:
    """A version race lost in a pass (a re-definition in between) leaves its due time on time for the next look,
    however late; times due before the scheduler's election are missed (catch_up="none": skipped)."""
    from zkqueue.jobs.repeats import load_all  # noqa: PLC0415

    with JobQueue(zk_client, PATH) as jq:
        base = next_second_ms()
        clock, scheduler = by_hand(jq, monkeypatch, base - 5500)
        jq.repeat("tick", None, every=1, catch_up="none")  # next fire: base - 5 s
        clock[0] = base - 500
        scheduler._since_ms = base - 500  # elected now: base - 5 s .. base - 2 s were missed (1 s of grace)
        [(stale, version)] = load_all(jq.client, jq.paths)
        jq.repeat("tick", {"v": 2}, every=1, catch_up="none")  # keeps the due next fire time; a new version
        assert not scheduler._fire(stale, version, base + 100)  # lost the version race: nothing fired
        clock[0] = base + 1800
        scheduler._pass()  # base - 1 s and base were due at the last (failed) look: on time, though late
        jobs = jobs_of(jq, "tick")
        assert sorted(jobs) == [base - 1000, base, base + 1000], jobs
        assert all(found[0].params == {"v": 2} for found in jobs.values())  # the stale read wrote nothing


@pytest.mark.parametrize("catch_up", ["last", "all", "none"])
def test_a_redefinition_keeps_a_due_fire_time(zk_client, monkeypatch, catch_up) -> None:
    """repeat() again (same schedule) after a fire time came due and before the scheduler fired it: that time
    still fires, whatever catch_up."""
    with JobQueue(zk_client, PATH) as jq:
        base = next_second_ms()
        clock, scheduler = by_hand(jq, monkeypatch, base - 500)
        jq.repeat("tick", {"v": 1}, every=1, catch_up=catch_up)
        scheduler._pass()
        clock[0] = base + 200  # due, not fired yet
        again = jq.repeat("tick", {"v": 2}, every=1, catch_up=catch_up)
        assert again.next_fire == datetime.fromtimestamp(base / 1000, timezone.utc)
        clock[0] = base + 300
        scheduler._pass()
        jobs = jobs_of(jq, "tick")
        assert sorted(jobs) == [base] and jobs[base][0].params == {"v": 2}
        # another schedule starts afresh: its first fire time after now
        changed = jq.repeat("tick", None, every=2, catch_up=catch_up)
        assert changed.next_fire == datetime.fromtimestamp(((base + 300) // 2000 + 1) * 2, timezone.utc)


def test_a_daily_cron_fires_once_when_the_clocks_go_back(zk_client, monkeypatch) -> None:
    """"30 2 * * *" in Europe/Paris: on 25 October 2026 02:30 comes twice (summer time, then winter time); like
    classic cron it fires once, at the first. Other days and other schedules keep their times."""
    def utc(*args: int) -> int:
        return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)

    daily = Schedule.of("30 2 * * *", None, "Europe/Paris")
    assert daily.next_after(utc(2026, 10, 24, 12)) == utc(2026, 10, 25, 0, 30)
    assert daily.next_after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)  # not 01:30Z, 02:30 again
    assert daily.at_or_before(utc(2026, 10, 25, 5)) == utc(2026, 10, 25, 0, 30)
    assert daily.latest_between(utc(2026, 10, 24), utc(2026, 10, 26, 12), 10) == (
        [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)], False)
    half_hourly = Schedule.of("*/30 * * * *", None, "Europe/Paris")  # every half hour of real time, fold or not
    assert half_hourly.latest_between(utc(2026, 10, 25, 0), utc(2026, 10, 25, 2), 10)[0] == [
        utc(2026, 10, 25, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1), utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 25, 2)]
    with JobQueue(zk_client, PATH) as jq:  # the scheduler, through that night
        clock, scheduler = by_hand(jq, monkeypatch, utc(2026, 10, 24, 12))
        jq.repeat("nightly", None, cron="30 2 * * *", tz="Europe/Paris", catch_up="all")
        for at in (utc(2026, 10, 25, 0, 30, 0) + 100, utc(2026, 10, 25, 1, 30) + 100, utc(2026, 10, 25, 3)):
            clock[0] = at
            scheduler._pass()
        assert sorted(jobs_of(jq, "nightly")) == [utc(2026, 10, 25, 0, 30)]
        assert jq.repeats()[0].next_fire == datetime(2026, 10, 26, 1, 30, tzinfo=timezone.utc)


def test_a_standby_whose_session_expired_keeps_the_lead_once_elected(zk_client_factory, caplog) -> None:
    """A standby scheduler's session expires (its election node is made again at the back); it is next in line
    when the leader closes: it leads and stays, not resigning at once for the old loss (the one behind it would
    take over)."""
    from zkqueue.server.testing import expire_session  # noqa: PLC0415

    a, b, c = (JobQueue(zk_client_factory(), PATH) for _ in range(3))
    election = a.client.Election(f"{PATH}/scheduler")
    try:
        a.start()
        wait_for(lambda: a._scheduler.active, timeout=15)
        b.start()
        wait_for(lambda: b._scheduler.identifier in election.contenders(), timeout=15)
        expire_session(b.client)
        wait_for(lambda: election.contenders() == [a._scheduler.identifier, b._scheduler.identifier], timeout=30)
        c.start()
        wait_for(lambda: len(election.contenders()) == 3, timeout=15)
        with caplog.at_level("WARNING", logger="zkqueue.jobs.scheduler"):
            a.close()
            wait_for(lambda: b._scheduler.active or c._scheduler.active, timeout=15)
            time.sleep(1.0)
        assert b._scheduler.active and not c._scheduler.active
        assert election.contenders()[0] == b._scheduler.identifier
        assert not [r for r in caplog.records if "lost its session" in r.getMessage()]
        b.repeat("tick", None, every=1)
        wait_for(lambda: len(jobs_of(b, "tick")) >= 1, timeout=15)
    finally:
        for jq in (a, b, c):
            jq.close()


def test_the_scheduler_thread_ends_when_its_client_is_closed_under_an_open_queue(zk_client_factory) -> None:
    """A client closed before its job queue (an app or a test that closes the connection first): the scheduler's
    contention loop stops, instead of retrying every 15 s for as long as the process lives."""
    client = zk_client_factory()
    jq = JobQueue(client, PATH)
    jq.start()
    name = f"zkqueue-scheduler-{PATH}"
    wait_for(lambda: [t for t in threading.enumerate() if t.name == name], timeout=10)
    client.stop()
    client.close()
    wait_for(lambda: not [t for t in threading.enumerate() if t.name == name], timeout=20,
             message="the scheduler thread is still contending on a closed client")
    jq.close(timeout=5)


def test_the_active_scheduler_keeps_the_lead_through_a_short_outage(zk_private_server, caplog) -> None:
    """A suspended connection is not a lost session: the scheduler elected before a server restart is still the
    one that leads after it (same election node, no resign-and-contend-again), and it fires again."""
    from zkqueue.server.testing import make_client  # noqa: PLC0415

    jq = JobQueue(make_client(zk_private_server.connect_string, timeout=30.0), PATH)  # outlives the outage
    try:
        jq.start()
        wait_for(lambda: jq._scheduler.active, timeout=15)
        election = jq.client.Election(f"{PATH}/scheduler")
        before = jq.client.get_children(f"{PATH}/scheduler")
        session = jq.client.client_id[0]
        with caplog.at_level("WARNING", logger="zkqueue.jobs.scheduler"):
            zk_private_server.stop(0)
            wait_for(lambda: not jq.client.connected, timeout=15)
            time.sleep(1.0)  # the scheduler's loop looks at its session while the connection is down
            zk_private_server.start(0)
            wait_for(lambda: jq.client.connected, timeout=30)
            time.sleep(0.5)
        assert jq.client.client_id[0] == session  # the session outlived the outage
        assert not [r for r in caplog.records if "lost its session" in r.getMessage()]
        assert jq._scheduler.active and jq.client.get_children(f"{PATH}/scheduler") == before
        assert election.contenders() == [jq._scheduler.identifier]
        jq.repeat("tick", None, every=1)
        wait_for(lambda: len(jobs_of(jq, "tick")) >= 1, timeout=15)
    finally:
        jq.close()
        jq.client.stop()
        jq.client.close()
