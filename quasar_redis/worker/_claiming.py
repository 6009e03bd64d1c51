"""Claiming: the claim loops, each claim carrying the outcomes the reporter gives it, the idle wait
on the queues' wake lists (which carries a claim of its own), and calls sent again after a lost
reply.

An idle worker blocks on the queues' wake lists until work arrives or the next scheduled job is
due. On a plain asyncio client the wait carries the next claim of the first queue: Redis runs it
the moment the wait ends, so a job enqueued to an idle worker is claimed in the round trip that
wakes it (``AsyncQuasar.wait_and_claim``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

import redis.exceptions as rex
from redis.exceptions import RedisError

from .. import _types as t
from .._access import refusal
from .._calls import Call
from .._urls import redact_text
from ..aio import AsyncQuasar
from ..errors import (
    AccessDenied,
    PermissionDenied,
    QuasarError,
    RedisUnavailable,
)
from ._health import WorkerHealth
from ._lease import Outgoing
from ._reporting import Reporter
from ._resend import Resends
from ._running import Runner

log = logging.getLogger("quasar_redis.worker")

#: How long a wait cut short may take to say its connection's id (a round trip) so that it can
#: be ended (``Blocked.end``).
BLOCKED_WAIT_S = 2.0


class Claimer:
    """The claim loops of one serving worker: one, or two side by side (``lanes``, with
    prefetch), so that one's call is in flight while the other's jobs start."""

    def __init__(
        self,
        *,
        client: AsyncQuasar,
        runner: Runner,
        reporter: Reporter,
        redis_ms: Callable[[], float],
        queues: list[str],
        lanes: int,
        idle_wait: float,
        burst: bool = False,
        max_jobs: int | None = None,
        health: WorkerHealth | None = None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.reporter = reporter
        self.redis_ms = redis_ms  # the Redis clock's time now (kept by the worker's maintenance)
        self.queues = queues
        self.lanes = lanes
        self.idle_wait = idle_wait
        self.burst = burst  # stop once nothing is claimable and nothing held
        self.max_jobs = max_jobs  # claim that many jobs in all, then stop once they are done
        self.health = health or WorkerHealth(self.runner.lease_ms)  # claims answered or failed
        self.worker_id, self.lease_ms = runner.worker_id, runner.lease_ms
        self.stopping, self.slot, self.poke = runner.stopping, runner.slot, runner.poke
        self.resends = Resends()
        # Slots asked for by claims in flight (and by the claim an idle wait carries), and how
        # many claim calls are in flight.
        self.asked = 0
        self.in_flight = 0
        self.background = Background(client)

    async def run(self) -> None:
        """The claim loops, until a stop; the first that fails ends the others."""
        self.reporter.claim_loops(self.lanes)
        if self.lanes == 1:
            await self._claim_loop(0)
            return
        loops = [asyncio.ensure_future(self._claim_loop(lane)) for lane in range(self.lanes)]
        try:
            await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        for loop in loops:
            if not loop.cancelled() and loop.exception() is not None:
                raise loop.exception()  # type: ignore[misc]

    def free(self) -> int:
        """Free slots (``Runner.room``; with ``max_jobs``, no more than the jobs left to claim),
        minus those claims in flight asked for."""
        room = self.runner.room()
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self.runner.stats.claimed)
        return room - self.asked

    async def _claim_loop(self, lane: int) -> None:
        backoff = 0.05
        while not self.stopping.is_set():
            _end_if_cancelled()
            free = self.free()
            if free <= 0 and not self.resends.waiting(lane):
                await self._full()
                continue
            let_go = self.runner.let_go  # (jobs ended before this claim went out)
            try:
                got, next_at = await self._claim(lane, free)
            except (QuasarError, RedisError, OSError) as exc:  # never die on Redis: back off
                self.health.claim_failed(exc)
                denied = access_denied(exc)
                if denied is not None:  # refused credentials or permissions: no retry helps
                    raise denied from exc
                # (sooner while a claim to send again carries outcomes their leases need)
                wait = self.reporter.retry_in(backoff, self.resends.carried())
                log.warning(
                    "worker %s: claim failed (%s); retrying in %.2fs",
                    self.worker_id,
                    redact_text(str(exc)),
                    wait,
                )
                self.reporter.pause_carrying()
                await pause(self.stopping, wait)
                self.reporter.resume_carrying()
                backoff = min(backoff * 2, 5.0) * random.uniform(0.8, 1.2)
                continue
            backoff = 0.05
            self.health.claimed()
            if got == 0:
                await self._none_claimed(lane, next_at, let_go)
            elif got < free:
                # The queues ran dry: let the jobs just claimed start before the next claim (most
                # likely an empty one) goes out. A full claim sends the next one first instead,
                # so that Redis works on it while these jobs run.
                await asyncio.sleep(0)

    async def _full(self) -> None:
        """No slot free (as many outcomes on their way as jobs running, or the other loop's claim
        asked for the rest): wait for one; or, ``max_jobs`` all claimed and done, stop."""
        spent = self.max_jobs is not None and self.runner.stats.claimed >= self.max_jobs
        if spent and self._all_done():
            self._finish(f"ran {self.max_jobs} jobs (max_jobs)")
            return
        await self._wait_for_slot()

    async def _wait_for_slot(self) -> None:
        """Until a slot may have freed. The outcomes waiting for a claim go through the lease
        keeper meanwhile, unless a claim in flight takes them when it is back."""
        if not self.in_flight:
            self.reporter.flush()
        self.slot.clear()
        await self.slot.wait()

    async def _none_claimed(self, lane: int, next_at: int | None, let_go: int) -> None:
        """The queues had nothing to claim: wait for work (idle), or in burst mode wait for the
        jobs held to end, and stop once none is. ``let_go``: the jobs that had ended when the
        claim went out; one that ended since (a retry due at once, a job it enqueued) may have
        made work that claim could not see: claim again before stopping."""
        _end_if_cancelled()
        if self.burst:
            if not self._all_done():  # a job that ends may retry at once, or enqueue others
                await self._wait_for_slot()  # (then claim again)
            elif self.runner.let_go == let_go:
                self._finish("nothing left to claim (burst)")
            return
        await self.idle(lane, next_at)

    def _all_done(self) -> bool:
        """No job held (none waiting, running or reporting) and no claim in flight."""
        return not self.runner.held and not self.in_flight and not self.resends.pending()

    def _finish(self, why: str) -> None:
        """Stop serving: the other claim loop too (nothing is held, so nothing to hand back)."""
        if not self.stopping.is_set():
            log.info("worker %s: %s, stopping", self.worker_id, why)
        self.stopping.set()
        self.slot.set()

    async def _claim(self, lane: int, free: int) -> tuple[int, int | None]:
        got, next_at = 0, None
        for queue in self.queues:
            want = min(free - got, 1000)
            # A call whose reply was lost (Redis went away, a wait cut short) is sent again with
            # its call id, free slots or not: the jobs it leased come back (to wait for a slot)
            # instead of waiting out their lease, and its outcomes get their first answers.
            unanswered = self.resends.pop(lane, queue)
            if unanswered is None and want <= 0:
                continue
            call, carried = unanswered or self._next_call(queue, want)
            want = max(want, 0)
            self.asked += want
            self.in_flight += 1
            try:
                reply = await self.client.execute(call)
            except (RedisUnavailable, asyncio.CancelledError):  # it may have been applied
                self.resends.keep(lane, queue, call, carried)
                raise
            except BaseException as exc:
                self.reporter.unsent(carried, exc)
                raise
            finally:
                self.asked -= want
                self.in_flight -= 1
            result = self._claim_part(reply, carried)
            if isinstance(result, t.ClaimsApplied):
                claims: Sequence[t.Claim] = result.claims
                if unanswered is not None:  # a re-sent call: its jobs may have started already
                    claims = self.resends.not_started(call.call_id, claims)
                got += self.start_claimed(queue, want, claims)
            elif isinstance(result.error, t.NothingClaimable) and result.error.next_at:
                next_at = min(next_at or result.error.next_at, result.error.next_at)
            if got >= free:
                break
        return got, next_at

    def _claim_part(self, reply: Any, carried: list[Outgoing]) -> t.ClaimsResult:
        """The claim's result of a claim's reply; the outcomes it carried get theirs."""
        if not isinstance(reply, t.ReportedAndClaimed):
            return reply  # type: ignore[no-any-return]
        self.reporter.settle(carried, reply.outcomes)
        if isinstance(reply.claim, Exception):
            raise reply.claim
        return reply.claim

    def _next_call(self, queue: str, want: int) -> tuple[Call[Any], list[Outgoing]]:
        """A claim of ``want`` jobs of ``queue``, carrying the outcomes waiting to be reported."""
        calls = self.client.calls
        carried, outcomes = self.reporter.take()
        if outcomes:
            call = calls.report_and_claim(self.worker_id, outcomes, queue, self.lease_ms, want)
            return call, carried
        return calls.claim_many(queue, self.worker_id, self.lease_ms, want), carried

    def report_unanswered(self) -> None:
        """On the way out: calls whose reply was lost are not sent again; the outcomes they
        carried go to the lease keeper."""
        self.reporter.to_keeper(self.resends.drop_all())

    # idling -------------------------------------------------------------------------------------

    async def idle(self, lane: int, next_at: int | None) -> None:
        """Block on the wake lists until work arrives, the next job is due, or a stop.

        On a plain asyncio client the wait carries the next claim of the first queue: Redis runs
        it the moment the wait ends, so a job enqueued to an idle worker is claimed in the round
        trip that wakes it (``AsyncQuasar.wait_and_claim``), and starts in the event loop's turn
        its answer comes in (``Woken``), before this wait has ended its other waits. A stop or a
        poke ends the wait early (``AsyncQuasar.unblock``: the claim still runs, and its jobs
        start or are handed back).
        """
        timeout = self.idle_wait
        if next_at is not None:
            local_ms = self.redis_ms()
            timeout = min(timeout, max(0.001, (next_at - local_ms) / 1000))
        free, queue = self.free(), self.queues[0]
        claim: Call[t.ClaimsResult] | None = None
        waiting = Blocked()  # the waiting connection's client id, once it waits
        woken = Woken(self, queue, 0)
        if free > 0 and self.client.can_wait_and_claim:
            woken.want = min(free, 1000)
            claim = self.client.calls.claim_many(queue, self.worker_id, self.lease_ms, woken.want)
            wait: Any = self.client.wait_and_claim(
                self.queues, max(timeout, 0.001), claim, waiting.said, woken.answer
            )
        else:
            wait = self.client.wait_for_work(self.queues, max(timeout, 0.001))
        pop = asyncio.ensure_future(wait)
        stop = asyncio.ensure_future(self.stopping.wait())
        poke = asyncio.ensure_future(self.poke.wait())
        self.asked += woken.want
        self.reporter.pause_carrying()  # (both until the jobs of its answer start, or it ends)
        try:
            await asyncio.wait({pop, stop, poke}, return_when=asyncio.FIRST_COMPLETED)
            if not pop.done() and claim is not None:
                await waiting.end(pop, self.client)
        finally:
            if not woken.started:  # (else let go as its jobs started)
                woken.let_go()
            self.poke.clear()
            for fut in (pop, stop, poke):
                if not fut.done():
                    fut.cancel()
            answered = self._answered(pop, lane, queue, claim, woken.started)
            woken.decided = True
            await asyncio.gather(stop, poke, return_exceptions=True)
        await woken.end(pop, answered and claim is not None)

    def _answered(
        self,
        pop: asyncio.Future[Any],
        lane: int,
        queue: str,
        claim: Call[Any] | None,
        started: bool,
    ) -> bool:
        """Whether the wait came back with its answer, decided once, here: it did if its
        answer has started its jobs (``started``: read whole, though the wait may since have
        been cancelled). A wait cut short is sent again (its claim may have run); it may also
        still finish (redis-py can swallow a cancellation), and its claim may then run after the
        re-sent one, which found nothing (so left no record to replay): the jobs of either
        answer start, each once (``Resends.not_started``)."""
        answered = started or (pop.done() and not pop.cancelled() and pop.exception() is None)
        if claim is not None and not answered:
            call_id = claim.call_id
            self.resends.keep(lane, queue, claim, [])
            self.resends.cut_short(call_id)
            pop.add_done_callback(functools.partial(self._late, queue, call_id))
        # Not awaited: redis-py may sit out a cancelled BLPOP until its timeout.
        self.background.keep(pop)
        return answered

    def _late(self, queue: str, call_id: str, pop: asyncio.Future[Any]) -> None:
        """A wait cut short finished after all: the jobs its claim leased start, but those the
        re-sent claim (same call id, replayed) started already. At a stop they are left to wait
        out their lease."""
        if pop.cancelled() or pop.exception() is not None or self.stopping.is_set():
            return
        result = pop.result()[1]
        if isinstance(result, t.ClaimsApplied):
            self.start_claimed(queue, 0, self.resends.not_started(call_id, result.claims))

    def start_claimed(self, queue: str, want: int, claims: Sequence[t.Claim]) -> int:
        """Starts the jobs a claim of ``want`` leased; a full claim wakes another idle worker."""
        if claims:
            self.runner.start_all(claims)
            if len(claims) == want:
                self.background.wake(queue)
        return len(claims)


class Woken:
    """The jobs of the claim an idle wait carried, started once: as the wait reads its answer
    (``answer``, ``AsyncQuasar.wait_and_claim``'s ``on_answer``, while the idle wait is
    undecided), or else by the idle wait once it has taken that answer as its own (``end``). A
    wait the idle wait gave up on (cut short) before its answer was read leaves its jobs to
    ``Claimer._late``. A refusal or an error is left to the claim that follows, which meets it
    again."""

    __slots__ = ("claimer", "decided", "queue", "started", "want")

    def __init__(self, claimer: Claimer, queue: str, want: int) -> None:
        self.claimer, self.queue, self.want = claimer, queue, want
        self.decided = False  # the idle wait has taken the answer, or given up on it
        self.started = False

    def answer(self, result: t.ClaimsResult) -> None:
        """The wait's answer, read (``AsyncQuasar.wait_and_claim``'s ``on_answer``)."""
        if not self.decided:
            self._start(result)

    async def end(self, pop: asyncio.Future[Any], answered: bool) -> None:
        """After the idle wait: the jobs of its answer start, if they have not; a refusal of
        our access raises; other Redis trouble pauses (the claim that follows reports it)."""
        if answered:
            if not self.started and self._start(pop.result()[1]):
                await asyncio.sleep(0)  # (they begin before the next claim goes out)
            return
        error = pop.exception() if pop.done() and not pop.cancelled() else None
        if isinstance(error, Exception):
            denied = access_denied(error)
            if denied is not None:
                raise denied
            await pause(self.claimer.stopping, 0.1)

    def _start(self, result: Any) -> int:
        if self.started or not isinstance(result, t.ClaimsApplied):
            return 0
        self.started = True
        if not self.decided:
            self.let_go()
        return self.claimer.start_claimed(self.queue, self.want, result.claims)

    def let_go(self) -> None:
        """The idle wait is over as far as the claim loops go: the slots its claim asked for
        are free again (its jobs hold theirs), and outcomes wait for the claim that follows."""
        self.claimer.asked -= self.want
        self.claimer.reporter.resume_carrying()


class Blocked:
    """The client id of an idle wait's connection, once the wait has said it
    (``AsyncQuasar.wait_and_claim``'s ``on_blocked``)."""

    __slots__ = ("client_id", "known")

    def __init__(self) -> None:
        self.client_id: int | None = None
        self.known = asyncio.Event()

    def said(self, client_id: int) -> None:
        self.client_id = client_id
        self.known.set()

    async def end(self, pop: asyncio.Future[Any], client: AsyncQuasar) -> None:
        """End the wait ``pop`` (cut short by a stop or a poke): its claim runs, and its reply
        comes back.

        A wait just sent may not have said its connection's id yet: it gets ``BLOCKED_WAIT_S``
        to. Cancelled instead, redis-py may send it all the same, and its claim would then lease
        jobs (those handed back at a stop, for one) to a worker that no longer runs them."""
        if self.client_id is None:
            said = asyncio.ensure_future(self.known.wait())
            await asyncio.wait(
                {pop, said}, timeout=BLOCKED_WAIT_S, return_when=asyncio.FIRST_COMPLETED
            )
            said.cancel()
        if pop.done() or self.client_id is None:
            return
        with contextlib.suppress(RedisError, OSError, QuasarError):
            await client.unblock(self.client_id)
            await asyncio.wait({pop}, timeout=5.0)


class Background:
    """What the claim loops do not wait for: futures kept until done (their exceptions
    retrieved), and wake-up pushes for other idle workers."""

    __slots__ = ("client", "futures", "waking")

    def __init__(self, client: AsyncQuasar) -> None:
        self.client = client
        self.futures: set[asyncio.Future[Any]] = set()
        self.waking: set[str] = set()  # queues with a wake-up push in flight

    def keep(self, future: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """Keep ``future`` until it is done (its exception, if any, retrieved)."""
        self.futures.add(future)
        future.add_done_callback(_forget(self.futures))
        return future

    def wake(self, queue: str) -> None:
        """Push a wake-up token for ``queue`` (another idle worker looks too), without waiting.

        At most one push per queue is in flight: a claim that fills up meanwhile needs no other.
        """
        if queue in self.waking:
            return
        self.waking.add(queue)
        push = self.keep(asyncio.ensure_future(self.client.wake(queue)))
        push.add_done_callback(lambda _: self.waking.discard(queue))


async def pause(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or until ``stopping`` is set."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


def access_denied(exc: BaseException, database: int | None = None) -> QuasarError | None:
    """The error of Redis refusing us, which no retry helps (``AccessDenied``: refused
    credentials or permissions; ``NoSuchDatabase``: ``database``, which the server lacks; see
    ``_access.refusal``), else None."""
    if isinstance(exc, AccessDenied):
        return exc
    refused = refusal(exc, database)
    if refused is not None:
        return refused
    if isinstance(exc, rex.NoPermissionError):
        return PermissionDenied(redact_text(str(exc)))
    return None


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
