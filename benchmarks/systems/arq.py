"""arq: ``ArqRedis.enqueue_job`` (asyncio only) and its ``Worker`` (``max_jobs`` at once)."""

from __future__ import annotations

from typing import Any, ClassVar

from arq import Worker, create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.constants import default_queue_name

from benchmarks import probe
from benchmarks.systems.base import System

MAX_JOBS = {"default": 10, "tuned": 500}


async def noop(ctx: dict[str, Any], data: str) -> None:
    probe.record(data)


class ArqSystem(System):
    name = "arq"
    distribution = "arq"
    sync_api = False
    async_api = True
    bulk_api = False
    sequential_note = "arq has only an asyncio API: one awaited enqueue_job at a time"
    variants: ClassVar[dict[str, str]] = {
        "default": f"Worker, max_jobs {MAX_JOBS['default']} (the default)",
        "tuned": f"Worker, max_jobs {MAX_JOBS['tuned']}",
    }
    notes: ClassVar[list[str]] = [
        "no sync producer API and no bulk API",
        "the worker polls the queue every poll_delay (0.5 s, the default) and reads at most "
        "max(5 × max_jobs, 100) job ids a poll, which bounds its rate on a full queue too",
    ]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.pool: ArqRedis | None = None

    async def open(self) -> None:
        self.pool = await create_pool(RedisSettings.from_dsn(self.url))

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()

    async def enqueue_async(self, data: str) -> None:
        assert self.pool is not None
        if await self.pool.enqueue_job("noop", data) is None:
            raise RuntimeError("enqueue_job refused the job")

    def finished(self, redis: Any, n: int) -> bool:
        # a job stays in the queue's sorted set until it is finished
        return int(redis.zcard(default_queue_name)) == 0

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        worker = Worker(
            functions=[noop],
            redis_settings=RedisSettings.from_dsn(url),
            max_jobs=MAX_JOBS[variant],
        )
        worker.run()


SYSTEM = ArqSystem
