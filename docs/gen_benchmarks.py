"""The site's Benchmarks page, written from the committed result files ``benchmarks/results/*latest.json``, so no figure
is typed by hand: each file is one run, shown with its command, its date, its machine and the tables the benchmark
harness prints (``benchmarks.report`` makes them, as it does for the terminal).

``python docs/gen_benchmarks.py``             prints the page (markdown)
``python docs/gen_benchmarks.py --headline``  prints the one line the README quotes
``python docs/gen_benchmarks.py --out PATH``  writes the page to PATH

mkdocs builds the page through the hook ``docs/hooks/benchmarks_page.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: Result files in page order, with their section titles; any other ``*-latest.json`` follows under its own name.
KNOWN = {"latest.json": "Full run: queues against Curator and kazoo",
         "jobs-live-latest.json": "Jobs live: a worker running while producers add",
         "deep-latest.json": "Deep queues",
         "celery-brokers-latest.json": "Celery on zkqueue://, on Redis and on kombu's zookeeper://",
         "flows-latest.json": "Flows and canvases beside BullMQ's FlowProducer"}


def _report() -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import report

    return report


def load_runs(results: Path = RESULTS) -> list[tuple[str, dict[str, Any]]]:
    """``(file name, report)`` of the committed result files (``latest.json``, ``*-latest.json``; the harness's
    timestamped files stay local, see ``benchmarks/results/.gitignore``), the known ones first."""
    files = [p for p in results.glob("*.json") if p.name == "latest.json" or p.name.endswith("-latest.json")]
    files.sort(key=lambda p: (list(KNOWN).index(p.name) if p.name in KNOWN else len(KNOWN), p.name))
    return [(p.name, json.loads(p.read_text())) for p in files]


def title(name: str, run: dict[str, Any]) -> str:
    """A run's section title: what its file holds, or, for a run that measured something else, its file name."""
    if name == "latest.json" and not run.get("workloads"):
        return f"Latest run (`{name}`)"
    return KNOWN.get(name, f"`{name}`")


def run_facts(name: str, run: dict[str, Any]) -> list[str]:
    """The command, the date and the machine of one run, as markdown list items."""
    m = run.get("machine") or {}
    started = str(run.get("started", "?"))[:16].replace("T", " ")
    load = "/".join(f"{x:.2f}" for x in m.get("load_at_start") or []) or "?"
    java = str(m.get("java", "?")).replace('"', "")
    command = run.get("command", "?").strip()
    return [(f"- **Command**: `{command}` ({run.get('mode', '?')} mode, {run.get('duration_s', 0):.0f} s)"),
            f"- **Date**: {started} UTC; file `benchmarks/results/{name}`",
            (f"- **Machine**: {m.get('cores', '?')} cores ({m.get('cpu', '?')}), {m.get('ram_gb', '?')} GB RAM, "
             f"{m.get('os', '?')}, Python {m.get('python', '?')}, {java}; load average {load} at the start"),
            (f"- **ZooKeeper**: {m.get('zookeeper', '?')}, {m.get('ensemble', '?')}, fsync {m.get('fsync', '?')}; "
             f"Curator {m.get('curator', '?')}, kazoo {m.get('kazoo', '?')}")]


def run_tables(run: dict[str, Any]) -> list[str]:
    """Every table of the run the harness knows how to print, as markdown, each under its title."""
    report = _report()
    out: list[str] = []
    if run.get("workloads"):
        head = ["workload", *[report.IMPL_LABELS.get(i, i) for i in run["impls"]], "zkqueue / Curator", "target",
                "pass"]
        out += [f"**{report.table(run).title}**", "", report.table_markdown(report.table(run), head), ""]
    for make in (report.large_table, report.jobs_table, report.aio_table, report.jobs_live_table,
                 report.progress_table, report.scheduled_table):
        t = make(run)
        if t is not None:
            out += [f"**{t.title}**", "", report.table_markdown(t), ""]
    for t in report.celery_brokers_tables(run):
        out += [f"**{t.title}**", "", report.table_markdown(t), ""]
    verdict = report.scheduled_verdict(run)
    rows = report.flows_notes(run) + report.canvas_notes(run)
    out += [f"- {line}" for line in rows] + ([""] if rows else [])
    if verdict:
        out += [verdict, ""]
    out += [f"- {note}" for note in run.get("notes") or []] + ([""] if run.get("notes") else [])
    return out


def _median(runs: list[dict[str, Any]]) -> float | None:
    rates = sorted(r["rate"] for r in runs if r.get("rate") is not None and not r.get("error"))
    return rates[len(rates) // 2] if rates else None


def headline(runs: list[tuple[str, dict[str, Any]]] | None = None) -> str:
    """One line for the README: lock-safe consumption against Curator (full run) and jobs end to end with a
    worker running against BullMQ (jobs live run), each with its date."""
    runs = load_runs() if runs is None else runs
    by_name = dict(runs)
    parts = []
    full = by_name.get("latest.json")
    if full:
        w = next((w for w in full.get("workloads", []) if w["name"] == "consume_lock_1"), None)
        if w and w.get("ratio"):
            z = w["impls"]["zkqueue"]["summary"]["median"]
            parts.append(f"lock-safe consumption {z:,.0f} items/s, {w['ratio']:.1f}x Curator 5.9.0 "
                         f"({str(full['started'])[:10]})")
    live = (by_name.get("jobs-live-latest.json") or {}).get("jobs_live") or {}
    if live.get("status") == "ok":
        raw, bull = _median(live["runs"].get("raw", [])), _median(live["runs"].get("bullmq", []))
        if raw:
            text = f"jobs end to end with a worker running {raw:,.0f} jobs/s"
            if bull:
                text += f" (BullMQ {live.get('versions', {}).get('bullmq', '')} on Redis: {bull:,.0f})".replace(" )", ")")
            parts.append(text + f" ({str(by_name['jobs-live-latest.json']['started'])[:10]})")
    machine = (full or by_name.get("jobs-live-latest.json") or {}).get("machine") or {}
    nodes = re.search(r"(\d+) node", str(machine.get("ensemble", "")))
    where = f"{machine.get('cores', '?')} cores" + (f", a {nodes[1]}-node ZooKeeper ensemble on loopback" if nodes else "")
    return "Measured on " + where + ": " + "; ".join(parts) + "."


def page(runs: list[tuple[str, dict[str, Any]]] | None = None) -> str:
    runs = load_runs() if runs is None else runs
    intro = ("This page is generated from the result files in `benchmarks/results/` by `docs/gen_benchmarks.py` "
             "each time the site is built: every figure here is the harness's own output, none is typed by hand. "
             "Rerun a benchmark with its command below (from a source checkout: `pip install -e '.[bench]'`); the "
             "harness writes a new result file. How each workload is measured: `python -m benchmarks --help` and "
             "the docstrings under `benchmarks/`.")
    note = ("    The ZooKeeper servers run on the same machine as the benchmark, which other work sometimes shares: "
            "the load at the start of each run is given. Spreads (±) are half the range over the repeats.")
    lines = ["# Benchmarks", "", intro, "", "!!! note \"Read these as this machine's figures\"", note, "",
             "**Headline**: " + headline(runs), ""]
    if not runs:
        lines += ["No result files were found in `benchmarks/results/`.", ""]
    for name, run in runs:
        lines += [f"## {title(name, run)}", "", *run_facts(name, run), "", *run_tables(run)]
        chart = name.replace(".json", ".png")
        if (RESULTS / chart).exists():
            lines += [f"![The run's chart (benchmarks/results/{chart})](benchmarks/{chart})", ""]
    return "\n".join(lines)


def charts(results: Path = RESULTS) -> dict[str, bytes]:
    """The charts the page shows, by their path in the site (``benchmarks/<name>.png``)."""
    return {f"benchmarks/{p.name}": p.read_bytes() for p in sorted(results.glob("*.png"))
            if (results / p.name.replace(".png", ".json")).exists()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--headline", action="store_true", help="print the README's one line and exit")
    parser.add_argument("--out", type=Path, help="write the page here instead of printing it")
    args = parser.parse_args(argv)
    if args.headline:
        print(headline())
        return 0
    text = page()
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
