"""How the Spark tests build a driver (this process or a subprocess); a module of its own so that subprocess
drivers import it by a name no other test folder uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def spark_environment() -> dict[str, str]:
    """Environment for a Spark driver (this process or a subprocess): venv Python, loopback, helpers importable."""
    env = {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    paths = [str(HERE), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def start_driver(script: str, cfg: dict[str, Any], log: Path, **popen: Any) -> subprocess.Popen:
    """A Spark driver subprocess running ``script`` (a file of this folder) with ``cfg`` as its JSON argument,
    its output in ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, str(HERE / script), json.dumps(cfg)],
                                env={**os.environ, **spark_environment()}, stdout=out, stderr=subprocess.STDOUT,
                                **popen)


def build_session(master: str, warehouse: str) -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName("zkqueue-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
