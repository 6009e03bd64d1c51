"""Tasks for the batch fleet test (``test_batches_fleet``): ``tests.batch_tasks:app``.

The app reads its Redis URL from ``QUASAR_TEST_URL`` and its namespace from ``QUASAR_TEST_NS``.
A callback's run adds one to a counter of its batch (a key of the namespace) and lists its job id,
so that a test counts every run of every callback.
"""

from __future__ import annotations

import asyncio
import os

from quasar_redis import App, current_job

from .helpers import REDIS_URL

#: The members' lease: short, so that the jobs of a killed worker come back quickly.
LEASE_MS = 1500

app = App(
    os.environ.get("QUASAR_TEST_URL", REDIS_URL),
    namespace=os.environ.get("QUASAR_TEST_NS", "batch-tasks-unset"),
)


def runs_key(root: str, batch_id: str) -> str:
    """Where the callback runs of ``batch_id`` are listed (under the namespace's ``root``)."""
    return f"{root}test-runs:{batch_id}"


@app.task(name="bt.work", lease_ms=LEASE_MS, max_attempts=20, retry=0.01)
async def work(ms: int) -> int:
    await asyncio.sleep(ms / 1000)
    return ms


@app.task(name="bt.done", lease_ms=LEASE_MS, max_attempts=20, retry=0.01)
async def done() -> int:
    job = current_job()
    batch_id = job.batch_id
    assert batch_id is not None
    client = app.aclient()
    await client.redis.rpush(runs_key(client.keys.root, batch_id), job.job.id)
    return len(await job.abatch_results())
