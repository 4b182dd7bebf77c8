"""Every test gets a real ZooKeeper: see zkqueue/pytest_plugin.py for the fixtures.

``make test`` runs the suite on three pytest-xdist workers (``-n 3 --dist loadscope``) with the scheduler below: a
test module is one unit of work, as in xdist's own ``loadscope``, except that the folders in :data:`GROUPS` are
one unit each (but for the modules in :data:`ALONE`). The suites that load the machine most, Spark's JVMs and the
fault suite's 3-node ensemble with its worker processes, thus run one after another on one worker while the others
run the rest; the benchmark smoke tests form a unit of their own (each starts servers and peers of its own). The
longest units are handed out first (:data:`FIRST`). (xdist's ``xdist_group`` marks
cannot do this here: with pytest 9.2 xdist 3.8 no longer tags the test ids with their group.)"""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["zkqueue.server.pytest_plugin"]

#: Test folders whose tests run on one xdist worker, one after another: folder -> unit of work.
GROUPS = {"spark": "heavy", "faults": "heavy", "bench": "bench"}
#: Modules of those folders that start no JVM (no SparkSession or Spark driver, no fault ensemble): units of their
#: own, run beside the heavy unit (the run's longest) instead of lengthening it. Spark modules stay in it: two Spark
#: JVMs at once on 2 cores each took twice as long.
ALONE = frozenset({
    "tests/spark/test_reconnect.py", "tests/spark/test_options.py", "tests/spark/test_sink_dedupe_order.py",
    "tests/faults/test_repeat_faults.py", "tests/faults/test_bad_input.py", "tests/faults/test_proxy.py",
})
#: Units handed out first, in this order (xdist hands units out by test count: the heavy unit must start at once).
FIRST = ("heavy", "bench", "tests/celery/test_celery_suite.py", "tests/celery/test_kombu_suite.py",
         "tests/integration/test_parking_depth.py")


def _unit(nodeid: str) -> str | None:
    parts = nodeid.split("/")
    if len(parts) < 3 or parts[0] != "tests" or nodeid.split("::")[0] in ALONE:
        return None
    return GROUPS.get(parts[1])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only when xdist runs the suite

    class FolderScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            for scope in reversed(FIRST):  # the next unit handed out is the first of FIRST still waiting
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return FolderScopes(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--timing", choices=("all", "skip", "only"), default="all",
                     help="tests marked 'timing' (wall-clock bounds that a busy machine breaks): run them with the "
                          "rest (all), leave them out (skip: the parallel run of make test), or run only them (only: "
                          "make test's second run, with nothing else on the machine)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mode = config.getoption("--timing")
    if mode == "all":
        return
    keep, drop = [], []
    for item in items:
        (keep if (item.get_closest_marker("timing") is not None) == (mode == "only") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
