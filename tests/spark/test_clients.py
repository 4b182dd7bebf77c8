"""One kazoo client per Python worker process, shared by the tasks that process runs."""

from __future__ import annotations

import pytest

from zkqueue.errors import ConfigurationError
from zkqueue.spark.clients import ZkSettings, close_all, get_client, parse_auth

pytestmark = pytest.mark.spark


def test_tasks_in_one_worker_share_one_session(spark, zk_hosts):
    settings = ZkSettings(zk_hosts, session_timeout=4.0)

    def session_of(_rows):
        import os

        client = get_client(settings)
        assert client.connected
        yield os.getpid(), client.client_id[0]

    pairs = spark.sparkContext.parallelize(range(12), 12).mapPartitions(session_of).collect()
    sessions_by_pid: dict[int, set[int]] = {}
    for pid, session in pairs:
        sessions_by_pid.setdefault(pid, set()).add(session)
    assert len(pairs) == 12
    assert len(sessions_by_pid) < 12  # workers were reused across tasks...
    assert all(len(sessions) == 1 for sessions in sessions_by_pid.values())  # ...and so were their clients
    assert len({s for sessions in sessions_by_pid.values() for s in sessions}) == len(sessions_by_pid)


def test_cache_key_and_close_all(zk_hosts):
    close_all()
    a = get_client(ZkSettings(zk_hosts, session_timeout=4.0))
    assert get_client(ZkSettings(zk_hosts, session_timeout=4.0)) is a
    b = get_client(ZkSettings(zk_hosts, session_timeout=5.0))
    assert b is not a
    assert close_all() == 2
    assert not a.connected and not b.connected
    c = get_client(ZkSettings(zk_hosts, session_timeout=4.0))
    assert c is not a and c.connected
    close_all()


def test_settings_are_checked():
    assert parse_auth("digest:u:p, sasl:x") == (("digest", "u:p"), ("sasl", "x"))
    with pytest.raises(ConfigurationError, match="scheme:credential"):
        parse_auth("digest")
    with pytest.raises(ConfigurationError, match="needs auth"):
        ZkSettings("h:1", acl="creator")
    with pytest.raises(ConfigurationError, match="required"):
        ZkSettings(" ")
    with pytest.raises(ConfigurationError, match="chroot"):
        ZkSettings("h:1/app", chroot="/x")
