"""One queue over a Redis Cluster: the same load with P = 1 and P = 3 partitions, in one run.

Starts a Redis Cluster of its own on loopback (3 primaries, each with a replica: the test
suite's ``tests/cluster.py``), then alternates the two layouts ``--rounds`` times, each round in
a new namespace, so that a drift of the machine falls on both:

- **enqueue**: ``--jobs`` jobs, ``enqueue_many`` of ``--batch`` jobs a call, from this process;
- **process**: ``--workers`` worker processes (``Worker``, a no-op async task, concurrency and
  prefetch 50: the tuned worker of ``benchmarks/systems/quasar.py``) run them all.

A namespace of P = 3 is one whose three partitions hash to three different primaries (the
benchmark picks its name so; with P a multiple of the primaries and larger, chance spreads
them). Before each phase every primary's ``INFO commandstats`` is reset (``CONFIG RESETSTAT``);
after it, the microseconds of every command but the operator's own (``INFO``, ``CONFIG``,
``CLUSTER``, ...) are summed per primary. Replicas are not counted: they replay what the
primaries did.

Prints one JSON object: for each layout and phase, the median over rounds of Redis's CPU per
job (µs, all primaries) and of each primary's share of it, ordered from the largest share; the
P = 3 / P = 1 ratio of CPU per job; and jobs/s, which on a machine of few cores shows the
clients' and servers' contention rather than the cluster's capacity. Run it from a checkout:
``python -m benchmarks.partitions --jobs 20000 --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from quasar_redis import App, BatchApplied, NewJob, Quasar
from quasar_redis._call_codec import payload_of
from quasar_redis._connect import sync_client
from quasar_redis.worker import Worker
from tests.cluster import HOST, LocalCluster, Migration, start_cluster
from tests.servers import RedisServer

QUEUE, STAGE = "bench", "noop"
#: each layout: where, and how many partitions (less than 0: that many, their slots moved to
#: one primary before the round, so that the calls of P = 3 meet one busy server)
LAYOUTS = {
    "P=1": ("cluster", 1),
    "P=3": ("cluster", 3),
    "P=3 on one primary": ("cluster", -3),
    "standalone P=1": ("standalone", 1),
    "standalone P=3": ("standalone", 3),
}
#: the queue's work: its scripts (a command a script calls is counted again on its own line of
#: ``INFO commandstats``, inside its script's time) and a worker's blocking wait
WORK = {"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro", "blpop"}


def usage(ports: list[int]) -> dict[str, list[float]]:
    """Of each primary: the microseconds inside the queue's commands (``usec``), how many of
    those it ran (``calls``), its process's CPU seconds (``cpu``), its ``used_memory`` and its
    connected clients."""
    out: dict[str, list[float]] = {k: [] for k in ("usec", "calls", "cpu", "memory", "clients")}
    for port in ports:
        with redis.Redis(host=HOST, port=port) as node:
            info: Any = node.info("all")
        work = [v for k, v in info.items() if k.removeprefix("cmdstat_") in WORK]
        out["usec"].append(sum(int(v["usec"]) for v in work))
        out["calls"].append(sum(int(v["calls"]) for v in work))
        out["cpu"].append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
        out["memory"].append(int(info["used_memory"]))
        out["clients"].append(int(info["connected_clients"]) - 1)  # (less this one)
    return out


def reset(ports: list[int]) -> None:
    for port in ports:
        with redis.Redis(host=HOST, port=port) as node:
            node.config_resetstat()


def new_name(client: Any, partitions: int) -> str:
    """A new namespace; on a cluster, one whose partitions are on as many primaries as can be."""
    while True:
        name = f"part-{uuid.uuid4().hex[:8]}"
        if partitions == 1 or not isinstance(client, RedisCluster):
            return name
        wrapped: Any = client  # (redis-py's cluster methods are untyped)
        primaries = len({node.port for node in wrapped.get_primaries()})
        homes = {wrapped.get_node_from_key(root).port for root in roots_of(name, partitions)}
        if len(homes) == min(partitions, primaries):
            return name


def roots_of(name: str, partitions: int) -> list[str]:
    return [f"quasar:{{{name}/{i}}}:" for i in range(partitions)]


def gather(cluster: LocalCluster, client: Any, name: str, partitions: int) -> None:
    """Move the slots of the namespace's partitions to the primary of its first, keys and all.
    (Partitions 0, 1 and 2 are never on one primary of an evenly split cluster: their tags'
    CRC16s differ by fixed bits, 4,129 and 8,258 slots apart.)"""
    roots = roots_of(name, partitions)
    target = client.get_node_from_key(roots[0]).port
    for root in roots[1:]:
        source = client.get_node_from_key(root).port
        if source != target:
            migration = Migration(cluster, client.keyslot(root), source, target)
            migration.begin()
            while keys := migration.keys():
                migration.move(keys)
            migration.finish()


def run_worker(url: str, namespace: str, partitions: int) -> None:
    app = App(url, namespace=namespace, partitions=partitions)

    @app.task(name=STAGE, queue=QUEUE)
    async def noop(i: int) -> None:
        return None

    Worker(app, [QUEUE], concurrency=50, prefetch=50).run()


def enqueue(q: Quasar, jobs: int, batch: int) -> None:
    for base in range(0, jobs, batch):
        chunk = [
            NewJob(STAGE, payload_of([i], {}), queue=QUEUE)
            for i in range(base, min(jobs, base + batch))
        ]
        result = q.enqueue_many(chunk)
        if not isinstance(result, BatchApplied):
            raise RuntimeError(f"enqueue_many refused: {result}")


def process(
    target: tuple[str, list[int], LocalCluster | None],
    q: Quasar,
    partitions: int,
    jobs: int,
    workers: int,
) -> dict[str, float]:
    """The workers run every job; the most that one primary's connections grew by, a worker's
    share, while they ran."""
    url, ports, _ = target
    procs = [
        multiprocessing.Process(target=run_worker, args=(url, q.namespace, partitions))
        for _ in range(workers)
    ]
    before = usage(ports)["clients"]
    for proc in procs:
        proc.start()
    connections = 0.0
    try:
        while q.counts(QUEUE).completed < jobs:
            if not all(proc.is_alive() for proc in procs):
                raise RuntimeError("a worker ended before the queue was done")
            grown = [a - b for a, b in zip(usage(ports)["clients"], before, strict=True)]
            connections = max(connections, max(grown) / workers)
            time.sleep(0.05)
        return {"connections_per_worker_per_primary": connections}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(60)


def phase(ports: list[int], jobs: int, work: Any) -> dict[str, Any]:
    reset(ports)
    before = usage(ports)
    start = time.perf_counter()
    extra = work() or {}
    seconds = time.perf_counter() - start
    after = usage(ports)
    total = sum(after["usec"])

    def grown(what: str) -> float:
        return sum(after[what]) - sum(before[what])

    return {
        "us_per_job": total / jobs,
        "shares": sorted((u / total for u in after["usec"]), reverse=True),
        "process_cpu_us_per_job": grown("cpu") / jobs * 1e6,
        "calls_per_job": sum(after["calls"]) / jobs,
        "memory_bytes_per_job": grown("memory") / jobs,
        "jobs_per_s": jobs / seconds,
        **extra,
    }


def one_round(
    target: tuple[str, list[int], LocalCluster | None], layout: int, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """The load on a new namespace of ``abs(layout)`` partitions at ``target`` (a URL, the
    ports of its primaries and the cluster, if it is one)."""
    url, ports, cluster = target
    partitions = abs(layout)
    client = sync_client(url)
    namespace = new_name(client, partitions)
    if layout < 0 and cluster is not None:
        gather(cluster, client, namespace, partitions)
        client.close()
        client = sync_client(url)
    q = Quasar(client, namespace, partitions=partitions)
    q.counts(QUEUE)  # (writes the namespace's record of P outside the measured phases)
    out = {
        "enqueue": phase(ports, args.jobs, lambda: enqueue(q, args.jobs, args.batch)),
        "process": phase(
            ports,
            args.jobs,
            lambda: process(target, q, partitions, args.jobs, args.workers),
        ),
    }
    client.close()
    return out


def median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    shares = zip(*(r["shares"] for r in results), strict=True)
    return {
        "us_per_job": statistics.median(r["us_per_job"] for r in results),
        "process_cpu_us_per_job": statistics.median(r["process_cpu_us_per_job"] for r in results),
        "calls_per_job": statistics.median(r["calls_per_job"] for r in results),
        "memory_bytes_per_job": statistics.median(r["memory_bytes_per_job"] for r in results),
        **(
            {
                "connections_per_worker_per_primary": max(
                    r["connections_per_worker_per_primary"] for r in results
                )
            }
            if "connections_per_worker_per_primary" in results[0]
            else {}
        ),
        "shares": [round(statistics.median(s), 4) for s in shares],
        "jobs_per_s": statistics.median(r["jobs_per_s"] for r in results),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    cluster = start_cluster(replicas=args.replicas)
    alone = RedisServer(Path(tempfile.mkdtemp(prefix="quasar-bench-")), durable=False)
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {name: [] for name in LAYOUTS}
    try:
        alone.start()
        nodes = ",".join(f"{HOST}:{port}" for port in cluster.ports)
        targets = {
            "cluster": (f"redis+cluster://{nodes}", cluster.primaries(), cluster),
            "standalone": (alone.url, [alone.port], None),
        }
        for _ in range(args.rounds):
            for name, (where, partitions) in LAYOUTS.items():
                runs[name].append(one_round(targets[where], partitions, args))
    finally:
        cluster.stop()
        alone.kill()
    phases = ("enqueue", "process")
    medians: dict[str, dict[str, Any]] = {
        name: {k: median_of([r[k] for r in results]) for k in phases}
        for name, results in runs.items()
    }
    for name, results in runs.items():
        both = [sum(r[k]["us_per_job"] for k in phases) for r in results]
        medians[name]["both_us_per_job"] = statistics.median(both)
    ratio = {
        name: {
            **{k: medians[name][k]["us_per_job"] / medians[base][k]["us_per_job"] for k in phases},
            "both": medians[name]["both_us_per_job"] / medians[base]["both_us_per_job"],
        }
        for name, base in (
            ("P=3", "P=1"),
            ("P=3 on one primary", "P=1"),
            ("standalone P=3", "standalone P=1"),
        )
    }
    return {
        "jobs": args.jobs,
        "batch": args.batch,
        "workers": args.workers,
        "rounds": args.rounds,
        "replicas": args.replicas,
        "layouts": medians,
        "cpu_per_job_P3_over_P1": ratio,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1, help="of each primary")
    print(json.dumps(measure(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
