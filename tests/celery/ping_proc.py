"""``python tests/celery/ping_proc.py <worker hostname>...``: one ``inspect().ping()`` of the test app from a process
of its own; prints ``<seconds the ping took> <json of the replies>`` (the set-up of the app is not timed)."""

from __future__ import annotations

import json
import sys
import time

from tests.celery.celery_app import app


def main(names: list[str]) -> None:
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        inspect = app.control.inspect(destination=names, timeout=20, connection=conn)
        started = time.monotonic()
        replies = inspect.ping() or {}
        took = time.monotonic() - started
    print(f"{took:.3f} {json.dumps(replies)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
