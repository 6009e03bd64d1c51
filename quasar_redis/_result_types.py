"""Refusals (why a transition changed nothing), the results of transitions and the outcomes a
lease holder reports; the jobs they carry are in ``_job_types``.

Every value is frozen and slotted, and usable in ``match``::

    match client.claim("emails", "worker-1", lease_ms=30_000):
        case ClaimApplied(Claim(job, token)):
            ...
        case ClaimRefused(NothingClaimable(next_at)):
            ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from ._job_types import (
    Claim,
    Job,
    LeaseToken,
    Status,
)

# --- refusals: why a transition changed nothing (``JobError``) ----------------------------------


@dataclass(frozen=True, slots=True)
class MissingJob:
    job_id: str


@dataclass(frozen=True, slots=True)
class DuplicateJob:
    job_id: str


@dataclass(frozen=True, slots=True)
class MissingDependency:
    job_id: str


@dataclass(frozen=True, slots=True)
class IncompleteDependency:
    job_id: str


@dataclass(frozen=True, slots=True)
class InvalidJob:
    reason: str


@dataclass(frozen=True, slots=True)
class NotAvailable:
    available_at: int


@dataclass(frozen=True, slots=True)
class DeadlinePassed:
    """A claim by id of a job never started whose ``deadline`` has come: it is never leased (a
    sweep, or a claim of its queue, expires it)."""

    deadline: int


@dataclass(frozen=True, slots=True)
class LeaseHeld:
    expires_at: int


@dataclass(frozen=True, slots=True)
class AttemptLimitReached:
    pass


@dataclass(frozen=True, slots=True)
class TerminalJob:
    pass


@dataclass(frozen=True, slots=True)
class StaleLease:
    pass


@dataclass(frozen=True, slots=True)
class LeaseExpired:
    expires_at: int


@dataclass(frozen=True, slots=True)
class NotFailed:
    pass


@dataclass(frozen=True, slots=True)
class FenceChanged:
    pass


@dataclass(frozen=True, slots=True)
class NothingClaimable:
    """A claim by queue found no claimable job; ``next_at`` is when one may come due, if known."""

    next_at: int | None


@dataclass(frozen=True, slots=True)
class QueuePaused:
    """A claim of a paused queue (``pause``), or of a job of one: nothing is leased from it
    until ``resume``."""

    queue: str


@dataclass(frozen=True, slots=True)
class StaleRevision:
    """A job's input given with a revision below the one stored (or, to ``change``, not above
    it): a newer input is there already, and this one would replace it with an older one."""

    job_id: str
    stored_revision: int


@dataclass(frozen=True, slots=True)
class CrossPartition:
    """An enqueue on a partitioned namespace naming a job (``job_id``: its own id or a
    dependency) that lives in ``partition``, while the job goes to ``expected``: a job and its
    dependencies share a partition (give them one flow key). Refused before anything is sent."""

    job_id: str
    partition: int
    expected: int


@dataclass(frozen=True, slots=True)
class MissingBatch:
    """No batch of this id (``open_batch`` makes one): an enqueue into it, or a close of it."""

    batch: str


@dataclass(frozen=True, slots=True)
class BatchClosed:
    """An enqueue into a batch that ``close_batch`` closed: it takes no more members."""

    batch: str


@dataclass(frozen=True, slots=True)
class BatchExists:
    """``open_batch`` of an id that a batch with other callbacks has already."""

    batch: str


JobError: TypeAlias = (
    MissingJob
    | DuplicateJob
    | MissingDependency
    | IncompleteDependency
    | InvalidJob
    | NotAvailable
    | DeadlinePassed
    | LeaseHeld
    | AttemptLimitReached
    | TerminalJob
    | StaleLease
    | LeaseExpired
    | NotFailed
    | FenceChanged
    | NothingClaimable
    | QueuePaused
    | CrossPartition
    | StaleRevision
    | MissingBatch
    | BatchClosed
    | BatchExists
)


# --- results -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobApplied:
    """An enqueue (or another transition) that holds ``job``; ``deduplicated``: an enqueue
    answered with a job that already held its dedup key (or, skipping duplicates, its id)
    instead of making one (docs/deduplication.md)."""

    job: Job
    deduplicated: bool = False


@dataclass(frozen=True, slots=True)
class JobRefused:
    error: JobError


JobResult: TypeAlias = JobApplied | JobRefused


@dataclass(frozen=True, slots=True)
class ClaimApplied:
    claim: Claim


@dataclass(frozen=True, slots=True)
class ClaimRefused:
    error: JobError


ClaimResult: TypeAlias = ClaimApplied | ClaimRefused


@dataclass(frozen=True, slots=True)
class ClaimsApplied:
    """A claim by queue that leased one or more jobs (at most the limit asked for)."""

    claims: tuple[Claim, ...]


ClaimsResult: TypeAlias = ClaimsApplied | ClaimRefused


@dataclass(frozen=True, slots=True)
class BatchApplied:
    """A bulk enqueue that wrote every job; ``jobs`` is empty when only ids were asked for.

    ``deduplicated``: the indexes (0-based) of the jobs answered with another job instead of
    written, a job holding their dedup key or, skipping duplicates, their id; in ``jobs`` and
    ``ids`` that job stands at their place (docs/deduplication.md)."""

    jobs: tuple[Job, ...]
    ids: tuple[str, ...] = ()
    deduplicated: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchRefused:
    """A bulk enqueue wrote nothing: job ``index`` (0-based) was refused with ``error``."""

    index: int
    error: JobError


BatchResult: TypeAlias = BatchApplied | BatchRefused


@dataclass(frozen=True, slots=True)
class CancelApplied:
    """A cancellation, and the dependents it cancelled with it (they can never run)."""

    job: Job
    cascaded: tuple[str, ...]


CancelResult: TypeAlias = CancelApplied | JobRefused


@dataclass(frozen=True, slots=True)
class SweepReport:
    """Leases a sweep expired, ids in the lease or deadline index whose job hash is damaged,
    and the waiting jobs it expired because their deadline came before they started."""

    expired: tuple[str, ...]
    damaged: tuple[str, ...]
    past_deadline: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CascadeReport:
    """One step of cascade work carried on: the dependents it cancelled, the damaged ones it
    skipped (left untouched), and whether work is left (``more``)."""

    cancelled: tuple[str, ...]
    damaged: tuple[str, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """Jobs of one queue by status at ``now`` (each job in exactly one)."""

    now: int
    available: int
    scheduled: int
    retryable: int
    executing: int
    completed: int
    discarded: int
    cancelled: int
    blocked: int
    expired: int = 0

    def by_status(self) -> dict[Status, int]:
        return {status: getattr(self, status.value) for status in Status}


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue of the namespace (``queues``): its counts and whether it is paused."""

    name: str
    counts: QueueCounts
    paused: bool


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker as it last announced itself (``workers``); times in ms, server clock.

    ``running``: the ids of the jobs it held then; ``started_at``: its first announcement (since
    its entry last lapsed); ``last_seen``: its last one; ``processed``: the runs it ended since
    it started (completed, retried or failed), ``failed``: those that failed (retried or not),
    as of its last announcement.
    """

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    running: tuple[str, ...]
    version: str
    started_at: int
    last_seen: int
    processed: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of jobs by cursor (``page_jobs``): ``next_cursor`` resumes after it, None at the end.
    A page may hold fewer jobs than asked for (even none) before the end."""

    jobs: tuple[Job, ...]
    next_cursor: str | None


# --- outcomes a lease holder reports (``report_many``) ------------------------------------------


@dataclass(frozen=True, slots=True)
class Complete:
    """Succeed the leased job (``complete``). ``result_ttl_ms``: keep the finished job that long
    (at least the 60 s re-send window), then let ``prune`` delete it; None: until ``prune``'s
    own age and count limits (docs/lifecycle.md)."""

    token: LeaseToken
    result: Any = None
    output_ref: str = "inline"
    result_ttl_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Fail:
    """Fail this attempt (``fail``): retried after ``retry_delay_ms`` while attempts remain.
    ``traceback`` (at most 8,192 bytes) is kept in the job's failure history."""

    token: LeaseToken
    reason: str
    retry_delay_ms: int = 0
    kind: str = "Error"
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class PermanentFail:
    """Fail the job for good (``permanent_fail``); ``traceback`` as ``Fail``'s."""

    token: LeaseToken
    reason: str
    kind: str = "Error"
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class Release:
    """Hand the job back without using an attempt (``release``)."""

    token: LeaseToken
    delay_ms: int = 0
    #: Hold the job's group (its queue, for a job without a group) this long: no job of it
    #: starts meanwhile (a task told to slow down: ``RateLimited``). None: no hold.
    hold_ms: int | None = None


Outcome: TypeAlias = Complete | Fail | PermanentFail | Release

STATE_NAMES = {
    "W": "Waiting",
    "R": "RetryWaiting",
    "L": "Leased",
    "S": "Succeeded",
    "F": "Failed",
    "C": "Cancelled",
    "E": "Expired",
}


@dataclass(frozen=True, slots=True)
class OutcomeApplied:
    """An outcome of ``report_many`` that was applied; ``state`` names the job's new state."""

    job_id: str
    state: str


OutcomeResult: TypeAlias = OutcomeApplied | JobRefused


@dataclass(frozen=True, slots=True)
class ReportedAndClaimed:
    """``report_and_claim``: each outcome's result, in order, and the claim's.

    An outcome of a damaged job, or a claim refused for damaged data, comes as the exception
    (``CorruptJobError``, ``CorruptKeyError``) in place of its result: the other part still counts.
    """

    outcomes: tuple[OutcomeResult | Exception, ...]
    claim: ClaimsResult | Exception
