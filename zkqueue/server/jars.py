"""Find the ZooKeeper and Curator jars that zkqueue runs against.

The default source is the ``jars`` folder of the installed pyspark wheel, which ships ZooKeeper 3.9.5 and
Curator 5.9.0. ``ZOOKEEPER_CLASSPATH`` (a classpath string, used verbatim) or ``ZOOKEEPER_HOME`` (an unpacked
ZooKeeper install: ``lib/*.jar`` and ``*.jar``) override it for the server.
"""

from __future__ import annotations

import glob
import logging
import os
from pathlib import Path

from zkqueue._extras import require
from zkqueue.errors import EnvironmentProblem

log = logging.getLogger("zkqueue.server.jars")

#: Jar name prefixes a standalone or quorum ZooKeeper server needs. snappy and metrics-core are easy to miss:
#: without them the server dies after its client port already listens.
ZOOKEEPER_SERVER_JARS = (
    "zookeeper-3",
    "zookeeper-jute-",
    "slf4j-api-",
    "metrics-core-",
    "snappy-java-",
    "log4j-slf4j2-impl-",
    "log4j-api-",
    "log4j-core-",
    "netty-",
    "commons-io-",
    "commons-cli-",
)

#: What a Curator 5.9.0 client program needs on top of the ZooKeeper client jars.
CURATOR_CLIENT_JARS = (
    "curator-client-",
    "curator-framework-",
    "curator-recipes-",
    "guava-",
    "failureaccess-",
    "zookeeper-3",
    "zookeeper-jute-",
    "slf4j-api-",
    "log4j-slf4j2-impl-",
    "log4j-api-",
    "log4j-core-",
    "netty-",
    "metrics-core-",
    "snappy-java-",
)


def pyspark_jars_dir() -> Path:
    """The ``jars`` folder of the installed pyspark wheel."""
    pyspark = require("pyspark", extra="server", what="the embedded ZooKeeper (the jars of the pyspark wheel)",
                      hint="or set ZOOKEEPER_CLASSPATH, or ZOOKEEPER_HOME to an unpacked ZooKeeper 3.9")
    jars = Path(pyspark.__file__).parent / "jars"
    if not jars.is_dir():
        raise EnvironmentProblem(f"pyspark is installed but has no jars folder at {jars}")
    return jars


def _select(folder: Path, prefixes: tuple[str, ...]) -> list[str]:
    names = sorted(os.listdir(folder))
    chosen = [str(folder / n) for n in names if n.endswith(".jar") and n.startswith(prefixes)]
    return chosen


def _require(classpath: list[str], needed: tuple[str, ...], where: str) -> None:
    base = {os.path.basename(p) for p in classpath}
    for prefix in needed:
        if not any(name.startswith(prefix) for name in base):
            raise EnvironmentProblem(f"no {prefix}*.jar found in {where}; ZooKeeper cannot run without it")


def zookeeper_classpath() -> str:
    """The classpath for ``org.apache.zookeeper.server.quorum.QuorumPeerMain``."""
    explicit = os.environ.get("ZOOKEEPER_CLASSPATH")
    if explicit:
        return explicit
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        parts = sorted(glob.glob(os.path.join(home, "*.jar")) + glob.glob(os.path.join(home, "lib", "*.jar")))
        if not parts:
            raise EnvironmentProblem(f"ZOOKEEPER_HOME={home} holds no jars (expected *.jar or lib/*.jar)")
        return os.pathsep.join(parts)
    folder = pyspark_jars_dir()
    parts = _select(folder, ZOOKEEPER_SERVER_JARS)
    _require(parts, ("zookeeper-3", "zookeeper-jute-", "slf4j-api-", "metrics-core-", "snappy-java-"), str(folder))
    return os.pathsep.join(parts)


def curator_classpath() -> str:
    """The classpath for a Curator 5.9.0 client program (the interop and benchmark peer)."""
    folder = pyspark_jars_dir()
    parts = _select(folder, CURATOR_CLIENT_JARS)
    _require(parts, ("curator-client-", "curator-framework-", "curator-recipes-", "guava-", "zookeeper-3"), str(folder))
    return os.pathsep.join(parts)
