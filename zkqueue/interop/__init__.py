"""Interop with Apache Curator 5.9.0: a Java Curator peer driven from Python (tests and benchmarks)."""

from zkqueue.interop.curator_peer import (
    FAST_START_JVM_ARGS,
    THROUGHPUT_JVM_ARGS,
    ConsumerHandle,
    CuratorPeer,
    CuratorPeerError,
    compiled_peer,
)

__all__ = [
    "FAST_START_JVM_ARGS",
    "THROUGHPUT_JVM_ARGS",
    "ConsumerHandle",
    "CuratorPeer",
    "CuratorPeerError",
    "compiled_peer",
]
