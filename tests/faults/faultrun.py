"""Drive one fault run: 4 producer and 4 consumer processes on a queue, faults, a probe, then the accounting.

Consumer ``c0`` always reaches the ensemble through one :class:`zkqueue.server.testing_proxy.TcpProxy` per node, so
it can be cut off; the others connect directly.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient

from zkqueue.builder import QueueBuilder
from zkqueue.server.embedded import ZooKeeperEnsemble
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import make_client, unique_chroot, wait_for
from zkqueue.server.testing_proxy import TcpProxy

from faultcheck import Accounting, account, read_journal  # type: ignore[import-not-found]

WORKER = Path(__file__).with_name("faultworker.py")
QUEUE = "/jobs"
LOCKS = "/jobs-locks"
#: Session timeouts (seconds): consumers, the cut-off consumer c0, producers.
CONSUMER_SESSION = 6.0
CUT_SESSION = 4.0
PRODUCER_SESSION = 10.0
#: Generous: the box is small and busy; these bound a failure, never a success.
DEADLINE = 120.0


class FaultRun:
    def __init__(
        self,
        ensemble: ZooKeeperEnsemble,
        scenario: str,
        workdir: Path,
        *,
        mode: str = "lock",
        producers: int = 4,
        consumers: int = 4,
        per_producer: int = 100,
        producer_pause: float = 0.0,
        item_seconds: float = 0.002,
    ) -> None:
        self.ensemble = ensemble
        self.scenario = scenario
        self.mode = mode
        self.workdir = workdir
        self.chroot = unique_chroot("/faults-")
        self.hosts = ensemble.connect_string + self.chroot
        self.item_seconds = item_seconds
        self.faults: list[str] = []
        self.killed: list[str] = []
        self.held_when_killed: list[str] = []  # items a consumer was inside of when SIGKILLed
        self.recoveries: list[float] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self.proxies = [TcpProxy(ensemble.node_connect_string(i)) for i in range(ensemble.size)]
        self.admin: KazooClient = make_client(ensemble.connect_string, timeout=PRODUCER_SESSION,
                                              connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 1.0})
        self.admin.ensure_path(self.chroot + QUEUE)
        self._probes: list[str] = []
        self._n_consumers = 0
        self._started = time.time()
        for i in range(consumers):
            self.start_consumer()
        wait_for(lambda: all(self._has(n, "ready") for n in self.consumer_names()), timeout=DEADLINE,
                 interval=0.1, message="consumers did not start")
        for i in range(producers):
            # even producers put in the foreground (each put acknowledged by its return), odd ones in the
            # background (acknowledged by the put listener)
            self._spawn("producer", f"p{i}", {"hosts": self.hosts, "queue": QUEUE, "count": per_producer,
                                              "pause": producer_pause, "session_timeout": PRODUCER_SESSION,
                                              "name": f"{scenario}-p{i}", "background": i % 2 == 1})
        # every producer runs before a fault strikes (on a loaded machine the others can put enough for the
        # fault's trigger while one is still starting, and the fault would then meet its start, not its puts)
        wait_for(lambda: all(self._has(n, "ready") for n in self.producer_names()), timeout=DEADLINE,
                 interval=0.1, message="producers did not start")

    # ---------------------------------------------------------------- processes
    def _journal(self, name: str) -> Path:
        return self.workdir / f"{name}.jsonl"

    def _spawn(self, role: str, name: str, cfg: dict) -> None:
        cfg["journal"] = str(self._journal(name))
        self._journal(name).touch()
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            self.procs[name] = subprocess.Popen(
                [sys.executable, str(WORKER), role, json.dumps(cfg)], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()

    def start_consumer(self) -> str:
        name = f"c{self._n_consumers}"
        self._n_consumers += 1
        cut = name == "c0"
        hosts = ",".join(p.connect_string for p in self.proxies) + self.chroot if cut else self.hosts
        cfg = {"hosts": hosts, "queue": QUEUE, "item_seconds": self.item_seconds, "batch": 10,
               "session_timeout": CUT_SESSION if cut else CONSUMER_SESSION}
        if self.mode == "lock":
            cfg["lock"] = LOCKS
        cfg["hold_file"] = str(self.workdir / f"hold-{name}")
        self._spawn("consumer", name, cfg)
        return name

    def consumer_names(self) -> list[str]:
        return [n for n in self.procs if n.startswith("c")]

    def producer_names(self) -> list[str]:
        return [n for n in self.procs if n.startswith("p")]

    def live_consumers(self) -> list[str]:
        return [n for n in self.consumer_names() if self.procs[n].poll() is None]

    def _events(self, name: str) -> list[dict]:
        return read_journal(self._journal(name)).events

    def _has(self, name: str, kind: str) -> bool:
        return any(e["ev"] == kind for e in self._events(name))

    def count(self, kind: str, names: list[str] | None = None) -> int:
        names = names if names is not None else list(self.procs)
        return sum(1 for n in names for e in self._events(n) if e["ev"] == kind)

    def delivered_ids(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for n in self.consumer_names():
            for e in self._events(n):
                if e["ev"] == "deliver":
                    out.setdefault(e["id"], e["t"])
        return out

    def deliveries_of(self, item: str) -> list[str]:
        """Consumers that got ``item``, in journal order per consumer."""
        return [n for n in self.consumer_names() for e in self._events(n) if e["ev"] == "deliver" and e["id"] == item]

    def deliveries_by_time(self, item: str) -> list[tuple[float, str]]:
        """(time, consumer) of every delivery of ``item``, earliest first."""
        return sorted((e["t"], n) for n in self.consumer_names() for e in self._events(n)
                      if e["ev"] == "deliver" and e["id"] == item)

    def items_delivered_more_than_once(self) -> list[str]:
        seen: dict[str, int] = {}
        for n in self.consumer_names():
            for e in self._events(n):
                if e["ev"] == "deliver":
                    seen[e["id"]] = seen.get(e["id"], 0) + 1
        return sorted(item for item, k in seen.items() if k > 1)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if name not in self.killed and proc.poll() not in (None, 0):
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{tail}")

    # ---------------------------------------------------------------- phases
    def wait_acked(self, n: int) -> None:
        def enough() -> bool:
            self.check_alive()
            return self.count("ack", self.producer_names()) >= n

        wait_for(enough, timeout=DEADLINE, interval=0.1, message=f"producers did not reach {n} acked puts")

    def kill_consumer(self, name: str) -> None:
        """SIGKILL: no ack, no lock release; its session just stops answering."""
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(30)
        self.killed.append(name)

    def fault(self, label: str, action: Callable[[], None]) -> None:
        """Run a fault (inject ... heal), then measure recovery: a probe put after the heal, until delivered."""
        self.faults.append(label)
        action()
        healed = time.time()
        probe = f"{self.scenario}-probe-{len(self._probes)}"
        self._probes.append(probe)
        with QueueBuilder.builder(self.admin, None, StrSerializer(), self.chroot + QUEUE).put_in_background(
            False
        ).build_queue() as q:
            deadline = time.monotonic() + DEADLINE
            while True:
                try:
                    q.put(probe)
                    break
                except Exception:  # noqa: BLE001 - the ensemble may still be settling: retry until the deadline
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        got = wait_for(lambda: self.delivered_ids().get(probe), timeout=DEADLINE, interval=0.05,
                       message=f"the queue did not recover after {label}: probe never delivered")
        self.recoveries.append(got - healed)

    def finish(self, extra_uncertain: int = 0) -> Accounting:
        """Producers finish; consumers drain the queue; everything stops; the journals are accounted."""
        end_of_faults = time.time()

        def producers_done() -> bool:
            self.check_alive()
            return all(self.procs[n].poll() is not None for n in self.producer_names())

        wait_for(producers_done, timeout=DEADLINE, interval=0.2, message="producers did not finish")
        acked = {e["id"] for n in self.producer_names() for e in self._events(n) if e["ev"] == "ack"}
        acked.update(self._probes)

        def drained() -> bool:
            self.check_alive()
            missing = acked - self.delivered_ids().keys()
            return not missing and self.admin.get_children(self.chroot + QUEUE) == []

        try:
            wait_for(drained, timeout=DEADLINE, interval=0.2)
            drain_s: float | None = time.time() - end_of_faults
        except AssertionError:
            drain_s = None  # the accounting below says what is missing
        left = self.admin.get_children(self.chroot + QUEUE)
        stuck = self._holders(left) if drain_s is None else ""
        for name in self.live_consumers():
            self.procs[name].send_signal(signal.SIGTERM)
        for name in self.consumer_names():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.procs[name].wait(60)
        self.check_alive()
        acc = account(
            self.scenario,
            self.mode,
            [read_journal(self._journal(n)) for n in self.producer_names()],
            [read_journal(self._journal(n)) for n in self.consumer_names()],
            killed=self.killed,
            extra_acked=self._probes,
        )
        acc.faults = list(self.faults)
        acc.recovery_s = round(max(self.recoveries), 3) if self.recoveries else None
        acc.drain_s = None if drain_s is None else round(drain_s, 2)
        if drain_s is None:
            acc.assert_ok()
            raise AssertionError(f"{self.scenario}: the queue did not drain; nodes left: {left[:10]}\n{stuck}")
        return acc

    def _holders(self, left: list[str]) -> str:
        """Who holds the items left behind (read while every consumer still runs): lock owner sessions."""
        sessions = {}
        for n in self.consumer_names():
            for e in self._events(n):
                if e.get("sid"):
                    sessions[e["sid"]] = n
        lines = []
        for name in sorted(left)[:10]:
            fences = []
            with contextlib.suppress(Exception):
                for child in self.admin.get_children(f"{self.chroot}{QUEUE}/{name}"):
                    owner = self.admin.exists(f"{self.chroot}{QUEUE}/{name}/{child}").ephemeralOwner
                    fences.append(f"{child} owned by {sessions.get(owner, hex(owner))}")
            lines.append(f"  {name}: fences {fences or 'none'}")
        with contextlib.suppress(Exception):
            for lock in self.admin.get_children(self.chroot + LOCKS)[:10]:
                owner = self.admin.exists(f"{self.chroot}{LOCKS}/{lock}").ephemeralOwner
                lines.append(f"  lock {lock} owned by {sessions.get(owner, hex(owner))}")
        return "\n".join(lines)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        for p in self.proxies:
            p.close()
        with contextlib.suppress(Exception):
            self.admin.stop()
            self.admin.close()

    def __enter__(self) -> "FaultRun":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _EnsembleOnly:
    """What the fault functions use of a run, for scenarios that bring their own processes."""

    def __init__(self, ensemble: ZooKeeperEnsemble) -> None:
        self.ensemble = ensemble


def strike(fault: str, ensemble: ZooKeeperEnsemble) -> None:
    """Run one ensemble fault of :data:`FAULTS` (``leader_kill``, ...) outside a :class:`FaultRun`."""
    FAULTS[fault](_EnsembleOnly(ensemble))


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every process still running, wait up to 30 s each, then SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


# -------------------------------------------------------------------------------------------- the faults
def leader_kill(run: FaultRun) -> None:
    zk = run.ensemble
    i = zk.leader()
    zk.kill(i)
    wait_for(lambda: _serving(zk, exclude=i), timeout=DEADLINE, interval=0.2, message="no new leader")
    zk.start(i, timeout=DEADLINE)
    zk.wait_ready(DEADLINE)


def follower_kill(run: FaultRun) -> None:
    zk = run.ensemble
    i = zk.followers()[0]
    zk.kill(i)
    zk.start(i, timeout=DEADLINE)
    zk.wait_ready(DEADLINE)


def rolling_restart(run: FaultRun) -> None:
    zk = run.ensemble
    for i in range(zk.size):
        zk.restart(i)
        zk.wait_ready(DEADLINE)


def pause_past_session(run: FaultRun) -> None:
    """SIGSTOP the leader for longer than the consumers' session timeout, then SIGCONT it."""
    zk = run.ensemble
    i = zk.leader()
    zk.pause(i)
    time.sleep(CONSUMER_SESSION + 2)  # the outage itself is the fault: it must outlast the session timeout
    zk.resume(i)
    zk.wait_ready(DEADLINE)


def quorum_loss(run: FaultRun) -> None:
    """Two of three nodes die: nobody can write. Then they come back."""
    zk = run.ensemble
    leader = zk.leader()
    others = [i for i in range(zk.size) if i != leader]
    zk.kill(others[0])
    zk.kill(leader)
    time.sleep(CONSUMER_SESSION / 2)  # the outage itself is the fault
    zk.start(leader, wait=False)
    zk.start(others[0], wait=False)
    zk.wait_ready(DEADLINE)


def proxy_cut(run: FaultRun) -> None:
    """Cut c0 off (its proxies stall) past its session timeout; the server expires its session."""
    lost_before = run.count("lost", ["c0"])
    for p in run.proxies:
        p.stall()
    # The cut itself is the fault: it must outlast the session timeout, which the server enforces within a tick or
    # two of it (the wait below checks that the session did expire).
    time.sleep(CUT_SESSION + 1.5)
    for p in run.proxies:
        p.drop()  # the stalled sockets are dead: the client reconnects through fresh ones
        p.heal()
    wait_for(lambda: run.count("lost", ["c0"]) > lost_before, timeout=DEADLINE, interval=0.1,
             message="c0's session did not expire during the cut")


def consumer_kill(run: FaultRun, replace: bool = False) -> None:
    """SIGKILL a live consumer (not c0) while it is inside consume_message."""
    victims = [n for n in run.live_consumers() if n != "c0"]
    name = random.choice(victims)
    (run.workdir / f"hold-{name}").touch()  # its next item blocks inside consume_message
    wait_for(lambda: run.count("holding", [name]) > 0, timeout=DEADLINE, interval=0.05,
             message=f"{name} never got an item to hold")
    run.kill_consumer(name)
    held = [e["id"] for e in run._events(name) if e["ev"] == "holding"]
    run.held_when_killed.extend(held)
    if replace:
        run.start_consumer()


def _serving(zk: ZooKeeperEnsemble, exclude: int) -> bool:
    modes = [zk.mode(j) for j in range(zk.size) if j != exclude]
    return "leader" in modes


FAULTS: dict[str, Callable[[FaultRun], None]] = {
    "leader_kill": leader_kill,
    "follower_kill": follower_kill,
    "rolling_restart": rolling_restart,
    "pause_past_session": pause_past_session,
    "consumer_kill": consumer_kill,
    "proxy_cut": proxy_cut,
    "quorum_loss": quorum_loss,
}
