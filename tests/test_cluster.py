"""Every transition on a real 3-master Redis Cluster that the session starts itself.

Redis Cluster refuses a script that touches a key on another master ("Script attempted to access
a non local key"), but Redis 7.0 lets it touch another slot of the same master. So each flow here
runs, unchanged, in namespaces on each of the three masters, over a client whose ACL user may touch
only ``quasar:{<namespace>}:*``: every key of that pattern hashes to the namespace's one slot, and
ACL checks every command a script sends, so a script that strays from its slot fails loudly.
After each test every key of the namespace is found on its own master and in its one slot.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

from quasar_redis import (
    AsyncQuasar,
    BatchApplied,
    CancelApplied,
    Cancelled,
    ClaimRefused,
    ClaimsApplied,
    Failed,
    IncompleteDependency,
    JobRefused,
    Leased,
    LeaseHeld,
    NewJob,
    NothingClaimable,
    Quasar,
    RetryWaiting,
    StaleLease,
    Status,
    Succeeded,
    Waiting,
)
from quasar_redis._scripts import scripts

from .cluster import HOST, LocalCluster, cluster_or_skip
from .helpers import REQUIRE, applied, claimed

pytestmark = pytest.mark.cluster

LEASE = 60_000


@pytest.fixture(scope="session")
def local_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    cluster = cluster_or_skip(REQUIRE)
    request.addfinalizer(cluster.stop)
    return cluster


@pytest.fixture(scope="module")
def rc(local_cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster(host=HOST, port=local_cluster.startup_port)
    try:
        yield client
    finally:
        client.close()


def root(namespace: str) -> str:
    return f"quasar:{{{namespace}}}:"


def owner(rc: RedisCluster, namespace: str) -> str:
    """The name (host:port) of the master that serves the namespace's slot."""
    cluster: Any = rc  # redis-py's cluster methods are untyped
    node = cluster.get_node_from_key(root(namespace))
    assert node is not None
    return str(node.name)


def namespace_on(rc: RedisCluster, index: int) -> str:
    """A fresh namespace whose slot is served by the ``index``-th master (by port)."""
    cluster: Any = rc
    masters = sorted(n.name for n in cluster.get_primaries())
    while True:
        namespace = f"c{index}-{uuid.uuid4().hex[:10]}"
        if owner(rc, namespace) == masters[index]:
            return namespace


def keys_by_node(local_cluster: LocalCluster, namespace: str) -> dict[str, list[bytes]]:
    """The namespace's keys found on each master, asked of each node directly."""
    out = {}
    for port in local_cluster.ports:
        with local_cluster.node_client(port) as node:
            out[f"{HOST}:{port}"] = list(node.scan_iter(match=f"{root(namespace)}*", count=1000))
    return out


def check_placement(rc: RedisCluster, local_cluster: LocalCluster, namespace: str) -> None:
    found = keys_by_node(local_cluster, namespace)
    home = owner(rc, namespace)
    strays = {node: keys for node, keys in found.items() if keys and node != home}
    assert not strays, f"keys of {namespace} outside its master {home}: {strays}"
    home_slot = key_slot(root(namespace).encode())
    slots = {key_slot(k) for k in found[home]}
    assert slots <= {home_slot}, f"keys of {namespace} on slots {slots}, not {home_slot}"


Confined = Callable[[int], Quasar]


@pytest.fixture
def confined(rc: RedisCluster, local_cluster: LocalCluster) -> Iterator[Confined]:
    """Makes clients of fresh namespaces on a given master, each connected as an ACL user that
    may touch only its namespace's keys; afterwards checks where the namespace's keys are."""
    made: list[tuple[RedisCluster, str]] = []

    def make(index: int) -> Quasar:
        namespace = namespace_on(rc, index)
        user, password = local_cluster.confine(namespace)
        client = RedisCluster(
            host=HOST,
            port=local_cluster.startup_port,
            username=user,
            password=password,
        )
        made.append((client, namespace))
        return Quasar(client, namespace)

    try:
        yield make
    finally:
        for client, _ in made:
            client.close()
    for _, namespace in made:
        check_placement(rc, local_cluster, namespace)


@pytest.fixture(params=[0, 1, 2], ids=["master0", "master1", "master2"])
def q(request: pytest.FixtureRequest, confined: Confined) -> Quasar:
    """A confined client of a fresh namespace, on each master in turn."""
    return confined(int(request.param))


def server_now(q: Quasar) -> int:
    seconds, micros = q.redis.time(target_nodes=RedisCluster.RANDOM)
    return int(seconds) * 1000 + int(micros) // 1000


# --- placement ------------------------------------------------------------------------------------


def test_namespaces_land_on_three_slots_and_three_masters(
    rc: RedisCluster, local_cluster: LocalCluster, confined: Confined
) -> None:
    clients = [confined(i) for i in range(3)]
    namespaces = [client.namespace for client in clients]
    slots = [int(rc.cluster_keyslot(root(ns))) for ns in namespaces]  # asked of the server
    assert len(set(slots)) == 3, slots
    assert slots == [key_slot(root(ns).encode()) for ns in namespaces]
    assert len({owner(rc, ns) for ns in namespaces}) == 3
    for ns, client in zip(namespaces, clients, strict=True):
        applied(client.enqueue("s", id="a"))
        claimed(client.claim("default", "w", LEASE))
        found = keys_by_node(local_cluster, ns)
        assert [node for node, keys in found.items() if keys] == [owner(rc, ns)], found
        # the job, its queue indexes, the queue set, the sequence and the claim call record
        assert len(found[owner(rc, ns)]) >= 5


def stray_script(namespace: str) -> str:
    return f"return redis.call('EXISTS', '{root(namespace)}job:x')"


def test_a_script_that_leaves_its_slot_fails(rc: RedisCluster, confined: Confined) -> None:
    """The canary: a stray key access fails here, so it would fail in the flows below too."""
    q = confined(0)
    elsewhere = namespace_on(rc, 1)
    with pytest.raises(redis.ResponseError, match="non local key"):  # the cluster says no
        rc.eval(stray_script(elsewhere), 1, root(q.namespace))
    same_master = namespace_on(rc, 0)
    assert key_slot(root(same_master).encode()) != key_slot(root(q.namespace).encode())
    # Redis 7.0 lets a legacy script read another slot of the same master; our ACL user cannot
    with pytest.raises(redis.ResponseError, match=r"can't access|permission|NOPERM"):
        q.redis.eval(stray_script(same_master), 1, root(q.namespace))


# --- enqueue --------------------------------------------------------------------------------------


def test_enqueue_single_and_batch_with_dependencies(q: Quasar) -> None:
    a = applied(q.enqueue("build", {"n": 1}, id="a"))
    assert a.state == Waiting(a.inserted_at)
    batch = q.enqueue_many(
        [
            NewJob("test", id="b", dependencies=["a"]),
            NewJob("ship", id="c", dependencies=["a", "b"], priority=-5),
        ]
    )
    assert isinstance(batch, BatchApplied), batch
    assert [(j.id, j.pending_dependencies) for j in batch.jobs] == [("b", 1), ("c", 2)]
    assert isinstance(q.enqueue("x", id="a"), JobRefused)
    info = q.get_job("c")
    assert info is not None
    assert info.waiting_on == "a"
    assert q.counts("default").blocked == 2


# --- claims and the lease holder's calls ------------------------------------------------------


def test_claim_heartbeat_complete_releases_dependents(q: Quasar) -> None:
    q.enqueue_many(
        [
            NewJob("s", id="low", priority=10),
            NewJob("s", id="high", priority=1),
            NewJob("s", id="dep", dependencies=["high"]),
        ]
    )
    first = claimed(q.claim("default", "w1", LEASE))
    assert first.job.id == "high"
    assert first.token.fencing_version == 1
    beat = claimed(q.heartbeat(first.token, "w1", LEASE * 2))
    assert beat.token.expires_at > first.token.expires_at
    assert q.complete(first.token, "w1") == JobRefused(StaleLease())
    done = applied(q.complete(beat.token, "w1", result={"ok": True}, output_ref="out/1"))
    assert isinstance(done.state, Succeeded)
    assert done.result == {"ok": True}
    dep = claimed(q.claim_job("dep", "w2", LEASE))
    assert dep.job.state == Leased("w2", 1, dep.token.expires_at)
    assert q.claim_job("dep", "w3", LEASE) == ClaimRefused(LeaseHeld(dep.token.expires_at))
    many = q.claim_many("default", "w4", LEASE, 10)
    assert isinstance(many, ClaimsApplied)
    assert [c.job.id for c in many.claims] == ["low"]
    nothing = q.claim("default", "w5", LEASE)
    assert isinstance(nothing, ClaimRefused)
    assert isinstance(nothing.error, NothingClaimable)


def test_fail_retry_permanent_fail_and_operator_retry(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", max_attempts=2))
    applied(q.enqueue("s", id="after", dependencies=["j"]))
    applied(q.enqueue("s", id="doomed", dependencies=["j"], on_dependency_failure="cancel"))
    first = claimed(q.claim_job("j", "w", LEASE))
    failed = applied(q.fail(first.token, "w", "boom", kind="Boom"))
    assert isinstance(failed.state, RetryWaiting)
    assert failed.error is not None
    assert failed.error.kind == "Boom"
    second = claimed(q.claim("default", "w", LEASE))
    assert (second.job.id, second.job.attempt) == ("j", 2)
    gone = applied(q.permanent_fail(second.token, "w", "broken for good"))
    assert isinstance(gone.state, Failed)
    doomed = q.get_job("doomed")
    assert doomed is not None
    assert isinstance(doomed.job.state, Cancelled)
    assert "j" in doomed.job.state.reason
    info = q.get_job("after")
    assert info is not None
    assert info.waiting_on == "j"  # blocked, visibly
    again = applied(q.retry("j", expected_fence=gone.fencing_version))
    assert (again.max_attempts, type(again.state)) == (3, RetryWaiting)
    third = claimed(q.claim("default", "w", LEASE))
    applied(q.complete(third.token, "w"))
    assert claimed(q.claim("default", "w", LEASE)).job.id == "after"


def test_expire_and_sweep(q: Quasar) -> None:
    now = server_now(q)
    q.enqueue_many([NewJob("s", id=f"j{i}", max_attempts=1 + i) for i in range(3)], now=now)
    claims = [claimed(q.claim_job(f"j{i}", "w", 100, now=now)) for i in range(3)]
    held = q.expire("j0", 1, now=now + 50)
    assert held == JobRefused(LeaseHeld(now + 100))
    gone = applied(q.expire("j0", claims[0].job.fencing_version, now=now + 100))
    assert isinstance(gone.state, Failed)  # max_attempts 1: out of attempts
    report = q.sweep_expired(now=now + 200)
    assert sorted(report.expired) == ["j1", "j2"]
    assert report.damaged == ()
    for i in (1, 2):
        info = q.get_job(f"j{i}", now=now + 200)
        assert info is not None
        assert info.job.state == RetryWaiting("worker lease expired", now + 200)
    assert q.sweep_expired(now=now + 300).expired == ()


def test_promote_scheduled_jobs(q: Quasar) -> None:
    now = server_now(q)
    applied(q.enqueue("s", id="later", delay_ms=1_000, now=now))
    assert q.counts("default", now=now).scheduled == 1
    assert q.promote_due(now=now + 500) == 0
    assert q.promote_due(now=now + 1_000) == 1
    assert q.list_jobs("default", Status.AVAILABLE, now=now + 1_000)[0].id == "later"
    assert claimed(q.claim("default", "w", LEASE, now=now + 1_000)).job.id == "later"


def test_cancel_cascades_to_dependents(q: Quasar) -> None:
    q.enqueue_many(
        [
            NewJob("s", id="root"),
            NewJob("s", id="child", dependencies=["root"]),
            NewJob("s", id="grandchild", dependencies=["child"]),
            NewJob("s", id="other"),
        ]
    )
    lease = claimed(q.claim_job("root", "w", LEASE))
    result = q.cancel("root", expected_fence=1, reason="not needed")
    assert isinstance(result, CancelApplied)
    assert sorted(result.cascaded) == ["child", "grandchild"]
    assert q.complete(lease.token, "w") == JobRefused(StaleLease())
    assert q.enqueue("s", id="late", dependencies=["root"]) == JobRefused(
        IncompleteDependency("root")
    )
    counts = q.counts("default")
    assert (counts.cancelled, counts.available, counts.blocked) == (3, 1, 0)


def test_prune_finished_jobs(q: Quasar) -> None:
    now = server_now(q)
    q.enqueue_many([NewJob("s", id=f"j{i}") for i in range(5)], now=now)
    for i in range(5):
        lease = claimed(q.claim("default", "w", LEASE, now=now + i))
        applied(q.complete(lease.token, "w", now=now + i))
    assert q.prune(max_count=2) == 0  # nothing finished in the last 60 s (the re-send window)
    assert q.prune(max_count=2, now=now + 60_010) == 3
    assert [j.id for j in q.list_jobs("default", Status.COMPLETED)] == ["j3", "j4"]
    assert q.prune(max_age_ms=0, now=now + 60_010) == 2
    assert q.get_job("j4") is None


def test_inspection(q: Quasar) -> None:
    now = server_now(q)
    mail = [NewJob("s", id="ready", queue="mail"), NewJob("s", id="soon", queue="mail")]
    q.enqueue_many(mail, now=now)
    applied(q.enqueue("s", id="later", queue="mail", delay_ms=60_000, now=now))
    claimed(q.claim_job("soon", "w", LEASE, now=now))
    counts = q.counts("mail", now=now)
    assert (counts.available, counts.scheduled, counts.executing) == (1, 1, 1)
    assert [j.id for j in q.list_jobs("mail", Status.SCHEDULED, now=now)] == ["later"]
    assert [j.id for j in q.list_jobs("mail", "executing", now=now)] == ["soon"]
    info = q.get_job("ready", now=now)
    assert info is not None
    assert info.status is Status.AVAILABLE
    assert q.get_job("nope") is None


# --- script cache -----------------------------------------------------------------------------


def script_cached(local_cluster: LocalCluster, sha: str) -> list[bool]:
    out = []
    for port in local_cluster.ports:
        with local_cluster.node_client(port) as node:
            out.append(bool(node.script_exists(sha)[0]))
    return out


def test_noscript_recovery_after_script_flush_on_every_node(
    local_cluster: LocalCluster, confined: Confined
) -> None:
    clients = [confined(i) for i in range(3)]
    for client in clients:
        applied(client.enqueue("s", id="j"))
    for port in local_cluster.ports:
        with local_cluster.node_client(port) as node:
            node.script_flush()
    sha = scripts()["claim"].sha
    assert script_cached(local_cluster, sha) == [False] * 3
    for client in clients:  # every master answers NOSCRIPT once; the client loads and re-sends
        lease = claimed(client.claim("default", "w", LEASE))
        applied(client.complete(lease.token, "w"))
    assert script_cached(local_cluster, sha) == [True] * 3


def test_execute_many_pipeline_on_cluster(rc: RedisCluster, confined: Confined) -> None:
    client = confined(0)
    applied(client.enqueue("s", id="j"))
    rc.script_flush()  # the pipeline meets NOSCRIPT too
    try:
        results = client.execute_many([client.calls.get_job("j"), client.calls.counts("default")])
    except Exception as exc:  # RedisClusterException is not a RedisError
        pytest.fail(
            "Quasar.execute_many cannot run on RedisCluster: redis-py's ClusterPipeline blocks "
            f"pipe.evalsha() ({type(exc).__name__}: {exc}); "
            "pipe.execute_command('EVALSHA', ...) is routed by key slot and works"
        )
    assert results[0].job.id == "j"
    assert results[1].available == 1


# --- asyncio --------------------------------------------------------------------------------------


async def async_flow(port: int, namespace: str, user: str, password: str) -> dict[str, Any]:
    client = AsyncRedisCluster(host=HOST, port=port, username=user, password=password)
    try:
        q = AsyncQuasar(client, namespace)
        batch = await q.enqueue_many([NewJob("s", id="a"), NewJob("s", id="b", dependencies=["a"])])
        await client.script_flush()  # all masters: the next call recovers from NOSCRIPT
        lease = claimed(await q.claim("default", "w", LEASE))
        beat = claimed(await q.heartbeat(lease.token, "w", LEASE))
        done = applied(await q.complete(beat.token, "w", result=[1, 2]))
        second = claimed(await q.claim("default", "w", LEASE))
        failed = applied(await q.fail(second.token, "w", "again", retry_delay_ms=0))
        cancelled = await q.cancel("b", reason="enough")
        return {
            "batch": batch,
            "first": lease.job.id,
            "done": done,
            "second": second.job.id,
            "failed": failed,
            "cancelled": cancelled,
            "counts": await q.counts("default"),
        }
    finally:
        await client.aclose()


def test_async_client_on_cluster(rc: RedisCluster, local_cluster: LocalCluster) -> None:
    namespace = namespace_on(rc, 2)
    user, password = local_cluster.confine(namespace)
    out = asyncio.run(async_flow(local_cluster.startup_port, namespace, user, password))
    assert (out["first"], out["second"]) == ("a", "b")
    assert isinstance(out["done"].state, Succeeded)
    assert out["done"].result == [1, 2]
    assert isinstance(out["failed"].state, RetryWaiting)
    assert isinstance(out["cancelled"], CancelApplied)
    assert (out["counts"].completed, out["counts"].cancelled) == (1, 1)
    check_placement(rc, local_cluster, namespace)


def test_role_users_made_by_quasar_acl_work_on_every_node(
    rc: RedisCluster, local_cluster: LocalCluster
) -> None:
    """A producer and a worker of `quasar acl setuser --cluster --apply` (set on every node)
    enqueue, claim and complete on the cluster; a producer may not claim."""
    from click.testing import CliRunner

    from quasar_redis.cli import main
    from quasar_redis.errors import PermissionDenied

    namespace = namespace_on(rc, 1)
    url = f"redis://{HOST}:{local_cluster.startup_port}/0"
    made: dict[str, Any] = {}
    for role in ("producer", "worker"):
        name, password = f"{role}-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
        args = ["acl", "setuser", name, role, "--namespace", namespace, "--cluster", "--apply"]
        args += ["--redis-url", url, "--password-env", "ROLE_PASSWORD"]
        out = CliRunner().invoke(main, args, env={"ROLE_PASSWORD": password})
        assert out.exit_code == 0, out.output
        made[name] = RedisCluster(
            host=HOST, port=local_cluster.startup_port, username=name, password=password
        )
    try:
        producer, worker = (Quasar(client, namespace) for client in made.values())
        applied(producer.enqueue("s", id="a"))
        with pytest.raises(PermissionDenied):
            producer.claim("default", "w", LEASE)
        lease = claimed(worker.claim("default", "w", LEASE))
        done = applied(worker.complete(lease.token, "w", result=1))
        assert isinstance(done.state, Succeeded)
    finally:
        for client in made.values():
            client.close()
        for port in local_cluster.ports:
            with local_cluster.node_client(port) as node:
                node.execute_command("ACL", "DELUSER", *made)


@pytest.mark.parametrize("master", [0, 1, 2])
def test_a_worker_process_and_the_cli_from_a_cluster_url(
    rc: RedisCluster, local_cluster: LocalCluster, tmp_path: Path, master: int
) -> None:
    # App, `quasar worker` and the operator CLI reach the cluster from a redis+cluster:// URL
    # (two startup nodes; the third is discovered), in a namespace on each master in turn.
    from .test_cli_ops import quasar
    from .test_deployments import tasks_app, work

    namespace = namespace_on(rc, master)
    nodes = ",".join(f"{HOST}:{port}" for port in local_cluster.ports[1:])
    url = f"redis+cluster://{nodes}"
    app, add = tasks_app(url, namespace)
    with app:
        handles = [add.enqueue(i, i) for i in range(4)]
        ran = work(tmp_path, url, namespace)
        assert ran.returncode == 0, ran.stderr
        assert [h.result(timeout=10) for h in handles] == [0, 2, 4, 6]
    listing = quasar("jobs", "work", "--json", url=url, namespace=namespace).json()
    assert [j["status"] for j in listing["jobs"]] == ["completed"] * 4
    shown = quasar("job", handles[3].id, "--json", url=url, namespace=namespace).json()
    assert shown["result"] == {"format": "msgpack", "value": 6}
    check_placement(rc, local_cluster, namespace)
