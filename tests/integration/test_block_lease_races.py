"""Block leases when their members end on different threads at once, on a private ZooKeeper that the test stops and
starts again (the session outlives the outage, as it outlives a leader election).

A block lease's lock is deleted by the multi that finishes its last member (the "tail" of that completion) or, when
its last member ends otherwise, by a delete of its own. A completion decides its tail when it plans its multi; a
member given back by another thread while that multi waits makes the completion the last one after all. The
lock must still go: a lock left behind holds every other node of its block for as long as the session lives
(the rate-limit fault scenario found this: 55 jobs held and never run after a leader kill).
"""

from __future__ import annotations

import threading
import time

import queueutil

from zkqueue.engine.queue import DistributedQueue
from zkqueue.engine.seams import Completion
from zkqueue.formats.serializers import StrSerializer
from zkqueue.server.testing import lock_nodes, make_client, wait_for

QPATH = "/races/jobs"
LPATH = "/races/jobs-locks"


def test_a_member_given_back_while_the_completion_of_the_other_waits_out_an_outage_frees_the_block(
        zk_private_server) -> None:
    client = make_client(zk_private_server.connect_string, timeout=30.0)  # the session outlives the outage
    other = None
    try:
        queueutil.fill(client, ["a", "b", "c"], QPATH, StrSerializer())
        q = DistributedQueue(client, None, StrSerializer(), QPATH, lock_path=LPATH)
        with q:
            a, b = q.claim_nodes(2, timeout=5, block_leases=True)
            assert len(lock_nodes(client, LPATH)) == 1  # one block lock holds both (and c with them)
            zk_private_server.stop(0)
            a.completion = Completion.ack()
            completing = threading.Thread(target=q.complete_nodes, args=([a],), name="completing")
            completing.start()  # its multi, planned with b still held (so without the block's delete), waits
            time.sleep(0.5)
            assert completing.is_alive()
            q.release_nodes([b])  # b goes back while a's completion waits: a is now the block's last member
            zk_private_server.start(0)
            completing.join(60)
            assert not completing.is_alive() and a.settled == "done"
            wait_for(lambda: not lock_nodes(client, LPATH), timeout=10,
                     message=f"the block's lock was left behind: {lock_nodes(client, LPATH)}")
        # Another consumer claims the rest of the block at once (it would wait for the session to end otherwise).
        other = make_client(zk_private_server.connect_string, timeout=10.0)
        q2 = DistributedQueue(other, None, StrSerializer(), QPATH, lock_path=LPATH)
        with q2:
            rest = q2.claim_nodes(5, timeout=5)
            assert sorted(o.items[0] for o in rest) == ["b", "c"]
            for o in rest:
                o.completion = Completion.ack()
            q2.complete_nodes(rest)
    finally:
        for c in (client, other):
            if c is not None:
                c.stop()
                c.close()
