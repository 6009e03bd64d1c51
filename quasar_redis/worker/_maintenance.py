"""The maintenance every worker runs: promote due jobs, recover expired leases, prune finished
jobs; and, for the worker itself, the Redis clock's offset from its own (the other parts read
the Redis time through ``redis_ms``), prefetched jobs that waited too long, and its recent counts
added to the rolling store (``_rolling``) every ``STATS_ROUNDS`` rounds. Any number of workers
may run it at once: each step is one atomic script."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from redis.exceptions import RedisError

from .._rolling import write_commands
from .._urls import redact_text
from ..aio import AsyncQuasar
from ..errors import QuasarError
from ._claiming import pause
from ._running import Runner

log = logging.getLogger("quasar_redis.worker")

#: Each call of a maintenance round handles at most BATCH jobs (a few ms of Redis: see "Bounds"
#: in docs/redis-layout.md), and a round makes at most ROUNDS calls of each kind.
BATCH = 100
ROUNDS = 100
#: Every STATS_ROUNDS-th round writes what the worker counted to the rolling store.
STATS_ROUNDS = 5


class Maintenance:
    """Rounds about every ``interval`` seconds (±20 %) until ``stopping``; every tenth prunes."""

    def __init__(
        self,
        *,
        client: AsyncQuasar,
        runner: Runner,
        interval: float,
        prune_max_age: float | None,
        prune_max_count: int | None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.interval = interval
        self.prune_max_age = prune_max_age
        self.prune_max_count = prune_max_count
        self.stopping: asyncio.Event = runner.stopping
        self.offset_ms = 0.0  # the Redis clock minus ours, from the last TIME read

    def redis_ms(self) -> float:
        """The Redis clock's time now, in ms (ours until its first TIME read)."""
        return time.time() * 1000 + self.offset_ms

    async def run(self) -> None:
        rounds = 0
        while not self.stopping.is_set():
            self.runner.give_back_stale()
            try:
                await self._sync_clock()
                await self._maintain(prune=rounds % 10 == 0)
                if rounds % STATS_ROUNDS == 0:
                    await self.write_stats()
            except (QuasarError, RedisError, OSError) as exc:
                log.warning(
                    "worker %s: maintenance failed: %s",
                    self.runner.worker_id,
                    redact_text(str(exc)),
                )
            rounds += 1
            await pause(self.stopping, self.interval * random.uniform(0.8, 1.2))

    async def _maintain(self, *, prune: bool) -> None:
        client = self.client
        for _ in range(ROUNDS):
            if await client.promote_due(limit=BATCH) < BATCH:
                break
        for _ in range(ROUNDS):  # (run-out leases, then jobs not started by their deadline)
            swept = await client.sweep_expired(limit=BATCH)
            self.runner.metrics.expired_leases(len(swept.expired))
            if len(swept.expired) + len(swept.past_deadline) < BATCH:
                break
        for _ in range(ROUNDS):  # (cascade work left by clients that went away)
            if not (await client.resume_cascades()).more:
                break
        if prune:  # (also with no limits: the jobs whose task's result_ttl ran out)
            age = None if self.prune_max_age is None else round(self.prune_max_age * 1000)
            for _ in range(ROUNDS):
                pruned = await client.prune(
                    max_age_ms=age, max_count=self.prune_max_count, limit=BATCH
                )
                if pruned < BATCH:
                    break

    async def last_stats(self) -> None:
        """At a stop, once its jobs have ended: what was counted since the last write."""
        with contextlib.suppress(QuasarError, RedisError, OSError):
            await self.write_stats()

    async def write_stats(self) -> None:
        """Add what was counted since the last write to the rolling store (one pipeline)."""
        counts = self.runner.metrics.tally.take()
        commands = write_commands(self.client.keys, counts, self.redis_ms())
        if not commands:
            return
        try:
            pipe = self.client.redis.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            await pipe.execute()
        except BaseException:
            self.runner.metrics.tally.give_back(counts)
            raise

    async def _sync_clock(self) -> None:
        try:
            server_ms = await self.client.server_time_ms()
        except Exception as exc:  # a Redis error: the next round tries again
            raise QuasarError(f"TIME failed: {exc}") from exc
        self.offset_ms = server_ms - time.time() * 1000
