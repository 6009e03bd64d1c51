"""Failover on a Redis Cluster with replicas (3 primaries, each with a replica), under load.

Durable mode first, call by call: a write is on the replica of the namespace's primary when the
call returns. Then real processes: two producers enqueue jobs of known ids (counting each
acknowledged one) and two workers run them while the namespace's primary is (a) moved to its
replica with ``CLUSTER FAILOVER``, (b) killed with SIGKILL and replaced by its replica, or (c)
loses the namespace's slot to another primary (a migration, ``cluster.Migration``). The
fault lands after each producer's first ``PAUSE_AFTER`` acknowledged enqueues; afterwards the
producers and workers carry on, no raw redis-py error reaches them, and every acknowledged job
is counted against what the queue holds. A manual failover waits for the replica to catch up,
and a migration moves every key, so they lose nothing in either mode; a kill loses nothing in
durable mode, and in the default mode at most what the replica had not received (asynchronous
replication): how many is printed, and only where the loss may lie is asserted. The load runs
on a namespace of one partition and on one of three (``partitions=3``); on three, the fault
lands on the primary of partition 0, while the other partitions' primaries go on meanwhile, and
a kill's loss may lie only in the partitions the killed primary served.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from quasar_redis import AsyncQuasar, Durable, Failed, JobApplied, Quasar, Succeeded
from quasar_redis._connect import async_client, sync_client
from quasar_redis._keys import KeySpace
from quasar_redis._partitions import partition_of

from .cluster import HOST, LocalCluster, Migration, cluster_or_skip
from .failover_load import PRODUCER, TASKS
from .helpers import REQUIRE, applied, claimed, wait_for

pytestmark = pytest.mark.cluster

QUASAR = Path(sys.executable).parent / "quasar"
LEASE = 60_000
DURABLE = Durable(replicas=1, timeout_ms=5000)
TOTAL, PAUSE_AFTER = 300, 100
BEHIND = 10  # jobs the primary holds, and its frozen replica lacks, when it is killed


@pytest.fixture
def replicated() -> Iterator[LocalCluster]:
    cluster = cluster_or_skip(REQUIRE, replicas=1, node_timeout_ms=1000)
    try:
        yield cluster
    finally:
        cluster.stop()


def roots(namespace: str, partitions: int) -> list[str]:
    """The root key of each partition of the namespace (of one partition: its one root)."""
    keys = KeySpace(namespace)
    return [keys.root] if partitions == 1 else [keys.part(i).root for i in range(partitions)]


def serving(rc: RedisCluster, key: str) -> int:
    """The port of the primary serving ``key``'s slot."""
    cluster: Any = rc
    return int(cluster.get_node_from_key(key).port)


def home(rc: RedisCluster, namespace: str, partitions: int = 1) -> int:
    """The port of the primary serving the namespace's slot (partitioned: partition 0's)."""
    return serving(rc, roots(namespace, partitions)[0])


def given(partitions: int) -> int | None:
    """The ``partitions=`` of a client of the namespace: None for one, as before partitions."""
    return partitions if partitions > 1 else None


def test_durable_writes_are_on_the_replica_when_they_return(replicated: LocalCluster) -> None:
    namespace = f"dur-{uuid.uuid4().hex[:8]}"
    rc = RedisCluster(host=HOST, port=replicated.startup_port)
    q = Quasar(rc, namespace, durable=DURABLE)
    replica = redis.Redis(
        host=HOST, port=replicated.replica_of(home(rc, namespace)), single_connection_client=True
    )
    # (a cluster replica answers reads only after READONLY)
    replica.execute_command("READONLY")  # type: ignore[no-untyped-call]
    job = applied(q.enqueue("stage", id="a"))
    assert replica.exists(q.keys.job(job.id))
    claim = claimed(q.claim("default", "w", LEASE))
    done = q.complete(claim.token, "w", result="ok")
    assert isinstance(done, JobApplied)

    async def flow() -> None:
        arc = AsyncRedisCluster(host=HOST, port=replicated.startup_port)
        aq = AsyncQuasar(arc, namespace, durable=DURABLE)
        results = await asyncio.gather(*(aq.enqueue("stage", id=f"j{i}") for i in range(10)))
        assert all(isinstance(r, JobApplied) for r in results)
        assert replica.exists(*(q.keys.job(f"j{i}") for i in range(10))) == 10
        await arc.aclose()

    asyncio.run(flow())
    stored = Quasar(rc, namespace).get_job("a")
    assert stored is not None and isinstance(stored.job.state, Succeeded)
    replica.close()
    rc.close()


def test_a_durable_client_follows_a_failover_and_loads_its_scripts_on_the_new_primary(
    replicated: LocalCluster,
) -> None:
    """After ``CLUSTER FAILOVER`` the old primary answers MOVED: the client reads the slot map
    again (not one ASK of the new primary), so the scripts it loads after a NOSCRIPT go to the new
    primary, and every later call works; sync and asyncio, each with a map made before it."""
    namespace = f"mv-{uuid.uuid4().hex[:8]}"
    url = "redis+cluster://" + ",".join(f"{HOST}:{port}" for port in replicated.ports)
    rc, arc = sync_client(url), async_client(url)  # (as a worker's: every node a startup node)
    q = Quasar(rc, namespace, durable=DURABLE)
    aq = AsyncQuasar(arc, namespace, durable=DURABLE)

    async def enqueue(job_id: str) -> Any:
        return await aq.enqueue("stage", id=job_id)

    loop = asyncio.new_event_loop()
    try:
        applied(q.enqueue("stage", id="before"))
        applied(loop.run_until_complete(enqueue("abefore")))
        primary = replicated.failover(home(rc, namespace))
        with replicated.node_client(primary) as node:
            node.script_flush()  # (what a replica promoted without the scripts is like)
        for i in range(3):
            applied(q.enqueue("stage", id=f"after-{i}"))
            applied(loop.run_until_complete(enqueue(f"aafter-{i}")))
        assert home(rc, namespace) == primary
        claim = claimed(q.claim("default", "w", LEASE))
        assert isinstance(q.complete(claim.token, "w", result="ok"), JobApplied)
        loop.run_until_complete(arc.aclose())
    finally:
        loop.close()
        rc.close()


class Load:
    """The producers and workers of one run, in ``folder``."""

    def __init__(
        self, folder: Path, cluster: LocalCluster, namespace: str, durable: bool, partitions: int
    ):
        self.folder = folder
        self.durable = durable
        (folder / "tasks.py").write_text(TASKS)
        (folder / "produce.py").write_text(PRODUCER)
        nodes = ",".join(f"{HOST}:{port}" for port in cluster.ports)
        self.env = {
            **os.environ,
            "QUASAR_REDIS_URL": f"redis+cluster://{nodes}",
            "QUASAR_NAMESPACE": namespace,
            "LOAD_DURABLE": "1" if durable else "0",
            "LOAD_PARTITIONS": str(partitions),
            # (the folder first, for tasks.py; then the test's own path to quasar_redis, if any)
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(folder), os.environ.get("PYTHONPATH")])
            ),
        }
        self.env.pop("REDIS_URL", None)
        self.workers = [self._worker("work", "-c", "4", "--lease-ms", "3000") for _ in range(2)]
        self.producers = [
            self._spawn([sys.executable, "produce.py", name, str(TOTAL), str(PAUSE_AFTER)], name)
            for name in ("pa", "pb")
        ]

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen[str]:
        out_path, err_path = self.folder / f"{name}.out", self.folder / f"{name}.err"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            return subprocess.Popen(
                args, cwd=self.folder, env=self.env, stdout=out, stderr=err, text=True
            )

    def _worker(self, queue: str, *options: str) -> subprocess.Popen[str]:
        name = f"worker-{queue}-{uuid.uuid4().hex[:4]}"
        args = [str(QUASAR), "worker", "tasks:app", "-q", queue, *options]
        return self._spawn(args, name)

    def paused(self) -> bool:
        return all((self.folder / f"paused-{n}").exists() for n in ("pa", "pb"))

    def go(self) -> None:
        (self.folder / "go").touch()

    def acked(self) -> list[str]:
        return [
            line
            for name in ("pa", "pb")
            for line in (self.folder / f"acked-{name}.txt").read_text().split()
        ]

    def output(self, name: str) -> str:
        return (self.folder / f"{name}.out").read_text() + (self.folder / f"{name}.err").read_text()

    def stop(self) -> None:
        for proc in self.workers + self.producers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers + self.producers:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def settled(q: Quasar) -> bool:
    """Nothing of queue "work" waits or runs."""
    counts = q.counts("work")
    return counts.available + counts.scheduled + counts.executing + counts.retryable == 0


def held_by(port: int, namespace: str) -> int:
    """How many jobs of queue "work" the node at ``port`` holds, asked of it alone: the job
    hashes of the namespace, or of the partitions whose slots it serves, but the "held" queue's
    (ids ending in ``-held``)."""
    patterns = (f"quasar:{{{namespace}}}:job:*", f"quasar:{{{namespace}/*}}:job:*")
    with redis.Redis(host=HOST, port=port) as node:
        return sum(
            not key.endswith(b"-held")
            for pattern in patterns
            for key in node.scan_iter(match=pattern, count=1000)
        )


def kill_behind_the_replica(
    cluster: LocalCluster, primary: int, namespace: str, load: Load
) -> None:
    """The kill, placed where asynchronous replication loses writes: the replica is frozen
    and cut off from its primary; the producers go on until the primary holds ``BEHIND`` jobs
    the replica lacks, acknowledged at once by default (in durable mode one a producer, each
    waiting for a replica in vain); then the primary is killed and the replica thawed, promoted
    with what it had. The killed node comes back as the new primary's replica (durable writes
    need one). On a partitioned namespace a producer goes on with its jobs of the partitions
    on other primaries, and waits at its first of a partition on this one."""
    replica = cluster.replica_of(primary)
    before = held_by(primary, namespace)
    cluster.freeze(replica)
    with cluster.node_client(primary) as node:  # (else the kernel buffers what follows for it)
        node.client_kill_filter(_type="replica")
    load.go()
    # (a durable producer applies one job, then sends it again until a replica has it)
    behind = 2 if load.durable else BEHIND
    wait_for(lambda: held_by(primary, namespace) >= before + behind, 120, "writes not replicated")
    cluster.kill_primary(primary, replica)
    cluster.restart(primary)


def migrate_under_load(rc: RedisCluster, cluster: LocalCluster, root: str, load: Load) -> None:
    """The slot of ``root`` (the namespace's, or partition 0's) moved to another primary while
    the producers go on."""
    wrapped: Any = rc
    source = serving(rc, root)
    target = next(p for p in cluster.primaries() if p != source)
    migration = Migration(cluster, wrapped.keyslot(root), source, target)
    migration.begin()
    load.go()
    while keys := migration.keys():
        migration.move(keys[:20])
    migration.finish()


def run_under_fault(
    folder: Path, cluster: LocalCluster, fault: str, durable: bool, partitions: int
) -> dict[str, Any]:
    rc = RedisCluster(host=HOST, port=cluster.startup_port)
    namespace = f"fo-{uuid.uuid4().hex[:8]}"
    load = Load(folder, cluster, namespace, durable, partitions)
    try:
        q = Quasar(rc, namespace, partitions=given(partitions))
        wait_for(load.paused, 120, "each producer's first acknowledged enqueues")
        wait_for(lambda: q.counts("work").completed >= 20, 120, "workers to run jobs")
        every = roots(namespace, partitions)
        primary = home(rc, namespace, partitions)
        on_primary = {i for i, root in enumerate(every) if serving(rc, root) == primary}
        if fault == "failover":
            cluster.failover(primary)
            load.go()
        elif fault == "migrate":
            migrate_under_load(rc, cluster, every[0], load)
        else:
            kill_behind_the_replica(cluster, primary, namespace, load)
        held = subprocess.run(
            [str(QUASAR), "worker", "tasks:app", "-q", "held", "--burst"],
            cwd=folder, env=load.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert held.returncode == 0, held.stderr
        for name, proc in zip(("pa", "pb"), load.producers, strict=True):
            assert proc.wait(timeout=300) == 0, load.output(name)
        rc.nodes_manager.initialize()
        wait_for(lambda: settled(q), 120, "the workers to run every job")
        alive = [proc.poll() is None for proc in load.workers]
        assert all(alive), [load.output(str(p.args)) for p in load.workers]
    finally:
        load.stop()
    outputs = {p: json.loads(load.output(p).splitlines()[-1]) for p in ("pa", "pb")}
    acked = load.acked()
    found = {job_id: q.get_job(job_id) for job_id in acked}
    lost = sorted(job_id for job_id, info in found.items() if info is None)
    states = {type(info.job.state).__name__ for info in found.values() if info is not None}
    failed = {
        i: info.errors for i, info in found.items() if info and isinstance(info.job.state, Failed)
    }
    rc.close()
    seen = {"acked": len(acked), "lost": lost, "states": states, "producers": outputs}
    return {**seen, "failed": failed, "on_primary": on_primary}


@pytest.mark.heavy
@pytest.mark.parametrize("durable", [True, False], ids=["durable", "default"])
@pytest.mark.parametrize("fault", ["failover", "kill", "migrate"])
@pytest.mark.parametrize("partitions", [1, 3], ids=["P1", "P3"])
def test_producers_and_workers_carry_on_through_a_failover(
    replicated: LocalCluster, tmp_path: Path, fault: str, durable: bool, partitions: int
) -> None:
    seen = run_under_fault(tmp_path, replicated, fault, durable, partitions)
    print(f"\n{fault} durable={durable} partitions={partitions}: {seen['acked']} acknowledged, "
          f"{len(seen['lost'])} lost, partitions {sorted(seen['on_primary'])} on the faulted "
          f"primary, producers {seen['producers']}")  # fmt: skip
    assert seen["acked"] == 2 * (TOTAL + 1)
    assert all(out["held"] == "held" for out in seen["producers"].values()), seen["producers"]
    if durable or fault != "kill":
        assert seen["lost"] == []
        assert seen["states"] == {"Succeeded"}, seen["failed"]
    else:  # (at most what the replica had not received: jobs acknowledged after it was cut off)
        numbers = [job_id.split("-")[1] for job_id in seen["lost"]]
        cut_off = [n.isdigit() and int(n) >= PAUSE_AFTER for n in numbers]
        assert all(cut_off), seen["lost"]
        # (and only in the partitions the killed primary served)
        places = {job_id: partition_of(job_id, partitions) for job_id in seen["lost"]}
        assert set(places.values()) <= seen["on_primary"], (places, seen["on_primary"])
        assert seen["states"] == {"Succeeded"}, seen["failed"]
