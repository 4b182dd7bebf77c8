"""Helpers for the engine tests (imported as ``queueutil``: pytest puts this folder on sys.path)."""

from __future__ import annotations

from typing import Any, Iterable

from zkqueue.builder import QueueBuilder
from zkqueue.formats.serializers import JsonSerializer


def fill(client: Any, items: Iterable[Any], path: str, serializer: Any = None) -> None:
    """Put ``items`` into the queue at ``path`` (background puts, flushed)."""
    with QueueBuilder.builder(client, None, serializer or JsonSerializer(), path).build_queue() as p:
        for item in items:
            p.put(item)
        assert p.flush_puts(30)


def lock_safe_queue(client: Any, consumer: Any, path: str, lock_path: str, serializer: Any = None,
                    **options: Any) -> Any:
    """A lock-safe queue; each option is a builder method and its argument (``batch_size=5``)."""
    b = QueueBuilder.builder(client, consumer, serializer or JsonSerializer(), path).lock_path(lock_path)
    for key, value in options.items():
        getattr(b, key)(value)
    return b.build_queue()
