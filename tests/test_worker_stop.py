"""A worker's stop as orchestrators drive it (docs/deploy.md): a job handed back at the end of
the grace period is claimable again at once, even when the stop came as the worker's idle wait
was going out (a wait redis-py sends after its cancellation would otherwise claim that job for
a worker that no longer runs it, until its lease ran out)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from quasar_redis import App, AsyncQuasar, Status, Worker, current_job
from quasar_redis.worker import WorkerPhase

from .helpers import REDIS_URL, delete_namespace, real_redis, wait_for


@pytest.fixture
def app(namespace: str) -> Iterator[App]:
    client = real_redis()
    try:
        with App(REDIS_URL, namespace=namespace) as made:
            yield made
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_a_job_handed_back_at_a_stop_is_not_claimed_by_the_stopping_worker(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()

    def holds() -> str:
        started.set()
        while not current_job().cancelled.is_set():  # until the worker lets go of it
            current_job().cancelled.wait(0.05)
        return "let go"

    task = app.task(holds, name="holds", queue="held", lease_ms=60_000)
    worker = Worker(app, ["held"], 2, prefetch=0, grace=0.2, idle_wait=5.0)
    real_wait = AsyncQuasar.wait_and_claim
    waits: list[int] = []

    def wait_sent_at_the_stop(self: AsyncQuasar, *args: Any) -> Any:
        """The first idle wait as it is (it claims the job); the next goes out only once the
        stop began, whatever cancels it: as a wait whose cancellation redis-py swallowed."""
        waits.append(1)
        if len(waits) == 1:
            return real_wait(self, *args)

        async def late() -> Any:
            while worker.health.phase() is not WorkerPhase.DRAINING:
                await asyncio.sleep(0.01)
            return await real_wait(self, *args)

        return asyncio.shield(late())

    monkeypatch.setattr(AsyncQuasar, "wait_and_claim", wait_sent_at_the_stop)
    with worker:
        wait_for(lambda: waits, 30, "the worker's first idle wait")
        handle = task.enqueue()
        assert started.wait(30), "the job did not start"
        wait_for(lambda: len(waits) == 2, 30, "the next idle wait")
    # the worker has stopped: the job it handed back waits for another worker
    info = app.client.get_job(handle.id)
    assert info is not None and info.status is Status.AVAILABLE, info
    assert info.job.fencing_version == 1  # claimed once, by the run the stop cut short
    assert worker.stats.claimed == 1
