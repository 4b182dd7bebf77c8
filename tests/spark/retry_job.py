"""Run by test_retries.py in a subprocess: a SparkSession on local[2,4], so failed tasks are retried (a process
can hold only one SparkContext, and the shared test session is local[2], where any task failure fails the job).

    python retry_job.py <zk connect string with chroot> <work dir>

Prints one JSON line with what the driver saw.
"""

from __future__ import annotations

import json
import os
import sys

from spark_session import build_session, spark_environment


def main() -> None:
    hosts, workdir = sys.argv[1], sys.argv[2]
    os.environ.update(spark_environment())
    os.environ["ZKQ_CRASH_AT_ROW"] = "150"
    spark = build_session("local[2,4]", os.path.join(workdir, "warehouse"))
    spark.sparkContext.setLogLevel("FATAL")
    import spark_helpers

    import zkqueue.spark as zks

    zks.register(spark)
    out: dict[str, object] = {}
    try:
        # 1. Executor consumers; one handler kills its worker while holding item locks.
        result = zks.consume(
            spark, hosts, "/work", spark_helpers.CrashOnce(os.path.join(workdir, "handled"), b"item-0137"),
            parallelism=2, lock_path="/work-locks", session_timeout=4.0, batch_size=20,
        )
        out["consume"] = {"processed": result.processed, "attempts": sorted(t.attempt for t in result.tasks)}

        # 2. Sink: partition 0's first attempt dies at its row 150, after earlier chunks were committed.
        df = spark.range(0, 400, 1, 2).selectExpr("concat('row-', id) AS v")
        for path, dedupe in (("/sink-dedupe", "true"), ("/sink-plain", "false")):
            (df.write.format("zkqueue").mode("append").option("zkHosts", hosts).option("valueColumn", "v")
             .option("serializer", "spark_helpers:CrashingSerializer").option("batchSize", "20")
             .option("inflight", "1").option("dedupe", dedupe).save(path))
        out["sink"] = "ok"
    finally:
        spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
