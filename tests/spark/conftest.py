"""One SparkSession for every Spark test (local[2], UI off, loopback only); the `spark` marker selects them.

Worker processes import ``spark_helpers`` (handlers, serializers) from this folder: it is put on PYTHONPATH
before the JVM starts, so the Python workers it forks inherit it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("no java")
    saved = {key: os.environ.get(key) for key in spark_environment()}
    os.environ.update(spark_environment())
    session = build_session("local[2]", str(tmp_path_factory.mktemp("warehouse")))
    session.sparkContext.setLogLevel("ERROR")
    import zkqueue.spark

    zkqueue.spark.register(session)
    yield session
    session.stop()
    from zkqueue.spark.clients import close_all

    close_all()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
