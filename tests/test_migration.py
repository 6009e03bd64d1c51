"""A namespace's slot migrated to another primary of a Redis Cluster (``CLUSTER SETSLOT
IMPORTING / MIGRATING``, ``MIGRATE`` of its keys, ``SETSLOT NODE``), with calls made at each step.

Every script declares the namespace's root key (which never exists) and its event stream (which
exists once anything happened). While the slot migrates, such a call meets either ``ASK`` (the
source lacks the declared keys) and then ``TRYAGAIN`` on the target (not all of them there), or
``TRYAGAIN`` at once: it is never run against half of the namespace's keys. The client says so
as ``RedisUnavailable`` (nothing applied: send it again), never a raw redis-py error; once the
slot has its new owner, every call works there, and every job is there, in both modes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from quasar_redis import Durable, JobApplied, Quasar, RedisUnavailable

from .cluster import HOST, LocalCluster, Migration, cluster_or_skip
from .helpers import REQUIRE, applied, claimed

pytestmark = [pytest.mark.cluster, pytest.mark.heavy]

LEASE = 60_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    started = cluster_or_skip(REQUIRE)
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.parametrize(
    "durable", [None, Durable(replicas=0, timeout_ms=100)], ids=["default", "durable"]
)
def test_calls_during_a_slot_migration_are_refused_whole_then_work_on_the_new_owner(
    cluster: LocalCluster, durable: Durable | None
) -> None:
    rc = RedisCluster(host=HOST, port=cluster.startup_port)
    q = Quasar(rc, f"mig-{uuid.uuid4().hex[:8]}", durable=durable)
    for i in range(6):
        applied(q.enqueue("stage", id=f"j{i}"))
    claim = claimed(q.claim("default", "w", LEASE))
    wrapped: Any = rc
    slot = wrapped.keyslot(q.keys.root)
    source = int(wrapped.get_node_from_key(q.keys.root).port)
    target = next(p for p in sorted(int(n.port) for n in wrapped.get_primaries()) if p != source)
    migration = Migration(cluster, slot, source, target)
    migration.begin()
    keys = migration.keys()
    half = keys[: len(keys) // 2]
    for step in ("begun", "half moved", "all moved"):
        with pytest.raises(RedisUnavailable, match="slot migration"):
            q.enqueue("stage", id="refused")
        with pytest.raises(RedisUnavailable):
            q.complete(claim.token, "w", result="early")
        with pytest.raises(RedisUnavailable):
            q.get_job("j1")
        if step == "begun":
            migration.move(half)
        elif step == "half moved":
            migration.move(migration.keys())
    assert migration.keys() == []
    migration.finish()
    done = q.complete(claim.token, "w", result="ok")
    assert isinstance(done, JobApplied)
    assert q.get_job("refused") is None  # (no refused call was applied on either side)
    assert all(q.get_job(f"j{i}") is not None for i in range(6))
    applied(q.enqueue("stage", id="after"))
    counts = q.counts("default")
    assert (counts.available, counts.completed) == (6, 1)
    with cluster.node_client(target) as node:
        assert node.exists(q.keys.job("after"))
    rc.close()
