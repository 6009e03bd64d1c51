"""One serve() of a worker: its parts, made in order, and its stop as a list of ordered steps.

The parts, by role: the lease keeper's thread (``_lease_keeper``: renews every lease held, and
reports the outcomes no claim carries), the reporter (``_reporting``: each outcome's one way to
Redis, with the next claim or through the keeper, and its result's one way back), the runner
(``_running``: the jobs held, their slots and phases; ``_invoking`` calls their tasks), the claim
loops (``_claiming``), maintenance (``_maintenance``, which also keeps the Redis clock's offset)
the worker's registry entry (``_registry``) and its app's periodic schedules (``_scheduler``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from .._hooks import WorkerContext
from ._claiming import Claimer
from ._invoking import Invoker
from ._lease_keeper import LeaseKeeper
from ._maintenance import Maintenance
from ._prefetch import Prefetch
from ._processes import ProcessPool
from ._registry import Registry
from ._reporting import Reporter
from ._running import Runner
from ._scheduler import Scheduler

if TYPE_CHECKING:
    from ._lifecycle import Worker

log = logging.getLogger("quasar_redis.worker")

#: One step of a stop: what it does, and the method of the part it belongs to.
Step = tuple[str, Callable[[], Awaitable[object] | None]]


class Serving:
    """The parts of one serve() of ``worker``, made and wired here (the lease keeper started);
    ``run`` serves until a stop, then takes ``stop_steps`` in order."""

    def __init__(
        self,
        worker: Worker,
        context: WorkerContext,
        processes: ProcessPool | None,
        *,
        prefetch: Prefetch,
        stopping: asyncio.Event,
        slot: asyncio.Event,
        poke: asyncio.Event,
    ) -> None:
        app, worker_id = worker.app, worker.worker_id
        self.worker, self.context, self.processes = worker, context, processes
        self.stopping = stopping
        self.keeper = LeaseKeeper(app.new_client(), worker_id)
        self.reporter = Reporter(self.keeper, asyncio.get_running_loop())
        self.pool = ThreadPoolExecutor(worker.concurrency, thread_name_prefix="quasar-task")
        invoker = Invoker(
            worker_id=worker_id, pool=self.pool, processes=processes, middleware=app.hooks.arounds
        )
        self.runner = runner = Runner(
            app_tasks=app.tasks,
            worker_id=worker_id,
            lease_ms=worker.lease_ms,
            concurrency=worker.concurrency,
            prefetch=prefetch,
            stats=worker.stats,
            keeper=self.keeper,
            reporter=self.reporter,
            invoker=invoker,
            stopping=stopping,
            slot=slot,
            poke=poke,
            worker=context,
        )
        self.reporter.deliver = runner.deliver
        runner.metrics = metrics = worker.metrics
        metrics.worker_id, metrics.concurrency = worker_id, worker.concurrency
        metrics.running = lambda: runner.live
        client = app.aclient()
        self.maintenance = Maintenance(
            client=client,
            runner=runner,
            interval=worker.maintenance_interval,
            prune_max_age=worker.prune_max_age,
            prune_max_count=worker.prune_max_count,
        )
        self.claimer = Claimer(
            client=client,
            runner=runner,
            reporter=self.reporter,
            redis_ms=self.maintenance.redis_ms,
            queues=worker.queues,
            lanes=prefetch.lanes,
            idle_wait=worker.idle_wait,
            burst=worker.burst,
            max_jobs=worker.max_jobs,
            health=worker.health,
        )
        self.registry = Registry(
            client=client, runner=runner, queues=worker.queues, interval=worker.maintenance_interval
        )
        # (periodic schedules: not in burst mode, which runs what is there and stops)
        self.scheduler = None
        if app.schedules and not worker.burst:
            self.scheduler = Scheduler(
                client=client,
                schedules=list(app.schedules.values()),
                stopping=stopping,
                redis_ms=self.maintenance.redis_ms,
                worker_id=worker_id,
            )
        self.loops: list[asyncio.Task[None]] = []
        self.keeper.start()

    def start_loops(self) -> None:
        """Maintenance and the registry's announcements, beside the claim loops."""
        self.loops = [
            asyncio.create_task(self.maintenance.run()),
            asyncio.create_task(self.registry.run()),
        ]
        if self.scheduler is not None:
            self.loops.append(asyncio.create_task(self.scheduler.run()))

    async def run(self) -> None:
        """The claim loops until a stop (or their failure); then the stop's steps."""
        try:
            await self.claimer.run()
        finally:
            await self.stop()

    def stop_steps(self) -> list[Step]:
        """The steps of a stop, in order."""
        hooks, context, runner = self.worker.app.hooks, self.context, self.runner
        steps: list[Step] = [
            # (also ends maintenance if a cancellation of it was swallowed)
            ("no more claims, no job starts", self.stopping.set),
            ("outcomes go to the lease keeper", self.reporter.stop_carrying),
            ("unanswered claims' outcomes go to the lease keeper", self.claimer.report_unanswered),
            ("running jobs end, or are handed back", lambda: runner.drain(self.worker.grace)),
            ("maintenance, announcements and schedules end", self.end_loops),
            ("the registry entry is retired", self.registry.retire),
            ("the last outcomes go to the lease keeper", self.reporter.flush),
            ("shutdown hooks", lambda: hooks.stop(context)),
            ("the lease keeper reports the rest and stops", self.reporter.close),
            ("the last counts are written", self.maintenance.last_stats),
            ("the lease keeper's connection closes", self.keeper.close),
            ("task threads", lambda: self.pool.shutdown(wait=False, cancel_futures=True)),
        ]
        if self.processes is not None:
            steps.append(("task processes", self.processes.close))
        return steps

    async def stop(self) -> None:
        """Take the stop's steps in order."""
        for _, step in self.stop_steps():
            done = step()
            if inspect.isawaitable(done):
                await done
        log.info("worker %s stopped", self.worker.worker_id)

    async def end_loops(self) -> None:
        """End maintenance and the announcements, and wait for both."""
        for loop in self.loops:
            loop.cancel()
        await asyncio.gather(*self.loops, return_exceptions=True)
