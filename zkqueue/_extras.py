"""Optional dependencies: every import of a package that an extra brings goes through :func:`require`.

``pip install zkqueue`` installs the core (kazoo, tenacity, click, croniter). The rest comes with extras::

    dashboard  flask                       zkqueue dashboard
    metrics    prometheus_client           zkqueue.metrics, zkqueue metrics
    cli        rich                        zkqueue watch, purge's progress bar, jobs repeats, demo
    spark      pyspark, pyarrow            zkqueue.spark
    celery     celery, kombu               zkqueue.celery (the zkqueue:// transport and result backend)
    otel       opentelemetry-api and -sdk  zkqueue.otel
    server     pyspark (its jars folder)   zkqueue server, ZooKeeperEnsemble, the test kit
    docker     testcontainers              ZKQUEUE_ZK=docker in the test kit
    all        every extra above but docker

A missing one raises :class:`~zkqueue.errors.MissingExtraError`, which names the extra to install.
"""

from __future__ import annotations

import importlib
import logging
import sys
from types import ModuleType

from zkqueue.errors import MissingExtraError

log = logging.getLogger("zkqueue._extras")

#: The extra that brings each optional top-level package (the import name).
EXTRA_OF: dict[str, str] = {
    "flask": "dashboard",
    "werkzeug": "dashboard",
    "prometheus_client": "metrics",
    "rich": "cli",
    "pyspark": "spark",
    "pyarrow": "spark",
    "celery": "celery",
    "kombu": "celery",
    "opentelemetry": "otel",
    "testcontainers": "docker",
}


def require(module: str, extra: str | None = None, *, what: str | None = None, hint: str = "") -> ModuleType:
    """Import ``module`` (``"flask"``, ``"pyspark.sql.datasource"``...) and return it, or raise
    :class:`MissingExtraError` naming the extra that installs it (by default the one :data:`EXTRA_OF` gives its
    top-level package). ``what`` names the feature in the message; ``hint`` adds another way out."""
    top = module.partition(".")[0]
    loaded = sys.modules.get(module)
    if loaded is not None and sys.modules.get(top) is not None:  # the common case, on hot paths too
        return loaded
    extra = extra or EXTRA_OF.get(top)
    if extra is None:
        raise ValueError(f"{top!r} is not an optional dependency of zkqueue (known: {', '.join(sorted(EXTRA_OF))})")
    try:
        importlib.import_module(top)  # first: a submodule still cached does not hide a missing package
        return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or top
        if isinstance(exc, MissingExtraError) or not (missing == top or missing.startswith(top + ".")):
            raise  # the package is there but something it imports is not: its own error says more
        log.debug("optional package %s is missing (extra %s)", module, extra)
        raise MissingExtraError(top, extra, what=what, hint=hint) from exc
