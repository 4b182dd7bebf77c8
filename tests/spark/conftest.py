"""One SparkSession for every Spark test (local[2], UI off, loopback only); the `spark` marker selects them.

Worker processes import ``spark_helpers`` (handlers, serializers) from this folder: it is put on PYTHONPATH
before the JVM starts, so the Python workers it forks inherit it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from spark_session import build_session, spark_environment  # type: ignore[import-not-found]



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
