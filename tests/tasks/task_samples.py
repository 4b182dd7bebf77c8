"""Task functions for tests/tasks. The by-name test's producer process enqueues them without importing this
module; the tests register them on apps of their own with :func:`register` (names ``task_samples.<function>``)."""

from __future__ import annotations

import asyncio
from typing import Any

from zkqueue.jobs import RetryPolicy


def add(x: int, y: int) -> int:
    return x + y


def send_mail(to: str, subject: str = "") -> dict[str, str]:
    return {"to": to, "subject": subject}


async def text_length(text: str) -> int:
    await asyncio.sleep(0)
    return len(text)


def always_fails(message: str) -> None:
    raise ValueError(message)


def register(app: Any, retry: RetryPolicy | None = None) -> dict[str, Any]:
    """Register the functions above on ``app``: add on "default", send_mail on "mail", text_length on "fetch",
    always_fails on "default" with ``retry``."""
    return {
        "add": app.task(add),
        "send_mail": app.task(queue="mail")(send_mail),
        "text_length": app.task(queue="fetch")(text_length),
        "always_fails": app.task(retry=retry)(always_fails),
    }
