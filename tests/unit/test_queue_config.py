"""QueueConfig: the options of a DistributedQueue, frozen and validated in one place, shared by QueueBuilder."""

from __future__ import annotations

import dataclasses
import inspect
from concurrent.futures import ThreadPoolExecutor

import pytest
from kazoo.security import make_digest_acl

import zkqueue
from zkqueue import QueueBuilder, StrSerializer
from zkqueue.engine import api
from zkqueue.engine.blobs import LargeItems
from zkqueue.engine.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_FINAL_FLUSH_TIME,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_PUT_OUTCOME_WAIT,
    QueueConfig,
)
from zkqueue.engine.queue import DistributedQueue
from zkqueue.errors import ConfigurationError, InvalidPathError, LockPathConflictError
from zkqueue.formats.buckets import Layout
from zkqueue.recipes.delay import DistributedDelayQueue
from zkqueue.recipes.priority import DistributedPriorityQueue

QPATH = "/cfg/q"


class _Hook:
    def claim_ops(self, node):  # noqa: ANN001, ANN201
        return []


def test_defaults_are_named_once_and_are_the_queue_keyword_defaults() -> None:
    cfg = QueueConfig()
    assert (cfg.batch_size, cfg.max_batch_bytes, cfg.final_flush_time, cfg.put_outcome_wait) == (
        DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_BYTES, DEFAULT_FINAL_FLUSH_TIME, DEFAULT_PUT_OUTCOME_WAIT)
    assert (cfg.batch_size, cfg.max_batch_bytes, cfg.final_flush_time) == (300, 4 * 2**20, 5.0)
    assert cfg.lock_path is None and cfg.put_in_background and cfg.run_mover and cfg.lock_names == "qualified"
    assert cfg.acl is None and cfg.auth == () and cfg.park_after is None
    # every option of DistributedQueue is a field of QueueConfig, with the same default
    params = {n: p for n, p in inspect.signature(DistributedQueue.__init__).parameters.items()
              if p.kind is inspect.Parameter.KEYWORD_ONLY and n != "config"}
    fields = {f.name: f.default for f in dataclasses.fields(QueueConfig)}
    assert set(params) == set(fields)
    for name, param in params.items():
        assert param.default == fields[name], name


def test_frozen() -> None:
    cfg = QueueConfig(batch_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.batch_size = 20  # type: ignore[misc]
    assert dataclasses.replace(cfg, batch_size=20).batch_size == 20
    assert cfg.batch_size == 10
    assert hash(cfg) == hash(QueueConfig(batch_size=10))


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"batch_size": 0}, ConfigurationError, "batch_size must be a positive int"),
    ({"batch_size": True}, ConfigurationError, "batch_size must be a positive int"),
    ({"max_batch_bytes": -1}, ConfigurationError, "max_batch_bytes must be a positive int"),
    ({"max_items": 0}, ConfigurationError, "max_items must be a positive int"),
    ({"final_flush_time": -1}, ConfigurationError, "final_flush_time must be >= 0 seconds"),
    ({"final_flush_time": None}, ConfigurationError, "final_flush_time must be >= 0 seconds"),
    ({"put_outcome_wait": 0}, ConfigurationError, "put_outcome_wait must be > 0 seconds"),
    ({"jute_max_buffer": 1024}, ConfigurationError, "jute_max_buffer must be an int > 1024"),
    ({"lock_names": "short"}, ConfigurationError, "lock_names must be 'qualified' or 'curator'"),
    ({"min_items_before_refresh": -1}, ConfigurationError, "min_items_before_refresh must be an int >= 0"),
    ({"acl": []}, ConfigurationError, "acl must hold at least one entry"),
    ({"acl": ["not an ACL"]}, ConfigurationError, "acl must be a non-empty list of kazoo ACL entries"),
    ({"auth": [("digest", "no-colon")]}, ConfigurationError, "auth must be 'user:password'"),
    ({"auth": ["digest"]}, ConfigurationError, "auth must hold"),
    ({"executor": object()}, ConfigurationError, "executor must be a concurrent.futures.Executor"),
    ({"claim_hook": object(), "lock_path": "/l"}, ConfigurationError, "claim_hook needs claim_ops"),
    ({"claim_hook": _Hook()}, ConfigurationError, "a claim hook needs a lock path"),
    ({"large_items": 5}, ConfigurationError, "large_items must be a LargeItems"),
    ({"producer_id": "a/b"}, ConfigurationError, "producer_id"),
    ({"park_after": -1}, ConfigurationError, "park_after must be None or a number of seconds >= 0"),
    ({"schedule_layout": (60, 2)}, ConfigurationError, "schedule_layout must be a zkqueue.formats.buckets.Layout"),
    ({"lock_path": "nope"}, InvalidPathError, "nope"),
    ({"quarantine_path": "/a/"}, InvalidPathError, "/a/"),
])
def test_validation_messages(options, error, message) -> None:  # noqa: ANN001
    with pytest.raises(error, match=message):
        QueueConfig(**options)
    with pytest.raises(error, match=message):  # replace() validates again
        dataclasses.replace(QueueConfig(), **options)


def test_paths_are_checked_against_the_queue_path() -> None:
    assert QueueConfig().paths(QPATH).quarantine == QPATH + "-quarantine"
    assert QueueConfig().paths(QPATH).receipt == QPATH + "-receipts"
    with pytest.raises(LockPathConflictError, match="must not be the queue path or inside it"):
        QueueConfig(lock_path=QPATH + "/locks").paths(QPATH)
    with pytest.raises(LockPathConflictError, match="must not contain the queue path"):
        QueueConfig(lock_path="/cfg").paths(QPATH)
    with pytest.raises(ConfigurationError, match="quarantine path .* must not be the queue path or inside it"):
        QueueConfig(quarantine_path=QPATH + "/q").paths(QPATH)
    with pytest.raises(ConfigurationError, match="the queue path cannot be the root"):
        QueueConfig().paths("/")


def test_normalised_once() -> None:
    acl = [make_digest_acl("u", "p", all=True)]
    cfg = QueueConfig(acl=acl, auth=[["digest", "u:p"]], final_flush_time=1, put_outcome_wait=2, park_after=3,
                      max_items=5)
    assert cfg.acl == tuple(acl) and cfg.auth == (("digest", "u:p"),)
    assert (cfg.final_flush_time, cfg.put_outcome_wait, cfg.park_after) == (1.0, 2.0, 3.0)
    assert cfg.put_in_background is False  # max_items forces foreground puts, as Curator


def test_of_applies_only_options_set_away_from_their_defaults() -> None:
    base = QueueConfig(lock_path="/l", batch_size=7, lock_names="curator")
    merged = QueueConfig.of(base, batch_size=DEFAULT_BATCH_SIZE, lock_names="qualified", refresh_on_watch=True,
                            min_items_before_refresh=0, auth=[], acl=None)
    assert merged == dataclasses.replace(base, refresh_on_watch=True, min_items_before_refresh=0)
    assert QueueConfig.of(base) is base
    assert QueueConfig.of(None, batch_size=3) == QueueConfig(batch_size=3)
    with pytest.raises(ConfigurationError, match="config must be a QueueConfig"):
        QueueConfig.of({"batch_size": 3})  # type: ignore[arg-type]


def test_exported() -> None:
    assert zkqueue.QueueConfig is QueueConfig
    assert api.QueueConfig is QueueConfig and "QueueConfig" in api.__all__


def test_builder_setters_validate_through_the_config(zk_client) -> None:  # noqa: ANN001
    b = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH)
    for setter, bad, message in [(b.batch_size, 0, "batch_size"), (b.max_batch_bytes, 0, "max_batch_bytes"),
                                 (b.max_items, -1, "max_items"), (b.final_flush_time, -2, "final_flush_time"),
                                 (b.jute_max_buffer, 10, "jute_max_buffer"), (b.lock_names, "x", "lock_names"),
                                 (b.put_outcome_wait, 0, "put_outcome_wait"), (b.executor, "x", "executor"),
                                 (b.schedule_layout, 1, "schedule_layout"), (b.producer_id, "", "producer_id")]:
        with pytest.raises(ConfigurationError, match=message):
            setter(bad)
    assert b.config == QueueConfig()  # a refused value leaves the builder as it was
    with pytest.raises(ConfigurationError, match="serializer needs serialize"):
        QueueBuilder.builder(zk_client, None, None, QPATH)
    with pytest.raises(ConfigurationError, match="client is required"):
        QueueBuilder.builder(None, None, StrSerializer(), QPATH)


def test_builder_and_queue_end_up_with_equal_configs(zk_client) -> None:  # noqa: ANN001
    executor = ThreadPoolExecutor(1)
    acl = [make_digest_acl("u", "p", all=True)]
    layout = Layout(hour_s=60, minute_s=2)
    try:
        built = (QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH)
                 .lock_path("/cfg/locks").max_items(50).executor(executor).final_flush_time(1)
                 .quarantine_path("/cfg/quar").batch_size(20).max_batch_bytes(2**20).jute_max_buffer(2**19)
                 .lock_names("curator").acl(acl).auth("u:p").large_items(max_item_bytes=2**22)
                 .producer_id("p1").put_outcome_wait(9).run_mover(False).schedule_layout(layout)
                 .build_queue())
        direct = DistributedQueue(
            zk_client, None, StrSerializer(), QPATH, lock_path="/cfg/locks", max_items=50, executor=executor,
            final_flush_time=1.0, quarantine_path="/cfg/quar", batch_size=20, max_batch_bytes=2**20,
            jute_max_buffer=2**19, lock_names="curator", acl=acl, auth=[("digest", "u:p")],
            large_items=LargeItems(max_item_bytes=2**22), producer_id="p1", put_outcome_wait=9, run_mover=False,
            schedule_layout=layout)
        assert built.config == direct.config
        assert built.config.put_in_background is False
        assert (built.lock_path, built.quarantine_path) == ("/cfg/locks", "/cfg/quar")
        assert QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue().config == QueueConfig()
        assert DistributedQueue(zk_client, None, StrSerializer(), QPATH, config=direct.config).config == direct.config
    finally:
        executor.shutdown()


def test_recipes_keep_their_settings_on_a_builder_config(zk_client) -> None:  # noqa: ANN001
    b = QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).lock_path("/cfg/locks").batch_size(11)
    prio = b.build_priority_queue(3)
    assert isinstance(prio, DistributedPriorityQueue)
    assert prio.config == dataclasses.replace(b.config, refresh_on_watch=True, min_items_before_refresh=3)
    delay = b.build_delay_queue(park_after=None)
    assert isinstance(delay, DistributedDelayQueue)
    assert delay.config.batch_size == 11 and delay.config.refresh_on_watch and delay.config.park_after is None
    assert b.build_delay_queue().config.park_after == 60.0


def test_pull_mode_needs_a_lock_path_and_no_consumer(zk_client) -> None:  # noqa: ANN001
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).build_queue() as q:
        with pytest.raises(ConfigurationError, match="pull mode"):
            q.claim_nodes(1, timeout=0)
    with QueueBuilder.builder(zk_client, lambda item: None, StrSerializer(), QPATH).lock_path(
            "/cfg/locks").build_queue() as q:
        with pytest.raises(ConfigurationError, match="pull mode"):
            q.claim_nodes(1, timeout=0)
    with QueueBuilder.builder(zk_client, None, StrSerializer(), QPATH).lock_path("/cfg/locks").max_items(
            10).build_queue() as q:
        q.put("a")
        [held] = q.claim_nodes(1, timeout=5)
        assert held.items == ["a"]
        q.release_nodes([held])
