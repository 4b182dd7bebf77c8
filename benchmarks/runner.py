"""Command line and run plan of the benchmark harness.

    python -m benchmarks [--quick | --deep] [--repeats N] [--count N] [--size S] [--connect HOSTS]
                         [--only put_bg,consume_plain] [--impls zkqueue,curator,kazoo] [--no-spark]
                         [--large-count N] [--large-mib M] [--no-large]
                         [--no-progress] [--progress-count N] [--no-aio] [--aio-adds N] [--aio-jobs N]
                         [--no-jobs-live] [--jobs-live-count N] [--jobs-live-cpu-count N]
                         [--no-celery-brokers] [--celery-brokers-count N]
                         [--no-scheduled] [--scheduled-depth N] [--scheduled-seconds S] [--scheduled-flat-depth N]

Starts an embedded 3-node ZooKeeper ensemble (unless ``--connect``), then for each repeat runs every workload on
every implementation that has the feature, interleaved (the implementation order rotates per repeat), each run at a
fresh queue path. Writes ``benchmarks/results/<timestamp>.json`` and ``latest.json``, a PNG chart next to them,
and prints the table. ``--quick`` is a small CI smoke version (under 2 minutes on 2 cores); ``--deep`` adds the
deep-queue drains (200k and 1M pending; long). The large-items row (default 8 x 10 MiB per run; quick 2 x 3 MiB)
measures MB/s against bare kazoo writing, reading and deleting the same bytes as 900 KB nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks import machine, report
from benchmarks.peers import IMPLS, Impl, Unsupported
from benchmarks.prefill import prefill, wipe
from benchmarks.workloads import MiB, Settings, Workload, run_spark, workloads

log = logging.getLogger("zkqueue.benchmarks.runner")

RESULTS_DIR = Path(__file__).with_name("results")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small CI smoke run (< 2 min on 2 cores)")
    mode.add_argument("--deep", action="store_true", help="also drain deep queues (200k and 1M pending)")
    p.add_argument("--deep-counts", default="200000,1000000",
                   help="pending items of the deep drains (with --deep), comma separated")
    p.add_argument("--repeats", type=int, help="runs per workload and implementation (default 3; quick 1)")
    p.add_argument("--count", type=int, help="items per throughput run (default 10000; quick 300)")
    p.add_argument("--size", type=int, default=100, help="payload bytes per item (default 100)")
    p.add_argument("--max-seconds", type=float, help="cap per run (default 20; quick 6)")
    p.add_argument("--latency-rate", type=float,
                   help="offered items/s for the latency workload (default: 50%% of zkqueue's max rate)")
    p.add_argument("--latency-seconds", type=float, help="producer duration of the latency workload")
    p.add_argument("--connect", help="use this ZooKeeper instead of starting an embedded 3-node ensemble")
    p.add_argument("--servers", type=int, default=3, help="embedded ensemble size (default 3)")
    p.add_argument("--force-sync", action="store_true", help="embedded servers fsync their log (default off)")
    p.add_argument("--only", help="comma-separated workload names (see --list)")
    p.add_argument("--impls", default="zkqueue,curator,kazoo", help="comma-separated implementations")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark rows")
    p.add_argument("--no-jobs", action="store_true", help="skip the jobs workload (zkqueue against RQ and Celery)")
    p.add_argument("--jobs-count", type=int, help="jobs per run of the jobs workload (default 2000; quick 200)")
    p.add_argument("--no-flows", action="store_true", help="skip the flows row (flow jobs/s, 3-step linear flow)")
    p.add_argument("--flows-count", type=int, help="flow jobs per run of the flows row (default 500; quick 100)")
    p.add_argument("--no-canvas", action="store_true", help="skip the canvas row (chords of 100 members/s)")
    p.add_argument("--canvas-count", type=int, help="chords per run of the canvas row (default 30; quick 10)")
    p.add_argument("--no-aio", action="store_true",
                   help="skip the aio rows (zkqueue.aio against arq and SAQ: async adds/s, I/O-bound jobs/s)")
    p.add_argument("--aio-adds", type=int, help="adds per run of the aio add row (default 10000; quick 1000)")
    p.add_argument("--aio-jobs", type=int, help="jobs per run of the aio end-to-end row (default 5000; quick 500)")
    p.add_argument("--no-jobs-live", action="store_true",
                   help="skip the jobs_live rows (jobs added while the worker works: zkqueue's JobQueue and task "
                        "paths against BullMQ 6.7.0, thread against process pool)")
    p.add_argument("--jobs-live-count", type=int,
                   help="jobs per run of the jobs_live rows (default 5000, in chunks of 1000; quick 300, in chunks "
                        "of 100)")
    p.add_argument("--jobs-live-cpu-count", type=int,
                   help="20 ms CPU-bound jobs per run of the jobs_live pool rows (default 400; quick 40)")
    p.add_argument("--no-celery-brokers", action="store_true",
                   help="skip the celery_brokers rows (Celery on zkqueue://, Redis and kombu's zookeeper://: end-to-end "
                        "tasks/s, and a SIGKILLed acks_late worker: tasks lost and run twice)")
    p.add_argument("--celery-brokers-count", type=int,
                   help="tasks per run of the celery_brokers rows, both scenarios (default 2000; quick 200)")
    p.add_argument("--no-progress", action="store_true", help="skip the ordered consumer row (zkqueue.progress)")
    p.add_argument("--progress-count", type=int, help="jobs per run of the progress row (default 5000; quick 500)")
    p.add_argument("--no-scheduled", action="store_true",
                   help="skip the scheduled row (delay queue: 50/s trickle over 1M parked items, against Redis)")
    p.add_argument("--scheduled-depth", type=int,
                   help="parked items of the scheduled row (default 1000000; quick 10000)")
    p.add_argument("--scheduled-seconds", type=float, help="trickle seconds of the scheduled row (default 20; quick 3)")
    p.add_argument("--scheduled-flat-depth", type=int,
                   help="items of the scheduled row's flat-layout run, park_after=None (default 100000; quick 0: "
                        "skipped); 0 skips it")
    p.add_argument("--large-count", type=int, help="items per run of the large-items workload (default 8; quick 2)")
    p.add_argument("--large-mib", type=float, help="MiB per large item (default 10; quick 3)")
    p.add_argument("--no-large", action="store_true", help="skip the large-items workload")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up round (default in --quick)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> tuple[Settings, int]:
    s = Settings(size=args.size)
    repeats = 3
    if args.quick:
        s.count, s.max_seconds, s.latency_seconds, s.latency_drain = 300, 6.0, 1.5, 5.0
        s.large_count, s.large_size = 2, 3 * MiB
        repeats = 1
    if args.deep:
        s.deep_counts = tuple(int(x) for x in args.deep_counts.split(",") if x.strip())
    if args.count:
        s.count = args.count
    if args.max_seconds:
        s.max_seconds = args.max_seconds
    if args.latency_seconds:
        s.latency_seconds = args.latency_seconds
    if args.large_count:
        s.large_count = args.large_count
    if args.large_mib:
        s.large_size = int(args.large_mib * MiB)
    s.latency_rate = args.latency_rate
    return s, args.repeats or repeats


@contextlib.contextmanager
def ensemble(args: argparse.Namespace, deep_max: int, large: bool = False) -> Iterator[str]:
    if args.connect:
        yield args.connect
        return
    from zkqueue.server.embedded import ZooKeeperEnsemble  # noqa: PLC0415

    # Large items: every server keeps its last 500 committed requests in memory (zookeeper.commitLogCount, which
    # cannot be set lower), and here most of them carry about 1 MB.
    heap = 512 if deep_max < 300_000 and not large else 2048
    with ZooKeeperEnsemble(size=args.servers, force_sync=args.force_sync, heap_mb=heap) as zk:
        yield zk.connect_string


def _latency_rate(results: dict[str, dict[str, Any]]) -> float | None:
    """50% of zkqueue's max end-to-end rate: the slower of its background put and plain consume medians."""
    rates = []
    for name in ("put_bg", "consume_plain"):
        runs = results.get(name, {}).get("impls", {}).get("zkqueue", {}).get("runs", [])
        if runs:
            rates.append(sorted(r["rate"] for r in runs)[len(runs) // 2])
    return round(0.5 * min(rates), 0) if rates else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    s, repeats = settings_from(args)
    if args.quick:
        args.no_warmup = True
    plan: list[Workload] = workloads(s)
    if args.list:
        for w in plan:
            print(f"{w.name:16} {w.label}  [{', '.join(w.impls)}]  target {w.target.text}")
        return 0
    if args.only:
        wanted = {x.strip() for x in args.only.split(",")} - {"jobs", "progress", "flows", "canvas", "scheduled", "aio",
                                                                    "jobs_live", "celery_brokers"}
        unknown = wanted - {w.name for w in plan}
        if unknown:
            raise SystemExit(f"unknown workload(s): {', '.join(sorted(unknown))} (see --list)")
        plan = [w for w in plan if w.name in wanted]
    if args.no_large:
        plan = [w for w in plan if w.kind != "large"]
    impl_names = [x.strip() for x in args.impls.split(",") if x.strip()]
    for name in impl_names:
        if name not in IMPLS:
            raise SystemExit(f"unknown implementation {name!r} (zkqueue, curator, kazoo)")
    mode = "quick" if args.quick else ("deep" if args.deep else "full")
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    started = time.time()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    results: dict[str, dict[str, Any]] = {
        w.name: {"name": w.name, "label": w.label, "kind": w.kind,
                 "target": {"text": w.target.text, "kind": w.target.kind, "value": w.target.value},
                 "count": w.params.get("pending") or w.count(s), "impls": {}}
        for w in plan
    }
    spark_rows: list[dict[str, Any]] = []
    jobs: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    jobs_on = not args.no_jobs and (not args.only or "jobs" in {x.strip() for x in args.only.split(",")})
    progress_on = not args.no_progress and (not args.only or "progress" in {x.strip() for x in args.only.split(",")})
    progress_row: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    aio: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    aio_on = not args.no_aio and (not args.only or "aio" in {x.strip() for x in args.only.split(",")})
    live: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    live_on = not args.no_jobs_live and (not args.only or "jobs_live" in {x.strip() for x in args.only.split(",")})
    celery_brokers: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    celery_on = not args.no_celery_brokers and (not args.only
                                                or "celery_brokers" in {x.strip() for x in args.only.split(",")})
    flows: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    flows_on = not args.no_flows and (not args.only or "flows" in {x.strip() for x in args.only.split(",")})
    canvas: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    canvas_on = not args.no_canvas and (not args.only or "canvas" in {x.strip() for x in args.only.split(",")})
    scheduled: dict[str, Any] = {"status": "n/a", "reason": "not run"}
    scheduled_on = not args.no_scheduled and (not args.only or "scheduled" in {x.strip() for x in args.only.split(",")})
    sched = scheduled_settings(args)
    ctx: dict[str, Any] = {"seq": 0, "latency_rate": s.latency_rate}
    deep_max = max([*s.deep_counts, sched.depth if scheduled_on else 0])
    with ensemble(args, deep_max, any(w.kind == "large" for w in plan)) as connect:
        describe = machine.describe(servers=None if args.connect else args.servers, force_sync=args.force_sync,
                                    connect=args.connect)
        impls: dict[str, Impl] = {n: IMPLS[n](connect, s.size) for n in impl_names}
        client = KazooClient(hosts=connect, timeout=15.0)
        client.start(timeout=60)
        root = f"/zkq-bench-{uuid.uuid4().hex[:8]}"
        client.ensure_path(root)
        # Interleaved: every repeat runs every workload on every implementation (order rotating per repeat).
        # Latency comes after the throughput repeats (its offered rate is 50% of zkqueue's median max rate), and
        # the long deep drains last.
        def rounds(ws: list[Workload], n_rounds: int) -> list[tuple[int, Workload, str]]:
            return [(r, w, n) for r in range(n_rounds) for w in ws
                    for n in _rotate([n for n in impl_names if n in w.impls], r)]

        steps = rounds([w for w in plan if w.kind not in ("latency", "deep")], repeats)
        steps += rounds([w for w in plan if w.kind == "latency"], repeats)
        steps += rounds([w for w in plan if w.kind == "deep"], 1)
        spark_on = not args.no_spark
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=False) as progress:
                task = progress.add_task("benchmarks", total=len(steps) + (1 if spark_on else 0) + (1 if jobs_on else 0)
                                         + (1 if flows_on else 0) + (1 if canvas_on else 0)
                                         + (1 if scheduled_on else 0) + (1 if aio_on else 0)
                                         + (1 if live_on else 0) + (1 if celery_on else 0))
                if not args.no_warmup:
                    progress.update(task, description="warming up the servers and the JVM")
                    _warm_up(client, root, impls, s)
                for r, w, name in steps:
                    progress.update(task, description=f"[{r + 1}/{repeats}] {w.name:15} {name:8}")
                    entry = results[w.name]["impls"].setdefault(name, {"runs": []})
                    if w.kind == "latency" and ctx["latency_rate"] is None:
                        ctx["latency_rate"] = _latency_rate(results) or 1000.0
                    ctx["seq"] += 1
                    try:
                        run = w.run(impls[name], client, root, s, ctx)
                        entry["runs"].append(run.as_dict())
                    except Unsupported as exc:
                        entry["na"] = str(exc)
                    except Exception as exc:  # noqa: BLE001 - recorded in the report, the rest goes on
                        log.warning("%s on %s failed: %r", w.name, name, exc)
                        entry.setdefault("errors", []).append(repr(exc)[:500])
                        entry["error"] = True
                        log.debug("%s", traceback.format_exc())
                    progress.advance(task)
                if jobs_on:
                    progress.update(task, description="jobs: zkqueue, RQ, Celery")
                    from benchmarks.jobs_peers import run_section  # noqa: PLC0415

                    jobs = run_section(connect, args.jobs_count or (200 if args.quick else 2000), repeats,
                                       s.max_seconds * 3)
                    progress.advance(task)
                if flows_on:
                    progress.update(task, description="flows: 3-step linear flow")
                    from benchmarks.flows_bench import run_section as run_flows  # noqa: PLC0415

                    flows = run_flows(connect, args.flows_count or (100 if args.quick else 500), repeats,
                                      s.max_seconds * 3)
                    progress.advance(task)
                if canvas_on:
                    progress.update(task, description="canvas: chords of 100 members")
                    from benchmarks.canvas_bench import run_section as run_canvas  # noqa: PLC0415

                    canvas = run_canvas(connect, args.canvas_count or (10 if args.quick else 30), repeats,
                                        s.max_seconds * 3)
                    progress.advance(task)
                if aio_on:
                    progress.update(task, description="aio: zkqueue.aio, arq, SAQ")
                    from benchmarks.aio_peers import AioSettings, run_section as run_aio  # noqa: PLC0415

                    aio_settings = AioSettings(repeats=repeats)
                    if args.quick:
                        aio_settings.adds, aio_settings.jobs = 1000, 500
                    aio_settings.adds = args.aio_adds or aio_settings.adds
                    aio_settings.jobs = args.aio_jobs or aio_settings.jobs
                    aio = _section_or_na("aio rows", lambda: run_aio(connect, aio_settings))
                    progress.advance(task)
                if live_on:
                    progress.update(task, description="jobs_live: zkqueue raw and task paths, BullMQ, pools")
                    from benchmarks.jobs_live import LiveSettings, run_section as run_live  # noqa: PLC0415

                    live_settings = LiveSettings(repeats=repeats)
                    if args.quick:
                        live_settings.jobs, live_settings.chunk, live_settings.cpu_jobs = 300, 100, 40
                    live_settings.jobs = args.jobs_live_count or live_settings.jobs
                    live_settings.cpu_jobs = args.jobs_live_cpu_count or live_settings.cpu_jobs
                    live = _section_or_na("jobs_live rows", lambda: run_live(connect, live_settings))
                    progress.advance(task)
                if celery_on:
                    progress.update(task, description="celery_brokers: Celery on zkqueue, Redis, kombu zookeeper")
                    from benchmarks.celery_brokers import CeleryBrokerSettings  # noqa: PLC0415
                    from benchmarks.celery_brokers import run_section as run_celery_brokers  # noqa: PLC0415

                    cb_settings = CeleryBrokerSettings.quick() if args.quick else CeleryBrokerSettings()
                    cb_settings.repeats = repeats
                    cb_settings.count = args.celery_brokers_count or cb_settings.count
                    celery_brokers = _section_or_na("celery_brokers rows",
                                                    lambda: run_celery_brokers(connect, settings=cb_settings))
                    progress.advance(task)
                if progress_on:  # (not counted in the bar's total)
                    progress.update(task, description="progress: ordered consumer")
                    from benchmarks.progress_probe import run_section as run_progress  # noqa: PLC0415

                    progress_row = run_progress(connect, args.progress_count or (500 if args.quick else 5000), repeats)
                if spark_on:
                    progress.update(task, description="spark probe")
                    spark = run_spark(connect, args.quick)
                    spark_rows = _spark_rows(spark)
                    progress.advance(task)
                # Last: its backlog of up to 1M nodes is left to the embedded ensemble (thrown away whole).
                if scheduled_on:
                    progress.update(task, description=f"scheduled: 50/s trickle over {sched.depth:,} parked")
                    from benchmarks.scheduled_bench import run_section as run_scheduled  # noqa: PLC0415

                    scheduled = _section_or_na(
                        "scheduled row", lambda: run_scheduled(connect, sched, cleanup=bool(args.connect)))
                    progress.advance(task)
        finally:
            if args.connect:  # an embedded ensemble is thrown away whole
                with contextlib.suppress(Exception):
                    wipe(client, root)
            client.stop()
            client.close()
    base = (results.get("consume_plain", {}).get("impls", {}).get("zkqueue", {}) or {}).get("runs")
    for res in results.values():
        if res["kind"] == "deep" and base:
            res["baseline_rate"] = sorted(r["rate"] for r in base)[len(base) // 2]
        report.evaluate(res)
    ceiling, put_bg = results.get("put_bg_ceiling"), results.get("put_bg")
    if ceiling and put_bg:
        top = ceiling["impls"].get("curator", {}).get("summary", {}).get("median")
        ours = put_bg["impls"].get("zkqueue", {}).get("summary", {}).get("median")
        if top and ours:
            ceiling["zkqueue_share"] = round(ours / top, 2)
    out = {
        "version": 1,
        "mode": mode,
        "started": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
        "duration_s": round(time.time() - started, 1),
        "command": "python -m benchmarks " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "machine": describe,
        "settings": {"count": s.count, "size": s.size, "repeats": repeats, "max_seconds": s.max_seconds,
                     "latency_seconds": s.latency_seconds, "deep_counts": list(s.deep_counts),
                     "large_count": s.large_count, "large_size": s.large_size},
        "latency_rate": ctx["latency_rate"],
        "impls": impl_names,
        "workloads": list(results.values()),
        "spark": spark_rows,
        "jobs": jobs,
        "progress": progress_row,
        "flows": flows,
        "canvas": canvas,
        "aio": aio,
        "jobs_live": live,
        "celery_brokers": celery_brokers,
        "scheduled": scheduled,
        "notes": [
            "Throughput runs are capped at max_seconds; a '(partial)' implementation reports the rate it reached.",
            "put_bg uses 2x count items and put_multi 10x count items (100 per znode).",
            "Consumers run as separate processes and sessions; consume timing runs from GO to the last delivery.",
            "large_items: MB/s (10^6 bytes) = payload / (put time + consume time); zkqueue's consume time runs "
            "until the last item was checked and deleted with its chunks; the ratio is against bare kazoo "
            "(900 KB nodes, 4 requests in flight: writes, then reads and deletes); rss_mb_max is the consumer "
            "process's peak RSS.",
        ],
    }
    path = report.write_json(out, args.out, stamp)
    png = report.write_png(out, args.out / f"{stamp}.png")
    if png is not None:
        (args.out / "latest.png").write_bytes(png.read_bytes())
    report.print_table(out, console)
    console.print(f"JSON: {path}   chart: {png or 'not written (nothing to draw, or matplotlib missing)'}   "
                  f"took {out['duration_s']:.0f} s")
    return 0


def _section_or_na(what: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``, or an "n/a" section with the reason when it fails: reported in the table, the rest goes on."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001
        log.warning("%s failed: %r", what, exc)
        return {"status": "n/a", "reason": repr(exc)[:300]}


def scheduled_settings(args: argparse.Namespace) -> Any:
    """The scheduled row's sizes: 1M parked, 20 s trickle, a 100k flat-layout run (quick: 10k, 3 s, no flat run)."""
    from benchmarks.scheduled_bench import ScheduledSettings  # noqa: PLC0415

    s = ScheduledSettings(size=args.size)
    if args.quick:
        s.depth, s.trickle_seconds, s.flat_depth, s.drain = 10_000, 3.0, 0, 15.0
    if args.scheduled_depth is not None:
        s.depth = args.scheduled_depth
    if args.scheduled_seconds is not None:
        s.trickle_seconds = args.scheduled_seconds
    if args.scheduled_flat_depth is not None:
        s.flat_depth = args.scheduled_flat_depth
    return s


def _warm_up(client: KazooClient, root: str, impls: dict[str, Impl], s: Settings) -> None:
    """Untimed: write, read and delete a few thousand nodes through each implementation, so the first measured
    run does not pay for cold ZooKeeper JVMs (their JIT) and cold caches. Failures here are only logged."""
    path = f"{root}/warmup"
    for name, impl in impls.items():
        try:
            impl.put(f"{path}/{name}-bg", min(s.count, 3000), 1, name != "kazoo", 0, 30.0)
            prefill(client, f"{path}/{name}-q", min(s.count, 3000), impl.payload, style=impl.style)
            impl.consume(f"{path}/{name}-q", min(s.count, 3000), 1, None, 30.0, client)
        except Exception as exc:  # noqa: BLE001 - a warm-up never stops the run
            log.warning("warm-up of %s failed: %r", name, exc)
    wipe(client, path)


def _rotate(names: list[str], r: int) -> list[str]:
    if not names:
        return names
    k = r % len(names)
    return names[k:] + names[:k]


def _spark_rows(spark: dict[str, Any]) -> list[dict[str, Any]]:
    if spark.get("status") != "ok":
        reason = spark.get("reason", "not run")
        return [{"label": "Spark sink rows/s", "value": "n/a", "reason": reason},
                {"label": "Spark executor consumers items/s", "value": "n/a", "reason": reason}]
    res = spark["result"]
    rows = []
    for key, label in (("sink_rows_per_s", "Spark sink rows/s"),
                       ("consume_cold_items_per_s", "Spark executor consumers items/s (lock-safe), first job"),
                       ("consume_items_per_s", "Spark executor consumers items/s (lock-safe), next job")):
        v = res.get(key)
        rows.append({"label": label, "value": f"{v:,.0f}" if isinstance(v, (int, float)) else "n/a",
                     "raw": res})
    v, share = res.get("stream_rows_per_s"), res.get("stream_of_sink")
    if isinstance(v, (int, float)) and isinstance(share, (int, float)):
        verdict = "pass" if share >= 0.5 else "MISS"
        rows.append({"label": f"Spark streaming source rows/s (AvailableNow): {share:.2f} of the sink, target >= 0.5 "
                              f"{verdict}", "value": f"{v:,.0f}", "raw": res})
    return rows
