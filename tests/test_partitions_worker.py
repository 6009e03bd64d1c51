"""A worker of a partitioned namespace: it claims from every partition, its idle wait wakes for
a job enqueued to any of them, and its maintenance sweeps them all; the command line reads the
namespace as its record of partitions says."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from quasar_redis import (
    App,
    AsyncQuasar,
    ClaimsApplied,
    Connector,
    JobApplied,
    RedisUnavailable,
    ReportedAndClaimed,
    Status,
    Worker,
)
from quasar_redis._partitions import partition_of

from .helpers import REDIS_URL, delete_namespace, real_redis, wait_for

COUNT = 3


@pytest.fixture
def papp(backend: str, namespace: str) -> Iterator[App]:
    """An App of a namespace of ``COUNT`` partitions, on each backend."""
    if backend == "fake":
        made = App(connector=Connector("memory://"), namespace=namespace, partitions=COUNT)
        yield made
        made.client.redis.close()
        return
    real_redis().close()  # skip (or fail under QUASAR_REQUIRE_REDIS=1) without a server
    made = App(REDIS_URL, namespace=namespace, partitions=COUNT)
    try:
        yield made
    finally:
        delete_namespace(made.client.redis, namespace)
        made.client.redis.close()


def worker_of(app: App, **options: Any) -> Worker:
    return Worker(app, **{"maintenance_interval": 0.1, "idle_wait": 1.0, **options})


def test_a_worker_runs_the_jobs_of_every_partition(papp: App) -> None:
    def double(n: int) -> int:
        return 2 * n

    task = papp.task(double, name="double")
    with worker_of(papp, concurrency=4):
        handles = [task.enqueue(n) for n in range(12)]
        first = task.options(flow="order-7").enqueue(100)
        then = task.options(flow="order-7", depends_on=[first]).enqueue(200)
        assert [h.result(timeout=30) for h in handles] == [2 * n for n in range(12)]
        assert (first.result(timeout=30), then.result(timeout=30)) == (200, 400)
    assert {partition_of(h.id, COUNT) for h in handles} == set(range(COUNT))
    assert partition_of(first.id, COUNT) == partition_of(then.id, COUNT)
    counts = papp.client.counts("default")
    assert counts.completed == 14 and counts.available == 0
    info = then.info()
    assert info is not None and info.status is Status.COMPLETED


def test_an_idle_worker_wakes_for_a_job_of_any_partition(papp: App) -> None:
    def echo(n: int) -> int:
        return n

    task = papp.task(echo, name="echo")
    with worker_of(papp, idle_wait=60.0) as worker:  # (woken by the job, not by its timeout)
        for n in range(COUNT * 2):
            handle = task.options(id=f"{n % COUNT}~job-{n}").enqueue(n)
            assert handle.result(timeout=30) == n
        done = COUNT * 2
        wait_for(lambda: worker.stats.completed == done or None, 30, "the outcomes counted")


def test_a_claim_whose_reply_was_lost_is_sent_again_and_its_jobs_run(
    papp: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis leases the jobs of a claim spread over the partitions, but its reply is lost (a
    failover): the worker sends the same call again (each partition's part with its call id),
    is answered the same leases, and runs them."""
    execute = AsyncQuasar.execute
    lost: list[Any] = []

    async def losing_a_reply(self: AsyncQuasar, call: Any) -> Any:
        result = await execute(self, call)
        claims = result.claim if isinstance(result, ReportedAndClaimed) else result
        if call.spread is not None and isinstance(claims, ClaimsApplied) and not lost:
            lost.append(call)
            raise RedisUnavailable("reply lost (simulated)")
        return result

    def echo(n: int) -> int:
        return n

    task = papp.task(echo, name="echo")
    handles = [task.enqueue(n) for n in range(COUNT * 2)]  # (before the worker claims)
    monkeypatch.setattr(AsyncQuasar, "execute", losing_a_reply)
    with worker_of(papp, concurrency=COUNT * 2) as worker:
        assert [h.result(timeout=30) for h in handles] == list(range(COUNT * 2))
        assert worker.stats.lost == 0
    assert len(lost) == 1


def test_the_cli_reads_a_partitioned_namespace_as_its_record_says(namespace: str) -> None:
    from click.testing import CliRunner

    from quasar_redis.cli import main

    real_redis().close()  # (the command line reads the real server)
    app = App(REDIS_URL, namespace=namespace, partitions=COUNT)
    try:
        jobs = [app.client.enqueue("s", id=f"{n}~cli", now=1_000) for n in range(COUNT)]
        assert all(isinstance(j, JobApplied) for j in jobs)
        app.client.cancel("1~cli", now=1_000)
        base = ["--redis-url", REDIS_URL, "--namespace", namespace]
        queues = CliRunner().invoke(main, ["queues", *base, "--json"])
        assert queues.exit_code == 0, queues.output
        [row] = json.loads(queues.output)
        assert (row["counts"]["available"], row["counts"]["cancelled"]) == (COUNT - 1, 1)
        listing = CliRunner().invoke(main, ["jobs", "default", *base, "--json"])
        assert listing.exit_code == 0, listing.output
        assert sorted(j["id"] for j in json.loads(listing.output)["jobs"]) == sorted(
            f"{n}~cli" for n in range(COUNT)
        )
        shown = CliRunner().invoke(main, ["job", "2~cli", *base, "--json"])
        assert shown.exit_code == 0 and json.loads(shown.output)["status"] == "available"
        events = CliRunner().invoke(main, ["events", *base, "--no-follow", "-n", "10"])
        assert events.exit_code == 0, events.output
        assert sorted(line.split()[1] for line in events.output.splitlines()) == sorted(
            [*(f"job={n}~cli" for n in range(COUNT)), "job=1~cli"]
        )
        purge = ["purge", "default", *base, "--status", "cancelled"]
        assert CliRunner().invoke(main, purge).exit_code == 0
    finally:
        delete_namespace(app.client.redis, namespace)
        app.close()
