"""The benchmark's large-items workload, tiny, on the test ZooKeeper: zkqueue (producer in this process, one
lock-safe consumer process) and bare kazoo (900 KB nodes) each move the same kind of self-checking items and check
every byte; Curator says why it cannot. Asserts behaviour only, never timings (the machine decides those)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from benchmarks import report
from benchmarks.peers import BARE_NODE_BYTES, IMPLS, Unsupported
from benchmarks.workloads import MiB, Settings, large_payloads, workloads

COUNT, SIZE = 2, 3 * MiB


def _run_all(zk_hosts: str, zk_client: Any) -> dict[str, Any]:
    """The runner's loop for one workload (see benchmarks.runner.main), one run per implementation."""
    s = Settings(large_count=COUNT, large_size=SIZE, max_seconds=60.0)
    (w,) = [w for w in workloads(s) if w.name == "large_items"]
    result: dict[str, Any] = {"name": w.name, "label": w.label, "kind": w.kind,
                              "target": {"text": w.target.text, "kind": w.target.kind, "value": w.target.value},
                              "count": w.count(s), "impls": {}}
    zk_client.ensure_path("/bench")
    for seq, name in enumerate(w.impls, 1):
        entry = result["impls"].setdefault(name, {"runs": []})
        try:
            entry["runs"].append(w.run(IMPLS[name](zk_hosts, s.size), zk_client, "/bench", s, {"seq": seq}).as_dict())
        except Unsupported as exc:
            entry["na"] = str(exc)
    report.evaluate(result)
    return result


def test_large_items_workload_moves_and_checks_every_byte(zk_hosts, zk_client) -> None:
    result = _run_all(zk_hosts, zk_client)
    assert result["count"] == COUNT and "10 MiB" not in result["label"] and "3 MiB" in result["label"]

    (zq,) = result["impls"]["zkqueue"]["runs"]
    assert zq["complete"] and zq["items"] == COUNT, zq
    assert zq["verified"] == COUNT and zq["in_order"] and zq["drained"], zq
    assert zq["bytes"] == COUNT * SIZE and zq["large_items_put"] == COUNT
    assert zq["chunks_per_item"] >= 2 and zq["compression"] == "none", zq  # random bytes: zlib skipped
    assert zq["left_in_queue"] == 0
    assert zq["rss_mb_max"] > 0  # the consumer process's peak RSS
    for key in ("mb_s", "put_mb_s", "consume_mb_s", "put_seconds", "consume_seconds"):
        assert zq[key] > 0, key

    (bare,) = result["impls"]["kazoo"]["runs"]
    assert bare["complete"] and bare["items"] == COUNT and bare["verified"] == COUNT, bare
    assert bare["nodes"] == COUNT * -(-SIZE // BARE_NODE_BYTES) and bare["bytes"] == COUNT * SIZE
    for key in ("mb_s", "put_mb_s", "consume_mb_s"):
        assert bare[key] > 0, key

    assert "1 MiB" in result["impls"]["curator"]["na"]
    # the ratio is zkqueue against bare kazoo, checked against the target
    assert result["ratio"] == round(zq["mb_s"] / bare["mb_s"], 2) and isinstance(result["pass"], bool)
    assert result["impls"]["zkqueue"]["rss_mb_max"] == zq["rss_mb_max"]

    # every run deleted its nodes (queue, blobs, locks, bare nodes)
    assert zk_client.get_children("/bench") == []

    # both tables show the row: MB/s, the ratio to bare kazoo, the consumer's RSS
    out = {"mode": "quick", "impls": list(result["impls"]), "workloads": [result], "spark": [],
           "settings": {"repeats": 1, "large_count": COUNT, "large_size": SIZE}}
    console = Console(width=220, record=True)
    report.print_table(out, console)
    text = console.export_text()
    assert "MB/s" in text and "of bare kazoo" in text and "consumer peak RSS" in text and "n/a" in text


def test_large_payloads_check_themselves() -> None:
    import hashlib  # noqa: PLC0415

    items = large_payloads(2, 1000)
    assert [len(x) for x in items] == [1000, 1000] and items[0] != items[1]
    assert all(hashlib.sha256(x[32:]).digest() == x[:32] for x in items)
