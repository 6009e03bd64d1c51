"""saq: ``Queue.enqueue`` (asyncio only) and its ``Worker`` (``concurrency`` at once)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from saq import Queue, Worker

from benchmarks import probe
from benchmarks.systems.base import QUEUE, System

CONCURRENCY = {"default": 10, "tuned": 50}


async def noop(ctx: dict[str, Any], *, data: str) -> None:
    probe.record(data)


class SaqSystem(System):
    name = "saq"
    distribution = "saq"
    sync_api = False
    async_api = True
    bulk_api = False
    sequential_note = "saq has only an asyncio API: one awaited enqueue at a time"
    variants: ClassVar[dict[str, str]] = {
        "default": f"Worker, concurrency {CONCURRENCY['default']} (the default)",
        "tuned": f"Worker, concurrency {CONCURRENCY['tuned']}",
    }
    notes: ClassVar[list[str]] = [
        "no sync producer API and no bulk API (Queue.batch groups calls, one per job)",
        "installed as saq[redis,hiredis] plus typing_extensions, which saq 0.26 imports without "
        "declaring it",
    ]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.queue: Queue | None = None

    async def open(self) -> None:
        self.queue = Queue.from_url(self.url, name=QUEUE)
        await self.queue.connect()

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.disconnect()

    async def enqueue_async(self, data: str) -> None:
        assert self.queue is not None
        if await self.queue.enqueue("noop", data=data) is None:
            raise RuntimeError("enqueue refused the job")

    def finished(self, redis: Any, n: int) -> bool:
        return int(redis.zcard(f"saq:{QUEUE}:incomplete")) == 0

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        async def main() -> None:
            queue = Queue.from_url(url, name=QUEUE)
            await queue.connect()
            worker = Worker(queue, functions=[noop], concurrency=CONCURRENCY[variant])
            await worker.start()  # returns on SIGTERM / SIGINT

        asyncio.run(main())


SYSTEM = SaqSystem
