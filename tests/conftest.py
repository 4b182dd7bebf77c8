"""Every test gets a real ZooKeeper: see zkqueue/pytest_plugin.py for the fixtures.

``make test`` runs the suite on three pytest-xdist workers (``-n 3 --dist loadscope``) with the scheduler below: a
test module is one unit of work, as in xdist's own ``loadscope``, except that the folders in :data:`GROUPS` are
one unit each. The suites that load the machine most, Spark's JVMs and the fault suite's 3-node ensemble with its
worker processes, thus run one after another on one worker while the others run the rest; the benchmark
smoke tests form a unit of their own (each starts servers and peers of its own). (xdist's ``xdist_group`` marks
cannot do this here: with pytest 9.2 xdist 3.8 no longer tags the test ids with their group.)"""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["zkqueue.server.pytest_plugin"]

#: Test folders whose tests run on one xdist worker, one after another: folder -> unit of work.
GROUPS = {"spark": "heavy", "faults": "heavy", "bench": "bench"}
#: Modules of those folders that are units of their own, like any other module: they start neither Spark nor the
#: fault suite's 3-node ensemble, and the heavy unit is the suite's longest (about 790 s of the 806 s of a
#: fresh-clone run's first part, while the other two workers shared about 1,360 s).
OWN_UNITS = frozenset({"tests/faults/test_bad_input.py", "tests/faults/test_proxy.py",
                       "tests/faults/test_repeat_faults.py"})


def _unit(nodeid: str) -> str | None:
    parts = nodeid.split("/")
    if len(parts) <= 2 or parts[0] != "tests" or nodeid.split("::")[0] in OWN_UNITS:
        return None
    return GROUPS.get(parts[1])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only when xdist runs the suite

    class FolderScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid) or super()._split_scope(nodeid)

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
