"""Every public call of the clients, written once: its signature, its docs and the ``Call`` it
sends.

``Quasar`` makes each of these a blocking method (``blocking``), ``AsyncQuasar`` a coroutine
(``coroutine``): the method builds the call here and hands it to the client's ``execute``. Type
checkers and IDEs see each method with this signature, returning the call's result (or a
coroutine of it).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, TypeVar

from . import _types as t
from ._batch_calls import BatchOperations
from ._calls import Call, CallBuilder, NewJob
from ._change_operations import ChangeOperations
from ._dedup import Dedup, OnDuplicate
from ._dependency_calls import DependencyOperations
from ._flow_calls import FlowOperations
from ._schedule_calls import ScheduleOperations
from .errors import QuasarError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class JobOptions(TypedDict, total=False):
    """What ``enqueue`` takes besides the stage and payload: the other fields of ``NewJob``."""

    id: str | None  # None: made at random
    queue: str  # "default"
    input_ref: str  # "inline"
    input_revision: int  # 0
    dependencies: Sequence[str | t.Job]  # ()
    priority: int  # 0
    max_attempts: int  # 3
    available_at: int | None  # absolute ms; wins over delay_ms
    delay_ms: int | None  # from the server's now
    on_dependency_failure: t.DependencyPolicy  # "block"
    flow: str | None  # None: partitioned by the id (docs/scaling.md)
    deadline: int | None  # absolute ms: not started by then, it expires (never runs)
    expires_in_ms: int | None  # the deadline, from the server's now
    dedup: Dedup | None  # None: no dedup key (docs/deduplication.md)
    group: str | None  # None: no flow group (docs/flow-control.md)
    batch: str | None  # None: no batch (docs/workflows.md)


def public(method: F, build: Callable[..., Call[Any]], owner: str) -> F:
    """``method`` of the class ``owner``, sending what ``build`` makes: named and documented as
    ``build``, its signature returning the call's result."""
    module = method.__module__
    functools.update_wrapper(method, build)
    method.__module__, method.__qualname__ = module, f"{owner}.{build.__name__}"
    signature = inspect.signature(build)
    result = signature.return_annotation.removeprefix("Call[").removesuffix("]")  # (a string here)
    method.__signature__ = signature.replace(return_annotation=result)  # type: ignore[attr-defined]
    return method


class Operations(
    ChangeOperations, ScheduleOperations, FlowOperations, DependencyOperations, BatchOperations
):
    """The call each public method of the clients sends (``self`` is the client); those that
    change a waiting job are ``ChangeOperations``', those of schedules
    ``ScheduleOperations``', those of flow control ``FlowOperations``', those of batches
    ``BatchOperations``'."""

    calls: CallBuilder

    # enqueue ----------------------------------------------------------------------------------

    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        *,
        now: int | None = None,
        ids_only: bool = False,
        on_duplicate: OnDuplicate = "refuse",
    ) -> Call[t.BatchResult]:
        """Enqueue a batch in one call, all or nothing; a job may depend on an earlier one.

        ``ids_only`` makes the reply carry the job ids alone (``BatchApplied.ids``): cheaper.
        ``on_duplicate="skip"``: a job whose id exists (or came earlier in the batch) is skipped
        instead of refusing the batch; ``BatchApplied.deduplicated`` says which, as it says
        which jobs a dedup key answered (docs/deduplication.md).
        """
        return self.calls.enqueue_many(jobs, now, ids_only=ids_only, on_duplicate=on_duplicate)

    def enqueue_each(
        self, jobs: Sequence[NewJob], *, now: int | None = None
    ) -> Call[list[t.JobResult]]:
        """Enqueue many jobs in one call, each on its own: a JobResult per job, in order."""
        return self.calls.enqueue_each(jobs, now)

    # claims and the lease holder's calls ------------------------------------------------------

    def claim(
        self, queue: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> Call[t.ClaimResult]:
        """Lease the best claimable job of ``queue``, or ``ClaimRefused(NothingClaimable)``."""
        return self.calls.claim(queue, worker_id, lease_ms, now=now)

    def claim_many(
        self, queue: str, worker_id: str, lease_ms: int, limit: int, *, now: int | None = None
    ) -> Call[t.ClaimsResult]:
        """Lease up to ``limit`` (1-1000) jobs of ``queue`` in one call, best first."""
        return self.calls.claim_many(queue, worker_id, lease_ms, limit, now)

    def claim_job(
        self, job_id: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> Call[t.ClaimResult]:
        """Lease one job by id: Waiting, RetryWaiting, or Leased with its lease run out."""
        return self.calls.claim_job(job_id, worker_id, lease_ms, now)

    def complete(
        self,
        token: t.LeaseToken,
        worker_id: str,
        *,
        result: Any = None,
        output_ref: str = "inline",
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """Mark the leased job Succeeded; releases dependents whose dependencies all succeeded."""
        return self.calls.complete(token, worker_id, output_ref, result, now)

    def fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        *,
        retry_delay_ms: int = 0,
        kind: str = "Error",
        traceback: str = "",
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """Fail this attempt: RetryWaiting after ``retry_delay_ms`` while attempts remain.

        The attempt (``kind``, ``reason``, ``traceback``: at most 8,192 bytes) is kept in the
        job's failure history (``get_job(...).errors``)."""
        return self.calls.fail(token, worker_id, reason, retry_delay_ms, kind, now, traceback)

    def permanent_fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        *,
        kind: str = "Error",
        traceback: str = "",
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """Fail the job for good, whatever attempts remain (kept in its failure history as
        ``fail`` keeps an attempt)."""
        return self.calls.permanent_fail(token, worker_id, reason, kind, now, traceback)

    def heartbeat(
        self, token: t.LeaseToken, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> Call[t.ClaimResult]:
        """Extend the lease to now + ``lease_ms``; the reply carries the new token."""
        return self.calls.heartbeat(token, worker_id, lease_ms, now)

    def report_progress(
        self,
        token: t.LeaseToken,
        worker_id: str,
        value: float,
        message: str | None = None,
        *,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """Write the leased job's progress now (docs/workflows.md, "Progress"): ``value`` a
        finite number, ``message`` at most 200 characters (InvalidArgument otherwise). Written,
        with the event ``progress``, only when it differs from the job's; the lease is not
        renewed. Refused as a heartbeat is (``StaleLease``, ``LeaseExpired``)."""
        return self.calls.report_progress(token, worker_id, value, message, now)

    def release(
        self,
        token: t.LeaseToken,
        worker_id: str,
        *,
        delay_ms: int = 0,
        hold_ms: int | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """Hand the leased job back, Waiting again after ``delay_ms``, without using an attempt.
        ``hold_ms``: and start no job of its group (of its queue, for a job without a group)
        for that long (docs/flow-control.md)."""
        return self.calls.release(token, worker_id, delay_ms, now, hold_ms=hold_ms)

    def report_many(
        self, worker_id: str, outcomes: Sequence[t.Outcome], *, now: int | None = None
    ) -> Call[list[t.OutcomeResult | QuasarError]]:
        """Report many outcomes (Complete, Fail, PermanentFail, Release) in one call.

        Each is checked and applied on its own, as its single call would be; a damaged job gives
        its exception in place of its result.
        """
        return self.calls.report_many(worker_id, outcomes, now)

    def report_and_claim(
        self,
        worker_id: str,
        outcomes: Sequence[t.Outcome],
        queue: str,
        lease_ms: int,
        limit: int,
        *,
        now: int | None = None,
    ) -> Call[t.ReportedAndClaimed]:
        """``report_many(outcomes)``, then ``claim_many(queue, ...)``, in one call (a worker's
        round trip): each part is applied or refused on its own, as its own call would be."""
        return self.calls.report_and_claim(worker_id, outcomes, queue, lease_ms, limit, now)

    # operators and maintenance ----------------------------------------------------------------

    def expire(
        self, job_id: str, expected_fence: int, *, now: int | None = None
    ) -> Call[t.JobResult]:
        """Recover a job whose lease ran out, if its fence is still ``expected_fence``."""
        return self.calls.expire(job_id, expected_fence, now)

    def cancel(
        self,
        job_id: str,
        *,
        expected_fence: int | None = None,
        reason: str = "cancelled",
        now: int | None = None,
    ) -> Call[t.CancelResult]:
        """Cancel a live job (and its dependents); ``expected_fence`` guards against races."""
        return self.calls.cancel(job_id, expected_fence, reason, now)

    def retry(
        self,
        job_id: str,
        *,
        expected_fence: int | None = None,
        reason: str = "retried by operator",
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """Operator retry of a Failed job: RetryWaiting now, with one more attempt allowed."""
        return self.calls.retry(job_id, expected_fence, reason, now)

    def sweep_expired(self, *, limit: int = 1000, now: int | None = None) -> Call[t.SweepReport]:
        """Expire up to ``limit`` leases that ran out, over every queue."""
        return self.calls.sweep_expired(limit, now)

    def resume_cascades(self, *, now: int | None = None) -> Call[t.CascadeReport]:
        """One bounded step of cascade work whose client went away (idle for 5 s): dependents
        of a cancelled, failed or completed job not yet visited. Call again while ``more``.

        A call that leaves cascade work carries it on itself before it returns; workers run
        this in their maintenance, so that work left by a client that died is done too.
        """
        return self.calls.resume_cascades(now)

    def promote_due(self, *, limit: int = 1000, now: int | None = None) -> Call[int]:
        """Make up to ``limit`` due scheduled jobs claimable; returns how many."""
        return self.calls.promote_due(limit, now)

    def prune(
        self,
        *,
        max_age_ms: int | None = None,
        max_count: int | None = None,
        limit: int = 1000,
        now: int | None = None,
    ) -> Call[int]:
        """Delete finished jobs older than ``max_age_ms`` or beyond ``max_count`` per queue, then
        done batches older than ``max_age_ms``; at most ``limit`` deletions, the number returned."""
        return self.calls.prune(max_age_ms, max_count, limit, now)

    def purge(
        self,
        queue: str,
        status: t.Status | str,
        job_ids: Sequence[str],
        *,
        finished_before: int | None = None,
        now: int | None = None,
    ) -> Call[int]:
        """Delete these finished jobs of ``queue`` (1-1000 ids), each only while it is still in
        ``status`` (completed, discarded, cancelled or expired) and finished before
        ``finished_before`` (ms; None: any time); returns how many were deleted.

        As ``prune``, it keeps a job finished in the last 60 s (a re-sent call must still find
        it) and one that a blocked job depends on; an id of another queue or status, or of no
        job, is left alone. Page the ids with ``page_jobs(queue, status)``.
        """
        return self.calls.purge(queue, status, job_ids, finished_before, now)

    # inspection -------------------------------------------------------------------------------

    def get_job(self, job_id: str, *, now: int | None = None) -> Call[t.JobInfo | None]:
        """The job, its status, the dependency it waits on and its last failed attempts
        (``JobInfo.errors``); None if there is no such job."""
        return self.calls.get_job(job_id, now)

    def counts(self, queue: str, *, now: int | None = None) -> Call[t.QueueCounts]:
        """How many jobs of ``queue`` are in each status."""
        return self.calls.counts(queue, now)

    def list_jobs(
        self,
        queue: str,
        status: t.Status | str,
        *,
        offset: int = 0,
        limit: int = 100,
        now: int | None = None,
    ) -> Call[list[t.Job]]:
        """A page of ``queue``'s jobs in ``status`` (or ``"blocked"``), oldest first.

        ``offset`` into ``available`` or ``scheduled`` is at most 1,000: page further with
        ``page_jobs``. On a partitioned namespace ``offset + limit`` is at most 1,000
        (docs/scaling.md).
        """
        return self.calls.list_jobs(queue, status, offset, limit, now)

    def page_jobs(
        self,
        queue: str,
        status: t.Status | str,
        *,
        after: str | None = None,
        limit: int = 100,
        now: int | None = None,
    ) -> Call[t.JobPage]:
        """A page of ``queue``'s jobs in ``status``, in ``list_jobs``' order, by cursor.

        ``after``: the ``next_cursor`` of the page before (None: the first page). Each call
        costs the same at any depth; a page may hold fewer than ``limit`` jobs (even none)
        before the end, which ``next_cursor is None`` marks.
        """
        return self.calls.page_jobs(queue, status, after, limit, now)

    # queues and workers -----------------------------------------------------------------------

    def pause(self, queue: str, *, now: int | None = None) -> Call[bool]:
        """Stop leasing jobs of ``queue`` to any worker (atomically: every claim checks it);
        enqueue and inspection go on. True if it was not paused before; a queue with no job
        yet is paused too. A malformed queue name raises InvalidArgument."""
        return self.calls.pause(queue, now)

    def resume(self, queue: str, *, now: int | None = None) -> Call[bool]:
        """Lease jobs of a paused ``queue`` again, waking its idle workers. True if it was
        paused."""
        return self.calls.resume(queue, now)

    def queues(self, *, now: int | None = None) -> Call[list[t.QueueInfo]]:
        """Every queue of the namespace, sorted by name: its counts and whether it is paused."""
        return self.calls.queues(now)

    def workers(self, *, now: int | None = None) -> Call[list[t.WorkerInfo]]:
        """The live workers of the namespace, by id, as each last announced itself."""
        return self.calls.workers(now)
