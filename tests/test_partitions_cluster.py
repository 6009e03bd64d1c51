"""A partitioned namespace on the suite's 3-master Redis Cluster, through both clients: its
partitions land on several slots and masters, each script stays in its partition's slot (the
ACL user may touch only the partitions' keys and the record), a flow keeps its jobs and their
dependencies together, and a durable call waits on each partition's own primary."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

from quasar_redis import (
    App,
    AsyncQuasar,
    BatchApplied,
    ClaimsApplied,
    Complete,
    CrossPartition,
    Durable,
    Job,
    JobRefused,
    NewJob,
    OutcomeApplied,
    PartitionMismatch,
    Quasar,
    Status,
    Worker,
)
from quasar_redis._keys import KeySpace
from quasar_redis._partitions import hashed, partition_of
from quasar_redis.acl import setuser

from .clients import KINDS, Driven
from .cluster import HOST, LocalCluster
from .helpers import applied, claimed, has_functions
from .test_cluster import local_cluster

__all__ = ["local_cluster"]  # (the fixture: the cluster the session starts once)

pytestmark = pytest.mark.cluster

LEASE = 60_000


def confine(cluster: LocalCluster, namespace: str, count: int) -> tuple[str, str]:
    """An ACL user, on every node, that may touch only the namespace's partitions and record."""
    user, password = f"p-{namespace}", os.urandom(12).hex()
    keys = KeySpace(namespace)
    patterns = [f"~{keys.part(i).root}*" for i in range(count)] + [f"~{keys.partitions}"]
    for port in cluster.ports:
        with cluster.node_client(port) as node:
            node.execute_command(
                "ACL", "SETUSER", user, "reset", "on", f">{password}", *patterns, "+@all"
            )
    return user, password


def spread_namespace(cluster: LocalCluster, count: int) -> str:
    """A fresh namespace whose partitions are on distinct slots and every master."""
    with RedisCluster(host=HOST, port=cluster.startup_port) as rc:
        masters = len(rc.get_primaries())
        while True:
            namespace = f"p-{uuid.uuid4().hex[:10]}"
            roots = [KeySpace(namespace).part(i).root for i in range(count)]
            nodes = {rc.get_node_from_key(root).name for root in roots}
            if len({key_slot(r.encode()) for r in roots}) == count and len(nodes) == masters:
                return namespace


@pytest.fixture(params=KINDS)
def make(request: pytest.FixtureRequest, local_cluster: LocalCluster) -> Iterator[Any]:
    """Makes a confined client of a fresh namespace of ``count`` partitions, of each kind."""
    loop = asyncio.new_event_loop()
    closing: list[Any] = []

    def made(count: int, namespace: str | None = None, **options: Any) -> Quasar:
        namespace = namespace or spread_namespace(local_cluster, count)
        user, password = confine(local_cluster, namespace, count)
        port = local_cluster.startup_port
        if request.param == "sync":
            client = RedisCluster(host=HOST, port=port, username=user, password=password)
            closing.append(client.close)
            return Quasar(client, namespace, partitions=count, **options)
        aclient = AsyncRedisCluster(host=HOST, port=port, username=user, password=password)
        closing.append(lambda: loop.run_until_complete(aclient.aclose()))
        q = AsyncQuasar(aclient, namespace, partitions=count, **options)
        return cast(Quasar, Driven(q, loop, RedisCluster(host=HOST, port=port)))

    try:
        yield made
    finally:
        for close in closing:
            close()
        loop.close()


def slots_and_masters(cluster: LocalCluster, namespace: str, count: int) -> tuple[set[int], int]:
    """The slots the namespace's keys are on (each key checked to be in its partition's slot),
    and how many masters hold any."""
    keys, slots, masters = KeySpace(namespace), set(), 0
    for port in cluster.ports:
        with cluster.node_client(port) as node:
            found = list(node.scan_iter(match=f"quasar:{{{namespace}*", count=1000))
        masters += bool(found)
        for key in found:
            if key == keys.partitions.encode():
                continue
            part = int(key.split(b"/")[1].split(b"}")[0])
            assert part < count and key_slot(key) == key_slot(keys.part(part).root.encode())
            slots.add(key_slot(key))
    return slots, masters


@pytest.mark.parametrize("count", [3, 7])
def test_a_partitioned_namespace_spreads_over_the_cluster(
    make: Any, local_cluster: LocalCluster, count: int
) -> None:
    q = make(count)
    jobs: list[Job] = []
    for _ in range(count):  # (a batch of jobs free to go anywhere: the next partition's)
        batch = q.enqueue_many([NewJob("s") for _ in range(20)])
        assert isinstance(batch, BatchApplied)
        jobs += batch.jobs
    flow = "order-42"
    first = applied(q.enqueue("charge", flow=flow, queue="orders"))
    then = applied(q.enqueue("ship", flow=flow, queue="orders", dependencies=[first.id]))
    assert partition_of(then.id, count) == hashed(flow, count)
    other = next(j for j in jobs if partition_of(j.id, count) != hashed(flow, count))
    assert q.enqueue("s", flow=flow, dependencies=[other.id]) == JobRefused(
        CrossPartition(other.id, partition_of(other.id, count), hashed(flow, count))
    )
    claims = q.claim_many("default", "w", LEASE, 20 * count)
    assert isinstance(claims, ClaimsApplied) and len(claims.claims) == 20 * count
    report = q.report_many("w", [Complete(c.token, result=1) for c in claims.claims])
    assert all(isinstance(r, OutcomeApplied) for r in report)
    assert q.counts("default").completed == 20 * count
    job = claimed(q.claim("orders", "w", LEASE))
    assert job.job.id == first.id
    applied(q.complete(job.token, "w"))
    applied(q.complete(claimed(q.claim_job(then.id, "w", LEASE)).token, "w"))
    info = q.get_job(then.id)
    assert info is not None and info.job.status(0) is Status.COMPLETED
    slots, masters = slots_and_masters(local_cluster, q.namespace, count)
    assert len(slots) == count and masters == len(local_cluster.ports)
    with pytest.raises(PartitionMismatch):
        make(count + 1, q.namespace).counts("default")


def test_durable_calls_go_to_each_partitions_primary(make: Any) -> None:
    """Durable mode on a namespace whose partitions are on every master: each script and the
    WAIT behind it go to the primary of its partition's slot, a call alone and a round trip
    over every partition alike (replicas=0: the test session's cluster has no replicas)."""
    count = 3
    q = make(count, durable=Durable(replicas=0, timeout_ms=100))
    ids = {partition_of(f"d-{n}", count): f"d-{n}" for n in range(50)}
    assert sorted(ids) == list(range(count))
    for job_id in ids.values():
        assert applied(q.enqueue("s", id=job_id)).id == job_id
    flows = {hashed(f"f{n}", count): f"f{n}" for n in range(50)}
    batch = q.enqueue_many([NewJob("s", flow=f) for f in flows.values() for _ in range(3)])
    assert isinstance(batch, BatchApplied)
    assert {partition_of(j.id, count) for j in batch.jobs} == set(range(count))
    claims = q.claim_many("default", "w", LEASE, 4 * count)
    assert isinstance(claims, ClaimsApplied) and len(claims.claims) == 4 * count
    report = q.report_many("w", [Complete(c.token, result=1) for c in claims.claims])
    assert all(isinstance(r, OutcomeApplied) for r in report), report
    assert q.counts("default").completed == 4 * count


def test_a_worker_serves_every_partition_on_the_cluster(local_cluster: LocalCluster) -> None:
    """In one process: a worker whose idle wait is a BLPOP per partition (one slot each)."""
    count = 3
    namespace = spread_namespace(local_cluster, count)
    url = "redis+cluster://" + ",".join(f"{HOST}:{port}" for port in local_cluster.ports)
    with App(url, namespace=namespace, partitions=count) as app:

        def triple(n: int) -> int:
            return 3 * n

        task = app.task(triple, name="triple")
        with Worker(app, concurrency=4, idle_wait=60.0, maintenance_interval=0.1):
            first = task.enqueue(1)
            assert first.result(timeout=30) == 3  # (an idle worker woken, whatever partition)
            handles = [task.options(flow=f"f{n}").enqueue(n) for n in range(9)]
            assert [h.result(timeout=30) for h in handles] == [3 * n for n in range(9)]
        assert {partition_of(h.id, count) for h in handles} == set(range(count))
        assert app.client.counts("default").completed == 10


def test_role_users_of_a_partitioned_namespace_work_on_the_cluster(
    local_cluster: LocalCluster,
) -> None:
    """A producer and a worker made by ``acl.setuser(..., partitions=P)`` on every node, once
    an admin wrote the namespace's record: each reaches every partition, and only its own."""
    count = 3
    namespace = spread_namespace(local_cluster, count)
    port = local_cluster.startup_port
    with RedisCluster(host=HOST, port=port) as admin:
        admin.set(KeySpace(namespace).partitions, str(count))
        users = {}
        for role in ("producer", "worker"):
            name, password = f"{role}-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
            words = setuser(
                name,
                [role],
                [namespace],
                password=password,
                cluster=True,
                partitions=count,
                paths="both" if has_functions(admin) else "scripts",  # (Redis 6.2: no +fcall)
            )
            admin.execute_command(*words, target_nodes=admin.ALL_NODES)
            users[role] = RedisCluster(host=HOST, port=port, username=name, password=password)
    producer = Quasar(users["producer"], namespace, partitions=count)
    worker = Quasar(users["worker"], namespace, partitions=count)
    try:
        batch = producer.enqueue_many([NewJob("s", flow=f"f{n}") for n in range(6)])
        assert isinstance(batch, BatchApplied)
        claims = worker.claim_many("default", "w", LEASE, 6)
        assert isinstance(claims, ClaimsApplied) and len(claims.claims) == 6
        report = worker.report_many("w", [Complete(c.token) for c in claims.claims])
        assert all(isinstance(r, OutcomeApplied) for r in report)
    finally:
        for client in users.values():
            client.close()
