"""What durable mode costs: enqueue and process throughput with and without WAIT, in one run.

Starts a Redis Cluster of its own on loopback (3 primaries, each with a replica: the test
suite's ``tests/cluster.py``), then, in one namespace after another on the same cluster, runs
the same work twice, without and with ``Durable(replicas=1)``, alternating the two modes
``--rounds`` times so that a drift of the machine falls on both:

- enqueue: ``--jobs`` single enqueues, one call each, through the sync client;
- process: the same jobs claimed one at a time and completed, one call each.

Prints one JSON object: each mode's median jobs/s, and the durable/default ratio. Run it from a
checkout: ``python -m benchmarks.durable --jobs 2000 --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

from redis.cluster import RedisCluster

from quasar_redis import ClaimApplied, Durable, Quasar
from tests.cluster import HOST, start_cluster

LEASE_MS = 60_000


def enqueue(q: Quasar, jobs: int) -> float:
    start = time.perf_counter()
    for i in range(jobs):
        q.enqueue("bench", id=f"j{i}")
    return jobs / (time.perf_counter() - start)


def process(q: Quasar, jobs: int) -> float:
    start = time.perf_counter()
    for _ in range(jobs):
        claim = q.claim("default", "bench-worker", LEASE_MS)
        assert isinstance(claim, ClaimApplied), claim
        q.complete(claim.claim.token, "bench-worker", result=None)
    return jobs / (time.perf_counter() - start)


def one_round(rc: RedisCluster, jobs: int, durable: Durable | None) -> dict[str, float]:
    q = Quasar(rc, f"bench-{uuid.uuid4().hex[:8]}", durable=durable)
    q.enqueue("warm-up", id="warm-up")  # (loads the scripts on the namespace's primary)
    q.cancel("warm-up")
    return {"enqueue": enqueue(q, jobs), "process": process(q, jobs)}


def measure(jobs: int, rounds: int) -> dict[str, Any]:
    cluster = start_cluster(replicas=1)
    try:
        rc = RedisCluster(host=HOST, port=cluster.startup_port)
        runs: dict[str, list[dict[str, float]]] = {"default": [], "durable": []}
        for _ in range(rounds):
            runs["default"].append(one_round(rc, jobs, None))
            runs["durable"].append(one_round(rc, jobs, Durable(replicas=1, timeout_ms=1000)))
        rc.close()
    finally:
        cluster.stop()
    medians = {
        mode: {kind: statistics.median(r[kind] for r in results) for kind in ("enqueue", "process")}
        for mode, results in runs.items()
    }
    ratio = {
        kind: medians["durable"][kind] / medians["default"][kind] for kind in ("enqueue", "process")
    }
    return {"jobs": jobs, "rounds": rounds, "per_s": medians, "durable_over_default": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.jobs, args.rounds), indent=2))


if __name__ == "__main__":
    main()
