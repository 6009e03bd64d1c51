"""Running the jobs of some queues here and now, for tests: ``App.drain`` / ``App.adrain``.

A worker in burst mode underneath: it claims and runs every claimable job of the queues (and the
jobs those enqueue, and retries due at once) until nothing is claimable and none of its jobs
runs. Jobs scheduled for later (a delay, a retry's backoff) stay where they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..app import App
from ._lifecycle import Worker


def drain_queues(app: App, queues: str | Sequence[str] | None) -> list[str]:
    """The queues to drain: those given, else those of the app's tasks (else ``default``)."""
    if isinstance(queues, str):
        return [queues]
    if queues is not None:
        return list(queues)
    return sorted({task.queue for task in app.tasks.values()}) or ["default"]


async def adrain(
    app: App,
    queues: str | Sequence[str] | None = None,
    *,
    timeout: float | None = 60.0,
    concurrency: int = 10,
) -> int:
    """Run the claimable jobs of ``queues`` on the running loop until none is left; how many runs
    it made (a job retried meanwhile counts once an attempt). TimeoutError after ``timeout``
    seconds (the jobs still running are handed back)."""
    worker = Worker(
        app,
        drain_queues(app, queues),
        concurrency,
        burst=True,
        prune_max_age=None,
        prune_max_count=None,
    )
    serving = asyncio.ensure_future(worker.serve())
    done, _ = await asyncio.wait({serving}, timeout=timeout)
    if not done:
        worker.stop(immediate=True)
        await serving
        raise TimeoutError(f"queues {', '.join(worker.queues)} not drained in {timeout}s")
    serving.result()
    return worker.stats.claimed - worker.stats.handed_back


def drain(
    app: App,
    queues: str | Sequence[str] | None = None,
    *,
    timeout: float | None = 60.0,
    concurrency: int = 10,
) -> int:
    """``adrain`` on an event loop of its own (not from a running loop: use ``adrain`` there)."""

    async def run() -> int:
        try:
            return await adrain(app, queues, timeout=timeout, concurrency=concurrency)
        finally:
            await app.aclose()  # the loop ends here: its client must not outlive it

    return asyncio.run(run())
