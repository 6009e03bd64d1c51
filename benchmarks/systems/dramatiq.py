"""dramatiq with its RedisBroker: ``Actor.send`` and one ``Worker`` process (threads)."""

from __future__ import annotations

import signal
import threading
from typing import Any, ClassVar

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks import probe
from benchmarks.systems.base import QUEUE, System

THREADS = {"default": 8, "tuned": 16}


def noop(data: str) -> None:
    probe.record(data)


def declare(url: str) -> tuple[RedisBroker, Any]:
    broker = RedisBroker(url=url)
    dramatiq.set_broker(broker)
    return broker, dramatiq.actor(noop, queue_name=QUEUE, broker=broker)


class DramatiqSystem(System):
    name = "dramatiq"
    distribution = "dramatiq"
    sync_api = True
    async_api = False
    bulk_api = False
    variants: ClassVar[dict[str, str]] = {
        "default": f"Worker, {THREADS['default']} threads (the default)",
        "tuned": f"Worker, {THREADS['tuned']} threads",
    }
    notes: ClassVar[list[str]] = [
        "no asyncio producer API and no bulk API (a group sends its messages one by one)",
        "default middleware (AgeLimit, TimeLimit, ShutdownNotifications, Callbacks, Pipelines, "
        "Retries); no result backend",
        "an idle consumer polls with a growing back-off, up to worker_timeout (1 s)",
    ]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.broker, self.actor = declare(url)

    async def close(self) -> None:
        self.broker.close()

    def enqueue_sync(self, data: str) -> None:
        self.actor.send(data)

    def finished(self, redis: Any, n: int) -> bool:
        # a message stays in the queue's .msgs hash until it is acknowledged
        return int(redis.hlen(f"dramatiq:{QUEUE}.msgs")) == 0

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        broker, _ = declare(url)
        worker = dramatiq.Worker(broker, worker_threads=THREADS[variant])
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        worker.start()
        stop.wait()
        worker.stop()
        broker.close()


SYSTEM = DramatiqSystem
