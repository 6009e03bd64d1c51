"""What every system adapter provides; the harness (``benchmarks.harness``) drives it.

An adapter runs in its system's own virtualenv. Producer calls that a system lacks stay
``None``-flagged (``sync_api``/``async_api``/``bulk_api`` False) and their figure is reported n/a.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar

QUEUE = "bench"  # every system's queue name
ASYNC_FILL_CONCURRENCY = 100


class System:
    """One job queue system: its producer calls, its worker, and how Redis shows jobs done."""

    name: ClassVar[str] = ""
    #: the distribution whose version is reported
    distribution: ClassVar[str] = ""
    sync_api: ClassVar[bool] = True
    async_api: ClassVar[bool] = False
    bulk_api: ClassVar[bool] = False
    #: what "one at a time" means when the system has no sync API
    sequential_note: ClassVar[str] = ""
    #: worker settings of the two process figures, as shown in the docs
    variants: ClassVar[dict[str, str]] = {}
    #: the worker variant of the latency figure (the default, unless it cannot keep up)
    latency_variant: ClassVar[str] = "default"
    notes: ClassVar[list[str]] = []

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        """Make the clients (called on the harness's event loop)."""

    async def close(self) -> None:
        """Close the clients."""

    def enqueue_sync(self, data: str) -> None:
        raise NotImplementedError

    async def enqueue_async(self, data: str) -> None:
        raise NotImplementedError

    def bulk(self, datas: Sequence[str]) -> Awaitable[None] | None:
        """Enqueue a chunk with the system's bulk API (may return an awaitable)."""
        raise NotImplementedError

    async def enqueue_one(self, data: str) -> None:
        """One job, the sequential way: the sync call, or the awaited async call."""
        if self.sync_api:
            self.enqueue_sync(data)
        else:
            await self.enqueue_async(data)

    async def fill(self, datas: Sequence[str], chunk: int = 1000) -> None:
        """Pre-fill a queue the fastest way the system offers (bulk, concurrent or one by one)."""
        if self.bulk_api:
            for i in range(0, len(datas), chunk):
                result = self.bulk(datas[i : i + chunk])
                if result is not None:
                    await result
        elif self.async_api:
            it = iter(datas)

            async def producer() -> None:
                for data in it:
                    await self.enqueue_async(data)

            await asyncio.gather(*(producer() for _ in range(ASYNC_FILL_CONCURRENCY)))
        else:
            for data in datas:
                self.enqueue_sync(data)

    def finished(self, redis: Any, n: int) -> bool:
        """Whether Redis shows all ``n`` jobs of the queue finished (called once they all ran)."""
        raise NotImplementedError

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        """Run one worker process of the system until SIGTERM."""
        raise NotImplementedError
