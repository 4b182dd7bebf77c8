"""Spark probe: sink rows/s (df.write.format("zkqueue")) and executor-consumer items/s (zkqueue.spark.consume).

    .venv/bin/python benchmarks/spark_probe.py [--rows 100000] [--items 20000] [--hosts HOST:PORT] [--master local[2]]

Without --hosts it starts a private 1-node ZooKeeper (zkqueue.server.embedded). The harness can call
:func:`measure` with an existing SparkSession instead; it returns a dict of numbers. One warm-up write runs
first (the first Python data source write pays for starting workers); the first consume job is reported on its
own as ``consume_cold_*`` (it starts the Python workers of the job), and ``consume_*`` is a second job of the same
size. Not a test; timings depend on the host.

Every kazoo session here (sink, consumers, cleanup) asks for a 30 s timeout: ZooKeeper JVMs and Spark sharing a
few cores can starve a worker past a short session's heartbeat. On failure the last three lines of stderr name
the phase, the innermost zkqueue frame and the real error (for a Spark job: the Python worker's exception).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

#: Session timeout (s) of every kazoo client of the probe: generous, see the module docstring.
SESSION_TIMEOUT = 30.0


class _Count:
    """A picklable handler that does nothing (so the probe measures the queue, not the work)."""

    def __call__(self, item: bytes) -> None:
        return None


def _drop(hosts: str, *paths: str) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT)
    client.start(timeout=30)
    try:
        for path in paths:
            with contextlib.suppress(Exception):
                client.delete(path, recursive=True)
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def _phase(name: str) -> Iterator[None]:
    """Tag an exception escaping this block with the probe's phase (shown by :func:`_failure_lines`)."""
    try:
        yield
    except Exception as exc:
        if not hasattr(exc, "probe_phase"):
            with contextlib.suppress(AttributeError):
                exc.probe_phase = name  # type: ignore[attr-defined]
        raise


def _failure_lines(exc: BaseException) -> list[str]:
    """Three lines naming the failure: phase, innermost zkqueue (else innermost) frame, and the exception line of
    the last traceback in ``exc``'s text, which for a failed Spark job is the Python worker's own."""
    text = "".join(traceback.format_exception(exc))
    lines = text.rsplit("Traceback (most recent call last):", 1)[-1].splitlines()
    frames = [line.strip() for line in lines if line.startswith("  File ")]
    error = next((line.strip() for line in lines if line.strip() and not line[0].isspace()), "")
    ours = [f for f in frames if "zkqueue" in f or "spark_probe" in f]
    where = (ours or frames or ["(no frame)"])[-1]
    return [
        f"spark_probe: FAILED in {getattr(exc, 'probe_phase', 'setup')} (full traceback above)",
        f"spark_probe: at {where}",
        f"spark_probe: {error or f'{type(exc).__name__}: {exc}'.splitlines()[0]}",
    ]


def measure(
    spark: Any,
    hosts: str,
    *,
    rows: int = 100_000,
    items: int = 20_000,
    partitions: int = 2,
    parallelism: int = 2,
    payload: int = 100,
    items_per_node: int = 1,
    dedupe: bool = True,
    root: str | None = None,
) -> dict[str, float]:
    """Time a sink write of ``rows`` rows, an executor drain of ``items`` items, and a streaming-source drain of
    ``rows`` rows (Trigger.AvailableNow into the noop sink); return rates (per second)."""
    import zkqueue.spark as zks

    zks.register(spark)
    root = root or f"/spark-probe-{uuid.uuid4().hex[:8]}"
    pad = "x" * max(0, payload - 12)

    def frame(n: int) -> Any:
        return spark.range(0, n, 1, partitions).selectExpr(f"concat(lpad(cast(id AS STRING), 12, '0'), '{pad}') AS v")

    def write(path: str, n: int) -> float:
        df = frame(n)
        df.count()  # materialize the plan's inputs outside the timing
        started = time.perf_counter()
        (df.write.format("zkqueue").mode("append").option("zkHosts", hosts).option("valueColumn", "v")
         .option("sessionTimeout", str(SESSION_TIMEOUT)).option("itemsPerNode", str(items_per_node))
         .option("dedupe", str(dedupe).lower()).save(path))
        return time.perf_counter() - started

    with _phase("warm-up sink write"):
        write(f"{root}/warmup", 1000)
    with _phase("sink write"):
        sink_seconds = write(f"{root}/sink", rows)
    def consume(path: str) -> tuple[Any, float]:
        started = time.perf_counter()
        result = zks.consume(spark, hosts, path, _Count(), parallelism=parallelism, lock_path=f"{path}-locks",
                             session_timeout=SESSION_TIMEOUT)
        return result, time.perf_counter() - started

    # The first consume job of a session also starts its Python workers; it is measured on its own ("cold"),
    # then the same job again on a fresh queue of the same size (the steady rate).
    with _phase("filling the consume queues"):
        write(f"{root}/cold", items)
        write(f"{root}/work", items)
    with _phase("executor consume (cold)"):
        cold, cold_seconds = consume(f"{root}/cold")
    with _phase("executor consume"):
        result, consume_seconds = consume(f"{root}/work")
    def stream(path: str) -> tuple[int, float]:
        """Drain ``path`` with the streaming source (Trigger.AvailableNow) into Spark's noop sink."""
        df = (spark.readStream.format("zkqueue").option("zkHosts", hosts).option("consumerId", "probe")
              .option("sessionTimeout", str(SESSION_TIMEOUT)).load(path))
        started = time.perf_counter()
        query = (df.writeStream.format("noop").option("checkpointLocation", f"/tmp/zkqueue-probe-{uuid.uuid4().hex}")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        seconds = time.perf_counter() - started
        return sum(p["numInputRows"] for p in query.recentProgress), seconds

    with _phase("filling the stream queues"):
        write(f"{root}/stream-warmup", 1000)
        write(f"{root}/stream", rows)
    with _phase("warm-up streaming query"):  # as the sink's warm-up write: the first query starts the machinery
        stream(f"{root}/stream-warmup")
    with _phase("streaming source"):
        streamed, stream_seconds = stream(f"{root}/stream")
    with _phase("cleanup"):
        _drop(hosts, root)
    return {
        "sink_rows": rows,
        "sink_seconds": round(sink_seconds, 3),
        "sink_rows_per_s": round(rows / sink_seconds, 1),
        "consume_items": result.processed,
        "consume_seconds": round(consume_seconds, 3),
        "consume_items_per_s": round(result.processed / consume_seconds, 1),
        "consume_cold_seconds": round(cold_seconds, 3),
        "consume_cold_items_per_s": round(cold.processed / cold_seconds, 1),
        "stream_rows": streamed,
        "stream_seconds": round(stream_seconds, 3),
        "stream_rows_per_s": round(streamed / stream_seconds, 1),
        "stream_of_sink": round((streamed / stream_seconds) / (rows / sink_seconds), 3),
        "partitions": partitions,
        "parallelism": parallelism,
        "items_per_node": items_per_node,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--items-per-node", type=int, default=1)
    parser.add_argument("--no-dedupe", dest="dedupe", action="store_false",
                        help="measure the sink without its dedupe markers (on by default, as in the sink)")
    parser.add_argument("--hosts", default=None)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    server = spark = None
    failure: Exception | None = None
    try:
        hosts = args.hosts
        if hosts is None:
            from zkqueue.server.embedded import ZooKeeperEnsemble

            server = ZooKeeperEnsemble(size=1).start_all()
            hosts = server.connect_string
        spark = (
            SparkSession.builder.master(args.master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        numbers = measure(spark, hosts, rows=args.rows, items=args.items, partitions=args.partitions,
                          parallelism=args.parallelism, items_per_node=args.items_per_node, dedupe=args.dedupe)
    except Exception as exc:  # noqa: BLE001 - reported below, after Spark's own shutdown output
        failure = exc
    finally:
        if spark is not None:
            spark.stop()
        if server is not None:
            server.close()
    if failure is not None:
        traceback.print_exception(failure, file=sys.stderr)
        print("\n".join(_failure_lines(failure)), file=sys.stderr, flush=True)
        sys.exit(1)
    print(json.dumps(numbers, indent=2))


if __name__ == "__main__":
    main()
