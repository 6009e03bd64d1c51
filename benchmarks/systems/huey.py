"""huey with RedisHuey: calling a task enqueues it; its consumer with worker threads."""

from __future__ import annotations

from typing import Any, ClassVar

from huey import RedisHuey

from benchmarks.systems import tasks
from benchmarks.systems.base import QUEUE, System

WORKERS = {"default": 1, "tuned": 8}


def declare(url: str) -> tuple[RedisHuey, Any]:
    huey = RedisHuey(QUEUE, url=url)
    return huey, huey.task(name="noop")(tasks.noop)


class HueySystem(System):
    name = "huey"
    distribution = "huey"
    sync_api = True
    async_api = False
    bulk_api = False
    variants: ClassVar[dict[str, str]] = {
        "default": f"consumer, {WORKERS['default']} worker thread (the default)",
        "tuned": f"consumer, {WORKERS['tuned']} worker threads",
    }
    notes: ClassVar[list[str]] = [
        "no asyncio producer API and no bulk API",
        "RedisHuey defaults: blocking dequeue (BRPOP), results stored (a no-op returns None)",
    ]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.huey, self.task = declare(url)

    def enqueue_sync(self, data: str) -> None:
        self.task(data)

    def finished(self, redis: Any, n: int) -> bool:
        return int(redis.llen(f"huey.redis.{QUEUE}")) == 0

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        huey, _ = declare(url)
        consumer = huey.create_consumer(workers=WORKERS[variant], worker_type="thread")
        consumer.run()  # SIGTERM stops it


SYSTEM = HueySystem
