"""The scheduler every worker runs for its app's periodic schedules (docs/schedules.md): it
declares them at start and every 30 s (so that they are not reported as undeclared), and sends
each due tick as it comes. Any number of workers may run it at once: lua/fire_schedule.lua
fires each tick once (its job id is the tick's), so no worker needs to lead."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from redis.exceptions import RedisError

from .._schedules import DECLARE_EVERY_MS, Firing, Schedule, Ticker
from .._urls import redact_text
from ..aio import AsyncQuasar
from ..errors import AccessDenied, QuasarError
from ._claiming import pause

log = logging.getLogger("quasar_redis.worker")

#: The longest wait between two rounds (a round also comes at the earliest tick due).
WAIT_MAX_S = 1.0


class Scheduler:
    """Rounds until ``stopping``: declarations when due, then the ticks due."""

    def __init__(
        self,
        *,
        client: AsyncQuasar,
        schedules: Sequence[Schedule],
        stopping: asyncio.Event,
        redis_ms: Callable[[], float],
        worker_id: str,
    ) -> None:
        self.client = client
        self.ticker = Ticker(list(schedules))
        self.stopping = stopping
        self.redis_ms = redis_ms
        self.worker_id = worker_id
        self.declared_at: int | None = None

    def _now(self) -> int:
        return round(self.redis_ms())

    async def run(self) -> None:
        while not self.stopping.is_set():
            try:
                await self.round(self._now())
            except AccessDenied as exc:  # (not transient: said once, and the jobs still run)
                log.error(
                    "worker %s: its Redis user may not fire periodic schedules (the scheduler "
                    "role, docs/security.md): none fires here: %s",
                    self.worker_id,
                    redact_text(str(exc)),
                )
                return
            except (QuasarError, RedisError, OSError) as exc:
                log.warning(
                    "worker %s: schedules failed: %s", self.worker_id, redact_text(str(exc))
                )
            due = self.ticker.next_due()
            wait = WAIT_MAX_S if due is None else (due - self._now()) / 1000
            await pause(self.stopping, min(max(wait, 0.01), WAIT_MAX_S))

    async def round(self, now: int, *, explicit: bool = False) -> int:
        """Declare the schedules if due, then send the ticks due at ``now``; how many jobs
        that enqueued."""
        at = now if explicit else None
        if self.declared_at is None or now - self.declared_at >= DECLARE_EVERY_MS:
            calls = self.ticker.declaring(self.client.calls, at)
            self.ticker.declared_all(await self.client.execute_many(calls))
            self.declared_at = now
        return await self._drive(self.ticker.firing(self.client.calls, now, explicit=explicit))

    async def _drive(self, flow: Firing) -> int:
        try:
            batch = next(flow)
            while True:
                batch = flow.send(await self.client.execute_many(batch))
        except StopIteration as done:
            enqueued: int = done.value
            return enqueued
