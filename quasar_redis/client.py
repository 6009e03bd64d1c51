"""The synchronous client, over ``redis.Redis`` or ``redis.cluster.RedisCluster``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import hiredis
import redis
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
from ._calls import Call, NewJob
from .errors import QuasarError

T = TypeVar("T")


class Quasar(ClientBase):
    """Every transition and inspection of one namespace, as blocking calls.

    Refusals come back as values (``JobRefused``, ``ClaimRefused``, ``BatchRefused``);
    exceptions (``QuasarError``) mean a broken connection, damaged data or a programmer error.
    """

    def __init__(self, redis: Any, namespace: str = "default", **options: Any) -> None:
        super().__init__(redis, namespace, **options)
        self._packed = _packed_sender(self.redis)

    # plumbing -------------------------------------------------------------------------------------

    def execute(self, call: Call[T]) -> T:
        """Send one call (FCALL or EVALSHA); what the server lacks is loaded, then sent again."""
        if call.early is not None:
            return call.early
        self._check_policy()
        try:
            reply = self._send(call)
        except Exception as exc:
            raise map_error(exc) from exc
        return call.parse(reply)

    def _send(self, call: Call[Any]) -> Any:
        for attempt in range(SENDS):
            try:
                if self._packed is not None:
                    return self._packed(self._command(call))
                return self.redis.execute_command(*self._command(call))
            except rex.ResponseError as exc:
                plan = recovery([(exc, call)])
                if not plan or attempt == SENDS - 1:
                    raise
                self._recover(plan)
        raise AssertionError("unreachable")

    def _recover(self, plan: Recovery) -> None:
        """Load what is missing: the function library, or scripts (see ``Recovery``)."""
        self._applied(plan)
        if plan.load_library and self.functions:
            try:
                self.redis.execute_command("FUNCTION", "LOAD", self.library.source)
            except rex.ResponseError as exc:
                self._library_refused(exc)
        for script in plan.scripts:
            self.redis.script_load(script.source)

    def execute_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send many calls in one pipeline (one round trip); results in the same order."""
        self._check_policy()
        todo: list[Call[Any] | None] = [c if c.early is None else None for c in calls]
        replies: list[Any] = [None] * len(calls)
        try:
            for attempt in range(SENDS):
                got = self._pipeline(todo)
                replies = merged(todo, got, replies)
                plan, todo = resend(todo, got)
                if not plan or attempt == SENDS - 1:
                    break
                self._recover(plan)
        except rex.RedisError as exc:
            raise map_error(exc) from exc
        return parse_all(calls, replies)

    def _pipeline(self, calls: Sequence[Call[Any] | None]) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for call in calls:
            if call is not None:
                # execute_command: redis-py blocks pipe.evalsha() in cluster pipelines, not this
                pipe.execute_command(*self._command(call))
        replies = iter(pipe.execute(raise_on_error=False))
        return [None if call is None else next(replies) for call in calls]

    def _check_policy(self) -> None:
        if self._policy_checked:
            return
        self._policy_checked = True
        try:
            reply = self.redis.config_get("maxmemory-policy")
        except Exception:  # managed Redis may refuse CONFIG; nothing to warn about then
            return
        warn_policy(reply)

    # enqueue --------------------------------------------------------------------------------------

    def enqueue(
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
        """Enqueue one job: ``JobApplied(job)`` in ``Waiting``, or ``JobRefused(error)``."""
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
        return self.execute(self.calls.enqueue(job, now))

    def enqueue_job(self, job: NewJob, *, now: int | None = None) -> t.JobResult:
        """Enqueue one job described by a ``NewJob``."""
        return self.execute(self.calls.enqueue(job, now))

    def enqueue_many(
        self, jobs: Sequence[NewJob], *, now: int | None = None, ids_only: bool = False
    ) -> t.BatchResult:
        """Enqueue a batch in one call, all or nothing; a job may depend on an earlier one.

        ``ids_only`` makes the reply carry the job ids alone (``BatchApplied.ids``): cheaper.
        """
        return self.execute(self.calls.enqueue_many(jobs, now, ids_only=ids_only))

    def enqueue_each(self, jobs: Sequence[NewJob], *, now: int | None = None) -> list[t.JobResult]:
        """Enqueue many jobs in one call, each on its own: a JobResult per job, in order."""
        results: list[t.JobResult] = self.execute(self.calls.enqueue_each(jobs, now))
        return results

    # claims and the lease holder's calls ----------------------------------------------------------

    def claim(
        self, queue: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> t.ClaimResult:
        """Lease the best claimable job of ``queue``, or ``ClaimRefused(NothingClaimable)``."""
        return self.execute(self.calls.claim_one(queue, worker_id, lease_ms, now))

    def claim_many(
        self, queue: str, worker_id: str, lease_ms: int, limit: int, *, now: int | None = None
    ) -> t.ClaimsResult:
        """Lease up to ``limit`` (1-1000) jobs of ``queue`` in one call, best first."""
        return self.execute(self.calls.claim(queue, worker_id, lease_ms, limit, now))

    def claim_job(
        self, job_id: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> t.ClaimResult:
        """Lease one job by id (docs/lifecycle.md, "claim_job (by id)")."""
        return self.execute(self.calls.claim_job(job_id, worker_id, lease_ms, now))

    def complete(
        self,
        token: t.LeaseToken,
        worker_id: str,
        *,
        result: Any = None,
        output_ref: str = "inline",
        now: int | None = None,
    ) -> t.JobResult:
        """Mark the leased job Succeeded; releases dependents whose dependencies all succeeded."""
        return self.execute(self.calls.complete(token, worker_id, output_ref, result, now))

    def fail(
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
        return self.execute(self.calls.fail(token, worker_id, reason, retry_delay_ms, kind, now))

    def permanent_fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        *,
        kind: str = "Error",
        now: int | None = None,
    ) -> t.JobResult:
        """Fail the job for good, whatever attempts remain."""
        return self.execute(self.calls.permanent_fail(token, worker_id, reason, kind, now))

    def heartbeat(
        self, token: t.LeaseToken, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> t.ClaimResult:
        """Extend the lease to now + ``lease_ms``; the reply carries the new token."""
        return self.execute(self.calls.heartbeat(token, worker_id, lease_ms, now))

    def release(
        self,
        token: t.LeaseToken,
        worker_id: str,
        *,
        delay_ms: int = 0,
        now: int | None = None,
    ) -> t.JobResult:
        """Hand the leased job back, Waiting again after ``delay_ms``, without using an attempt."""
        return self.execute(self.calls.release(token, worker_id, delay_ms, now))

    def report_many(
        self, worker_id: str, outcomes: Sequence[t.Outcome], *, now: int | None = None
    ) -> list[t.OutcomeResult | QuasarError]:
        """Report many outcomes (Complete, Fail, PermanentFail, Release) in one call.

        Each is checked and applied on its own, as its single call would be; a damaged job gives
        its exception in place of its result.
        """
        return self.execute(self.calls.report(worker_id, outcomes, now))

    def report_and_claim(
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
        return self.execute(call)

    # operators and maintenance --------------------------------------------------------------------

    def expire(self, job_id: str, expected_fence: int, *, now: int | None = None) -> t.JobResult:
        """Recover a job whose lease ran out, if its fence is still ``expected_fence``."""
        return self.execute(self.calls.expire(job_id, expected_fence, now))

    def cancel(
        self,
        job_id: str,
        *,
        expected_fence: int | None = None,
        reason: str = "cancelled",
        now: int | None = None,
    ) -> t.CancelResult:
        """Cancel a live job (and its dependents); ``expected_fence`` guards against races."""
        return self.execute(self.calls.cancel(job_id, expected_fence, reason, now))

    def retry(
        self,
        job_id: str,
        *,
        expected_fence: int | None = None,
        reason: str = "retried by operator",
        now: int | None = None,
    ) -> t.JobResult:
        """Operator retry of a Failed job: RetryWaiting now, with one more attempt allowed."""
        return self.execute(self.calls.retry(job_id, expected_fence, reason, now))

    def sweep_expired(self, *, limit: int = 1000, now: int | None = None) -> t.SweepReport:
        """Expire up to ``limit`` leases that ran out, over every queue."""
        return self.execute(self.calls.sweep(limit, now))

    def promote_due(self, *, limit: int = 1000, now: int | None = None) -> int:
        """Make up to ``limit`` due scheduled jobs claimable; returns how many."""
        return self.execute(self.calls.promote(limit, now))

    def prune(
        self,
        *,
        max_age_ms: int | None = None,
        max_count: int | None = None,
        limit: int = 1000,
        now: int | None = None,
    ) -> int:
        """Delete finished jobs older than ``max_age_ms`` or beyond ``max_count`` per queue."""
        return self.execute(self.calls.prune(max_age_ms, max_count, limit, now))

    # inspection -----------------------------------------------------------------------------------

    def get_job(self, job_id: str, *, now: int | None = None) -> t.JobInfo | None:
        """The job, its status and the dependency it waits on; None if there is no such job."""
        return self.execute(self.calls.get(job_id, now))

    def counts(self, queue: str, *, now: int | None = None) -> t.QueueCounts:
        """How many jobs of ``queue`` are in each status."""
        return self.execute(self.calls.counts(queue, now))

    def list_jobs(
        self,
        queue: str,
        status: t.Status | str,
        *,
        offset: int = 0,
        limit: int = 100,
        now: int | None = None,
    ) -> list[t.Job]:
        """A page of ``queue``'s jobs in ``status`` (or ``"blocked"``), oldest first."""
        return self.execute(self.calls.list_jobs(queue, status, offset, limit, now))


def _packed_sender(client: Any) -> Callable[[tuple[Any, ...]], Any] | None:
    """A sender of one command packed by hiredis (C), for a plain ``redis.Redis``.

    redis-py's ``execute_command`` costs far more than the round trip's own system calls (its
    argument handling, packing in Python, per-command bookkeeping): on a 2-core machine about
    110 µs of client CPU for a PING against 20 µs for the socket calls. This sends the packed
    bytes on a connection of the client's pool under the client's own retry policy, as
    ``execute_command`` does (a connection that asks to reconnect is reconnected after); a cluster
    client, a single-connection client and fakeredis keep ``execute_command``.
    """
    if type(client) is not redis.Redis or client.connection is not None:
        return None
    pool: Any = client.connection_pool
    takes_name = needs_command_name(pool)

    def send(command: tuple[Any, ...]) -> Any:
        packed = hiredis.pack_command(command)
        conn = pool.get_connection(command[0]) if takes_name else pool.get_connection()

        def once() -> Any:
            conn.send_packed_command([packed])  # (bytes as they are: a list of buffers)
            return conn.read_response()

        try:
            return conn.retry.call_with_retry(once, lambda _: conn.disconnect())
        finally:
            try:
                reconnect = getattr(conn, "should_reconnect", None)
                if reconnect is not None and reconnect():  # (redis-py 7+: a server maintenance)
                    conn.disconnect()
                    conn.connect()
            finally:
                pool.release(conn)

    return send
