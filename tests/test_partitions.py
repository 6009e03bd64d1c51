"""A namespace of several partitions: each partition its own hash tag, every job in the partition
its id (or its flow key) names, and both clients routing each call there. On fakeredis, on one
real server, and (heavy) on a Redis Cluster of 3 primaries, each with a replica, that the module
starts: there the partitions' keys fall on the three primaries' slots."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from redis.cluster import RedisCluster

from quasar_redis import (
    BatchApplied,
    BatchRefused,
    CancelApplied,
    ClaimRefused,
    ClaimsApplied,
    Complete,
    ConfigurationError,
    CrossPartition,
    Fail,
    InvalidArgument,
    InvalidJob,
    JobApplied,
    JobRefused,
    NewJob,
    NothingClaimable,
    OutcomeApplied,
    PartitionMismatch,
    Quasar,
    QueuePaused,
    Status,
    Unique,
    Waiting,
)
from quasar_redis._keys import KeySpace
from quasar_redis._partitions import hashed, partition_of
from quasar_redis._reading import arun, job_view, run
from quasar_redis.acl import rules

from .clients import KINDS, Driven, clients
from .cluster import HOST, LocalCluster, cluster_or_skip
from .helpers import REQUIRE, T0, applied, claimed, delete_namespace, has_functions

LEASE = 60_000
COUNTS = (3, 7)

Make = Callable[..., Quasar]


@pytest.fixture(
    params=[
        "fake",
        "redis",
        pytest.param("cluster", marks=[pytest.mark.heavy, pytest.mark.cluster]),
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    """fakeredis, the real server, or the module's replicated cluster."""
    return str(request.param)


@pytest.fixture(scope="module")
def replicated() -> Iterator[LocalCluster]:
    cluster = cluster_or_skip(REQUIRE, replicas=1)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_client(
    request: pytest.FixtureRequest, backend: str, namespace: str, redis_client: Any
) -> Iterator[Any]:
    """The test's server: fakeredis or the real one (as everywhere), or a client of the
    replicated cluster, the namespace's keys deleted after."""
    if backend != "cluster":
        yield redis_client
        return
    cluster: LocalCluster = request.getfixturevalue("replicated")
    client = RedisCluster(host=HOST, port=cluster.startup_port)
    try:
        yield client
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture(params=KINDS)
def make(request: pytest.FixtureRequest, redis_client: Any, backend: str) -> Iterator[Make]:
    """Makes clients (``make(namespace, partitions=P)``), blocking and asyncio in turn."""
    with clients(str(request.param), redis_client) as made:
        yield lambda namespace, **options: made(namespace, functions=backend == "redis", **options)


@pytest.fixture(params=COUNTS, ids=[f"P{n}" for n in COUNTS])
def count(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def q(make: Make, namespace: str, count: int) -> Quasar:
    return make(namespace, partitions=count)


def written(q: Quasar) -> dict[bytes, Any]:
    """Every key of the namespace (every partition's and its record) with its value."""
    return {
        key: q.redis.dump(key)
        for key in q.redis.scan_iter(match=f"quasar:{{{q.namespace}*", count=1000)
    }


def part_key(q: Quasar, partition: int, job_id: str) -> str:
    return KeySpace(q.namespace).part(partition).job(job_id)


def id_in(partition: int, count: int, stem: str = "job") -> str:
    """A caller's id (no ``k~`` prefix) that hashes to ``partition``."""
    n = 0
    while partition_of(f"{stem}-{n}", count) != partition:
        n += 1
    return f"{stem}-{n}"


# --- the record of partitions ---------------------------------------------------------------------


def test_the_first_client_records_the_partitions_and_another_count_is_refused(
    make: Make, namespace: str
) -> None:
    first = make(namespace, partitions=3)
    applied(first.enqueue("s", id="a", now=T0))
    assert first.redis.get(KeySpace(namespace).partitions) == b"3"
    before = written(first)
    for other in (1, 5):
        with pytest.raises(PartitionMismatch, match="has 3 partitions"):
            make(namespace, partitions=other).enqueue("s", id="b", now=T0)
    assert written(first) == before
    again = make(namespace, partitions=3)
    assert again.get_job("a") is not None


def test_a_record_no_client_wrote_is_refused(make: Make, namespace: str, redis_client: Any) -> None:
    redis_client.set(KeySpace(namespace).partitions, b"many")
    q = make(namespace, partitions=2)
    with pytest.raises(PartitionMismatch, match="has many partitions"):
        q.claim("default", "w", LEASE)


@pytest.mark.parametrize("bad", [0, -1, 1025, "3", 2.0, True])
def test_a_number_of_partitions_out_of_bounds_is_refused(
    make: Make, namespace: str, bad: Any
) -> None:
    with pytest.raises(ConfigurationError, match="partitions must be"):
        make(namespace, partitions=bad)


def test_one_partition_given_keeps_the_layout_of_none_given(make: Make, namespace: str) -> None:
    q = make(namespace, partitions=1)
    job = applied(q.enqueue("s", now=T0))
    assert "~" not in job.id
    assert q.redis.exists(KeySpace(namespace).job(job.id))
    assert q.redis.get(KeySpace(namespace).partitions) == b"1"
    with pytest.raises(PartitionMismatch):
        make(namespace, partitions=2).counts("default")


# --- where jobs go --------------------------------------------------------------------------------


def test_generated_ids_name_their_partition_and_jobs_spread(q: Quasar, count: int) -> None:
    seen: list[int] = []
    for _ in range(count):  # (a batch of jobs free to go anywhere goes to one partition)
        batch = q.enqueue_many([NewJob("s") for _ in range(5)], now=T0)
        assert isinstance(batch, BatchApplied)
        partitions = {int(job.id.split("~")[0]) for job in batch.jobs}
        assert len(partitions) == 1, batch
        seen += partitions
        for job in batch.jobs:
            assert q.redis.exists(part_key(q, seen[-1], job.id))
            info = q.get_job(job.id)
            assert info is not None and info.job == job
    assert sorted(seen) == list(range(count))  # (each batch to the next partition in turn)
    singles = {int(applied(q.enqueue("s", now=T0)).id.split("~")[0]) for _ in range(count)}
    assert singles == set(range(count))


def test_jobs_free_to_go_anywhere_join_the_batchs_largest_partition(q: Quasar, count: int) -> None:
    named = [f"order-{n}" for n in range(40)]
    target = hashed(named[0], count)
    ids = [n for n in named if hashed(n, count) == target][:2]
    other = next(n for n in named if hashed(n, count) != target)
    jobs = [NewJob("s", id=ids[0]), NewJob("s"), NewJob("s", id=other), NewJob("s", id=ids[1])]
    batch = q.enqueue_many([*jobs, NewJob("s")], now=T0)
    assert isinstance(batch, BatchApplied)
    assert [batch.jobs[i].id for i in (0, 2, 3)] == [ids[0], other, ids[1]]  # (in order)
    for job in (batch.jobs[1], batch.jobs[4]):
        assert job.id.startswith(f"{target}~")
        assert q.redis.exists(part_key(q, target, job.id))


def test_a_callers_id_is_in_the_partition_its_hash_names(q: Quasar, count: int) -> None:
    for n in range(10):
        job = applied(q.enqueue("s", id=f"order-{n}", now=T0))
        where = hashed(job.id, count)
        assert q.redis.exists(part_key(q, where, job.id))
        assert q.get_job(job.id) is not None
    assert q.get_job("order-x") is None


def test_a_flow_keeps_its_jobs_and_their_dependencies_in_one_partition(
    q: Quasar, count: int
) -> None:
    flow = "order-42"
    first = applied(q.enqueue("charge", flow=flow, now=T0))
    then = applied(q.enqueue("ship", flow=flow, dependencies=[first.id], now=T0))
    named = applied(q.enqueue("mail", id=flow, dependencies=[then], now=T0))
    home = hashed(flow, count)
    assert {partition_of(j.id, count) for j in (first, then, named)} == {home}
    claim = claimed(q.claim("default", "w", LEASE, now=T0))
    assert claim.job.id == first.id  # (the others wait on it)
    applied(q.complete(claim.token, "w", now=T0))
    assert claimed(q.claim("default", "w", LEASE, now=T0)).job.id == then.id


def test_a_job_without_id_or_flow_goes_where_its_dependency_is(q: Quasar, count: int) -> None:
    dep = applied(q.enqueue("s", id=id_in(count - 1, count), now=T0))
    job = applied(q.enqueue("s", dependencies=[dep.id], now=T0))
    assert job.id.startswith(f"{count - 1}~")


def test_dependencies_in_another_partition_are_refused_and_nothing_written(
    q: Quasar, count: int
) -> None:
    a, b = id_in(0, count, "a"), id_in(1, count, "b")
    applied(q.enqueue("s", id=a, now=T0))
    applied(q.enqueue("s", id=b, now=T0))
    before = written(q)
    assert q.enqueue("s", id=id_in(1, count, "c"), dependencies=[a], now=T0) == JobRefused(
        CrossPartition(a, 0, 1)
    )
    assert q.enqueue("s", dependencies=[a, b], now=T0) == JobRefused(CrossPartition(b, 1, 0))
    flow = id_in(2, count, "f")
    assert q.enqueue("s", flow=flow, dependencies=[a], now=T0) == JobRefused(
        CrossPartition(a, 0, 2)
    )
    assert q.enqueue("s", flow=flow, id=b, now=T0) == JobRefused(CrossPartition(b, 1, 2))
    batch = [NewJob("s", flow=flow), NewJob("s", id=id_in(2, count, "d"), dependencies=[b])]
    assert q.enqueue_many(batch, now=T0) == BatchRefused(1, CrossPartition(b, 1, 2))
    assert written(q) == before
    each = q.enqueue_each(batch, now=T0)  # (each on its own: the first applied)
    assert isinstance(each[0], JobApplied) and each[1] == JobRefused(CrossPartition(b, 1, 2))


@pytest.mark.parametrize("flow", [42, b"\xff", "", "two words", ("a",)])
def test_a_flow_key_that_is_no_id_is_refused_and_nothing_written(
    make: Make, namespace: str, flow: Any
) -> None:
    for q in (make(namespace, partitions=3), make(f"{namespace}-one")):
        refused = q.enqueue("s", flow=flow, now=T0)
        assert isinstance(refused, JobRefused) and isinstance(refused.error, InvalidJob)
        assert "flow" in refused.error.reason
        many = q.enqueue_many([NewJob("s"), NewJob("s", flow=flow)], now=T0)
        assert isinstance(many, BatchRefused) and many.index == 1
        assert not [k for k in written(q) if not k.endswith(b"partitions")]


# --- batches --------------------------------------------------------------------------------------


def test_a_batch_over_partitions_answers_in_the_callers_order(q: Quasar, count: int) -> None:
    ids = [id_in(n % count, count, f"b{n}") for n in range(2 * count)]
    for ids_only in (False, True):
        stem = "x" if ids_only else "y"
        jobs = [NewJob("s", id=f"{stem}{i}") for i in ids]
        batch = q.enqueue_many(jobs, now=T0, ids_only=ids_only)
        assert isinstance(batch, BatchApplied)
        assert list(batch.ids) == [j.id for j in jobs]
        assert ids_only or [j.id for j in batch.jobs] == [j.id for j in jobs]
    each = q.enqueue_each([NewJob("s", id="y" + ids[-1]), NewJob("s", id="z")], now=T0)
    assert [type(r) for r in each] == [JobRefused, JobApplied]
    again = q.enqueue_many([NewJob("s", id="fresh"), NewJob("s", id="x" + ids[1])], now=T0)
    assert isinstance(again, BatchRefused) and again.index == 1


# --- claims and reports ---------------------------------------------------------------------------


def test_claims_take_every_partition_in_turn(q: Quasar, count: int) -> None:
    for partition in range(count):
        applied(q.enqueue("s", flow=id_in(partition, count, "flow"), now=T0))
    got = [claimed(q.claim("default", "w", LEASE, now=T0)).job.id for _ in range(count)]
    assert sorted(partition_of(i, count) for i in got) == list(range(count))
    # (the leases run out then: their jobs are claimable again)
    assert q.claim("default", "w", LEASE, now=T0) == ClaimRefused(NothingClaimable(T0 + LEASE))
    applied(q.enqueue("s", id=id_in(1, count, "later"), delay_ms=5_000, now=T0))
    applied(q.enqueue("s", id=id_in(2, count, "sooner"), delay_ms=2_000, now=T0))
    assert q.claim("default", "w", LEASE, now=T0) == ClaimRefused(NothingClaimable(T0 + 2_000))


def test_claim_many_gathers_from_the_partitions_up_to_its_limit(q: Quasar, count: int) -> None:
    one = applied(q.enqueue("s", id=id_in(0, count, "one"), now=T0))
    batch = q.enqueue_many([NewJob("s", id=id_in(1, count, f"m{n}")) for n in range(3)], now=T0)
    assert isinstance(batch, BatchApplied)
    many = q.claim_many("default", "w", LEASE, 3, now=T0)
    assert isinstance(many, ClaimsApplied) and len(many.claims) == 3
    rest = q.claim_many("default", "w", LEASE, 3, now=T0)
    assert isinstance(rest, ClaimsApplied) and len(rest.claims) == 1
    assert {c.job.id for c in many.claims + rest.claims} == {one.id, *batch.ids}


def test_a_change_and_a_supersede_go_to_their_jobs_partition(q: Quasar, count: int) -> None:
    ids = [id_in(n, count, "waiting") for n in range(3)]
    for job_id in ids:
        applied(q.enqueue("s", 0, id=job_id, delay_ms=5_000, now=T0))
    for n, job_id in enumerate(ids):
        assert applied(q.promote(job_id, now=T0 + 1)).state == Waiting(T0 + 1)
        job = applied(q.enqueue("s", n, id=job_id, input_revision=1, now=T0 + 2))
        assert (job.payload, job.input_revision) == (n, 1)
    got = [claimed(q.claim("default", "w", LEASE, now=T0 + 3)).job.id for _ in ids]
    assert sorted(got) == sorted(ids)


def test_each_lease_holders_call_goes_to_its_jobs_partition(q: Quasar, count: int) -> None:
    ids = [id_in(n, count, "lease") for n in range(3)]
    for job_id in ids:
        applied(q.enqueue("s", id=job_id, max_attempts=2, now=T0))
    claims = {c.job.id: c for c in (claimed(q.claim_job(i, "w", LEASE, now=T0)) for i in ids)}
    beat = claimed(q.heartbeat(claims[ids[0]].token, "w", 2 * LEASE, now=T0))
    assert beat.token.expires_at == T0 + 2 * LEASE
    report = q.report_many(
        "w",
        [Complete(beat.token, result=1), Fail(claims[ids[1]].token, "boom")],
        now=T0,
    )
    assert [type(r) for r in report] == [OutcomeApplied, OutcomeApplied]
    applied(q.permanent_fail(claims[ids[2]].token, "w", "no", now=T0))
    job = applied(q.retry(ids[2], now=T0))
    assert job.attempt == 1
    cancel = q.cancel(ids[1], now=T0)
    assert isinstance(cancel, CancelApplied)
    statuses = {i: q.get_job(i) for i in ids}
    assert [s.job.status(T0) if s else None for s in statuses.values()] == [
        Status.COMPLETED,
        Status.CANCELLED,
        Status.AVAILABLE,  # (retried: due at once)
    ]


# --- every partition at once ----------------------------------------------------------------------


def test_counts_queues_and_pause_cover_every_partition(q: Quasar, count: int) -> None:
    for partition in range(count):
        applied(q.enqueue("s", id=id_in(partition, count, "c"), now=T0))
    applied(q.enqueue("s", id=id_in(0, count, "d"), delay_ms=1_000, now=T0))
    counts = q.counts("default", now=T0)
    assert (counts.available, counts.scheduled) == (count, 1)
    assert q.pause("default", now=T0) is True
    assert q.claim("default", "w", LEASE, now=T0) == ClaimRefused(QueuePaused("default"))
    [info] = q.queues(now=T0)
    assert info.paused and info.counts == counts
    assert q.resume("default", now=T0) is True
    assert q.promote_due(now=T0 + 1_000) == 1
    assert q.counts("default", now=T0 + 1_000).available == count + 1
    claim = claimed(q.claim("default", "w", 1, now=T0))
    assert q.sweep_expired(now=T0 + 10).expired == (claim.job.id,)


def test_pages_by_cursor_carry_every_partitions_place(q: Quasar, count: int) -> None:
    jobs = q.enqueue_many([NewJob("s", id=f"page-{n}") for n in range(25)], now=T0)
    assert isinstance(jobs, BatchApplied)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = q.page_jobs("default", "available", after=cursor, limit=4, now=T0)
        assert len(page.jobs) <= 4
        seen += [j.id for j in page.jobs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(jobs.ids)
    for bad in ("", "P", "available:1:0:", f"P{',' * count}", 7):
        with pytest.raises(InvalidArgument):
            q.page_jobs("default", "available", after=bad, limit=4, now=T0)  # type: ignore[arg-type]


def fill(q: Quasar, count: int) -> None:
    """30 jobs due 10 ms apart in a shuffled order, of three priorities, enqueued at T0 + 100
    (those due by then claimable, the others left unpromoted); the first 18 leased, completed,
    failed to retry, failed for good or cancelled at shuffled times; 3 blocked on leased ones;
    4 more expired at their deadlines, at shuffled times."""
    ids = [id_in(n % count, count, f"j{n}") for n in range(30)]
    for n, job_id in enumerate(ids):
        at = T0 + 10 * (n * 7 % 30)
        applied(q.enqueue("s", id=job_id, priority=n % 3, available_at=at, now=T0 + 100))
    for n in range(4):
        late = id_in(n % count, count, f"x{n}")
        applied(q.enqueue("s", id=late, deadline=T0 + 101 + n * 3 % 4, now=T0 + 100))
    for k in range(4):
        q.sweep_expired(now=T0 + 101 + k)
    for n, job_id in enumerate(ids[:18]):
        now = T0 + 300 + n * 5 % 18
        if n % 6 == 5:
            assert isinstance(q.cancel(job_id, now=now), CancelApplied)
            continue
        token = claimed(q.claim_job(job_id, "w", LEASE, now=now)).token
        if n % 6 == 1:
            blocked = id_in(n % count, count, f"b{n}")
            applied(q.enqueue("s", id=blocked, dependencies=[job_id], available_at=T0 - n, now=now))
        elif n % 6 == 2:
            applied(q.complete(token, "w", now=now))
        elif n % 6 == 3:
            applied(q.fail(token, "w", "again", retry_delay_ms=1_000 - 10 * n, now=now))
        elif n % 6 == 4:
            applied(q.permanent_fail(token, "w", "no", now=now))


def test_list_jobs_merges_the_partitions_in_the_order_of_one(
    q: Quasar, make: Make, namespace: str, count: int
) -> None:
    one = make("one", tag=namespace)  # (one partition; its keys deleted with the namespace's)
    for client in (q, one):
        fill(client, count)
    for status in Status:
        size = len(one.list_jobs("default", status, now=T0 + 200))
        assert size >= 3, status
        for offset, limit in [(o, n) for o in range(0, size + 2, 2) for n in (1, 3, 100)]:
            got = q.list_jobs("default", status, offset=offset, limit=limit, now=T0 + 200)
            want = one.list_jobs("default", status, offset=offset, limit=limit, now=T0 + 200)
            assert got == want, (status, offset, limit)
    available = [j.priority for j in q.list_jobs("default", "available", now=T0 + 200)]
    assert available != sorted(available)  # (the due ones not yet promoted come last)


def test_list_jobs_refuses_what_one_partition_refuses_sending_nothing(
    make: Make, namespace: str
) -> None:
    q, one = make(namespace, partitions=3), make("one", tag=namespace)
    bad: list[tuple[str, Any, Any]] = [
        ("succeeded", 0, 10),
        ("available", -1, 10),
        ("available", "1", 10),
        ("scheduled", 1001, 1),
        ("completed", 0, 0),
        ("blocked", 0, 1001),
    ]
    for status, offset, limit in bad:
        with pytest.raises(InvalidArgument) as refused:
            one.list_jobs("default", status, offset=offset, limit=limit, now=T0)
        with pytest.raises(InvalidArgument) as same:
            q.list_jobs("default", status, offset=offset, limit=limit, now=T0)
        assert str(same.value) == str(refused.value)
    for status, offset, limit in [("completed", 990, 11), ("available", 600, 500)]:
        assert one.list_jobs("default", status, offset=offset, limit=limit, now=T0) == []
        with pytest.raises(InvalidArgument, match=r"offset \+ limit must be at most 1000"):
            q.list_jobs("default", status, offset=offset, limit=limit, now=T0)
    assert not written(q)  # (not even the record of partitions, a client's first write)


def test_purge_sends_each_id_to_its_partition(q: Quasar, count: int) -> None:
    ids = [id_in(n % count, count, f"purge{n}") for n in range(count + 1)]
    for job_id in ids:
        applied(q.enqueue("s", id=job_id, now=T0))
        q.cancel(job_id, now=T0)
    assert q.purge("default", "cancelled", [*ids, "none"], now=T0 + 120_000) == len(ids)
    assert all(q.get_job(i) is None for i in ids)


def test_a_jobs_events_and_dependents_are_read_in_its_partition(q: Quasar, count: int) -> None:
    first = applied(q.enqueue("s", flow="f", now=T0))
    then = applied(q.enqueue("s", flow="f", dependencies=[first.id], now=T0))
    flow = job_view(q.calls, first.id, 10, 10)
    if isinstance(q, Quasar):
        view = run(q, flow)
    else:  # (the asyncio client, driven on its loop)
        driven = cast(Driven, q)
        view = driven.loop.run_until_complete(arun(driven.client, flow))
    assert view is not None
    assert [d.id for d in view.dependent_statuses] == [then.id]
    assert [e.event for e in view.events] == ["available"]


def test_acl_rules_name_every_partition_and_the_record() -> None:
    words = rules(["reader"], ["orders"], partitions=3)
    keys = [w for w in words if w.startswith("~")]
    assert keys == ["~quasar:{orders}:*", *(f"~quasar:{{orders/{i}}}:*" for i in range(3))]
    assert "+get" in words and "+set" not in words  # (the record: read, an admin writes it)
    assert "+get" not in rules(["reader"], ["orders"])
    assert [w for w in rules(["reader"], ["o"], partitions=1) if w.startswith("~")] == [
        "~quasar:{o}:*"
    ]
    with pytest.raises(ConfigurationError):
        rules(["reader"], ["o"], partitions=0)


def test_a_client_given_no_partitions_sends_what_it_sent_before(
    redis_client: Any, backend: str, namespace: str
) -> None:
    """No record read, no round trip more: every command it sends is a script's call (or the
    loading of the scripts), and the namespace keeps no record."""
    q = Quasar(redis_client, namespace, functions=backend == "redis")
    sent: list[Any] = []
    send = q._send

    def recorded(command: Any) -> Any:
        sent.append(command)
        return send(command)

    q._send = recorded
    job = applied(q.enqueue("s", now=T0))
    claimed(q.claim_job(job.id, "w", LEASE, now=T0))
    assert q.counts("default", now=T0).executing == 1
    words = {c[0] for c in sent} - {"FUNCTION", "SCRIPT"}
    expected = "FCALL" if backend == "redis" else "EVALSHA"
    if backend == "redis" and not has_functions(redis_client):
        # Redis 6.2: the first FCALL is refused and the client goes on with scripts
        assert words == {"FCALL", "EVALSHA"} and sent[0][0] == "FCALL", sent
        expected, words, sent = "EVALSHA", {"EVALSHA"}, sent[1:]
    assert words == {expected}, sent
    calls = {c[3 + c[2]] for c in sent if c[0] in words}  # (their call ids: a NOSCRIPT resends)
    assert len(calls) == 3
    assert not redis_client.exists(KeySpace(namespace).partitions)


def test_jobs_of_one_dedup_key_meet_in_one_partition(q: Quasar) -> None:
    first = applied(q.enqueue("s", dedup=Unique("report"), now=T0))
    again = q.enqueue("s", dedup=Unique("report"), now=T0)
    assert isinstance(again, JobApplied) and again.deduplicated and again.job.id == first.id
    made = applied(q.enqueue("s", {"a": 1}, dedup=Unique(), now=T0))
    batch = q.enqueue_many([NewJob("s", {"a": 1}, dedup=Unique()), NewJob("s")], now=T0)
    assert isinstance(batch, BatchApplied) and batch.deduplicated == (0,)
    assert batch.jobs[0].id == made.id
