"""Exact accounting of one fault run, from the journals the worker processes wrote.

Rules (issue 7):
- every put the server acknowledged is delivered at least once: ``lost`` must be empty;
- nothing is delivered that no producer tried to put: ``phantoms`` must be empty;
- lock-safe mode: an item delivered more than once is allowed only when an earlier delivery went to a consumer
  that lost its session (a ``lost`` journal line) or was SIGKILLed: anything else is ``unexplained_duplicates``;
- no-lock mode (at-most-once): no item is delivered twice.
A put that raised (``uncertain``) may have been stored or not: it may be delivered zero times or once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Journal:
    name: str
    events: list[dict]

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["ev"] == kind]


def read_journal(path: Path) -> Journal:
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the one line a SIGKILL may cut short
    return Journal(path.stem, events)


@dataclass
class Accounting:
    scenario: str
    mode: str
    acked: int = 0
    uncertain: int = 0
    delivered_unique: int = 0
    deliveries: int = 0
    duplicates: int = 0
    faults: list[str] = field(default_factory=list)
    sessions_lost: dict[str, int] = field(default_factory=dict)
    killed: list[str] = field(default_factory=list)
    recovery_s: float | None = None
    drain_s: float | None = None
    lost: list[str] = field(default_factory=list)
    phantoms: list[str] = field(default_factory=list)
    unexplained_duplicates: list[str] = field(default_factory=list)

    def figures(self) -> dict:
        out = asdict(self)
        for key in ("lost", "phantoms", "unexplained_duplicates"):
            out[key] = len(out[key])
            out[key + "_sample"] = getattr(self, key)[:5]
        return out

    def assert_ok(self) -> None:
        problems = []
        if self.lost:
            problems.append(f"{len(self.lost)} acknowledged items never delivered, e.g. {self.lost[:5]}")
        if self.phantoms:
            problems.append(f"{len(self.phantoms)} delivered items nobody put, e.g. {self.phantoms[:5]}")
        if self.unexplained_duplicates:
            problems.append(
                f"{len(self.unexplained_duplicates)} duplicates without a lost session, "
                f"e.g. {self.unexplained_duplicates[:5]}"
            )
        if self.mode == "nolock" and self.duplicates:
            problems.append(f"at-most-once broken: {self.duplicates} extra deliveries")
        assert not problems, f"{self.scenario}: " + "; ".join(problems)


def account(
    scenario: str,
    mode: str,
    producers: list[Journal],
    consumers: list[Journal],
    *,
    killed: list[str] = (),
    extra_acked: list[str] = (),
) -> Accounting:
    acc = Accounting(scenario=scenario, mode=mode, killed=list(killed))
    acked = set(extra_acked)
    uncertain: set[str] = set()
    for j in producers:
        acked.update(e["id"] for e in j.of("ack"))
        uncertain.update(e["id"] for e in j.of("uncertain"))
    acc.acked, acc.uncertain = len(acked), len(uncertain)

    deliveries: dict[str, list[tuple[float, str]]] = defaultdict(list)
    lossy = set(killed)
    for j in consumers:
        losses = j.of("lost")
        if losses:
            acc.sessions_lost[j.name] = len(losses)
            lossy.add(j.name)
        for e in j.of("deliver"):
            deliveries[e["id"]].append((e["t"], j.name))
    acc.deliveries = sum(len(v) for v in deliveries.values())
    acc.delivered_unique = len(deliveries)
    acc.duplicates = acc.deliveries - acc.delivered_unique
    acc.lost = sorted(acked - deliveries.keys())
    acc.phantoms = sorted(deliveries.keys() - acked - uncertain)
    for item, got in sorted(deliveries.items()):
        if len(got) > 1:
            got.sort()
            # every delivery but the last must have gone to a consumer whose session was lost
            if any(name not in lossy for _, name in got[:-1]):
                acc.unexplained_duplicates.append(f"{item}: {[name for _, name in got]}")
    return acc
