"""rq: ``Queue.enqueue``, ``Queue.enqueue_many``; ``Worker`` (forking) and ``SimpleWorker``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import redis
from rq import Queue, SimpleWorker, Worker
from rq.registry import FinishedJobRegistry

from benchmarks.systems import tasks
from benchmarks.systems.base import QUEUE, System


class RQSystem(System):
    name = "rq"
    distribution = "rq"
    sync_api = True
    async_api = False
    bulk_api = True
    variants: ClassVar[dict[str, str]] = {
        "default": "Worker (forks a work horse per job; the default of `rq worker`)",
        "tuned": "SimpleWorker (no fork; rq has no concurrency setting inside one process)",
    }
    latency_variant = "tuned"
    notes: ClassVar[list[str]] = [
        "latency measured with SimpleWorker: the forking Worker runs fewer jobs a second than the "
        "200 a second of the latency test, so its queue would only grow",
        "no asyncio producer API",
        "bulk: Queue.enqueue_many of Queue.prepare_data, 1,000 jobs a call",
        "worker logging at WARNING (no per-job log lines)",
    ]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.redis = redis.Redis.from_url(url)
        self.queue = Queue(QUEUE, connection=self.redis)

    async def close(self) -> None:
        self.redis.close()

    def enqueue_sync(self, data: str) -> None:
        self.queue.enqueue(tasks.noop, data)

    def bulk(self, datas: Sequence[str]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(tasks.noop, (d,)) for d in datas])

    def finished(self, redis: Any, n: int) -> bool:
        return FinishedJobRegistry(QUEUE, connection=redis).count >= n

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        connection = redis.Redis.from_url(url)
        worker_class = Worker if variant == "default" else SimpleWorker
        worker = worker_class([Queue(QUEUE, connection=connection)], connection=connection)
        worker.work(logging_level="WARNING")


SYSTEM = RQSystem
