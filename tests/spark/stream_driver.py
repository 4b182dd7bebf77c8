"""A Spark driver process for the streaming source's kill test. argv[1] is JSON: hosts, path, out, chk, mode
("run": stream until killed; "drain": Trigger.AvailableNow, then print the output's counts as JSON), consumer,
max (maxItemsPerTrigger), warehouse."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_session import build_session  # noqa: E402

import zkqueue.spark  # noqa: E402


def main() -> None:
    cfg = json.loads(sys.argv[1])
    spark = build_session("local[2]", cfg["warehouse"])
    spark.sparkContext.setLogLevel("ERROR")
    zkqueue.spark.register(spark)
    df = (spark.readStream.format("zkqueue").option("zkHosts", cfg["hosts"]).option("consumerId", cfg["consumer"])
          .option("maxItemsPerTrigger", cfg["max"]).option("sessionTimeout", cfg.get("session", 4)).load(cfg["path"]))
    writer = df.writeStream.format("parquet").option("path", cfg["out"]).option("checkpointLocation", cfg["chk"])
    if cfg["mode"] == "run":
        query = writer.trigger(processingTime="0 seconds").start()
        print("started", flush=True)
        query.awaitTermination()
        return
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    rows = spark.read.parquet(cfg["out"]).collect()
    print(json.dumps({"rows": len(rows), "distinct_ids": len({r["id"] for r in rows}),
                      "values": len({bytes(r["value"]) for r in rows})}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
