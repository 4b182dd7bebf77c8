"""Child process of test_chord_body_once.py: the part that completes a chord fires its body, and the process dies
(``os._exit``) the moment Celery says the body was published, before anything else runs.

    python chord_crash_proc.py URL GROUP_ID PART_ID BODY_QUEUE
"""

from __future__ import annotations

import os
import sys

import zkqueue.celery  # noqa: F401  (registers zkqueue://)
from celery import Celery, signals, signature
from celery.app.task import Context

CRASHED = 17


def main(url: str, group_id: str, part_id: str, queue: str) -> None:
    app = Celery("chord-crash", broker=url, backend=url, set_as_current=False)
    backend = app.backend
    body = signature("zkq.test.chord-body", app=app, queue=queue)
    header = app.GroupResult(group_id, [app.AsyncResult(part_id)])
    backend.apply_chord((header.id, header.results), body)
    backend.set_chord_size(group_id, 1)

    @signals.after_task_publish.connect(weak=False)
    def die(**_kwargs: object) -> None:
        os._exit(CRASHED)

    backend.mark_as_done(part_id, 5, request=Context(id=part_id, group=group_id, chord=dict(body)))
    sys.exit(1)  # not reached when the body was published


if __name__ == "__main__":
    main(*sys.argv[1:5])
