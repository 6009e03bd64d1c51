"""bullmq (the Python package, no Node.js): ``Queue.add``, ``Queue.addBulk``, ``Worker``."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar

from bullmq import Queue, Worker

from benchmarks import probe
from benchmarks.systems.base import QUEUE, System

CONCURRENCY = {"default": 1, "tuned": 50}


class BullMQSystem(System):
    name = "bullmq"
    distribution = "bullmq"
    sync_api = False
    async_api = True
    bulk_api = True
    sequential_note = "bullmq has only an asyncio API: one awaited Queue.add at a time"
    variants: ClassVar[dict[str, str]] = {
        "default": f"Worker, concurrency {CONCURRENCY['default']} (the default)",
        "tuned": f"Worker, concurrency {CONCURRENCY['tuned']}",
    }
    notes: ClassVar[list[str]] = [
        "no sync producer API; a Queue talks over one connection (its concurrent adds share it)",
        "bulk: Queue.addBulk, 1,000 jobs a call",
        "completed jobs are kept (removeOnComplete unset, the default)",
    ]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.queue: Queue | None = None

    async def open(self) -> None:
        self.queue = Queue(QUEUE, {"connection": self.url})

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()

    async def enqueue_async(self, data: str) -> None:
        assert self.queue is not None
        await self.queue.add("noop", {"data": data})

    def bulk(self, datas: Sequence[str]) -> Awaitable[Any]:
        assert self.queue is not None
        return self.queue.addBulk([{"name": "noop", "data": {"data": d}} for d in datas])

    def finished(self, redis: Any, n: int) -> bool:
        return int(redis.zcard(f"bull:{QUEUE}:completed")) >= n

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        async def process(job: Any, token: str) -> None:
            probe.record(job.data["data"])

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            opts: Any = {"connection": url, "concurrency": CONCURRENCY[variant]}
            worker = Worker(QUEUE, process, opts)
            await stop.wait()
            await worker.close()

        asyncio.run(main())


SYSTEM = BullMQSystem
