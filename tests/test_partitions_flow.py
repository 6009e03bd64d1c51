"""Flow control on a namespace of several partitions: a group's jobs in its one partition (its
turns, rates, cap and holds whole there), a queue's rate and cap shared out among the
partitions, and ``flow`` reading them back as set for the namespace. On fakeredis and on one
real server, with both clients, and (heavy) on a Redis Cluster of 3 primaries, each with a
replica, that the module starts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from quasar_redis import (
    UNLIMITED,
    BatchApplied,
    BatchRefused,
    ClaimRefused,
    ClaimsApplied,
    CrossPartition,
    InvalidArgument,
    InvalidJob,
    JobRefused,
    NewJob,
    NothingClaimable,
    Quasar,
    Rate,
)
from quasar_redis._keys import KeySpace
from quasar_redis._partitions import cap_shares, group_partition, merge_flows, partition_of, split

from .clients import KINDS, clients
from .cluster import HOST, LocalCluster, cluster_or_skip
from .helpers import REQUIRE, T0, applied, claimed, delete_namespace

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
    """The test's server: fakeredis or the real one, or a client of the replicated cluster,
    the namespace's keys deleted after."""
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
    with clients(str(request.param), redis_client) as made:
        yield lambda namespace, **options: made(namespace, functions=backend == "redis", **options)


@pytest.fixture(params=COUNTS, ids=[f"P{n}" for n in COUNTS])
def count(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def q(make: Make, namespace: str, count: int) -> Quasar:
    return make(namespace, partitions=count)


def written(q: Quasar) -> dict[bytes, Any]:
    return {
        key: q.redis.dump(key)
        for key in q.redis.scan_iter(match=f"quasar:{{{q.namespace}*", count=1000)
    }


def flow_hash(q: Quasar, partition: int, queue: str = "default") -> dict[bytes, bytes]:
    """A partition's flow hash of ``queue`` (its limits, lua/include/flow_control.lua)."""
    root = KeySpace(q.namespace).part(partition).root
    return dict(q.redis.hgetall(f"{root}q:{queue}:flow"))


def group_in(partition: int, count: int, stem: str = "tenant") -> str:
    """A group name whose jobs go to ``partition``."""
    n = 0
    while group_partition(f"{stem}-{n}", count) != partition:
        n += 1
    return f"{stem}-{n}"


def id_in(partition: int, count: int, stem: str = "job") -> str:
    n = 0
    while partition_of(f"{stem}-{n}", count) != partition:
        n += 1
    return f"{stem}-{n}"


def fill(q: Quasar, count: int, per_partition: int, queue: str = "default") -> None:
    """``per_partition`` jobs without a group in every partition."""
    for k in range(count):
        flow = id_in(k, count, "f")
        jobs = [NewJob("s", queue=queue, flow=flow) for _ in range(per_partition)]
        assert isinstance(q.enqueue_many(jobs, now=T0), BatchApplied)


def claim_all(q: Quasar, now: int, queue: str = "default") -> list[Any]:
    got = q.claim_many(queue, "w", LEASE, 1000, now=now)
    return list(got.claims) if isinstance(got, ClaimsApplied) else []


# --- where a group's jobs go ----------------------------------------------------------------------


def test_the_jobs_of_a_group_land_in_its_one_partition(q: Quasar, count: int) -> None:
    group = "acme"
    home = group_partition(group, count)
    one = [applied(q.enqueue("s", group=group, now=T0)) for _ in range(count * 2)]
    batch = q.enqueue_many(
        [NewJob("s", group=group), NewJob("s"), NewJob("s", group=group, priority=5)], now=T0
    )
    assert isinstance(batch, BatchApplied)
    each = q.enqueue_each([NewJob("s", group=group) for _ in range(3)], now=T0)
    ids = [j.id for j in one] + [batch.ids[0], batch.ids[2]] + [applied(r).id for r in each]
    assert {partition_of(i, count) for i in ids} == {home}
    # its own id and its dependencies may be given, in its partition
    named = id_in(home, count, "mine")
    applied(q.enqueue("s", id=named, group=group, dependencies=[one[0].id], now=T0))
    # a group is the flow key of a job without one: a job whose flow key is the group goes along
    assert partition_of(applied(q.enqueue("s", flow=group, group=group, now=T0)).id, count) == home
    info = q.flow("default", group=group, now=T0)
    assert [(g.name, g.ready) for g in info.groups] == [
        (group, count * 2 + 2 + 3 + 1)
    ]  # (one blocked on its dependency)


def test_an_empty_group_is_no_group_and_places_nothing(q: Quasar, count: int) -> None:
    spread = {
        partition_of(applied(q.enqueue("s", group="", now=T0)).id, count) for _ in range(count)
    }
    assert spread == set(range(count))


def test_ids_and_dependencies_of_another_partition_than_the_groups_are_refused(
    q: Quasar, count: int
) -> None:
    group = group_in(0, count)
    elsewhere = id_in(1, count, "other")
    dep = applied(q.enqueue("s", id=id_in(2, count, "dep"), now=T0))
    before = written(q)
    assert q.enqueue("s", id=elsewhere, group=group, now=T0) == JobRefused(
        CrossPartition(elsewhere, 1, 0)
    )
    assert q.enqueue("s", group=group, dependencies=[dep.id], now=T0) == JobRefused(
        CrossPartition(dep.id, 2, 0)
    )
    # a flow key and a group of two partitions: the group would be split, refused by its name
    flow = id_in(1, count, "flow")
    assert q.enqueue("s", flow=flow, group=group, now=T0) == JobRefused(CrossPartition(group, 0, 1))
    batch = [NewJob("s", group=group), NewJob("s", group=group, dependencies=[dep.id])]
    assert q.enqueue_many(batch, now=T0) == BatchRefused(1, CrossPartition(dep.id, 2, 0))
    assert written(q) == before
    each = q.enqueue_each(batch, now=T0)
    assert partition_of(applied(each[0]).id, count) == 0
    assert each[1] == JobRefused(CrossPartition(dep.id, 2, 0))


def test_a_group_that_is_no_id_is_refused_and_nothing_written(q: Quasar) -> None:
    before = written(q)
    for group in ("a b", "x" * 1000):
        refused = q.enqueue("s", group=group, now=T0)
        assert isinstance(refused, JobRefused) and isinstance(refused.error, InvalidJob)
        assert "group" in refused.error.reason
        many = q.enqueue_many([NewJob("s"), NewJob("s", group=group)], now=T0)
        assert isinstance(many, BatchRefused) and many.index == 1
        assert isinstance(many.error, InvalidJob)
    assert written(q) == before


# --- a queue's limits shared out ------------------------------------------------------------------


def test_shares_of_a_total_and_of_a_cap() -> None:
    assert split(10, 3) == [4, 3, 3] and split(2, 3) == [1, 1, 0] and split(0, 2) == [0, 0]
    assert cap_shares(5, 3) == [2, 2, 1]
    assert cap_shares(2, 3) == [1, 1, 1]  # (at least one each)
    assert cap_shares(None, 2) == [None, None]


def test_set_limits_gives_each_partition_its_share(q: Quasar, count: int) -> None:
    applied(q.enqueue("s", now=T0))
    q.set_limits(
        "default",
        rate=Rate(10, per=2, burst=count + 1),
        concurrency=2 * count + 1,
        group_rate="3/s",
        group_concurrency=2,
        now=T0,
    )
    bursts = [2] + [1] * (count - 1)  # count + 1 shared: the first gets one more
    caps = [3] + [2] * (count - 1)
    for k in range(count):
        limits = flow_hash(q, k)
        assert limits[b"rate"] == f"10 {2000 * count} {bursts[k]}".encode()
        assert limits[b"cap"] == str(caps[k]).encode()
        assert limits[b"grate"] == b"3 1000 0" and limits[b"gcap"] == b"2"
    info = q.flow("default", now=T0)
    assert info.rate == Rate(10, per=2, burst=count + 1)
    assert info.concurrency == 2 * count + 1
    assert info.group_rate == Rate(3) and info.group_concurrency == 2
    # None removes a limit everywhere, KEEP leaves the others as they are
    q.set_limits("default", rate=None, now=T0)
    assert all(b"rate" not in flow_hash(q, k) for k in range(count))
    info = q.flow("default", now=T0)
    assert info.rate is None and info.concurrency == 2 * count + 1


def test_a_cap_under_the_partitions_leaves_one_to_each(q: Quasar, count: int) -> None:
    applied(q.enqueue("s", now=T0))
    q.set_limits("default", concurrency=2, now=T0)
    assert [flow_hash(q, k)[b"cap"] for k in range(count)] == [b"1"] * count
    assert q.flow("default", now=T0).concurrency == count  # (the bound: max(cap, P))


def test_the_queues_cap_holds_over_the_namespace(q: Quasar, count: int) -> None:
    fill(q, count, 3)
    q.set_limits("default", concurrency=count + 1, now=T0)
    got = claim_all(q, T0)
    assert len(got) == count + 1  # each partition to its share: 2, then 1 each
    assert sorted(partition_of(c.job.id, count) for c in got) == sorted([0, *range(count)])
    assert claim_all(q, T0) == []
    info = q.flow("default", now=T0)
    assert info.leased == count + 1 and info.waiting_on.startswith("its concurrency cap")
    q.complete(got[0].token, "w", now=T0)  # a lease ends: its partition starts another
    again = claim_all(q, T0)
    assert [partition_of(c.job.id, count) for c in again] == [partition_of(got[0].job.id, count)]


def test_the_queues_rate_is_shared_out(q: Quasar, count: int) -> None:
    """2 a second with no burst: each partition 2 per ``count`` seconds, one start every
    ``count / 2`` seconds; at most 2 + (P - 1) start in a second over the namespace."""
    fill(q, count, 3)
    q.set_limits("default", rate="2/s", now=T0)
    first = claim_all(q, T0)
    assert sorted(partition_of(c.job.id, count) for c in first) == list(range(count))
    step = count * 1000 // 2
    assert q.claim_many("default", "w", LEASE, 10, now=T0 + 1) == ClaimRefused(
        NothingClaimable(T0 + step)
    )
    assert q.flow("default", now=T0 + 1).next_at == T0 + step
    assert len(claim_all(q, T0 + step)) == count
    assert q.flow("default", now=T0 + step + 1).rate == Rate(2)


def test_the_namespace_starts_at_most_n_plus_b_plus_p_minus_1_in_a_window(
    q: Quasar, count: int
) -> None:
    """The rate "10/s+4": every window of a second starts at most P * ceil(10 / P) + 4, at
    most 10 + 4 + (P - 1); the first reaches it, every partition starting its burst share at
    once."""
    fill(q, count, 20)
    q.set_limits("default", rate="10/s+4", now=T0)
    starts: list[int] = []
    for at in range(T0, T0 + 3000, 50):
        starts += [at] * len(claim_all(q, at))
    bound = count * -(-10 // count) + 4
    assert bound <= 10 + 4 + count - 1
    assert len([at for at in starts if at < T0 + 1000]) == bound
    assert all(len([s for s in starts if at <= s < at + 1000]) <= bound for at in starts)


def test_set_limits_on_a_queue_known_to_one_partition_reaches_every_partition(
    q: Quasar, count: int
) -> None:
    applied(q.enqueue("s", queue="only", flow=id_in(count - 1, count, "f"), now=T0))
    q.set_limits("only", concurrency=count, now=T0)
    assert [flow_hash(q, k, "only").get(b"cap") for k in range(count)] == [b"1"] * count
    assert q.flow("only", now=T0).concurrency == count


def test_a_declared_queue_takes_its_limits_everywhere(q: Quasar, count: int) -> None:
    q.set_limits("ahead", rate="5/s+1", declare=True, now=T0)
    assert sum(int(flow_hash(q, k, "ahead")[b"rate"].split()[2]) for k in range(count)) == 1
    assert q.flow("ahead", now=T0).rate == Rate(5, burst=1)


# --- a group's limits and its hold ----------------------------------------------------------------


def test_a_groups_cap_holds_over_the_namespace(q: Quasar, count: int) -> None:
    group = "acme"
    for _ in range(4):
        applied(q.enqueue("s", group=group, now=T0))
    others = [group_in(k, count, "other") for k in range(count)]
    for other in others:
        applied(q.enqueue("s", group=other, now=T0))
    q.set_limits("default", group_concurrency=1, now=T0)
    q.set_group_limits("default", group, concurrency=2, now=T0)
    got = claim_all(q, T0)
    mine = [c for c in got if c.job.group == group]
    assert len(mine) == 2 and len(got) == 2 + count
    assert claim_all(q, T0) == []
    info = q.flow("default", group=group, now=T0)
    assert [(g.state, g.leased, g.ready, g.concurrency) for g in info.groups] == [("full", 2, 2, 2)]
    # the group's own limit lives in its partition only
    own = [
        q.redis.hget(f"{KeySpace(q.namespace).part(k).root}q:default:glimits", group)
        for k in range(count)
    ]
    assert own == [b"|2" if k == group_partition(group, count) else None for k in range(count)]
    q.set_group_limits("default", group, concurrency=UNLIMITED, now=T0)
    assert len(claim_all(q, T0)) == 2


def test_a_hold_holds_the_group_in_its_partition(q: Quasar, count: int) -> None:
    held, free = group_in(0, count, "held"), group_in(1, count, "free")
    for group in (held, held, free, free):
        applied(q.enqueue("s", group=group, now=T0))
    job = applied(q.enqueue("s", group=held, now=T0))
    first = claimed(q.claim_job(job.id, "w", LEASE, now=T0))
    applied(q.release(first.token, "w", hold_ms=10_000, now=T0))
    got = claim_all(q, T0 + 1)
    assert got and {c.job.group for c in got} == {free}
    info = q.flow("default", group=held, now=T0 + 1)
    assert info.groups[0].state == "wait" and info.groups[0].until == T0 + 10_000
    assert {c.job.group for c in claim_all(q, T0 + 10_000)} == {held}


# --- reading the flow -----------------------------------------------------------------------------


def test_flow_merges_the_partitions(q: Quasar, count: int) -> None:
    groups = [group_in(k, count, "g") for k in range(count)] + [group_in(0, count, "h")]
    for group in groups:
        for _ in range(2):
            applied(q.enqueue("s", group=group, now=T0))
    fill(q, count, 1)
    q.set_limits("default", group_concurrency=1, now=T0)
    info = q.flow("default", now=T0)
    assert info.groups_in_turn == len(groups) and info.ready_ungrouped == count
    assert {g.name for g in info.groups} == set(groups)
    assert all(g.state == "turn" and g.ready == 2 for g in info.groups)
    assert len(q.flow("default", groups=2, now=T0).groups) == 2
    assert q.flow("default", groups=0, now=T0).groups == ()
    got = claim_all(q, T0)
    assert len(got) == len(groups) + count
    info = q.flow("default", groups=2, now=T0)
    assert info.leased == len(got) and info.ready_ungrouped == 0
    assert info.groups_full == len(groups) and info.groups_in_turn == 0
    assert [g.state for g in info.groups] == ["full", "full"]
    assert info.next_at is None and info.rate is None and info.concurrency is None


def test_merge_takes_the_soonest_next_at_and_the_groups_by_kind() -> None:
    from quasar_redis import FlowInfo, GroupFlow

    def part(now: int, next_at: int | None, *groups: GroupFlow) -> FlowInfo:
        rate = Rate(4, per=3, burst=1)
        return FlowInfo("q", now, rate, 2, None, None, 1, 1, next_at, 1, 1, 0, groups)

    def group(name: str, state: Any, until: int | None = None) -> GroupFlow:
        return GroupFlow(name, state, 1, 0, until, None, None)

    infos = [
        part(5, 20, group("a", "turn"), group("b", "turn"), group("w1", "wait", 30)),
        part(7, 10, group("c", "turn"), group("w2", "wait", 15)),
    ]
    merged = merge_flows(infos, 3, 2)
    assert merged.now == 7 and merged.next_at == 10
    assert merged.rate == Rate(4, per=1.5, burst=2) and merged.concurrency == 4
    assert [g.name for g in merged.groups] == ["a", "c", "b", "w2", "w1"]
    assert [g.name for g in merge_flows(infos, 1, 2).groups] == ["a", "w2"]
    assert merge_flows([infos[0], part(7, None)], 3, 2).next_at is None


# --- bad input ------------------------------------------------------------------------------------


def test_bad_limits_are_refused_and_nothing_written(q: Quasar, count: int) -> None:
    applied(q.enqueue("s", now=T0))
    q.set_limits("default", concurrency=4, now=T0)
    before = written(q)
    with pytest.raises(InvalidArgument, match="7 days"):
        q.set_limits("default", rate=Rate(1, per=3 * 86_400), now=T0)
    for bad in (
        {"concurrency": 0},
        {"concurrency": UNLIMITED},
        {"rate": "fast"},
        {"group_concurrency": -1},
    ):
        with pytest.raises(InvalidArgument):
            q.set_limits("default", now=T0, **bad)
    with pytest.raises(InvalidArgument, match="at least one limit"):
        q.set_limits("default", now=T0)
    with pytest.raises(InvalidArgument, match="unknown queue"):
        q.set_limits("never", concurrency=1, now=T0)
    with pytest.raises(InvalidArgument):
        q.set_limits("bad name", concurrency=1, now=T0)
    for group in ("", "a b"):
        with pytest.raises(InvalidArgument):
            q.set_group_limits("default", group, concurrency=1, now=T0)
        with pytest.raises(InvalidArgument):
            q.flow("default", group=group, now=T0)
    with pytest.raises(InvalidArgument):
        q.flow("default", groups=-1, now=T0)
    assert written(q) == before
