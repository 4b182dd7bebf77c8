"""A named subset of Celery's own integration tests (``celery_suite.SUBSET``) passes on ``zkqueue://``, every test of
it. The subset holds tests that pass on Redis: ``make celery-suite`` runs all of Celery's tests on both brokers and
compares them (see tests/celery/celery_suite.py); running the subset on Redis here again would only double its
time in ``make test``. Redis still serves the tests' own bookkeeping where they use it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.celery import celery_suite


@pytest.fixture(scope="module")
def redis_address() -> Iterator[tuple[str, int]]:
    from benchmarks.jobs_peers import RedisServerMissing, redis_server

    try:
        with redis_server() as redis:
            yield redis.host, redis.port
    except RedisServerMissing as exc:
        pytest.skip(str(exc))


def test_celery_integration_subset(zk_server: Any, redis_address: tuple[str, int], tmp_path: Path) -> None:
    try:
        celery_suite.fetch_sdist("celery")
        celery_suite.pydantic_path()
    except Exception as exc:  # no network, no index: nothing to run
        pytest.skip(f"Celery's sdist (or pydantic for its tasks.py) could not be fetched: {exc}")
    tests = list(celery_suite.SUBSET)
    zkqueue = celery_suite.run_target("zkqueue", tmp_path, zk_server.connect_string, redis_address, tests)
    print(celery_suite.table([zkqueue]))
    missing = sorted({celery_suite.result_name(t) for t in tests} - set(zkqueue.passed))
    assert not missing, f"did not pass on zkqueue: {missing}\n{zkqueue.output}"
