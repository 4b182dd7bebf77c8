"""A named subset of Celery's own integration tests (``celery_suite.SUBSET``) passes on ``zkqueue://`` wherever it
passes on Redis (see tests/celery/celery_suite.py for how they are run; ``make celery-suite`` runs them all)."""

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
    outcomes = [celery_suite.run_target(name, tmp_path, zk_server.connect_string, redis_address, tests)
                for name in ("redis", "zkqueue")]
    print(celery_suite.table(outcomes))
    redis, zkqueue = outcomes
    assert redis.passed, redis.output
    missing = sorted(set(redis.passed) - set(zkqueue.passed))
    assert not missing, f"pass on Redis, not on zkqueue: {missing}\n{zkqueue.output}"
