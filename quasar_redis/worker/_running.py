"""Running the jobs a worker claimed: slots, prefetched jobs waiting for one, each run and its
outcome, hand-backs, lost leases, and the outcomes' results."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from .. import _types as t
from .._hooks import WorkerContext
from ..app import Task
from . import _outcomes as o
from ._invoking import Invoker
from ._job import (
    DONE,
    HANDING_BACK,
    LOST,
    QUEUED,
    REPORTING,
    RUNNING,
    RUNS,
    STARTING,
    CancelFlag,
    HeldJob,
    JobContext,
    current,
)
from ._lease import LOST as LEASE_LOST
from ._lease import Lease, Outgoing
from ._lease_keeper import LeaseKeeper, log_loss
from ._metrics import WorkerMetrics
from ._prefetch import Prefetch
from ._progress import ProgressBox
from ._reporting import Reporter

log = logging.getLogger("quasar_redis.worker")

_context = t.builder(JobContext)


class Runner:
    """The jobs one serving worker holds, by job id: waiting for a slot (``queued``, in claim
    order), running (``live`` of them, at most ``concurrency``), or reporting their outcome
    (``reporting`` of them). Lives on the worker's event loop, but for ``on_lost``."""

    def __init__(
        self,
        *,
        app_tasks: dict[str, Task[Any, Any]],
        worker_id: str,
        lease_ms: int,
        concurrency: int,
        prefetch: Prefetch,
        stats: o.WorkerStats,
        keeper: LeaseKeeper,
        reporter: Reporter,
        invoker: Invoker,
        stopping: asyncio.Event,
        slot: asyncio.Event,
        poke: asyncio.Event,
        worker: WorkerContext | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.tasks = app_tasks
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.stats = stats
        self.keeper = keeper  # keeps the leases of the jobs held
        self.reporter = reporter  # takes their outcomes to Redis, and back to ``deliver``
        self.invoker = invoker  # runs their tasks
        self.stopping = stopping  # set: no job starts any more
        self.slot = slot  # set when a slot may have freed (a full claim loop waits on it)
        self.poke = poke  # set to look for work again (ends an idle wait)
        self.worker = worker  # what its tasks see as current_worker()
        self.held: dict[str, HeldJob] = {}
        self.queued: deque[HeldJob] = deque()  # prefetched, in claim order (let go ones skipped)
        self.live = 0  # jobs whose task was made and whose run has not ended: <= concurrency
        self.reporting = 0  # held jobs whose outcome is on its way
        self.let_go = 0  # jobs let go so far: their outcomes are in Redis (or they never ran)
        self.metrics = WorkerMetrics()

    def room(self) -> int:
        """Jobs it may take on now: ``concurrency`` plus the jobs it may hold ahead (prefetch),
        minus the jobs running or waiting to run. A job whose run has ended frees its slot as
        soon as its outcome is queued, so the next claim carries it (or overlaps with the lease
        keeper's report of it); at most as many such outcomes as slots may wait for their
        result."""
        held, ahead = len(self.held), self.concurrency + self.prefetch.extra
        return min(ahead - held + self.reporting, 2 * ahead - held)

    # starting -----------------------------------------------------------------------------------

    def start_all(self, claims: Sequence[t.Claim]) -> None:
        """Hold the leases of one claim's jobs from now on and run them, each as an asyncio
        task while fewer than ``concurrency`` run (the rest, prefetched, wait for a slot in claim
        order; at a stop, none starts: they are handed back)."""
        tasks, worker_id, worker, now = self.tasks, self.worker_id, self.worker, time.monotonic()
        on_lost, held, queued = self.on_lost, self.held, self.queued
        flush_soon = self.keeper.flush_soon
        started: list[Lease] = []
        for claim in claims:
            job = claim.job
            task = tasks.get(job.stage)
            lease_ms = task.lease_ms if task is not None and task.lease_ms else self.lease_ms
            box = ProgressBox()
            running = HeldJob(
                claim,
                lease_ms,
                on_lost,
                _context(job, worker_id, CancelFlag(), worker, None, box),
                now,
            )
            box.flusher = functools.partial(flush_soon, running)
            held[job.id] = running
            started.append(running)
            queued.append(running)
        self.stats.claimed += len(started)
        self.keeper.hold_many(started)
        self.run_next()  # (then their metrics: read from Redis's times, not from now)
        self.loop.call_soon(self.metrics.claimed, [claim.job for claim in claims])

    def run_next(self) -> None:
        """Start waiting jobs while slots are free (never once the worker is stopping)."""
        loop, queued, tasks = self.loop, self.queued, self.tasks
        while queued and self.live < self.concurrency and not self.stopping.is_set():
            running = queued.popleft()
            if running.phase is not QUEUED:  # lost or handed back while it waited
                continue
            running.move_to(STARTING)
            self.live += 1
            running.started = time.monotonic()  # (its timeout and duration count from here)
            task = tasks.get(running.ctx.job.stage)
            running.task = loop.create_task(self._execute(running, task))

    def _never_runs(self, running: HeldJob) -> None:
        """A job that will never begin (waiting for a slot, or its task cancelled first): a slot
        it took frees."""
        if running.phase is STARTING:
            self.live -= 1
            self.run_next()

    # running ------------------------------------------------------------------------------------

    async def _execute(self, running: HeldJob, task: Task[Any, Any] | None) -> None:
        running.move_to(RUNNING)
        try:
            token = current.set(running.ctx)
            try:
                outcome = await self.invoker.outcome_of(running, task)
            except asyncio.CancelledError:
                if running.lost or running.phase is not HANDING_BACK:
                    return
                outcome = o.HANDED_BACK
            except Exception as exc:  # the worker's own making of the outcome: the job must end
                log.exception("job %s: making its outcome failed", running.ctx.job.id)
                outcome = o.worker_error("making the outcome of its run", exc)
            finally:
                current.reset(token)
            if running.state is LEASE_LOST:  # (running.lost, without a call: once a job)
                return
            self.send(running, outcome)
        finally:
            self.live -= 1
            if self.queued:
                self.run_next()
            if running.phase is not REPORTING:  # nothing to report
                running.move_to(DONE)
                self._let_go(running)

    def send(self, running: HeldJob, outcome: o.Outcome) -> None:
        """Hand the outcome to the reporter (its result comes back to ``deliver``)."""
        running.outcome = outcome
        running.duration = time.monotonic() - running.started
        if self.prefetch.auto and running.phase in RUNS:  # (not a job handed back unstarted)
            self.prefetch.learn(running.duration)
        running.move_to(REPORTING)
        self.reporter.put(Outgoing(running, outcome.build, running))
        self.reporting += 1
        self.slot.set()

    # letting go ---------------------------------------------------------------------------------

    def _let_go(self, running: HeldJob) -> None:
        job_id = running.ctx.job.id
        if self.held.get(job_id) is running:
            del self.held[job_id]
        self.let_go += 1
        self.slot.set()

    def on_lost(self, lease: Lease, error: t.JobError) -> None:
        """From the lease keeper's thread: the lease was lost."""
        self.loop.call_soon_threadsafe(self.lost, lease.claim.job.id, error)

    def lost(self, job_id: str, error: t.JobError) -> None:
        """The lease of a held job was lost: its run is told to end; one that has not begun
        never will."""
        running = self.held.get(job_id)
        if running is None:
            return
        self.stats.lost += 1
        self.metrics.lost_lease(running.ctx.job, error)
        running.ctx.cancelled.set()
        if running.task is not None:
            running.task.cancel()
        phase = running.phase
        if phase is QUEUED or phase is STARTING:
            self._never_runs(running)
            running.move_to(DONE)
            self._let_go(running)
        elif phase is RUNNING or phase is HANDING_BACK:
            running.move_to(LOST)

    def hand_back_all(self) -> None:
        """Hand back every job held: those waiting for a slot, those whose task has not begun,
        and the running ones (cancelled: each hands its job back as its task ends)."""
        self.hand_back_queued()
        for running in list(self.held.values()):
            phase = running.phase
            if phase is RUNNING:
                running.move_to(HANDING_BACK)
            elif phase is not STARTING and phase is not LOST:
                continue
            assert running.task is not None
            running.ctx.cancelled.set()
            running.task.cancel()
            if phase is STARTING:  # it will never run: hand it back here
                self._hand_back_unstarted(running)

    def hand_back_queued(self) -> None:
        """Jobs waiting for a slot (prefetched) go back to their queue: at a stop, or when they
        waited too long (``give_back_stale``)."""
        while self.queued:
            running = self.queued.popleft()
            if running.phase is QUEUED:
                self._hand_back_unstarted(running)

    def _hand_back_unstarted(self, running: HeldJob) -> None:
        self._never_runs(running)
        self.send(running, o.HANDED_BACK)

    async def drain(self, grace: float) -> None:
        """At a stop: jobs waiting for a slot are handed back, running ones get ``grace``
        seconds to end, then those left are handed back (and given 10 s to end)."""
        self.hand_back_queued()
        tasks = [r.task for r in self.held.values() if r.task is not None]
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        self.hand_back_all()
        left = [r.task for r in self.held.values() if r.task is not None]
        if left:
            await asyncio.wait(left, timeout=10.0)

    def give_back_stale(self) -> None:
        """prefetch="auto", from the maintenance loop: jobs that waited too long for a slot go
        back to their queue, and prefetch pauses (``Prefetch.stale``)."""
        waited = self.prefetch.stale(self.queued, self.held.values())
        if waited is not None:
            log.info(
                "worker %s: jobs waited %.1fs for a slot: handed back, prefetch paused",
                self.worker_id,
                waited,
            )
            self.hand_back_queued()

    # results ------------------------------------------------------------------------------------

    def deliver(self, pairs: list[tuple[Any, Any]]) -> None:
        """Results of one report batch, on the event loop (one wake-up per batch)."""
        plain = not log.isEnabledFor(logging.INFO)  # no line per job to log
        completed = o.COMPLETED
        for running, result in pairs:
            if plain and running.outcome is completed and type(result) is t.OutcomeApplied:
                if running.state is not LEASE_LOST:  # what _reported does for it, in short
                    self.stats.completed += 1
                    self.metrics.ended(running.ctx.job, o.OutcomeKind.COMPLETED, running.duration)
            else:
                try:
                    self._reported(running, result)
                except Exception:  # a bug here must not keep the other results from their jobs
                    log.exception("job %s: handling its result failed", running.ctx.job.id)
            running.move_to(DONE)
            self.reporting -= 1
            self._let_go(running)

    def _reported(self, running: HeldJob, result: Any) -> None:
        job, outcome = running.ctx.job, running.outcome
        assert outcome is not None
        if isinstance(result, BaseException):
            log.error(
                "job %s stage=%s attempt=%d: its outcome (%s) was not reported: %s",
                job.id,
                job.stage,
                job.attempt,
                outcome.kind.value,
                result,
            )
            return
        if running.lost:  # lost while the outcome was on its way: lost() counted it
            return
        if isinstance(result, t.JobRefused) and isinstance(result.error, t.InvalidJob):
            log.error(
                "job %s stage=%s attempt=%d: Redis refused its outcome (%s): %s; it runs again "
                "once its lease runs out",
                job.id,
                job.stage,
                job.attempt,
                outcome.kind.value,
                result.error.reason,
            )
            return
        if isinstance(result, t.JobRefused):
            then = f"its outcome from attempt {job.attempt} was refused"
            client, error = self.keeper.client, result.error
            revision = job.input_revision
            self.loop.run_in_executor(None, log_loss, client, job.id, error, then, revision)
            self.stats.lost += 1
            self.metrics.lost_lease(job, error)
            return
        if outcome.delay_ms is not None and not self.stopping.is_set():
            self._poke_in(outcome.delay_ms)
        kind = o.kind_of(outcome, result)
        o.count(self.stats, kind)
        self.metrics.ended(job, kind, running.duration)
        if outcome.error:
            _log_failure(running, outcome, kind)
        elif log.isEnabledFor(logging.INFO):
            log.info(
                "job %s stage=%s attempt=%d status=%s duration=%.3fs",
                job.id,
                job.stage,
                job.attempt,
                o.describe(outcome, kind),
                running.duration,
            )

    def _poke_in(self, delay_ms: int) -> None:
        """Look for work again after ``delay_ms`` (a job of ours retries then), idle or not."""
        self.loop.call_later(delay_ms / 1000 + 0.001, self.poke.set)


def _log_failure(running: HeldJob, outcome: o.Outcome, kind: o.OutcomeKind) -> None:
    """A failed run's line, with the job in ``extra`` (``job_id``, ``queue``, ``task``,
    ``attempt``) for structured-logging handlers. A retried attempt is one WARNING line (its
    error and when it runs again), its traceback at DEBUG (it is kept in the job's failure
    history too); a final failure is an ERROR with the exception's traceback (``exc_info``)."""
    job = running.ctx.job
    extra = {"job_id": job.id, "queue": job.queue, "task": job.stage, "attempt": job.attempt}
    retried = kind is o.OutcomeKind.RETRYING
    log.log(
        logging.WARNING if retried else logging.ERROR,
        "job %s stage=%s attempt=%d status=%s duration=%.3fs error=%s",
        job.id,
        job.stage,
        job.attempt,
        o.describe(outcome, kind),
        running.duration,
        outcome.error,
        exc_info=None if retried else outcome.exception,
        extra=extra,
    )
    if retried and outcome.exception is not None:
        log.debug(
            "job %s attempt=%d: the traceback of its failure",
            job.id,
            job.attempt,
            exc_info=outcome.exception,
            extra=extra,
        )
