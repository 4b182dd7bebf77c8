"""A Spark driver process for the batch read's fault scenarios. argv[1] is JSON: hosts, path, out, consumer, max
(maxItems per claim), warehouse, mode ("drain": claim until the queue is empty, then print the output's counts as
JSON; "crash": SIGKILL this process inside the third claim, after its rows were written and before the commit),
and optionally "signal" (a file created once two claims have committed).

Each claim is written to ``out/<smallest id in the claim>`` with mode overwrite: a claim read again after a
crash has the same rows, so it lands in the same place (an idempotent sink keyed on the rows' ids)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_session import build_session  # noqa: E402

import zkqueue.spark  # noqa: E402


def main() -> None:
    cfg = json.loads(sys.argv[1])
    spark = build_session("local[2]", cfg["warehouse"])
    spark.sparkContext.setLogLevel("ERROR")
    options = {"zkHosts": cfg["hosts"], "consumerId": cfg["consumer"], "maxItems": cfg["max"], "sessionTimeout": 4}
    claims = 0
    while True:
        with zkqueue.spark.claimed_read(spark, cfg["path"], **options) as df:
            first = df.agg({"id": "min"}).first()[0]
            if first is None:
                break
            df.write.mode("overwrite").parquet(str(Path(cfg["out"]) / first.replace(":", "_")))
            claims += 1
            if cfg["mode"] == "crash" and claims == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        if claims == 2 and cfg.get("signal"):
            Path(cfg["signal"]).touch()
    rows = spark.read.parquet(str(Path(cfg["out"]) / "*")).collect()
    print(json.dumps({"rows": len(rows), "distinct_ids": len({r["id"] for r in rows}),
                      "values": len({bytes(r["value"]) for r in rows})}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
