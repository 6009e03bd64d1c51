"""The asyncio client, over ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import hiredis
import redis.asyncio
import redis.exceptions as rex

from . import _types as t
from ._base import (
    SENDS,
    ClientBase,
    Recovery,
    map_error,
    merged,
    needs_command_name,
    parse_all,
    recovery,
    resend,
    warn_policy,
)
from ._calls import Call, NewJob, dependency_id
from .errors import QuasarError

T = TypeVar("T")


# A coalesced batch this large or larger is sent as two calls when no other call is in flight.
SPLIT_MIN = 16

Pending = tuple[NewJob, "asyncio.Future[t.JobResult]"]


def _halves(batch: list[Pending]) -> tuple[list[Pending], ...]:
    """A coalesced batch as two calls, when its halves cannot tell the difference: each job is
    checked and applied on its own (mode "each"), so only a job naming another of the batch (a
    dependency on it, or the same id) depends on the order Redis runs the two in; then, or when
    the batch is small, the batch whole. (Jobs enqueued concurrently have no order between them:
    the halves' sequence numbers may come in either order.)"""
    if len(batch) < SPLIT_MIN:
        return (batch,)
    named = [job.id for job, _ in batch if job.id is not None]
    if named:
        ids = set(named)
        if len(ids) < len(named):
            return (batch,)
        for job, _ in batch:
            for dep in job.dependencies:
                dep_id = dependency_id(dep)
                if isinstance(dep_id, str) and dep_id in ids:
                    return (batch,)
    half = (len(batch) + 1) // 2
    return batch[:half], batch[half:]


class AsyncQuasar(ClientBase):
    """Every transition and inspection of one namespace, as coroutines (same API as ``Quasar``).

    Refusals come back as values (``JobRefused``, ``ClaimRefused``, ``BatchRefused``);
    exceptions (``QuasarError``) mean a broken connection, damaged data or a programmer error.
    """

    def __init__(self, redis: Any, namespace: str = "default", **options: Any) -> None:
        self.coalesce: bool = options.pop("coalesce", True)
        super().__init__(redis, namespace, **options)
        self._pending: list[Pending] = []
        self._flush_scheduled = False
        self._flushes: set[asyncio.Task[None]] = set()
        self._packed = _packed_sender(self.redis)
        # (redis-py before 5.3 wants a command's name to lend a connection)
        self._named = self._packed is not None and needs_command_name(self.redis.connection_pool)

    # plumbing -------------------------------------------------------------------------------------

    def _command(self, call: Call[Any]) -> tuple[Any, ...]:
        # Arguments as bytes: redis-py's asyncio connection packs commands in Python, and encodes
        # a str argument at about twice the cost of this (an enqueue of 100 jobs has 1,300).
        name, *rest = super()._command(call)
        return (name, *[a.encode() if type(a) is str else a for a in rest])

    async def execute(self, call: Call[T]) -> T:
        """Send one call (FCALL or EVALSHA); what the server lacks is loaded, then sent again."""
        if call.early is not None:
            return call.early
        await self._check_policy()
        try:
            reply = await self._send(call)
        except Exception as exc:
            raise map_error(exc) from exc
        return call.parse(reply)

    async def _send(self, call: Call[Any]) -> Any:
        for attempt in range(SENDS):
            try:
                if self._packed is not None:
                    return await self._packed(super()._command(call))
                return await self.redis.execute_command(*self._command(call))
            except rex.ResponseError as exc:
                plan = recovery([(exc, call)])
                if not plan or attempt == SENDS - 1:
                    raise
                await self._recover(plan)
        raise AssertionError("unreachable")

    async def _recover(self, plan: Recovery) -> None:
        """Load what is missing: the function library, or scripts (see ``Recovery``)."""
        self._applied(plan)
        if plan.load_library and self.functions:
            try:
                await self.redis.execute_command("FUNCTION", "LOAD", self.library.source)
            except rex.ResponseError as exc:
                self._library_refused(exc)
        for script in plan.scripts:
            await self.redis.script_load(script.source)

    async def execute_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send many calls in one pipeline (one round trip); results in the same order."""
        await self._check_policy()
        todo: list[Call[Any] | None] = [c if c.early is None else None for c in calls]
        replies: list[Any] = [None] * len(calls)
        try:
            for attempt in range(SENDS):
                got = await self._pipeline(todo)
                replies = merged(todo, got, replies)
                plan, todo = resend(todo, got)
                if not plan or attempt == SENDS - 1:
                    break
                await self._recover(plan)
        except rex.RedisError as exc:
            raise map_error(exc) from exc
        return parse_all(calls, replies)

    async def _pipeline(self, calls: Sequence[Call[Any] | None]) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for call in calls:
            if call is not None:
                # execute_command: redis-py blocks pipe.evalsha() in cluster pipelines, not this
                pipe.execute_command(*self._command(call))
        replies = iter(await pipe.execute(raise_on_error=False))
        return [None if call is None else next(replies) for call in calls]

    async def _coalesced(self, job: NewJob) -> t.JobResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[t.JobResult] = loop.create_future()
        self._pending.append((job, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._start_flush)
        return await future

    def _start_flush(self) -> None:
        limit = self.calls.limits.max_batch
        batch, self._pending = self._pending[:limit], self._pending[limit:]
        self._flush_scheduled = bool(self._pending)
        if self._pending:
            asyncio.get_running_loop().call_soon(self._start_flush)
        # Nothing in flight: two calls, so that Redis runs the second while this process reads
        # the first's reply and its callers make the next batch (one call at a time, the two
        # took turns: on 2 cores, about twice the jobs a second with two).
        for part in _halves(batch) if not self._flushes else (batch,):
            task = asyncio.ensure_future(self._flush(part))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _flush(self, batch: list[Pending]) -> None:
        try:
            results = await self.execute(self.calls.enqueue_each([job for job, _ in batch]))
        except BaseException as exc:  # every caller of the batch gets the exception
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def _check_policy(self) -> None:
        if self._policy_checked:
            return
        self._policy_checked = True
        try:
            reply = await self.redis.config_get("maxmemory-policy")
        except Exception:  # managed Redis may refuse CONFIG; nothing to warn about then
            return
        warn_policy(reply)

    # enqueue --------------------------------------------------------------------------------------

    async def enqueue(
        self,
        stage: str,
        payload: Any = None,
        *,
        id: str | None = None,
        queue: str = "default",
        input_ref: str = "inline",
        input_revision: int = 0,
        dependencies: Sequence[str | t.Job] = (),
        priority: int = 0,
        max_attempts: int = 3,
        available_at: int | None = None,
        delay_ms: int | None = None,
        on_dependency_failure: t.DependencyPolicy = "block",
        now: int | None = None,
    ) -> t.JobResult:
        """Enqueue one job: ``JobApplied(job)`` in ``Waiting``, or ``JobRefused(error)``.

        Concurrent calls (without ``now``) are coalesced: those made in one turn of the event
        loop go to Redis as one script call, each job checked and applied on its own.
        """
        job = NewJob(
            stage,
            payload,
            id,
            queue,
            input_ref,
            input_revision,
            dependencies,
            priority,
            max_attempts,
            available_at,
            delay_ms,
            on_dependency_failure,
        )
        return await self.enqueue_job(job, now=now)

    async def enqueue_job(self, job: NewJob, *, now: int | None = None) -> t.JobResult:
        """Enqueue one job described by a ``NewJob`` (coalesced as ``enqueue`` is)."""
        if now is None and self.coalesce:
            return await self._coalesced(job)
        return await self.execute(self.calls.enqueue(job, now))

    async def enqueue_many(
        self, jobs: Sequence[NewJob], *, now: int | None = None, ids_only: bool = False
    ) -> t.BatchResult:
        """Enqueue a batch in one call, all or nothing; a job may depend on an earlier one.

        ``ids_only`` makes the reply carry the job ids alone (``BatchApplied.ids``): cheaper.
        """
        return await self.execute(self.calls.enqueue_many(jobs, now, ids_only=ids_only))

    async def enqueue_each(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> list[t.JobResult]:
        """Enqueue many jobs in one call, each on its own: a JobResult per job, in order."""
        results: list[t.JobResult] = await self.execute(self.calls.enqueue_each(jobs, now))
        return results

    # claims and the lease holder's calls ----------------------------------------------------------

    async def claim(
        self, queue: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> t.ClaimResult:
        """Lease the best claimable job of ``queue``, or ``ClaimRefused(NothingClaimable)``."""
        return await self.execute(self.calls.claim_one(queue, worker_id, lease_ms, now))

    async def claim_many(
        self, queue: str, worker_id: str, lease_ms: int, limit: int, *, now: int | None = None
    ) -> t.ClaimsResult:
        """Lease up to ``limit`` (1-1000) jobs of ``queue`` in one call, best first."""
        return await self.execute(self.calls.claim(queue, worker_id, lease_ms, limit, now))

    async def claim_job(
        self, job_id: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> t.ClaimResult:
        """Lease one job by id (docs/lifecycle.md, "claim_job (by id)")."""
        return await self.execute(self.calls.claim_job(job_id, worker_id, lease_ms, now))

    async def complete(
        self,
        token: t.LeaseToken,
        worker_id: str,
        *,
        result: Any = None,
        output_ref: str = "inline",
        now: int | None = None,
    ) -> t.JobResult:
        """Mark the leased job Succeeded; releases dependents whose dependencies all succeeded."""
        return await self.execute(self.calls.complete(token, worker_id, output_ref, result, now))

    async def fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        *,
        retry_delay_ms: int = 0,
        kind: str = "Error",
        now: int | None = None,
    ) -> t.JobResult:
        """Fail this attempt: RetryWaiting after ``retry_delay_ms`` while attempts remain."""
        return await self.execute(
            self.calls.fail(token, worker_id, reason, retry_delay_ms, kind, now)
        )

    async def permanent_fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        *,
        kind: str = "Error",
        now: int | None = None,
    ) -> t.JobResult:
        """Fail the job for good, whatever attempts remain."""
        return await self.execute(self.calls.permanent_fail(token, worker_id, reason, kind, now))

    async def heartbeat(
        self, token: t.LeaseToken, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> t.ClaimResult:
        """Extend the lease to now + ``lease_ms``; the reply carries the new token."""
        return await self.execute(self.calls.heartbeat(token, worker_id, lease_ms, now))

    async def release(
        self,
        token: t.LeaseToken,
        worker_id: str,
        *,
        delay_ms: int = 0,
        now: int | None = None,
    ) -> t.JobResult:
        """Hand the leased job back, Waiting again after ``delay_ms``, without using an attempt."""
        return await self.execute(self.calls.release(token, worker_id, delay_ms, now))

    async def report_many(
        self, worker_id: str, outcomes: Sequence[t.Outcome], *, now: int | None = None
    ) -> list[t.OutcomeResult | QuasarError]:
        """Report many outcomes (Complete, Fail, PermanentFail, Release) in one call.

        Each is checked and applied on its own, as its single call would be; a damaged job gives
        its exception in place of its result.
        """
        return await self.execute(self.calls.report(worker_id, outcomes, now))

    async def report_and_claim(
        self,
        worker_id: str,
        outcomes: Sequence[t.Outcome],
        queue: str,
        lease_ms: int,
        limit: int,
        *,
        now: int | None = None,
    ) -> t.ReportedAndClaimed:
        """``report_many(outcomes)``, then ``claim_many(queue, ...)``, in one call (a worker's
        round trip): each part is applied or refused on its own, as its own call would be."""
        call = self.calls.report_claim(worker_id, outcomes, queue, lease_ms, limit, now)
        return await self.execute(call)

    # the worker's waits ------------------------------------------------------------------------

    @property
    def can_wait_and_claim(self) -> bool:
        """Whether ``wait_and_claim`` can send a wait and a call in one write (a plain client)."""
        return self._packed is not None

    async def wait_and_claim(
        self,
        queues: Sequence[str],
        timeout: float,
        call: Call[T],
        on_blocked: Callable[[int], None],
    ) -> tuple[bool, T | BaseException]:
        """Wait for a wake-up token of ``queues`` (up to ``timeout`` seconds), then ``call``, in
        one write on a connection of their own: Redis runs the call the moment the wait ends (a
        client's later commands wait for its blocking one), so a worker woken by a new job has
        its claim in the same round trip. ``on_blocked`` gets the connection's client id as the
        wait starts: ``unblock(id)`` ends the wait early, and the call still runs. Whether a token
        was popped, and the call's result (or the error it met). Only where
        ``can_wait_and_claim``.

        A wait that is cancelled drops its connection: Redis forgets a blocked client that is
        gone, but a call it ran before that is answered to nobody (send it again: same call id).
        """
        assert self._packed is not None
        await self._check_policy()
        pool: Any = self.redis.connection_pool
        conn = await (pool.get_connection("BLPOP") if self._named else pool.get_connection())
        wait: Any = ("BLPOP", *(self.keys.wake(q) for q in queues), str(timeout))
        commands: list[Any] = [("CLIENT", "ID"), wait, super()._command(call)]
        clean = False
        try:
            await conn.send_packed_command(b"".join(map(hiredis.pack_command, commands)))
            with contextlib.suppress(rex.ResponseError):  # CLIENT refused (an ACL): no early end
                on_blocked(int(await conn.read_response()))
            socket_timeout = conn.socket_timeout
            popped = await conn.read_response(
                timeout=None if socket_timeout is None else timeout + socket_timeout
            )
            reply: Any
            try:
                reply = await conn.read_response()
            except rex.ResponseError as exc:  # (the library missing: the next call loads it)
                reply = exc
            clean = True
        finally:
            if not clean:
                await conn.disconnect(nowait=True)
            await pool.release(conn)
        if isinstance(reply, Exception):
            return popped is not None, map_error(reply)
        try:
            return popped is not None, call.parse(reply)
        except QuasarError as exc:
            return popped is not None, exc

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up token of ``queues``; whether one came."""
        keys = [self.keys.wake(q) for q in queues]
        return await self.redis.blpop(keys, timeout=timeout) is not None

    async def wake(self, queue: str) -> None:
        """Push a wake-up token for ``queue``: one idle worker of it looks for work."""
        await self.redis.rpush(self.keys.wake(queue), "1")

    async def unblock(self, client_id: int) -> None:
        """End the wait of the connection ``client_id`` (``CLIENT UNBLOCK``) early."""
        await self.redis.execute_command("CLIENT", "UNBLOCK", client_id)

    async def server_time_ms(self) -> float:
        """The Redis server's clock, in milliseconds since the epoch."""
        seconds, micros = await self.redis.time()
        return float(seconds * 1000 + micros / 1000)

    # operators and maintenance --------------------------------------------------------------------

    async def expire(
        self, job_id: str, expected_fence: int, *, now: int | None = None
    ) -> t.JobResult:
        """Recover a job whose lease ran out, if its fence is still ``expected_fence``."""
        return await self.execute(self.calls.expire(job_id, expected_fence, now))

    async def cancel(
        self,
        job_id: str,
        *,
        expected_fence: int | None = None,
        reason: str = "cancelled",
        now: int | None = None,
    ) -> t.CancelResult:
        """Cancel a live job (and its dependents); ``expected_fence`` guards against races."""
        return await self.execute(self.calls.cancel(job_id, expected_fence, reason, now))

    async def retry(
        self,
        job_id: str,
        *,
        expected_fence: int | None = None,
        reason: str = "retried by operator",
        now: int | None = None,
    ) -> t.JobResult:
        """Operator retry of a Failed job: RetryWaiting now, with one more attempt allowed."""
        return await self.execute(self.calls.retry(job_id, expected_fence, reason, now))

    async def sweep_expired(self, *, limit: int = 1000, now: int | None = None) -> t.SweepReport:
        """Expire up to ``limit`` leases that ran out, over every queue."""
        return await self.execute(self.calls.sweep(limit, now))

    async def promote_due(self, *, limit: int = 1000, now: int | None = None) -> int:
        """Make up to ``limit`` due scheduled jobs claimable; returns how many."""
        return await self.execute(self.calls.promote(limit, now))

    async def prune(
        self,
        *,
        max_age_ms: int | None = None,
        max_count: int | None = None,
        limit: int = 1000,
        now: int | None = None,
    ) -> int:
        """Delete finished jobs older than ``max_age_ms`` or beyond ``max_count`` per queue."""
        return await self.execute(self.calls.prune(max_age_ms, max_count, limit, now))

    # inspection -----------------------------------------------------------------------------------

    async def get_job(self, job_id: str, *, now: int | None = None) -> t.JobInfo | None:
        """The job, its status and the dependency it waits on; None if there is no such job."""
        return await self.execute(self.calls.get(job_id, now))

    async def counts(self, queue: str, *, now: int | None = None) -> t.QueueCounts:
        """How many jobs of ``queue`` are in each status."""
        return await self.execute(self.calls.counts(queue, now))

    async def list_jobs(
        self,
        queue: str,
        status: t.Status | str,
        *,
        offset: int = 0,
        limit: int = 100,
        now: int | None = None,
    ) -> list[t.Job]:
        """A page of ``queue``'s jobs in ``status`` (or ``"blocked"``), oldest first."""
        return await self.execute(self.calls.list_jobs(queue, status, offset, limit, now))


def _packed_sender(client: Any) -> Any:
    """A sender of one command packed by hiredis (C), for a plain ``redis.asyncio.Redis``.

    redis-py's asyncio connection packs a command in Python, joining a growing buffer for every
    argument: about 16 µs a job for the 13 arguments a coalesced enqueue sends per job (hiredis
    packs the same in a fifth of that). This sends the packed bytes on a connection of the
    client's pool with the client's own retry policy, as ``execute_command`` does; a cluster
    client or a single-connection client keeps ``execute_command``.
    """
    if type(client) is not redis.asyncio.Redis:
        return None
    if client.single_connection_client:
        return None
    pool: Any = client.connection_pool
    takes_name = needs_command_name(pool)

    async def send(command: tuple[Any, ...]) -> Any:
        packed = hiredis.pack_command(command)
        conn = await (pool.get_connection(command[0]) if takes_name else pool.get_connection())

        async def once() -> Any:
            await conn.send_packed_command(packed)
            return await conn.read_response()

        async def fail(_: Exception) -> None:
            await conn.disconnect()

        try:
            return await conn.retry.call_with_retry(once, fail)
        finally:
            await pool.release(conn)

    return send
