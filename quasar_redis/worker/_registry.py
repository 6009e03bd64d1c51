"""The worker's entry in the namespace's worker registry (``workers()``, ``quasar workers``).

A serving worker announces itself every maintenance interval (at least once a minute): its id,
host, pid, queues, concurrency, the jobs it runs, its version and the runs it ended and failed
since it started (counted in memory), in one call that costs nothing per job. Each announcement
keeps the entry for ``LAPSE_INTERVALS`` intervals (at least a second), so a worker that dies
without a word (``kill -9``, a lost machine) is gone from the registry that long after its last
announcement; one that stops retires its entry at once.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket

from redis.exceptions import RedisError

from .._calls import WorkerEntry
from .._urls import redact_text
from ..aio import AsyncQuasar
from ..errors import InvalidArgument, QuasarError
from ._claiming import pause
from ._job import RUNS, STARTING
from ._running import Runner

log = logging.getLogger("quasar_redis.worker")
PACKAGE = __name__.split(".")[0]

#: An entry lapses this many intervals after the worker's last announcement.
LAPSE_INTERVALS = 5
LAPSE_MIN_MS = 1000
#: Announcements are at most this far apart, whatever the maintenance interval.
ANNOUNCE_MAX_S = 60.0


def lapse_ms(interval: float) -> int:
    """How long an announcement keeps a worker's entry, for announcements every ``interval`` s."""
    return max(LAPSE_MIN_MS, round(interval * LAPSE_INTERVALS * 1000))


class Registry:
    """Announces one serving worker every ``interval`` seconds until ``stopping``; ``retire``
    takes its entry out as it stops."""

    def __init__(
        self, *, client: AsyncQuasar, runner: Runner, queues: list[str], interval: float
    ) -> None:
        self.client = client
        self.runner = runner
        self.interval = min(interval, ANNOUNCE_MAX_S)
        self.ttl_ms = lapse_ms(self.interval)
        self.stopping = runner.stopping
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.queues = tuple(queues)
        # (the package's version; the package imports this module before it sets it)
        self.version: str = importlib.import_module(PACKAGE).__version__
        self.refused = False  # the registry refused this worker's entry: no more tries

    def entry(self) -> WorkerEntry:
        """What the worker announces now: the jobs whose run has begun (or is about to)."""
        held = self.runner.held.values()
        running = tuple(r.ctx.job.id for r in held if r.phase in RUNS or r.phase is STARTING)
        stats = self.runner.stats
        failed = stats.retried + stats.failed
        return WorkerEntry(
            self.runner.worker_id,
            self.host,
            self.pid,
            self.queues,
            self.runner.concurrency,
            running,
            self.version,
            stats.completed + failed,
            failed,
        )

    async def run(self) -> None:
        while not self.stopping.is_set() and not self.refused:
            await self.announce()
            await pause(self.stopping, self.interval)

    async def announce(self) -> None:
        try:
            await self.client.execute(self.client.calls.announce(self.entry(), self.ttl_ms))
        except InvalidArgument as exc:  # a worker id the registry cannot name: say so once
            self.refused = True
            log.warning("worker %s: not in the worker registry: %s", self.runner.worker_id, exc)
        except (QuasarError, RedisError, OSError) as exc:  # the next round tries again
            log.warning(
                "worker %s: announcing it failed: %s", self.runner.worker_id, redact_text(str(exc))
            )

    async def retire(self) -> None:
        """Take the worker's entry out (it stops); a failure leaves it to lapse."""
        if self.refused:
            return
        try:
            await self.client.execute(self.client.calls.retire(self.runner.worker_id))
        except (QuasarError, RedisError, OSError):
            log.info("worker %s: its registry entry lapses by itself", self.runner.worker_id)
