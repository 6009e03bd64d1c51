"""The worker: claims jobs of some queues in batches, runs them, reports each outcome.

asyncio at its core: async tasks run on the loop, plain functions in a thread pool. Leases are
renewed by the lease keeper thread (``_lease_keeper``) at about a third of their duration; when a
renewal is refused (the job was cancelled, expired or taken over) the running task is told
(asyncio cancellation, and ``current_job().cancelled`` for plain functions) and its outcome is
never reported. An idle worker blocks on the queues' wake lists until work arrives or the next
scheduled job is due. Maintenance (promote, sweep, prune) runs inside every worker; any number
of them may run it at once.

Outcomes ride the next claim: one ``report_claim`` call reports the jobs that ended and claims
as many new ones (one round trip a batch). When no claim is about to go out (the worker is idle,
backing off, full or stopping), or a heartbeat of the job is in flight, the lease keeper reports
the outcome instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import random
import re
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.exceptions import RedisError

from . import _types as t
from ._calls import Call
from ._codec import Encoded, EncodeError, encode
from ._keys import check_name
from ._lease_keeper import Item, Lease, LeaseKeeper
from .aio import AsyncQuasar
from .app import App, Task, args_of
from .errors import CorruptDataError, QuasarError, RedisUnavailable
from .retry import PermanentFailure, Snooze

log = logging.getLogger("quasar_redis.worker")

REASON_MAX = 8000
# The most outcomes a claim carries. A small batch costs mostly its round trip and its call's
# fixed cost, which one call for both saves; a larger one goes through the lease keeper on its own
# connection, so that Redis reports it while the worker starts the jobs of the claim sent beside
# it (measured on 2 cores: carried, +8-30% jobs/s at concurrency 10; at 200, carrying all of them
# lost that overlap, -10%).
CARRY_MAX = 64
CUT_SHORT_KEPT = 64
# prefetch="auto": hold as many jobs beyond the running ones as can be expected to start within
# PREFETCH_WAIT_S (at most ``concurrency``), judged by the moving average of recent run times
# (each new one weighs RUN_AVG_WEIGHT); none before the first job has run.
PREFETCH_WAIT_S = 0.01
RUN_AVG_WEIGHT = 0.1
# ... and when a job has waited for a slot this long all the same (long jobs came after short
# ones, and every slot is taken), the waiting jobs go back to their queue for an idle worker.
PREFETCH_STALE_S = 1.0
Build = Callable[[t.LeaseToken], t.Outcome]


class CancelFlag:
    """Set when a job should stop; like ``threading.Event``, made only when someone waits."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set (or ``timeout`` seconds); True if set."""
        if self._event is None:
            self._event = threading.Event()
            if self._set:
                self._event.set()
        return self._event.wait(timeout)


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a running task can know about its job (``current_job()``)."""

    job: t.Job
    worker_id: str
    cancelled: CancelFlag = field(default_factory=CancelFlag)

    @property
    def attempt(self) -> int:
        return self.job.attempt


_current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("quasar_job")


def current_job() -> JobContext:
    """The job the calling task runs for (LookupError outside a job).

    A plain-function task should check ``current_job().cancelled.is_set()`` now and then: it is
    set when the job's lease was lost, its timeout passed, or the worker hands it back.
    """
    return _current.get()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to report for a run: ``name`` for the log line, ``build`` makes the call."""

    name: str
    build: Build
    delay_ms: int | None = None  # when the job comes back (a retry or a hand-back), if it does


_complete = t.builder(t.Complete)


def _complete_empty(token: t.LeaseToken) -> t.Outcome:
    return _complete(token, None, "inline")


_COMPLETED = Outcome("completed", _complete_empty)  # a run that returned None


_context = t.builder(JobContext)


class _Running(Lease):
    """A job this worker runs: its lease (kept by the lease keeper) and its run."""

    __slots__ = (
        "begun",
        "ctx",
        "duration",
        "ended",
        "handing_back",
        "outcome",
        "settled",
        "started",
        "task",
    )

    def __init__(
        self,
        claim: t.Claim,
        lease_ms: int,
        on_lost: Callable[[Lease, t.JobError], None],
        ctx: JobContext,
        started: float,
    ) -> None:
        super().__init__(claim, lease_ms, on_lost)
        self.ctx = ctx
        self.started = started
        self.task: asyncio.Task[None] | None = None
        self.handing_back = False
        self.begun = False  # its task has started to run it
        self.ended = False  # ... and is done with it (or was cancelled before it started)
        self.outcome: Outcome | None = None  # handed to the lease keeper
        self.duration = 0.0  # from its start (its claim, unless prefetched) to the outcome
        self.settled = False  # the outcome's result is back


@dataclass
class WorkerStats:
    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    snoozed: int = 0
    handed_back: int = 0
    lost: int = 0


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def _kind(exc: BaseException) -> str:
    return re.sub(r"[^\w.\-]", "_", type(exc).__name__)[:64] or "Error"


def _reason(text: str) -> str:
    data = text.encode("utf-8", "replace")[:REASON_MAX]
    return data.decode("utf-8", "ignore") or "error"


class Worker:
    """Runs the tasks of ``app`` for ``queues`` with up to ``concurrency`` jobs at once."""

    def __init__(
        self,
        app: App,
        queues: Sequence[str] = ("default",),
        concurrency: int = 10,
        *,
        prefetch: int | Literal["auto"] = "auto",
        worker_id: str | None = None,
        lease_ms: int = 30_000,
        grace: float = 30.0,
        idle_wait: float = 5.0,
        maintenance_interval: float = 1.0,
        prune_max_age: float | None = 7 * 86_400.0,
        prune_max_count: int | None = 100_000,
    ) -> None:
        if concurrency < 1 or lease_ms < 1 or not queues:
            raise ValueError("concurrency and lease_ms must be positive, and queues not empty")
        if prefetch != "auto" and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
        ):
            raise ValueError(f"prefetch must be a nonnegative integer or 'auto': got {prefetch!r}")
        self.app = app
        self.queues = [check_name(q, "queue") for q in queues]
        self.concurrency = concurrency
        self.prefetch = prefetch
        # Jobs it may hold beyond ``concurrency`` now (prefetch="auto": from recent run times).
        self._auto = prefetch == "auto"
        self._extra = 0 if isinstance(prefetch, str) else prefetch
        self._run_avg: float | None = None  # seconds, moving average (prefetch="auto")
        self.worker_id = worker_id or default_worker_id()
        self.lease_ms = lease_ms
        self.grace = grace
        self.idle_wait = idle_wait
        self.maintenance_interval = maintenance_interval
        self.prune_max_age = prune_max_age
        self.prune_max_count = prune_max_count
        self.stats = WorkerStats()
        # Jobs held: waiting for a slot (prefetched), running, or reporting their outcome.
        self._running: dict[str, _Running] = {}
        self._queued: deque[_Running] = deque()  # prefetched, in claim order (ended ones skipped)
        self._live = 0  # jobs whose task was made and whose run has not ended: <= concurrency
        # Claim loops: two with prefetch, so that one's call is in flight while the other's jobs
        # start (one loop and Redis take turns). Slots asked for by claims in flight (and by the
        # claim an idle wait carries), and how many claim calls are in flight.
        self._lanes = 2 if prefetch else 1
        self._asked = 0
        self._in_flight = 0
        self._reporting = 0  # of those, how many have handed their outcome to the lease keeper
        self._stopping = asyncio.Event()
        self._slot = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: AsyncQuasar | None = None
        self._keeper: LeaseKeeper | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._offset_ms = 0.0
        self._signals = 0
        self._stop_requested = False
        self._poke = asyncio.Event()
        self._background: set[asyncio.Future[Any]] = set()
        # A call whose reply was lost, per claim loop and queue, and the outcomes it carries:
        # sent again as is.
        self._unanswered: dict[tuple[int, str], tuple[Call[Any], list[Item]]] = {}
        self._outbox: list[Item] = []  # outcomes for the next claim, or for the lease keeper
        self._carrying = 0  # claim loops that will send a claim soon (and take the outbox)
        # Call ids of claims sent with a wait cut short, and the jobs each has started (from the
        # late answer or the re-sent call, whichever came first): the newest CUT_SHORT_KEPT.
        self._cut_short: dict[str, set[str]] = {}
        self._waking: set[str] = set()  # queues with a wake-up push in flight

    # running and stopping -------------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> None:
        """Run until stopped (SIGTERM / SIGINT when ``install_signals``)."""
        asyncio.run(self._serve_and_close(install_signals))

    async def _serve_and_close(self, install_signals: bool) -> None:
        try:
            await self.serve(install_signals=install_signals)
        finally:
            await self.app.aclose()  # the loop ends here: its client must not outlive it

    async def serve(self, *, install_signals: bool = False) -> None:
        """Run on the current event loop until ``stop()``."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._slot = asyncio.Event()
        self._poke = asyncio.Event()
        if self._stop_requested:  # stop() came before serve() started
            self._stopping.set()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._on_signal)
        self._client = self.app.aclient()
        loop = self._loop

        def dispatch(pairs: list[tuple[Any, Any]]) -> None:
            loop.call_soon_threadsafe(self._deliver, pairs)

        self._keeper = LeaseKeeper(self.app.new_client(), self.worker_id, dispatch=dispatch)
        self._keeper.start()
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="quasar-task")
        maintenance = asyncio.create_task(self._maintenance())
        log.info(
            "worker %s started: queues %s, concurrency %d, prefetch %s",
            self.worker_id,
            ",".join(self.queues),
            self.concurrency,
            self.prefetch,
        )
        try:
            await self._claim_loops()
        finally:
            self._stopping.set()  # ends maintenance even if a cancellation gets swallowed
            self._carrying = 0
            self._flush_outbox()
            self._report_unanswered()
            await self._drain()
            maintenance.cancel()
            await asyncio.gather(maintenance, return_exceptions=True)
            self._flush_outbox()
            await asyncio.to_thread(self._keeper.stop)
            self._keeper.client.redis.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            log.info("worker %s stopped", self.worker_id)

    def stop(self, *, immediate: bool = False) -> None:
        """Stop claiming; running jobs get ``grace`` seconds (none if ``immediate``)."""
        if immediate:
            self.grace = 0.0
        self._stop_requested = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if _on_loop(loop):
            self._stop_now()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to stop
                loop.call_soon_threadsafe(self._stop_now)

    def _stop_now(self) -> None:
        self._stopping.set()
        self._slot.set()
        self._hand_back_queued()  # (the grace is for jobs that run)
        if self.grace <= 0:
            self._hand_back_all()

    def _on_signal(self) -> None:
        self._signals += 1
        log.info(
            "worker %s: signal %d, %s",
            self.worker_id,
            self._signals,
            "stopping" if self._signals == 1 else "stopping at once",
        )
        self.stop(immediate=self._signals > 1)

    async def _drain(self) -> None:
        self._hand_back_queued()
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if tasks and self.grace > 0:
            await asyncio.wait(tasks, timeout=self.grace)
        self._hand_back_all()
        left = [r.task for r in self._running.values() if r.task is not None]
        if left:
            await asyncio.wait(left, timeout=10.0)

    def _hand_back_all(self) -> None:
        self._hand_back_queued()
        for running in list(self._running.values()):
            if running.task is not None and not running.task.done() and not running.handing_back:
                running.handing_back = True
                running.ctx.cancelled.set()
                running.task.cancel()
                if not running.begun:  # it will never run: hand it back here
                    self._hand_back_unstarted(running)

    def _hand_back_queued(self) -> None:
        """Jobs waiting for a slot (prefetched) go back to their queue: at a stop, or when they
        waited too long (``_give_back_stale``)."""
        while self._queued:
            running = self._queued.popleft()
            if not running.ended and not running.handing_back:
                self._hand_back_unstarted(running)

    def _hand_back_unstarted(self, running: _Running) -> None:
        running.handing_back = True
        self._never_runs(running)
        self._send(running, self._release(0, "handed back"))

    # claiming ---------------------------------------------------------------------------------

    async def _claim_loops(self) -> None:
        """The claim loop, or two of them side by side (with prefetch); the first that fails
        ends the others."""
        self._carrying = self._lanes
        if self._lanes == 1:
            await self._claim_loop(0)
            return
        loops = [asyncio.ensure_future(self._claim_loop(lane)) for lane in range(self._lanes)]
        try:
            await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        for loop in loops:
            if not loop.cancelled() and loop.exception() is not None:
                raise loop.exception()  # type: ignore[misc]

    async def _claim_loop(self, lane: int) -> None:
        backoff = 0.05
        while not self._stopping.is_set():
            _end_if_cancelled()
            free = self._free()
            if free <= 0 and not any(key[0] == lane for key in self._unanswered):
                # Full (as many outcomes on their way as jobs running, or the other loop's claim
                # asked for the rest): unless a claim is in flight (its loop takes the outcomes
                # when it is back), what ended meanwhile goes through the lease keeper.
                if not self._in_flight:
                    self._flush_outbox()
                self._slot.clear()
                await self._slot.wait()
                continue
            try:
                got, next_at = await self._claim(lane, free)
            except (QuasarError, RedisError, OSError) as exc:  # never die on Redis: back off
                log.warning(
                    "worker %s: claim failed (%s); retrying in %.2fs", self.worker_id, exc, backoff
                )
                self._stop_carrying()
                await self._pause(backoff)
                self._carrying += 1
                backoff = min(backoff * 2, 5.0) * random.uniform(0.8, 1.2)
                continue
            backoff = 0.05
            if got == 0:
                _end_if_cancelled()
                self._stop_carrying()
                try:
                    await self._idle(lane, next_at)
                finally:
                    self._carrying += 1
            elif got < free:
                # The queues ran dry: let the jobs just claimed start before the next claim (most
                # likely an empty one) goes out. A full claim sends the next one first instead,
                # so that Redis works on it while these jobs run.
                await asyncio.sleep(0)

    def _free(self) -> int:
        """Free slots: ``concurrency`` plus the jobs it may hold ahead (``prefetch``, or what
        recent run times allow under "auto"), minus the jobs running or waiting to run, minus
        those claims in flight asked for. A job whose run has ended frees its slot as soon as its
        outcome is queued, so the next claim carries it (or overlaps with the lease keeper's
        report of it); at most as many such outcomes as slots may wait for their result."""
        held, ahead = len(self._running), self.concurrency + self._extra
        return min(ahead - held + self._reporting, 2 * ahead - held) - self._asked

    async def _claim(self, lane: int, free: int) -> tuple[int, int | None]:
        assert self._client is not None
        got, next_at = 0, None
        for queue in self.queues:
            want = min(free - got, 1000)
            # A call whose reply was lost (Redis went away, a wait cut short) is sent again with
            # its call id, free slots or not: the jobs it leased come back (to wait for a slot)
            # instead of waiting out their lease, and its outcomes get their first answers.
            unanswered = self._unanswered.pop((lane, queue), None)
            if unanswered is None and want <= 0:
                continue
            call, carried = unanswered or self._next_call(queue, want)
            want = max(want, 0)
            self._asked += want
            self._in_flight += 1
            try:
                reply = await self._client.execute(call)
            except (RedisUnavailable, asyncio.CancelledError):  # it may have been applied
                self._unanswered[(lane, queue)] = (call, carried)
                raise
            except BaseException as exc:
                self._settle(carried, [exc] * len(carried))
                raise
            finally:
                self._asked -= want
                self._in_flight -= 1
            result = self._claim_part(reply, carried)
            if isinstance(result, t.ClaimsApplied):
                claims: Sequence[t.Claim] = result.claims
                if unanswered is not None:  # a re-sent call: its jobs may have started already
                    claims = self._not_started(call.call_id, claims)
                got += self._start_claimed(queue, want, claims)
            elif isinstance(result.error, t.NothingClaimable) and result.error.next_at:
                next_at = min(next_at or result.error.next_at, result.error.next_at)
            if got >= free:
                break
        return got, next_at

    def _claim_part(self, reply: Any, carried: list[Item]) -> t.ClaimsResult:
        """The claim's result of a claim's reply; the outcomes it carried get theirs."""
        if not isinstance(reply, t.ReportedAndClaimed):
            return reply  # type: ignore[no-any-return]
        self._settle(carried, reply.outcomes)
        if isinstance(reply.claim, Exception):
            raise reply.claim
        return reply.claim

    def _next_call(self, queue: str, want: int) -> tuple[Call[Any], list[Item]]:
        """A claim of ``want`` jobs of ``queue``, carrying the outcomes waiting to be reported."""
        assert self._client is not None and self._keeper is not None
        calls, carried = self._client.calls, list[Item]()
        if len(self._outbox) > CARRY_MAX:
            self._flush_outbox()
        elif self._outbox:
            items, self._outbox = self._outbox, []
            carried, outcomes = self._keeper.carry(items)
            if outcomes:
                call = calls.report_claim(self.worker_id, outcomes, queue, self.lease_ms, want)
                return call, carried
        return calls.claim(queue, self.worker_id, self.lease_ms, want), carried

    def _settle(self, carried: list[Item], results: Sequence[Any]) -> None:
        """The results of outcomes a claim carried: to their jobs, as the lease keeper's are."""
        if carried:
            assert self._keeper is not None
            self._keeper.forget(carried)
            self._deliver([(item[2], r) for item, r in zip(carried, results, strict=True)])

    def _stop_carrying(self) -> None:
        """This loop sends no claim for now: outcomes go to the lease keeper unless another
        loop carries them."""
        self._carrying -= 1
        self._flush_outbox()

    def _report_unanswered(self) -> None:
        """On the way out: the outcomes of calls whose reply was lost go to the lease keeper (as
        a new report: one applied the first time is refused as stale, which changes nothing)."""
        for _, carried in self._unanswered.values():
            self._outbox.extend(carried)
        self._unanswered.clear()
        self._flush_outbox()

    async def _idle(self, lane: int, next_at: int | None) -> None:
        """Block on the wake lists until work arrives, the next job is due, or a stop.

        On a plain asyncio client the wait carries the next claim of the first queue: Redis runs
        it the moment the wait ends, so a job enqueued to an idle worker is claimed in the round
        trip that wakes it (``AsyncQuasar.wait_and_claim``). A stop or a poke ends the wait early
        (``AsyncQuasar.unblock``: the claim still runs, and its jobs start or are handed back).
        """
        assert self._client is not None
        timeout = self.idle_wait
        if next_at is not None:
            local_ms = time.time() * 1000 + self._offset_ms
            timeout = min(timeout, max(0.001, (next_at - local_ms) / 1000))
        free, queue = self._free(), self.queues[0]
        claim: Call[t.ClaimsResult] | None = None
        waiting: list[int] = []  # the waiting connection's client id, once it waits
        asked = 0
        if free > 0 and self._client.can_wait_and_claim:
            asked = min(free, 1000)
            claim = self._client.calls.claim(queue, self.worker_id, self.lease_ms, asked)
            wait: Any = self._client.wait_and_claim(
                self.queues, max(timeout, 0.001), claim, waiting.append
            )
        else:
            wait = self._client.wait_for_work(self.queues, max(timeout, 0.001))
        self._asked += asked
        pop = asyncio.ensure_future(wait)
        stop = asyncio.ensure_future(self._stopping.wait())
        poke = asyncio.ensure_future(self._poke.wait())
        try:
            await asyncio.wait({pop, stop, poke}, return_when=asyncio.FIRST_COMPLETED)
            if not pop.done() and waiting:  # end the wait: the claim runs, its reply comes back
                with contextlib.suppress(RedisError, OSError, QuasarError):
                    await self._client.unblock(waiting[0])
                    await asyncio.wait({pop}, timeout=5.0)
        finally:
            self._asked -= asked
            self._poke.clear()
            for fut in (pop, stop, poke):
                if not fut.done():
                    fut.cancel()
            # Decided once, here. A wait cut short is sent again (its claim may have run); it may
            # also still finish (redis-py can swallow a cancellation), and its claim may then
            # run after the re-sent one, which found nothing (so left no record to replay): the
            # jobs of either answer start, each once (see _cut_short).
            answered = pop.done() and not pop.cancelled() and pop.exception() is None
            if claim is not None and not answered:
                self._unanswered[(lane, queue)] = (claim, [])
                self._cut_short[claim.call_id] = set()
                while len(self._cut_short) > CUT_SHORT_KEPT:
                    del self._cut_short[next(iter(self._cut_short))]
                pop.add_done_callback(functools.partial(self._late, queue, claim.call_id))
            # Not awaited: redis-py may sit out a cancelled BLPOP until its timeout.
            self._background.add(pop)
            pop.add_done_callback(_forget(self._background))
            await asyncio.gather(stop, poke, return_exceptions=True)
        if answered and claim is not None:
            await self._woken(queue, asked, pop.result()[1])
        elif pop.done() and not pop.cancelled() and isinstance(pop.exception(), Exception):
            await self._pause(0.1)  # Redis trouble: the claim that follows reports it

    def _late(self, queue: str, call_id: str, pop: asyncio.Future[Any]) -> None:
        """A wait cut short finished after all: the jobs its claim leased start, but those the
        re-sent claim (same call id, replayed) started already. At a stop they are left to wait
        out their lease."""
        if pop.cancelled() or pop.exception() is not None or self._stopping.is_set():
            return
        result = pop.result()[1]
        if isinstance(result, t.ClaimsApplied):
            self._start_claimed(queue, 0, self._not_started(call_id, result.claims))

    def _not_started(self, call_id: str, claims: Sequence[t.Claim]) -> Sequence[t.Claim]:
        """Of a cut-short call's claims (its late answer, or its re-sent call's), those the other
        answer has not started; without a record of the call, all of them."""
        started = self._cut_short.get(call_id)
        if started is None:
            return claims
        fresh = [c for c in claims if c.job.id not in started]
        started.update(c.job.id for c in fresh)
        return fresh

    async def _woken(self, queue: str, want: int, result: Any) -> None:
        """The claim that went with the wait: its jobs start (before the next claim goes out).
        A refusal or an error is left to the claim that follows, which meets it again."""
        if isinstance(result, t.ClaimsApplied) and self._start_claimed(queue, want, result.claims):
            await asyncio.sleep(0)

    def _start_claimed(self, queue: str, want: int, claims: Sequence[t.Claim]) -> int:
        """Starts the jobs a claim of ``want`` leased; a full claim wakes another idle worker."""
        if claims:
            self._start_all(claims)
            if len(claims) == want:
                self._wake_others(queue)
        return len(claims)

    def _wake_others(self, queue: str) -> None:
        """Push a wake-up token for ``queue`` (another idle worker looks too), without waiting.

        At most one push per queue is in flight: a claim that fills up meanwhile needs no other.
        """
        assert self._client is not None
        if queue in self._waking:
            return
        self._waking.add(queue)
        push = asyncio.ensure_future(self._client.wake(queue))
        self._background.add(push)
        push.add_done_callback(_forget(self._background))
        push.add_done_callback(lambda _: self._waking.discard(queue))

    def _poke_in(self, delay_ms: int) -> None:
        """Look for work again after ``delay_ms`` (a job of ours retries then), idle or not."""
        if self._loop is not None:
            self._loop.call_later(delay_ms / 1000 + 0.001, self._poke.set)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    # running a job ------------------------------------------------------------------------------

    def _start_all(self, claims: Sequence[t.Claim]) -> None:
        """Hold the leases of one claim's jobs from now on and run them, each as an asyncio
        task while fewer than ``concurrency`` run (the rest, prefetched, wait for a slot in claim
        order; at a stop, none starts: they are handed back)."""
        assert self._keeper is not None
        tasks, worker_id, now = self.app.tasks, self.worker_id, time.monotonic()
        on_lost, held, queued = self._on_lost, self._running, self._queued
        started: list[Lease] = []
        for claim in claims:
            job = claim.job
            task = tasks.get(job.stage)
            lease_ms = task.lease_ms if task is not None and task.lease_ms else self.lease_ms
            running = _Running(
                claim, lease_ms, on_lost, _context(job, worker_id, CancelFlag()), now
            )
            held[job.id] = running
            started.append(running)
            queued.append(running)
        self.stats.claimed += len(started)
        self._keeper.hold_many(started)
        self._run_next()

    def _run_next(self) -> None:
        """Start waiting jobs while slots are free (never once the worker is stopping)."""
        assert self._loop is not None
        loop, queued, tasks = self._loop, self._queued, self.app.tasks
        while queued and self._live < self.concurrency and not self._stopping.is_set():
            running = queued.popleft()
            if running.ended:  # lost while it waited
                continue
            self._live += 1
            running.started = time.monotonic()  # (its timeout and duration count from here)
            running.task = loop.create_task(
                self._execute(running, tasks.get(running.ctx.job.stage))
            )

    def _never_runs(self, running: _Running) -> None:
        """A job whose task was made but will never begin (cancelled first): its slot frees."""
        running.ended = True
        if running.task is not None:
            self._live -= 1
            self._run_next()

    def _on_lost(self, lease: Lease, error: t.JobError) -> None:
        """From the lease keeper's thread: the lease was lost."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._lost, lease.claim.job.id, error)

    def _finish(self, running: _Running) -> None:
        job_id = running.ctx.job.id
        if self._running.get(job_id) is running:
            del self._running[job_id]
        self._slot.set()

    def _lost(self, job_id: str, error: t.JobError) -> None:
        running = self._running.get(job_id)
        if running is None:
            return
        self.stats.lost += 1
        running.ctx.cancelled.set()
        if running.task is not None:
            running.task.cancel()
        if not running.begun and not running.ended:  # it will never run (or was prefetched)
            self._never_runs(running)
            self._finish(running)

    async def _execute(self, running: _Running, task: Task[Any, Any] | None) -> None:
        running.begun = True
        try:
            token = _current.set(running.ctx)
            try:
                outcome = await self._invoke(running, task)
            except asyncio.CancelledError:
                if running.lost or not running.handing_back:
                    return
                outcome = self._release(0, "handed back")
            finally:
                _current.reset(token)
            if running.lost:
                return
            self._send(running, outcome)
        finally:
            running.ended = True
            self._live -= 1
            if self._queued:
                self._run_next()
            if running.outcome is None or running.settled:  # nothing to report, or reported
                self._finish(running)

    async def _invoke(self, running: _Running, task: Task[Any, Any] | None) -> Outcome:
        job = running.ctx.job
        if task is None:
            return self._permanent("UnknownTask", f"no task named {job.stage!r} in this worker")
        try:
            args, kwargs = args_of(job.payload)
        except (TypeError, CorruptDataError) as exc:
            return self._permanent("BadPayload", str(exc))
        try:
            if task.timeout is None:
                if task.is_async:
                    value = await task.fn(*args, **kwargs)
                else:
                    value = await self._call(task, args, kwargs)
            else:
                value = await asyncio.wait_for(self._call(task, args, kwargs), task.timeout)
        except Snooze as snooze:
            return self._release(round(snooze.delay * 1000), "snoozed")
        except PermanentFailure as exc:
            return self._permanent(_kind(exc), str(exc) or "permanent failure")
        except (TimeoutError, asyncio.TimeoutError) as exc:  # one class from Python 3.11 on
            running.ctx.cancelled.set()
            timed_out = task.timeout is not None and _past(running.started, task.timeout)
            reason = f"timed out after {task.timeout}s" if timed_out else str(exc) or "timeout"
            return self._failure(task, job, exc, "Timeout" if timed_out else _kind(exc), reason)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit / KeyboardInterrupt from a task fail the job only
            return self._failure(task, job, exc, _kind(exc), str(exc) or repr(exc))
        return self._success(value)

    async def _call(self, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
        if task.is_async:
            return await task.fn(*args, **kwargs)
        assert self._loop is not None and self._pool is not None
        ctx = contextvars.copy_context()
        call = functools.partial(ctx.run, task.fn, *args, **kwargs)
        return await self._loop.run_in_executor(self._pool, call)

    # outcomes -----------------------------------------------------------------------------------

    def _success(self, value: Any) -> Outcome:
        if value is None:
            return _COMPLETED
        try:
            data = Encoded(encode(value))
        except EncodeError as exc:
            return self._permanent("BadResult", f"the result {exc}")
        return Outcome("completed", lambda tok: t.Complete(tok, data))

    def _failure(
        self, task: Task[Any, Any], job: t.Job, exc: BaseException, kind: str, reason: str
    ) -> Outcome:
        delay = task.retry.delay(job.attempt, exc)
        if delay is None:
            return self._permanent(kind, reason)
        delay_ms = max(0, round(delay * 1000))
        build: Build = lambda tok: t.Fail(tok, _reason(reason), delay_ms, kind)  # noqa: E731
        return Outcome("failed", build, delay_ms)

    def _permanent(self, kind: str, reason: str) -> Outcome:
        return Outcome(
            "failed permanently", lambda tok: t.PermanentFail(tok, _reason(reason), kind)
        )

    def _release(self, delay_ms: int, name: str) -> Outcome:
        return Outcome(name, lambda tok: t.Release(tok, delay_ms), delay_ms)

    def _send(self, running: _Running, outcome: Outcome) -> None:
        """Queue the outcome for the next claim, or for the lease keeper when no claim is about
        to go out: the outcomes of one turn of the loop go as one."""
        assert self._loop is not None
        running.outcome = outcome
        running.duration = time.monotonic() - running.started
        if self._auto and running.begun:
            self._learn(running.duration)
        self._outbox.append((running, outcome.build, running))
        if not self._carrying and len(self._outbox) == 1:  # no claim to carry it: the keeper
            self._loop.call_soon(self._flush_outbox)
        self._reporting += 1
        self._slot.set()

    def _learn(self, seconds: float) -> None:
        """prefetch="auto": a job ran for ``seconds``. The k-th job waiting for a slot starts
        after about k / concurrency run times, so hold as many as start within PREFETCH_WAIT_S:
        ``concurrency`` for jobs of 10 ms or less, none once they take longer than
        ``concurrency`` times that."""
        avg = self._run_avg
        self._set_run_avg(seconds if avg is None else avg + (seconds - avg) * RUN_AVG_WEIGHT)

    def _set_run_avg(self, avg: float) -> None:
        self._run_avg = avg
        c = self.concurrency
        self._extra = c if avg <= 0 else min(c, int(PREFETCH_WAIT_S * c / avg))

    def _give_back_stale(self) -> None:
        """prefetch="auto", from the maintenance loop: when a job has waited for a slot longer
        than PREFETCH_STALE_S (the jobs running now are long ones, the average learnt from short
        ones), the waiting jobs go back to their queue, and the average is raised to the longest
        run going on, which ends prefetch until short runs bring it down again."""
        if not self._auto:
            return
        now = time.monotonic()
        oldest = next((r for r in self._queued if not r.ended and not r.handing_back), None)
        if oldest is None or now - oldest.started < PREFETCH_STALE_S:
            return
        runs = (now - r.started for r in self._running.values() if r.begun and not r.ended)
        self._set_run_avg(max(self._run_avg or 0.0, *runs, PREFETCH_STALE_S))
        log.info(
            "worker %s: jobs waited %.1fs for a slot: handed back, prefetch paused",
            self.worker_id,
            now - oldest.started,
        )
        self._hand_back_queued()

    def _flush_outbox(self) -> None:
        if self._outbox and self._keeper is not None:
            items, self._outbox = self._outbox, []
            self._keeper.report_many(items)

    def _deliver(self, pairs: list[tuple[Any, Any]]) -> None:
        """Results of one report batch, on the event loop (one wake-up per batch)."""
        plain = not log.isEnabledFor(logging.INFO)  # no line per job to log
        for running, result in pairs:
            if plain and running.outcome is _COMPLETED and type(result) is t.OutcomeApplied:
                if not running.lost:  # what _reported does for it, in short
                    self.stats.completed += 1
            else:
                try:
                    self._reported(running, result)
                except Exception:  # a bug here must not keep the other results from their jobs
                    log.exception("job %s: handling its result failed", running.ctx.job.id)
            running.settled = True
            self._reporting -= 1
            if running.ended:
                self._finish(running)

    def _reported(self, running: _Running, result: Any) -> None:
        job, outcome = running.ctx.job, running.outcome
        assert outcome is not None
        if isinstance(result, BaseException):
            log.error(
                "job %s stage=%s attempt=%d: outcome %s not reported: %s",
                job.id,
                job.stage,
                job.attempt,
                outcome.name,
                result,
            )
            return
        if running.lost:  # lost while the outcome was on its way: _lost counted it
            return
        if isinstance(result, t.JobRefused):
            log.warning(
                "job %s stage=%s attempt=%d: outcome %s refused (%s): the lease was lost",
                job.id,
                job.stage,
                job.attempt,
                outcome.name,
                type(result.error).__name__,
            )
            self.stats.lost += 1
            return
        if outcome.delay_ms is not None and not self._stopping.is_set():
            self._poke_in(outcome.delay_ms)
        self._count(outcome, result)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "job %s stage=%s attempt=%d outcome=%s duration=%.3fs",
                job.id,
                job.stage,
                job.attempt,
                self._outcome_name(outcome, result),
                running.duration,
            )

    def _outcome_name(self, outcome: Outcome, result: Any) -> str:
        if outcome.name == "failed" and getattr(result, "state", None) == "RetryWaiting":
            return "retrying"
        return outcome.name

    def _count(self, outcome: Outcome, result: Any) -> None:
        name = self._outcome_name(outcome, result)
        if name == "completed":
            self.stats.completed += 1
        elif name == "retrying":
            self.stats.retried += 1
        elif name == "snoozed":
            self.stats.snoozed += 1
        elif name == "handed back":
            self.stats.handed_back += 1
        else:
            self.stats.failed += 1

    # maintenance --------------------------------------------------------------------------------

    async def _maintenance(self) -> None:
        rounds = 0
        while not self._stopping.is_set():
            self._give_back_stale()
            try:
                await self._sync_clock()
                await self._maintain(prune=rounds % 10 == 0)
            except (QuasarError, RedisError, OSError) as exc:
                log.warning("worker %s: maintenance failed: %s", self.worker_id, exc)
            rounds += 1
            await self._pause(self.maintenance_interval * random.uniform(0.8, 1.2))

    async def _maintain(self, *, prune: bool) -> None:
        assert self._client is not None
        for _ in range(10):
            if await self._client.promote_due(limit=1000) < 1000:
                break
        for _ in range(10):
            if len((await self._client.sweep_expired(limit=1000)).expired) < 1000:
                break
        if prune and (self.prune_max_age is not None or self.prune_max_count is not None):
            age = None if self.prune_max_age is None else round(self.prune_max_age * 1000)
            await self._client.prune(max_age_ms=age, max_count=self.prune_max_count, limit=1000)

    async def _sync_clock(self) -> None:
        assert self._client is not None
        try:
            server_ms = await self._client.server_time_ms()
        except Exception as exc:  # a Redis error: the next round tries again
            raise QuasarError(f"TIME failed: {exc}") from exc
        self._offset_ms = server_ms - time.time() * 1000


def _end_if_cancelled() -> None:
    """Raise CancelledError if the running task was cancelled and the cancellation got lost.

    redis-py awaits asyncio.wait_for, which on Python 3.11 at times swallows a cancellation that
    arrives as the call completes; the task then runs on with its cancel request pending
    (``Task.cancelling()``, Python 3.11+), and the claim loop would go on claiming.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError


def _forget(pending: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    def done(future: asyncio.Future[Any]) -> None:
        pending.discard(future)
        if not future.cancelled():
            future.exception()  # retrieved, so asyncio does not log it as never retrieved

    return done


def _past(started: float, seconds: float) -> bool:
    return time.monotonic() - started >= seconds * 0.999


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
