"""Medians and spread, the terminal table, the JSON file and the PNG chart."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

IMPL_LABELS = {"zkqueue": "zkqueue", "curator": "Curator 5.9.0", "kazoo": "kazoo 2.11"}


def _paired_notes(name: str, section: dict[str, Any], ours: str, theirs: Callable[[dict[str, Any]], str]) -> list[str]:
    """The lines of a row run beside BullMQ's FlowProducer (``section`` has ``status`` "ok"): ``ours`` (what ran
    and its median) with the runs' state, then BullMQ's line, ``theirs(peer)``, with the ratio, or why it is n/a."""
    runs = section.get("runs", [])
    state = "complete" if runs and all(r.get("complete") for r in runs) else "INCOMPLETE"
    out = [f"{name}: {ours} (median of {section['repeats']}, {state})"]
    peer = section.get("bullmq") or {}
    if peer.get("median") is not None:
        out.append(f"{name}: BullMQ {peer['runs'][0].get('version') or ''} FlowProducer, {theirs(peer)}; "
                   f"zkqueue / BullMQ = {section.get('ratio')}")
    elif peer:
        out.append(f"{name}: BullMQ FlowProducer: n/a ({peer.get('reason', '')})")
    return out


def flows_notes(report: dict[str, Any]) -> list[str]:
    """The flows row's lines: flow jobs/s through the 3-step linear flow beside BullMQ's FlowProducer, same chain."""
    flows = report.get("flows") or {}
    if flows.get("status") != "ok":
        return []
    return _paired_notes("flows", flows, f"{flows['count']} flow jobs through a {flows['steps']}-step linear flow, "
                         f"one worker process: {flows['median']:.1f} flow jobs/s",
                         lambda peer: f"same chain, same run: {peer['median']:.1f} flows/s")


def canvas_notes(report: dict[str, Any]) -> list[str]:
    """The canvas row's lines: completed chords/s (chords of 100 members) beside BullMQ's parent with 100 children."""
    canvas = report.get("canvas") or {}
    if canvas.get("status") != "ok":
        return [f"canvas: n/a ({canvas['reason']})"] if canvas.get("reason") not in (None, "not run") else []
    return _paired_notes("canvas", canvas, f"{canvas['count']} chords of {canvas['members']} members, one worker "
                         f"process: {canvas['median']:.2f} chords/s",
                         lambda peer: f"a parent with {canvas['members']} children, same run: "
                         f"{peer['median']:.2f} flows/s")


def summarize(runs: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Median, min, max and half-range spread (% of the median) of ``metric`` over the runs that have it."""
    values = [float(r[metric]) for r in runs if r.get(metric) is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "spread_pct": None, "n": 0}
    med = statistics.median(values)
    spread = (max(values) - min(values)) / 2 / med * 100 if med else 0.0
    return {"median": round(med, 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "spread_pct": round(spread, 1), "n": len(values)}


def evaluate(result: dict[str, Any]) -> None:
    """Fill ``summary``, ``ratio`` and ``pass`` of one workload result (in place)."""
    kind = result["target"]["kind"]
    metric = {"latency": "p99_ms", "large": "mb_s"}.get(result["kind"], "rate")
    for impl in result["impls"].values():
        if impl.get("runs"):
            impl["summary"] = summarize(impl["runs"], metric)
            impl["partial"] = not all(r.get("complete", True) for r in impl["runs"])
            if result["kind"] == "latency":
                impl["p50_ms"] = summarize(impl["runs"], "p50_ms")["median"]
                impl["rate_offered"] = summarize(impl["runs"], "offered_rate")["median"]
            if any("rss_mb_max" in r for r in impl["runs"]):
                impl["rss_mb_max"] = max(r.get("rss_mb_max") or 0 for r in impl["runs"])
            if result["kind"] == "large":
                impl["put_mb_s"] = summarize(impl["runs"], "put_mb_s")["median"]
                impl["consume_mb_s"] = summarize(impl["runs"], "consume_mb_s")["median"]
    z = result["impls"].get("zkqueue", {}).get("summary", {}).get("median")
    c = result["impls"].get("curator", {}).get("summary", {}).get("median")
    result["ratio"] = None
    result["pass"] = None
    if kind == "ratio" and z and c:
        result["ratio"] = round(z / c, 2)
        result["pass"] = result["ratio"] >= result["target"]["value"]
    elif kind == "bare":  # zkqueue against bare kazoo moving the same bytes
        k = result["impls"].get("kazoo", {}).get("summary", {}).get("median")
        if z and k:
            result["ratio"] = round(z / k, 2)
            result["pass"] = result["ratio"] >= result["target"]["value"] and not result["impls"]["zkqueue"].get(
                "partial")
    elif kind == "latency" and z is not None and c is not None:
        result["ratio"] = round(c / z, 2) if z else None  # how many times lower zkqueue's p99 is
        result["pass"] = z <= c and not result["impls"]["zkqueue"].get("partial")
    elif kind == "deep":
        zk = result["impls"].get("zkqueue", {})
        base = result.get("baseline_rate")
        if zk.get("runs") and base:
            result["ratio"] = round((z or 0) / base, 2)
            result["pass"] = (not zk.get("partial")) and (z or 0) >= result["target"]["value"] * base
        if z and c:
            result["ratio_to_curator"] = round(z / c, 2)


def _fmt_rate(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:,.1f}"


def _cell(impl: dict[str, Any] | None, latency: bool, large: bool = False) -> str:
    if impl is None:
        return "-"
    if impl.get("na"):
        return "n/a"
    if impl.get("error"):
        return "error"
    s = impl.get("summary") or {}
    if s.get("median") is None:
        return "-"
    if latency:
        text = f"{impl.get('p50_ms', 0):.1f} / {s['median']:.1f} ms"
    elif large:
        text = f"{_fmt_rate(s['median'])} MB/s"
        if impl.get("rss_mb_max"):
            text += f", RSS {impl['rss_mb_max']:.0f} MB"
    else:
        text = _fmt_rate(s["median"])
    if s.get("n", 0) > 1:
        text += f" ±{s['spread_pct']:.0f}%"
    if impl.get("partial"):
        text += " (partial)"
    return text


def table(report: dict[str, Any]) -> Table:
    t = Table(title=f"zkqueue benchmarks ({report['mode']} mode, items/s, median of {report['settings']['repeats']})")
    t.add_column("workload")
    for impl in report["impls"]:
        t.add_column(IMPL_LABELS.get(impl, impl), justify="right")
    t.add_column("zkqueue / Curator", justify="right")
    t.add_column("target", justify="right")
    t.add_column("pass", justify="center")
    for w in report["workloads"]:
        latency = w["kind"] == "latency"
        label = w["label"] + (" (p50 / p99)" if latency else "")
        cells = [_cell(w["impls"].get(i), latency, w["kind"] == "large") for i in report["impls"]]
        ratio = w.get("ratio")
        if w["kind"] == "deep":
            ratio_text = "-" if w.get("ratio_to_curator") is None else f"{w['ratio_to_curator']:.1f}x"
            if ratio is not None:
                ratio_text += f" ({ratio:.2f} of 10k rate)"
        elif latency and ratio is not None:
            ratio_text = f"{ratio:.1f}x lower p99"
        elif w["target"]["kind"] == "bare":
            ratio_text = "-" if ratio is None else f"{ratio:.2f}x of bare kazoo"
        elif w["kind"] == "ceiling":
            share = w.get("zkqueue_share")
            ratio_text = "-" if share is None else f"zkqueue put bg = {share:.2f} of it"
        else:
            ratio_text = "-" if ratio is None else f"{ratio:.1f}x"
        verdict = {True: "[green]pass[/]", False: "[red]MISS[/]", None: "-"}[w.get("pass")]
        t.add_row(label, *cells, ratio_text, w["target"]["text"], verdict)
    for row in report.get("spark", []):
        first = row.get("value", "n/a")
        t.add_row(row["label"] + ("" if first != "n/a" else f" ({row.get('reason', '')})"), first,
                  *["n/a"] * (len(report["impls"]) - 1), "-", "(none)", "-")
    return t


def large_table(report: dict[str, Any]) -> Table | None:
    """The large-items workload in detail: put and consume MB/s apart, and the consumer process's peak RSS."""
    rows = [w for w in report["workloads"] if w["kind"] == "large"
            and any(i.get("summary") for i in w["impls"].values())]
    if not rows:
        return None
    settings = report["settings"]
    t = Table(title=f"large items: {settings.get('large_count')} x {settings.get('large_size', 0) / 2**20:g} MiB "
                    f"per run (MB/s = 10^6 bytes/s, median of {settings['repeats']})")
    for col in ("implementation", "how", "put MB/s", "consume MB/s", "total MB/s", "consumer peak RSS"):
        t.add_column(col, justify="left" if col in ("implementation", "how") else "right")
    for w in rows:
        for name, impl in w["impls"].items():
            if not impl.get("summary"):
                continue
            first = impl["runs"][0]
            if name == "kazoo":
                how = (f"bare: {first.get('nodes')} nodes of {first.get('node_bytes', 0) // 1000} KB, "
                       f"{first.get('window')} in flight")
            else:
                how = (f"lock-safe, 1 consumer process, {first.get('chunks_per_item', '?')} chunks/item, "
                       f"{first.get('compression', '?')}")
            rss = impl.get("rss_mb_max")
            total = _fmt_rate(impl["summary"]["median"]) + (" (partial)" if impl.get("partial") else "")
            t.add_row(IMPL_LABELS.get(name, name), how, _fmt_rate(impl.get("put_mb_s")),
                      _fmt_rate(impl.get("consume_mb_s")), total, f"{rss:.0f} MB" if rss else "-")
    return t


def jobs_table(report: dict[str, Any]) -> Table | None:
    """The jobs workload: zkqueue against RQ and Celery (one worker process, results stored)."""
    jobs = report.get("jobs") or {}
    if jobs.get("status") != "ok":
        return None
    t = Table(title=f"jobs: add {jobs['count']} jobs, one worker process stores each result (jobs/s, median of "
                    f"{jobs['repeats']})")
    for col in ("zkqueue", "RQ", "Celery", "zkqueue / RQ", "zkqueue / Celery", "target", "pass"):
        t.add_column(col, justify="right")
    cells = []
    for name in ("zkqueue", "rq", "celery"):
        rates = [r["rate"] for r in jobs["runs"].get(name, [])]
        if name in jobs.get("na", {}):
            cells.append("n/a")
        elif rates:
            med = sorted(rates)[len(rates) // 2]
            spread = (max(rates) - min(rates)) / 2 / med * 100 if med else 0
            cells.append(_fmt_rate(med) + (f" ±{spread:.0f}%" if len(rates) > 1 else ""))
        else:
            cells.append("-")
    ratios = [f"{jobs['ratios'][n]:.1f}x" if n in jobs.get("ratios", {}) else "-" for n in ("rq", "celery")]
    verdict = "[green]pass[/]" if jobs.get("pass") else ("[red]MISS[/]" if len(jobs.get("ratios", {})) == 2 else "-")
    t.add_row(*cells, *ratios, jobs.get("target", ""), verdict)
    return t


AIO_ROWS = (("add", "async adds/s from one event loop ({adds:,} adds, {in_flight} in flight)"),
            ("e2e", "I/O-bound jobs/s end to end ({jobs:,} jobs of sleep({sleep_s:g}), concurrency {concurrency}, "
                    "worker process)"))


def _rate_cell(runs: list[dict[str, Any]], na: str | None) -> str:
    """Median and half-range spread of ``rate``; "n/a", "error" or "(partial)" as the runs say."""
    if na:
        return "n/a"
    rates = [r["rate"] for r in runs if not r.get("error")]
    if not rates:
        return "error" if runs else "-"
    med = sorted(rates)[len(rates) // 2]
    text = _fmt_rate(med) + (f" ±{(max(rates) - min(rates)) / 2 / med * 100:.0f}%" if len(rates) > 1 and med else "")
    return text + ("" if all(r.get("complete") for r in runs) else " (partial)")


def aio_table(report: dict[str, Any]) -> Table | None:
    """The aio rows (issue 21): zkqueue.aio against arq and SAQ, and zkqueue / max(arq, SAQ)."""
    sec = report.get("aio") or {}
    if sec.get("status") != "ok":
        return None
    st = sec["settings"]
    versions = sec.get("versions", {})
    t = Table(title=f"aio: zkqueue.aio against arq {versions.get('arq', '?')} and SAQ {versions.get('saq', '?')} on a "
                    f"local redis-server (median of {st['repeats']})")
    for col in ("row", "zkqueue", "arq", "SAQ", "zkqueue / max(arq, SAQ)", "target", "pass"):
        t.add_column(col, justify="left" if col == "row" else "right")
    for key, label in AIO_ROWS:
        runs = sec["runs"].get(key, {})
        cells = [_rate_cell(runs.get(n, []), sec.get("na", {}).get(n)) for n in ("zkqueue", "arq", "saq")]
        ratio = sec.get("ratios", {}).get(key)
        verdict = {True: "[green]pass[/]", False: "[red]MISS[/]", None: "-"}[sec.get("pass", {}).get(key)]
        t.add_row(label.format(**st), *cells, "-" if ratio is None else f"{ratio:.2f}x", sec.get("target", ""),
                  verdict)
    return t


LIVE_ROWS = (("raw", "zkqueue raw path: JobQueue.add_all per chunk, a JobQueue.work(concurrency={concurrency}) "
                    "process"),
             ("bullmq", "BullMQ {bullmq}: Queue.addBulk per chunk, a Worker(concurrency={concurrency}) process, "
                        "redis-server AOF everysec"),
             ("task", "zkqueue task path: enqueue_many per chunk, `zkqueue worker --concurrency {concurrency}`"),
             ("raw_otel", "zkqueue raw path + otel: as the raw path, OpenTelemetry on in producer and worker"),
             ("task_otel", "zkqueue task + otel: as the task path, OpenTelemetry on in producer and worker"),
             ("cpu_thread", "{cpu_jobs:,} CPU-bound jobs of {cpu_ms:g} ms: `zkqueue worker --pool thread "
                            "--concurrency {cpu_concurrency}`"),
             ("cpu_process", "{cpu_jobs:,} CPU-bound jobs of {cpu_ms:g} ms: `zkqueue worker --pool process "
                             "--concurrency {cpu_concurrency}`"))
LIVE_RATIOS = (("raw_bullmq", "ratio zkqueue raw / BullMQ"), ("task_raw", "ratio task path / raw path"),
               ("process_thread", "ratio process pool / thread pool"))
#: The cost of OpenTelemetry (rows run with ZKQ_BENCH_OTEL=1): jobs/s with it on over jobs/s without (no target).
LIVE_OTEL = (("raw_otel", "ratio raw path with otel / without"), ("task_otel", "ratio task path with otel / without"))


def jobs_live_table(report: dict[str, Any]) -> Table | None:
    """The jobs_live rows (issue 28): jobs/s of each row with its spread, then the ratios with targets and marks."""
    sec = report.get("jobs_live") or {}
    if sec.get("status") != "ok":
        return None
    st = sec["settings"]
    fmt = {**st, "bullmq": sec.get("versions", {}).get("bullmq", "?")}
    t = Table(title=f"jobs live: the worker process running and idle first, then {st['jobs']:,} jobs added in chunks "
                    f"of {st['chunk']:,} while it works; from the first add until every result is stored (jobs/s, "
                    f"median of {st['repeats']})")
    for col in ("row", "jobs/s", "target", "pass"):
        t.add_column(col, justify="left" if col == "row" else "right")
    for key, label in LIVE_ROWS:
        if key in sec.get("runs", {}):
            t.add_row(label.format(**fmt), _rate_cell(sec["runs"][key], sec.get("na", {}).get(key)), "", "")
    for key, label in LIVE_RATIOS:
        ratio = sec.get("ratios", {}).get(key)
        verdict = {True: "[green]pass[/]", False: "[red]MISS[/]", None: "-"}[sec.get("pass", {}).get(key)]
        t.add_row(label, "n/a" if ratio is None else f"{ratio:.2f}x", f">= {sec['targets'][key]:.1f}x", verdict)
    for key, label in LIVE_OTEL:
        if key in sec.get("otel_cost", {}):
            ratio = sec["otel_cost"][key]
            t.add_row(label, "n/a" if ratio is None else f"{ratio:.2f}x", "", "")
    return t


def jobs_live_notes(report: dict[str, Any]) -> list[str]:
    """Why rows of the jobs_live section did not run (one line per reason), or why the section did not."""
    sec = report.get("jobs_live") or {}
    if sec.get("status") != "ok":
        return [f"jobs_live rows: n/a ({sec['reason']})"] if sec.get("reason") not in (None, "not run") else []
    by_reason: dict[str, list[str]] = {}
    for key, reason in sec.get("na", {}).items():
        by_reason.setdefault(reason, []).append(key)
    return [f"jobs_live {', '.join(keys)}: n/a ({reason})" for reason, keys in by_reason.items()]


CELERY_BROKERS = ("zkqueue", "zkqueue_unconfirmed", "redis", "kombu_zookeeper")


def celery_brokers_tables(report: dict[str, Any]) -> list[Table]:
    """The celery_brokers rows (issue 31): end-to-end tasks/s of Celery per broker with the ratios, then the SIGKILL
    scenario's counts (lost, run twice, killed in-flight tasks run again and when) per broker."""
    sec = report.get("celery_brokers") or {}
    if sec.get("status") != "ok":
        return []
    st, labels, versions = sec["settings"], sec.get("labels", {}), sec.get("versions", {})
    t = Table(title=f"celery_brokers: Celery {versions.get('celery', '?')}, one prefork worker process "
                    f"(--concurrency {st['concurrency']}) running first, then one producer sends {st['count']:,} "
                    f"tasks with delay(); from the first send until the last result is stored (tasks/s, median of "
                    f"{st['repeats']})")
    for col in ("broker", "tasks/s", "zkqueue / this", "this / Redis", "target", "pass"):
        t.add_column(col, justify="left" if col == "broker" else "right")
    ratios = sec.get("ratios", {})
    target = f">= {sec['target'].split('>=')[-1].strip()}"
    verdicts = {True: "[green]pass[/]", False: "[red]MISS[/]", None: "-"}
    for b in CELERY_BROKERS:
        if b not in sec.get("runs", {}):
            continue
        key = {"redis": "zkqueue_redis", "kombu_zookeeper": "zkqueue_kombu_zookeeper"}.get(b)
        to_redis = {"zkqueue": "zkqueue_redis", "zkqueue_unconfirmed": "zkqueue_unconfirmed_redis"}.get(b)
        ratio = ratios.get(key) if key else None
        own = ratios.get(to_redis) if to_redis else None
        verdict = {"zkqueue": verdicts[sec.get("pass")],
                   "zkqueue_unconfirmed": verdicts[sec.get("pass_unconfirmed")]}.get(b, "")
        t.add_row(labels.get(b, b), _rate_cell(sec["runs"][b], sec.get("na", {}).get(b)),
                  "" if key is None else ("n/a" if ratio is None else f"{ratio:.2f}x"),
                  "" if to_redis is None else ("n/a" if own is None else f"{own:.2f}x"),
                  target if to_redis else "", verdict)
    out = [t]
    kill = sec.get("kill") or {}
    if kill:
        k = Table(title=f"celery_brokers, SIGKILL: acks_late, prefetch multiplier 1, two worker processes "
                        f"(--concurrency {st['kill_concurrency']} each), {st['kill_count']:,} tasks of "
                        f"{st['task_ms']:g} ms; the victim's process group SIGKILLed after half had started; counted "
                        f"{st['kill_deadline']:g} s after the kill at most")
        for col in ("broker", "in flight at kill", "lost", "ran twice", "killed tasks run again", "back after",
                    "missing ones are"):
            k.add_column(col, justify="left" if col in ("broker", "missing ones are") else "right")
        for b, row in kill.items():
            if "error" in row:
                k.add_row(labels.get(b, b), "error", "-", "-", "-", "-", row["error"][:80])
                continue
            back = row.get("back_after_kill_s")
            where = row.get("where_missing") or {}
            place = ("-" if not row["lost"] else
                     f"{where['in_unacked_hash']} in Redis's unacked hash (visibility timeout "
                     f"{where['visibility_timeout_s']:g} s)" if "in_unacked_hash" in where else
                     f"{where['gone']} gone (deleted at delivery), {where['in_queue_node']} still queued"
                     if "in_queue_node" in where else where.get("note", "?"))
            k.add_row(labels.get(b, b), str(row["in_flight_at_kill"]), str(row["lost"]),
                      f"{row['duplicates']}" + (f" ({row['duplicates_done_before_kill']} done before the kill)"
                                                 if row["duplicates"] else ""),
                      f"{row['in_flight_back']} of {row['in_flight_at_kill']}",
                      "-" if not back else f"{back['min']:.1f}-{back['max']:.1f} s", place)
        out.append(k)
    return out


def progress_table(report: dict[str, Any]) -> Table | None:
    """The ordered consumer row: jobs/s through a ProgressConsumer with trivial workers, progress writes per job."""
    row = report.get("progress") or {}
    if row.get("status") != "ok":
        return None
    t = Table(title=f"progress: {row['count']} jobs from a JobLog through one ProgressConsumer (max_processing=8, "
                    f"trivial workers; median of {row['repeats']})")
    for col in ("jobs/s", "progress writes per job", "complete"):
        t.add_column(col, justify="right")
    t.add_row(_fmt_rate(row["rate"]), f"{row['writes_per_job']:.4f}", "yes" if row.get("complete") else "no")
    return t


SCHEDULED_ROWS = (("zkqueue_parked", "zkqueue, {depth} parked (park_after={park_after})"),
                  ("zkqueue_empty", "zkqueue, empty queue"),
                  ("redis_parked", "Redis sorted set, {depth} parked (poll every {poll_ms:g} ms)"),
                  ("zkqueue_flat", "zkqueue, {flat_depth} pending, flat layout (park_after=None)"))


def _count_text(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else f"{n:,}"


def scheduled_table(report: dict[str, Any]) -> Table | None:
    """The scheduled row (issue 19): lateness of a 50/s trickle, each item due 1 s after its put, over a deep
    backlog of far-future items; the consumer process's CPU; the parking cost."""
    sec = report.get("scheduled") or {}
    if sec.get("status") != "ok":
        return None
    fmt = {"depth": _count_text(sec["depth"]), "flat_depth": _count_text(sec.get("flat_depth") or 0),
           "park_after": f"{sec['park_after']:g} s" if sec.get("park_after") else "unsupported", "poll_ms": sec.get("poll_ms") or 0}
    t = Table(title=f"scheduled: {sec['trickle_rate']:g} items/s for {sec['trickle_seconds']:g} s, each due "
                    f"{sec['due_after_s']:g} s after its put, over items parked up to 30 days ahead (lateness = "
                    f"delivery - due time)")
    for col in ("run", "p50 ms", "p99 ms", "max ms", "early", "consumer CPU s/s", "prefill items/s",
                "znodes / ZK txns per parked item", "complete"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for key, label in SCHEDULED_ROWS:
        row = sec["rows"].get(key)
        if row is None:
            continue
        name = label.format(**fmt)
        if row.get("status") == "n/a":
            t.add_row(name, "n/a", "", "", "", "", "", "", row.get("reason", "")[:60])
            continue

        def ms(v: Any) -> str:
            return "-" if v is None else f"{v:,.1f}"

        per_item = "-"
        if row.get("znodes_per_item") is not None:
            per_item = f"{row['znodes_per_item']:.3f} / {row['zk_txns_per_item']:.4f}"
        t.add_row(name, ms(row.get("p50_ms")), ms(row.get("p99_ms")), ms(row.get("max_ms")),
                  str(row.get("early_all", "-")), f"{row['cpu_s_per_s']:.3f}" if row.get("cpu_s_per_s") is not None
                  else "-", _fmt_rate(row.get("prefill_rate")), per_item,
                  "yes" if row.get("complete") else f"no ({row.get('received')}/{row.get('sent')})")
    return t


def scheduled_verdict(report: dict[str, Any]) -> str | None:
    """One line: p99 1M-parked / empty (target <= 1.5), p99 <= 50 ms, early deliveries, CPU 1M-parked / empty."""
    sec = report.get("scheduled") or {}
    if sec.get("status") != "ok":
        return f"scheduled row: n/a ({sec['reason']})" if sec.get("reason") and sec["reason"] != "not run" else None
    parked = sec["rows"].get("zkqueue_parked", {})
    tg = sec.get("targets", {})
    ratio, cpu, p99 = sec.get("p99_ratio"), sec.get("cpu_ratio"), parked.get("p99_ms")
    ratio_text = "-" if ratio is None else f"{ratio:.2f}"
    cpu_text = "-" if cpu is None else f"{cpu:.2f}"
    p99_text = "-" if p99 is None else f"{p99:.1f}"
    verdict = {True: "pass", False: "MISS", None: "-"}[sec.get("pass")]
    return (f"scheduled: zkqueue {_count_text(sec['depth'])}-parked p99 / empty p99 = {ratio_text} (target <= "
            f"{tg.get('p99_ratio', 1.5):g}), p99 {p99_text} ms (target <= {tg.get('p99_ms', 50):g}), early "
            f"deliveries {sec.get('early_total', '-')} (target 0), consumer CPU parked / empty = {cpu_text}: "
            f"{verdict}")


def markdown(report: dict[str, Any]) -> str:
    """The table as GitHub markdown (for the README)."""
    head = ["workload", *[IMPL_LABELS.get(i, i) for i in report["impls"]], "zkqueue / Curator", "target", "pass"]
    return table_markdown(table(report), head)


def table_markdown(t: Table, head: list[str] | None = None) -> str:
    """A terminal table as GitHub markdown, its colour marks dropped; ``head``: the header row (default: the
    table's column headers)."""
    head = head if head is not None else [str(col.header) for col in t.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cols = [[str(c) for c in col.cells] for col in t.columns]
    for i in range(len(cols[0]) if cols else 0):
        cells = [col[i].replace("[green]", "").replace("[red]", "").replace("[/]", "") for col in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.report FILE``: the jobs live table of a results file as markdown (the README's)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.report RESULTS.json", file=sys.stderr)
        return 2
    report = json.loads(Path(args[0]).read_text())
    live = jobs_live_table(report)
    if live is None:
        print(f"{args[0]}: no jobs live rows", file=sys.stderr)
        return 1
    print(run_line(report, args[0]))
    print()
    head = ["jobs live", "jobs/s", "target", "pass"]
    print(table_markdown(live, head))
    return 0


def run_line(report: dict[str, Any], path: str) -> str:
    """When and how a results file's run ran, as the README's sentence before its table."""
    started = str(report.get("started", "?"))[:16].replace("T", " ")
    live = report.get("jobs_live") or {}
    repeats = (live.get("settings") or {}).get("repeats", "?")
    load = (report.get("machine") or {}).get("load_at_start") or []
    loads = "/".join(f"{x:.2f}" for x in load) if load else "?"
    return (f"Run of {started} UTC (median of {repeats}, {report.get('duration_s', '?'):.0f} s, `{path}`; the table "
            f"is `python -m benchmarks.report {path}`), load average {loads} at the start:")


def write_json(report: dict[str, Any], directory: Path, stamp: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, default=str)
    path = directory / f"{stamp}.json"
    path.write_text(text)
    (directory / "latest.json").write_text(text)
    return path


def write_png(report: dict[str, Any], path: Path) -> Path | None:
    """Bars of items/s per workload and implementation (log scale), and latency p50/p99."""
    if not any((w.get("impls") or {}) for w in report.get("workloads", []) if w["kind"] != "large"):
        return None  # nothing measured to draw (e.g. --only jobs; large items are MB/s, in the tables only)
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None
    impls = report["impls"]
    colors = {"zkqueue": "#2a7ab9", "curator": "#d9822b", "kazoo": "#7a7a7a"}
    rows = [w for w in report["workloads"] if w["kind"] not in ("latency", "large")]  # (large: MB/s, in the table)
    lat = [w for w in report["workloads"] if w["kind"] == "latency"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.55 * max(4, len(rows)) + 1.5),
                             gridspec_kw={"width_ratios": [3, 1]})
    ax = axes[0]
    height = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        ys, xs = [], []
        for j, w in enumerate(rows):
            med = ((w["impls"].get(impl) or {}).get("summary") or {}).get("median")
            if med:
                ys.append(j + (k - (len(impls) - 1) / 2) * height)
                xs.append(med)
        ax.barh(ys, xs, height=height, label=IMPL_LABELS.get(impl, impl), color=colors.get(impl))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([w["label"] for w in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("items/s (log scale, median)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax2 = axes[1]
    if lat:
        w = lat[0]
        names, p50, p99 = [], [], []
        for impl in impls:
            d = w["impls"].get(impl) or {}
            med = (d.get("summary") or {}).get("median")
            if med is not None:
                names.append(IMPL_LABELS.get(impl, impl))
                p50.append(d.get("p50_ms") or 0)
                p99.append(med)
        x = range(len(names))
        ax2.bar([i - 0.2 for i in x], p50, 0.4, label="p50")
        ax2.bar([i + 0.2 for i in x], p99, 0.4, label="p99")
        ax2.set_xticks(list(x))
        ax2.set_xticklabels(names, fontsize=8)
        ax2.set_ylabel("ms")
        rate = report.get("latency_rate")
        ax2.set_title(f"end-to-end latency at {rate:,.0f} items/s" if rate else "end-to-end latency", fontsize=9)
        ax2.legend(fontsize=8)
    else:
        ax2.axis("off")
    m = report["machine"]
    fig.suptitle(f"zkqueue vs Curator vs kazoo: {m.get('ensemble')}, {m.get('cores')} cores, "
                 f"{report['settings']['size']}-byte items, fsync {m.get('fsync')}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_table(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.print(table(report))
    large = large_table(report)
    if large is not None:
        console.print(large)
    jobs = jobs_table(report)
    if jobs is not None:
        console.print(jobs)
    aio = aio_table(report)
    if aio is not None:
        console.print(aio)
    elif (report.get("aio") or {}).get("reason") not in (None, "not run"):
        console.print(f"aio rows: n/a ({report['aio']['reason']})")
    live = jobs_live_table(report)
    if live is not None:
        console.print(live)
    for t in celery_brokers_tables(report):
        console.print(t)
    if (report.get("celery_brokers") or {}).get("reason") not in (None, "not run"):
        console.print(f"celery_brokers rows: n/a ({report['celery_brokers']['reason']})", markup=False)
    for b, reason in ((report.get("celery_brokers") or {}).get("na") or {}).items():
        console.print(f"celery_brokers {b}: n/a ({reason})", markup=False, highlight=False)
    for line in jobs_live_notes(report):
        console.print(line, markup=False, highlight=False)  # a reason may hold brackets (pip extras, npm output)
    for line in flows_notes(report):
        console.print(line, markup=False, highlight=False)
    if (report.get("flows") or {}).get("status") != "ok" and (report.get("jobs") or {}).get("reason"):
        console.print(f"jobs workload: n/a ({report['jobs']['reason']})")
    for line in canvas_notes(report):
        console.print(line, markup=False, highlight=False)
    ordered = progress_table(report)
    if ordered is not None:
        console.print(ordered)
    elif (report.get("progress") or {}).get("reason"):
        console.print(f"progress row: n/a ({report['progress']['reason']})")
    sched = scheduled_table(report)
    if sched is not None:
        console.print(sched)
    line = scheduled_verdict(report)
    if line:
        console.print(line)


if __name__ == "__main__":
    raise SystemExit(main())
