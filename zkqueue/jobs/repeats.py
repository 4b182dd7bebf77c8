"""Repeating jobs: their definitions, how they are stored, and when they fire. No threads here (the elected loop
that fires them is :mod:`zkqueue.jobs.scheduler`).

A repeat is one node, ``<job queue>/repeats/<escaped name>``, in Curator's multi-item framing with two parts: a JSON
header (schedule, tz, catch_up, times) and the params as the job queue's serializer wrote them. The header keeps
``last_ms`` (the latest fire time that added a job) and ``next_ms`` (the earliest fire time not yet handled);
every firing advances them in the same multi that adds the job, version-checked, so a fire time is handled at
most once whoever fires it. ``<job queue>/scheduler`` holds the election of the schedulers.

Schedules:

- ``cron``: a cron expression (croniter: 5 fields, or 6 with seconds last) evaluated in ``tz`` (an IANA zone,
  via :mod:`zoneinfo`), so ``"0 3 * * *"`` in ``Europe/Paris`` fires at 03:00 Paris time, summer and winter.
- ``every``: a whole number of seconds (>= 1; a :class:`~datetime.timedelta` or a number). It fires at the
  instants that are whole multiples of it since the Unix epoch: ``every=3600`` on the hour (UTC),
  ``every=86400`` at midnight UTC. Only ``tz="UTC"`` goes with it.

Each firing adds the job ``<name>@<fire time>``, the fire time in ISO 8601 UTC to the second
(``nightly@2026-11-24T03:00:00Z``, see :func:`job_id`), due at the fire time.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zkqueue.errors import ConfigurationError, CorruptItemError
from zkqueue.formats import framing, naming
from zkqueue.jobs import names
from zkqueue.jobs.model import now_ms
from zkqueue.jobs.store import Paths

log = logging.getLogger("zkqueue.jobs.repeats")

CATCH_UP = ("last", "all", "none")
#: A due fire time at most this much (ms) before the active scheduler's previous look (or its election) is on
#: time; older ones were missed (see catch_up and :mod:`zkqueue.jobs.scheduler`).
GRACE_MS = 1000
#: The most missed fire times ``catch_up="all"`` fires at one look (the latest ones; older ones are skipped).
MAX_CATCH_UP = 1000
ID_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def repeats_path(paths: Paths) -> str:
    return naming.join(paths.root, "repeats")


def election_path(paths: Paths) -> str:
    return naming.join(paths.root, "scheduler")


def repeat_path(paths: Paths, name: str) -> str:
    return naming.join(repeats_path(paths), names.node_id(name))


def job_id(name: str, fire_ms: int) -> str:
    """The id of the job a firing adds: ``<name>@<fire time as YYYY-MM-DDTHH:MM:SSZ, UTC>``."""
    return f"{name}@{to_datetime(fire_ms).strftime(ID_FORMAT)}"


def to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


# ---------------------------------------------------------------------------------------------- schedules
@dataclass(frozen=True)
class Schedule:
    """When a repeat fires: ``cron`` in ``tz``, or ``every_s`` seconds since the epoch. Fire times are whole
    seconds, in ms since the epoch."""

    cron: str | None
    every_s: int | None
    tz: str

    @classmethod
    def of(cls, cron: str | None, every: timedelta | float | int | None, tz: str) -> Schedule:
        """A checked schedule; ConfigurationError for a bad cron, a bad zone, a bad ``every`` or both/neither."""
        if (cron is None) == (every is None):
            raise ConfigurationError("give a repeat exactly one of cron= or every=")
        if not isinstance(tz, str):
            raise ConfigurationError(f"tz must be an IANA zone name, got {tz!r}")
        _zone(tz)
        if cron is not None:
            if not isinstance(cron, str) or not croniter.is_valid(cron):
                raise ConfigurationError(f"not a cron expression: {cron!r}")
            return cls(cron, None, tz)
        seconds = every.total_seconds() if isinstance(every, timedelta) else every
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 1 \
                or seconds != int(seconds):
            raise ConfigurationError(f"every must be a whole number of seconds >= 1, got {every!r}")
        if tz != "UTC":
            raise ConfigurationError("tz applies to cron schedules only; every= counts from the epoch in UTC")
        return cls(None, int(seconds), tz)

    @property
    def every(self) -> timedelta | None:
        return None if self.every_s is None else timedelta(seconds=self.every_s)

    def describe(self) -> str:
        return self.cron if self.cron is not None else f"every {self.every}"

    def next_after(self, ms: int) -> int:
        """The first fire time strictly after ``ms``."""
        if self.every_s is not None:
            period = self.every_s * 1000
            return (ms // period + 1) * period
        it = croniter(self.cron, to_datetime(ms).astimezone(_zone(self.tz)))
        while True:
            t = _ms(it.get_next(datetime))
            if not self._repeats_wall_clock(t):
                return t

    def at_or_before(self, ms: int) -> int:
        """The latest fire time at or before ``ms``."""
        if self.every_s is not None:
            period = self.every_s * 1000
            return ms // period * period
        it = croniter(self.cron, to_datetime(ms + 1).astimezone(_zone(self.tz)))
        while True:
            t = _ms(it.get_prev(datetime))
            if not self._repeats_wall_clock(t):
                return t

    def _repeats_wall_clock(self, t: int) -> bool:
        """Whether cron fire time ``t`` shows the same local wall-clock time as the fire time before it: the
        repeated hour when clocks go back (``"30 2 * * *"`` in Europe/Paris would fire at 02:30 summer time and
        again at 02:30 winter time). Like classic cron, such a time is not a fire time: the wall-clock time fires
        once. Only a time in the second pass of a repeated hour (``fold=1``) can be one."""
        zone = _zone(self.tz)
        local = to_datetime(t).astimezone(zone)
        if not local.fold:
            return False
        before = croniter(self.cron, local).get_prev(datetime).astimezone(zone)
        return before.replace(tzinfo=None) == local.replace(tzinfo=None)

    def latest_between(self, first_ms: int, last_ms: int, limit: int) -> tuple[list[int], bool]:
        """The fire times in ``[first_ms, last_ms]``, oldest first, at most the latest ``limit``; and whether
        older ones were left out."""
        out: list[int] = []
        t = self.at_or_before(last_ms)
        while t >= first_ms:
            if len(out) == limit:
                return out[::-1], True
            out.append(t)
            t = self.at_or_before(t - 1)
        return out[::-1], False


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(f"unknown time zone {tz!r}") from exc


def _ms(value: datetime) -> int:
    return int(round(value.timestamp() * 1000))


def check_catch_up(catch_up: str) -> str:
    if catch_up not in CATCH_UP:
        raise ConfigurationError(f"catch_up must be one of {', '.join(CATCH_UP)}; got {catch_up!r}")
    return catch_up


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a repeat name must be a non-empty str, got {name!r}")
    names.node_id(name)
    return name


# ---------------------------------------------------------------------------------------------- definitions
@dataclass(frozen=True)
class Definition:
    """A repeat as stored: params as the serializer's bytes, times in ms since the epoch."""

    name: str
    schedule: Schedule
    catch_up: str
    params: bytes
    next_ms: int
    last_ms: int | None = None
    created_ms: int = 0
    updated_ms: int = 0

    def encode(self) -> bytes:
        head = {"name": self.name, "cron": self.schedule.cron, "every_s": self.schedule.every_s,
                "tz": self.schedule.tz, "catch_up": self.catch_up, "next_ms": self.next_ms,
                "last_ms": self.last_ms, "created_ms": self.created_ms, "updated_ms": self.updated_ms}
        return framing.encode_items([json.dumps(head, separators=(",", ":")).encode(), self.params])

    @classmethod
    def decode(cls, data: bytes) -> Definition:
        try:
            head_bytes, params = framing.decode_items(data)
            head = json.loads(head_bytes)
            return cls(
                name=head["name"],
                schedule=Schedule(head["cron"], head["every_s"], head["tz"]),
                catch_up=head["catch_up"],
                params=params,
                next_ms=int(head["next_ms"]),
                last_ms=None if head["last_ms"] is None else int(head["last_ms"]),
                created_ms=int(head["created_ms"]),
                updated_ms=int(head["updated_ms"]),
            )
        except CorruptItemError:
            raise
        except Exception as exc:
            raise CorruptItemError(f"not a repeat definition: {exc!r}") from exc

    def advanced(self, next_ms: int, last_ms: int | None) -> Definition:
        """This definition after a firing (or a skip): handled up to before ``next_ms``."""
        return replace(self, next_ms=next_ms, last_ms=last_ms, updated_ms=now_ms())

    def public(self, serializer: Any) -> Repeat:
        return Repeat(
            name=self.name, params=serializer.deserialize(self.params), cron=self.schedule.cron,
            every=self.schedule.every, tz=self.schedule.tz, catch_up=self.catch_up,
            last_fired=None if self.last_ms is None else to_datetime(self.last_ms),
            next_fire=to_datetime(self.next_ms),
        )


@dataclass(frozen=True)
class Repeat:
    """A repeating job's definition, as :meth:`JobQueue.repeats` gives it: ``cron`` (in ``tz``) or ``every``;
    ``last_fired`` is the latest fire time that added a job (None before the first), ``next_fire`` the next fire
    time not handled yet (in the past while no scheduler runs). Times are aware UTC datetimes."""

    name: str
    params: Any
    cron: str | None
    every: timedelta | None
    tz: str
    catch_up: str
    last_fired: datetime | None
    next_fire: datetime

    @property
    def schedule(self) -> str:
        """The cron expression, or ``every <interval>``."""
        return self.cron if self.cron is not None else f"every {self.every}"


# ---------------------------------------------------------------------------------------------- store
def save(client: KazooClient, paths: Paths, name: str, schedule: Schedule, catch_up: str, params: bytes,
         acl: Any) -> Definition:
    """Create or replace the repeat ``name``. A replaced definition keeps its ``last_ms``. Its next fire time: with
    the same schedule, a due one not handled yet (``next_ms`` at or before now) is kept, so a re-definition (an
    application declaring its repeats at every start) neither drops a firing a scheduler is about to make nor the
    catch-up of times missed while none ran; otherwise the schedule's first after both now and ``last_ms``. So no
    fire time fires twice (the scheduler also skips a fire time whose job exists, even finished). Version-checked
    against a firing in between (which is kept)."""
    path = repeat_path(paths, name)
    client.retry(client.ensure_path, repeats_path(paths), acl=acl)
    while True:
        now = now_ms()
        try:
            data, stat = client.retry(client.get, path)
        except NoNodeError:
            fresh = Definition(name, schedule, catch_up, params, schedule.next_after(now), None, now, now)
            try:
                client.retry(client.create, path, fresh.encode(), acl=acl)
                return fresh
            except NodeExistsError:
                continue
        old = Definition.decode(data)
        if old.schedule == schedule and old.next_ms <= now:
            next_ms = old.next_ms  # due and not handled yet: the next look handles it (per catch_up)
        else:
            next_ms = schedule.next_after(now if old.last_ms is None else max(now, old.last_ms))
        new = Definition(name, schedule, catch_up, params, next_ms, old.last_ms, old.created_ms, now)
        try:
            client.retry(client.set, path, new.encode(), version=stat.version)
            return new
        except (BadVersionError, NoNodeError):
            continue


def load_all(client: KazooClient, paths: Paths, watch: Any = None) -> list[tuple[Definition, int]]:
    """Every repeat with its node version, by name; with ``watch``, set on the folder and on each repeat. A node
    that is not a repeat definition is logged and left out."""
    parent = repeats_path(paths)
    try:
        children = client.get_children(parent, watch=watch)
    except NoNodeError:
        if watch is not None and client.exists(parent, watch=watch) is not None:
            return load_all(client, paths, watch)  # created meanwhile
        return []
    out = []
    for child in sorted(children):
        try:
            data, stat = client.get(naming.join(parent, child), watch=watch)
        except NoNodeError:
            continue
        try:
            out.append((Definition.decode(data), stat.version))
        except CorruptItemError as exc:
            log.warning("%s/%s is not a repeat definition, left out: %s", parent, child, exc)
    return out


def delete(client: KazooClient, paths: Paths, name: str) -> bool:
    """Remove the repeat ``name``; False if there was none. Jobs it already added stay."""
    try:
        client.retry(client.delete, repeat_path(paths, name))
        return True
    except NoNodeError:
        return False


__all__ = ["CATCH_UP", "Definition", "GRACE_MS", "MAX_CATCH_UP", "Repeat", "Schedule", "check_catch_up",
           "check_name", "delete", "election_path", "job_id", "load_all", "repeat_path", "repeats_path", "save"]
