"""A pure-Python model of the job state machine, for the stateful test against the Lua scripts.

The model is the state machine written down in docs/lifecycle.md: each edge's checks in the order
listed there (enqueue, claim by id and by queue, complete, fail, permanent_fail, release,
heartbeat, expire and sweep, cancel, operator retry, change, prune; and supersede, an enqueue
of a stored id with a higher input revision), queues and priorities, claim by queue
(best first: priority, then available_at, then enqueue order), batches, pending dependencies with
the ``block`` / ``cancel`` policy, cascading cancellation, deadlines (a job never started by its
deadline expires: at a claim by queue that meets it, or at a sweep), the per-claim lease nonce
and each job's last error (kind + message), down to the details the scripts (``lua/*.lua``)
settle: the error kinds written by expiry and operator retry, the reasons given to cascaded
cancellations, and claim by queue's maintenance (it first promotes due jobs and expires run-out
leases of its queue, even when it then finds nothing to claim), and dedup keys
(docs/deduplication.md: unique, throttle and debounce, and batches that skip duplicate ids).

Flow control (docs/flow-control.md, lua/include/flow_control.lua) is modelled exactly, not by
its invariants: jobs with a group, each queue's flow (its limits, its rate's arrival time, the
turns of its groups and of its jobs without a group, the groups waiting on a rate or a hold and
those held at their cap, each group's own limits and rate), and claim by queue as lua/claim.lua
makes it (best first without a flow; the queue's cap and rate cutting the claim when no grouped
job is ready; else turn by turn, ties by group name), with the bookkeeping each call does at its
end (``Model.call``).

Nothing here talks to Redis. Results are the client's own typed values (``quasar_redis._types``),
so a test compares them with ``==``. Two things the model cannot know are supplied by the test:

* the nonce of each new lease (random per claim): a claim returns a token whose nonce is ``""``
  and the test hands the implementation's nonce to ``adopt_nonce``;
* which dependency a cascaded cancellation names when several were cancelled at the same depth
  of the cascade (the scripts walk Redis sets, whose order is unspecified): the model keeps every
  acceptable reason and ``reconcile`` takes the one the implementation chose.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import wraps
from typing import Any, TypeVar, cast

from quasar_redis import _types as t
from quasar_redis._call_base import KEEP, JobChange
from quasar_redis._calls import NewJob
from quasar_redis._codec import encode
from quasar_redis._dedup import Debounce, Throttle, Unique

LEASE_EXPIRED_KIND = "LeaseExpired"
LEASE_EXPIRED_REASON = "worker lease expired"
#: Placeholder nonce of a lease the model granted, until the test adopts the real one.
UNKNOWN_NONCE = ""

TERMINAL_STATES = (t.Succeeded, t.Failed, t.Cancelled, t.Expired)
WAITING_STATES = (t.Waiting, t.RetryWaiting)

#: lua/include/core.lua CALL_TTL_MS: prune keeps every job finished more recently than this.
RESEND_WINDOW_MS = 60_000
#: lua/include/flow_control.lua: added to a grouped job's priority in ready.
GROUPED = 10_000_000
#: lua/claim.lua: entries a claim drops (or turns that lease nothing), at most; gwait entries a
#: claim brings back, at most.
REPAIR_MAX = 100
MAINTENANCE = 100


@dataclass
class ModelJob:
    """One job as the model stores it (the Lua job hash, minus call ids)."""

    id: str
    queue: str
    stage: str
    raw_payload: bytes
    input_ref: str
    input_revision: int
    dependencies: tuple[str, ...]
    priority: int
    #: Enqueue order; also the job's identity, as an id is free again once its job is pruned.
    seq: int
    max_attempts: int
    inserted_at: int
    on_dependency_failure: t.DependencyPolicy
    pending: int
    state: t.JobState
    attempt: int = 0
    fence: int = 0
    attempted_at: int | None = None
    error: t.ErrorInfo | None = None
    raw_result: bytes | None = None
    nonce: str | None = None
    #: The ``seq`` of each dependency as it was at enqueue (an id may be reused after pruning).
    dependency_seqs: tuple[int, ...] = ()
    #: The job sits in the claim index ("ready"), not in the not-yet-due index ("delayed").
    in_ready: bool = False
    #: Its last failed attempts, oldest first (``JobInfo.errors``).
    errors: tuple[t.ErrorInfo, ...] = ()
    #: When it must have started by, or it expires unstarted (None: no deadline).
    deadline: int | None = None
    #: How it was enqueued with a dedup key (``Job.dedup``).
    dedup: str | None = None
    #: Its flow group (None: the queue's jobs without a group).
    group: str | None = None
    #: Under policy "run": the dependencies it counted as resolved though they did not succeed.
    resolved: tuple[str, ...] = ()

    @property
    def terminal(self) -> bool:
        return isinstance(self.state, TERMINAL_STATES)

    @property
    def waiting(self) -> bool:
        return isinstance(self.state, WAITING_STATES)

    @property
    def available_at(self) -> int:
        assert isinstance(self.state, WAITING_STATES)
        return self.state.available_at

    @property
    def expires_at(self) -> int:
        assert isinstance(self.state, t.Leased)
        return self.state.expires_at

    def finished_at(self) -> int | None:
        match self.state:
            case t.Succeeded(_, at) | t.Failed(_, at) | t.Cancelled(_, at) | t.Expired(_, at):
                return at
        return None

    def to_job(self) -> t.Job:
        return t.Job(
            id=self.id,
            queue=self.queue,
            stage=self.stage,
            raw_payload=self.raw_payload,
            input_ref=self.input_ref,
            input_revision=self.input_revision,
            dependencies=self.dependencies,
            priority=self.priority,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            fencing_version=self.fence,
            state=self.state,
            inserted_at=self.inserted_at,
            attempted_at=self.attempted_at,
            completed_at=self.finished_at(),
            error=self.error,
            raw_result=self.raw_result,
            on_dependency_failure=self.on_dependency_failure,
            pending_dependencies=self.pending,
            deadline=self.deadline,
            dedup=self.dedup,
            group=self.group,
        )

    def past_deadline(self, now: int) -> bool:
        """Waiting, never started (never leased), and its deadline has come."""
        return (
            self.deadline is not None
            and isinstance(self.state, t.Waiting)
            and self.attempted_at is None
            and self.deadline <= now
        )

    def token(self) -> t.LeaseToken:
        assert isinstance(self.state, t.Leased)
        return t.LeaseToken(
            self.id,
            self.input_revision,
            self.state.worker_id,
            self.fence,
            self.state.expires_at,
            self.nonce or UNKNOWN_NONCE,
        )


@dataclass
class _Revision:
    """An enqueue of a stored live job's id with a higher input revision: a supersede."""

    job: ModelJob
    spec: NewJob


@dataclass
class _Cascade:
    """A cancellation cascade: jobs in cascade order, and the reasons each may give."""

    jobs: list[ModelJob] = field(default_factory=list)
    reasons: dict[str, list[str]] = field(default_factory=dict)
    #: Dependents under policy "run" reached, each with the parent that releases it.
    released: list[tuple[ModelJob, ModelJob]] = field(default_factory=list)


@dataclass
class ModelFlow:
    """A queue's flow (lua/include/flow_control.lua): its limits as stored (``""``: none), and
    the state of its turns, rates and holds. Times of rates are in µs, as the scripts keep them.
    """

    rate: str = ""
    cap: str = ""
    grate: str = ""
    gcap: str = ""
    #: The queue rate's arrival time (None: no ``tat`` field).
    tat: int | None = None
    turn: int = 0
    #: The turn of the queue's jobs without a group (None: no ``uturn`` field).
    uturn: int | None = None
    groups: dict[str, int] = field(default_factory=dict)
    gwait: dict[str, int] = field(default_factory=dict)
    gfull: set[str] = field(default_factory=set)
    #: A group's own limits: (rate, cap), each "" (the default), "none" or a value.
    glimits: dict[str, tuple[str, str]] = field(default_factory=dict)
    gtat: dict[str, int] = field(default_factory=dict)
    #: A hold of the queue: its end (ms; 0: none); of its groups: each one's end (ms).
    hold: int = 0
    ghold: dict[str, int] = field(default_factory=dict)
    holds: bool = False  #: a group was ever held (claims read the groups' holds)
    counts: bool = False  #: its groups' leases are counted (a group cap was ever set)

    def fields(self) -> dict[str, str]:
        """The flow hash as Redis holds it."""
        out = {"turn": str(self.turn)}
        for name in ("rate", "cap", "grate", "gcap"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.tat is not None:
            out["tat"] = str(self.tat)
        if self.uturn is not None:
            out["uturn"] = str(self.uturn)
        if self.hold:
            out["hold"] = str(self.hold)
        if self.holds:
            out["holds"] = "1"
        if self.counts:
            out["counts"] = "1"
        return out

    def group_limits(self, group: str) -> tuple[str, int | None]:
        """A group's rate spec and cap: its own over the queue's defaults for its groups."""
        rate, cap = self.grate, self.gcap
        own_rate, own_cap = self.glimits.get(group, ("", ""))
        rate = own_rate or rate
        cap = own_cap or cap
        return rate, (int(cap) if cap and cap != "none" else None)

    def join(self, group: str) -> None:
        """The group takes turns at the current turn, unless it waits or is held at its cap."""
        if group not in self.gwait and group not in self.gfull:
            self.groups.setdefault(group, self.turn)

    def head(self) -> tuple[str, int] | None:
        """The group whose turn comes first: lowest turn, then name (a zset's order)."""
        if not self.groups:
            return None
        name = min(self.groups, key=lambda g: (self.groups[g], g.encode()))
        return name, self.groups[name]


def rate_of(spec: str) -> tuple[int, int] | None:
    """A rate "<n> <window ms> <burst>": its interval and tolerance (µs), or None."""
    if spec in ("", "none"):
        return None
    n, window, burst = (int(x) for x in spec.split())
    interval = math.ceil(window * 1000 / n)
    return interval, burst * interval + max(0, 1000 - interval)


F = TypeVar("F", bound=Callable[..., Any])


def one_call(method: F) -> F:
    """A transition method that is one script call: the flow's bookkeeping of the call's end
    (groups that got ready jobs join the turns; a group whose lease ended leaves gfull) runs
    once, when the outermost such method returns."""

    @wraps(method)
    def wrapper(self: Model, *args: Any, **kwargs: Any) -> Any:
        with self.call():
            return method(self, *args, **kwargs)

    return cast(F, wrapper)


def _new_job_error(spec: NewJob) -> t.InvalidJob | None:
    """The new job's own checks, in their order (available_at checked by ``_available_at``)."""
    if spec.id == "":
        return t.InvalidJob("id must not be empty")
    if spec.stage == "":
        return t.InvalidJob("stage must not be empty")
    if spec.input_ref == "":
        return t.InvalidJob("input_ref must not be empty")
    if spec.input_revision < 0:
        return t.InvalidJob("input_revision must be nonnegative")
    if spec.max_attempts < 1:
        return t.InvalidJob("max_attempts must be positive")
    return None


def _available_at(spec: NewJob, now: int) -> int | t.InvalidJob:
    """``available_at`` wins over ``delay_ms``; neither means now."""
    if spec.available_at is not None:
        if spec.available_at < 0:
            return t.InvalidJob("available_at must be nonnegative")
        return spec.available_at
    delay = spec.delay_ms or 0
    if delay < 0:
        return t.InvalidJob("delay must be nonnegative")
    return now + delay


def _dedup_text(spec: NewJob) -> str | None:
    """``Job.dedup`` of a job enqueued as ``spec``: "<mode> <window ms> <key>"."""
    match spec.dedup:
        case Unique(key, until, ttl):
            return f"{until} {ttl or 0} {key}"
        case Throttle(key, window):
            return f"throttle {window} {key}"
        case Debounce(key, window):
            return f"debounce {window} {key}"
    return None


def _deadline(spec: NewJob, now: int, at: int) -> int | t.InvalidJob | None:
    """The deadline, absolute or from now: after both now and ``at`` (None: no deadline)."""
    if spec.deadline is None and spec.expires_in_ms is None:
        return None
    if spec.deadline is not None and spec.expires_in_ms is not None:
        return t.InvalidJob("give deadline or expires_in, not both")
    if spec.deadline is not None:
        deadline = spec.deadline
    else:
        assert spec.expires_in_ms is not None
        if spec.expires_in_ms < 1:
            return t.InvalidJob("expires_in must be positive")
        deadline = now + spec.expires_in_ms
    if deadline <= now:
        return t.InvalidJob("deadline must be in the future")
    if deadline <= at:
        return t.InvalidJob("deadline must be after available_at")
    return deadline


def _dependency_ids(spec: NewJob) -> tuple[str, ...]:
    return tuple(d.id if isinstance(d, t.Job) else d for d in spec.dependencies)


def _listed_twice(deps: Sequence[str]) -> t.InvalidJob | None:
    seen: set[str] = set()
    for dep in deps:
        if dep in seen:
            return t.InvalidJob(f"dependency {dep} is listed twice")
        seen.add(dep)
    return None


def _new_time(job: ModelJob, what: JobChange, now: int) -> int | t.InvalidJob | None:
    """The time a change gives a waiting job (None: kept), or its refusal."""
    given = [what.available_at is not None, what.delay_ms is not None, what.promote]
    if not (what.payload is not KEEP or what.input_revision is not None) and not (
        what.priority is not None or any(given)
    ):
        return t.InvalidJob("nothing to change")
    if sum(given) > 1:
        return t.InvalidJob("give one of available_at, delay and promote")
    if what.promote:
        return min(job.available_at, now)
    if what.available_at is not None:
        if what.available_at < 0:
            return t.InvalidJob("available_at must be nonnegative")
        return what.available_at
    if what.delay_ms is not None:
        if what.delay_ms < 0:
            return t.InvalidJob("delay must be nonnegative")
        return now + what.delay_ms
    return None


def _change_error(job: ModelJob, what: JobChange) -> t.JobError | None:
    """A change's checks of its priority and input, in their order, after its time's."""
    if what.priority is not None and not -1_000_000 <= what.priority <= 1_000_000:
        return t.InvalidJob("priority must be between -1000000 and 1000000")
    if what.payload is KEEP:
        return (
            None if what.input_revision is None else t.InvalidJob("input_revision needs a payload")
        )
    if what.input_revision is None:
        return None
    if what.input_revision < 0:
        return t.InvalidJob("input_revision must be nonnegative")
    if what.input_revision <= job.input_revision:
        return t.StaleRevision(job.id, job.input_revision)
    return None


def _lease_invalid(worker_id: str, lease_ms: int) -> t.InvalidJob | None:
    """The first two readiness checks of a claim."""
    if worker_id == "":
        return t.InvalidJob("worker_id must not be empty")
    if lease_ms < 1:
        return t.InvalidJob("lease_duration must be positive")
    return None


def _cascade_reason(parent: str, failed: str | None) -> str:
    """Why a dependent is cancelled: its dependency ``failed`` ("failed" or "expired": policy
    "cancel"), or was cancelled (None)."""
    return f"dependency {parent} {failed or 'was cancelled'}"


class Model:
    """Every job of one namespace, and every transition on them."""

    def __init__(self) -> None:
        self.jobs: dict[str, ModelJob] = {}
        self.seq = 0
        #: Dedup keys: the id of the job that took each.
        self.keys: dict[str, str] = {}
        #: Cascaded cancellations whose reason may name any of several dependencies.
        self.reason_choices: dict[str, frozenset[str]] = {}
        #: Each queue's flow, once it has one (a limit, a hold, or a grouped job made ready).
        self.flows: dict[str, ModelFlow] = {}
        #: The queues the namespace knows (its ``queues`` set): some job was written to them.
        self.known_queues: set[str] = set()
        #: The call in progress (see ``call``): its depth, the groups that got ready jobs, and
        #: the leased jobs per (queue, group) at its start.
        self._depth = 0
        self._touched: dict[str, set[str]] = {}
        self._leased_before: Counter[tuple[str, str]] = Counter()
        #: How the last claim by queue went (for the test's statistics): its path, and what
        #: held back a turn ("cap", "rate", "gcap", "grate": a group's rate or a hold).
        self.claim_path: str = ""
        self.held_by: set[str] = set()

    # --- flow: the bookkeeping of a call ----------------------------------------------------------

    def leased_by_group(self) -> Counter[tuple[str, str]]:
        return Counter(
            (j.queue, j.group)
            for j in self.jobs.values()
            if j.group is not None and isinstance(j.state, t.Leased)
        )

    @contextmanager
    def call(self) -> Iterator[None]:
        """One script call: at its end (lua/include/flow_control.lua's flush_flow) the groups
        that got ready jobs join the turns of their queue (which has a flow from then on), and
        a group held at its cap whose leased jobs went down takes turns again."""
        if self._depth == 0:
            self._touched = {}
            self._leased_before = self.leased_by_group()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._flush()

    def _flush(self) -> None:
        for queue, groups in self._touched.items():
            flow = self.flows.setdefault(queue, ModelFlow())
            for group in groups:
                flow.join(group)
        self._touched = {}
        after = self.leased_by_group()
        for key in set(after) | set(self._leased_before):
            queue, group = key
            held = self.flows.get(queue)
            if after[key] < self._leased_before[key] and held and group in held.gfull:
                held.gfull.discard(group)
                held.groups.setdefault(group, held.turn)

    def _made_ready(self, job: ModelJob) -> None:
        if job.group is not None:
            self._touched.setdefault(job.queue, set()).add(job.group)

    def group_active(self, queue: str, group: str) -> int:
        return sum(
            1
            for j in self.jobs.values()
            if j.queue == queue and j.group == group and isinstance(j.state, t.Leased)
        )

    def leased_count(self, queue: str) -> int:
        return sum(
            1 for j in self.jobs.values() if j.queue == queue and isinstance(j.state, t.Leased)
        )

    def ready_jobs(self, queue: str, group: str | None) -> list[ModelJob]:
        """The queue's ready jobs of ``group`` (None: those without a group), in claim order."""
        jobs = [
            j for j in self.jobs.values() if j.queue == queue and j.in_ready and j.group == group
        ]
        return sorted(jobs, key=lambda j: (j.priority, j.available_at, j.seq))

    # --- helpers ------------------------------------------------------------------------------

    def dependents(self, job: ModelJob) -> list[ModelJob]:
        """The live jobs that depend on ``job``."""
        return [j for j in self.jobs.values() if job.seq in j.dependency_seqs and not j.terminal]

    def blocked_dependents(self, job: ModelJob) -> list[ModelJob]:
        return [j for j in self.dependents(job) if j.waiting and j.pending > 0]

    def _place(self, job: ModelJob, now: int) -> None:
        """Index a waiting job for claiming: ready when due and unblocked, else not."""
        job.in_ready = job.waiting and job.pending == 0 and job.available_at <= now
        if job.in_ready:
            self._made_ready(job)
        elif job.waiting and job.group is not None:  # (its queue has a flow from then on)
            self._touched.setdefault(job.queue, set())

    def claimable(self, job: ModelJob, now: int) -> bool:
        return (
            job.waiting
            and job.pending == 0
            and job.available_at <= now
            and job.attempt < job.max_attempts
        )

    def dependency_error(self, job: ModelJob) -> t.JobError | None:
        """The first of the job's dependencies that has not succeeded, as its refusal."""
        for dep in job.dependencies:
            other = self.jobs.get(dep)
            if other is None:
                return t.MissingDependency(dep)
            if not isinstance(other.state, t.Succeeded) and not (
                job.on_dependency_failure == "run" and other.terminal
            ):
                return t.IncompleteDependency(dep)
        return None

    def lease_error(
        self, job: ModelJob, token: t.LeaseToken, worker_id: str, now: int
    ) -> t.JobError | None:
        """The lease check, the claim nonce checked beside the fence."""
        if (
            worker_id != token.worker_id
            or job.id != token.job_id
            or job.input_revision != token.input_revision
        ):
            return t.StaleLease()
        state = job.state
        if not (
            isinstance(state, t.Leased)
            and state.worker_id == token.worker_id
            and state.fencing_version == token.fencing_version
            and job.nonce == token.nonce
            and state.expires_at == token.expires_at
        ):
            return t.StaleLease()
        if now >= state.expires_at:
            return t.LeaseExpired(state.expires_at)
        return None

    def _cascade(self, root: ModelJob, policy_only: str | None) -> _Cascade:
        """Jobs that can never run once ``root`` is cancelled (or ``policy_only``: "failed",
        "expired", for the dependents that asked for it).

        Breadth first, as the scripts walk it; a job reached from several parents of the same
        depth may name any of them. Only the failed root's own dependents are said to be
        cancelled because it failed; deeper ones because their dependency was cancelled.
        """
        out = _Cascade()
        depth = {root.id: 0}
        frontier = [root]
        level = 0
        while frontier:
            following: list[ModelJob] = []
            failed = policy_only if level == 0 else None
            for parent in frontier:
                for child in self.dependents(parent):
                    if child.on_dependency_failure == "run":
                        out.released.append((child, parent))
                        continue
                    if failed and child.on_dependency_failure != "cancel":
                        continue
                    reason = _cascade_reason(parent.id, failed)
                    if child.id in depth:
                        if depth[child.id] == level + 1:
                            out.reasons[child.id].append(reason)
                        continue
                    depth[child.id] = level + 1
                    out.reasons[child.id] = [reason]
                    out.jobs.append(child)
                    following.append(child)
            frontier = following
            level += 1
        return out

    def _release(self, job: ModelJob, parent: ModelJob, now: int) -> None:
        """One pending dependency less for a blocked dependent of ``parent`` (which ended); a
        "run" dependent notes a parent that did not succeed, and counts each parent once."""
        if not job.waiting or job.pending == 0 or parent.id in job.resolved:
            return
        job.pending -= 1
        if not isinstance(parent.state, t.Succeeded):
            job.resolved = (*job.resolved, parent.id)
        self._place(job, now)

    def _apply_cascade(self, cascade: _Cascade, now: int) -> None:
        for job, parent in cascade.released:
            self._release(job, parent, now)
        for job in cascade.jobs:
            reasons = cascade.reasons[job.id]
            job.state = t.Cancelled(reasons[0], now)
            job.in_ready = False
            if len(reasons) > 1:
                self.reason_choices[job.id] = frozenset(reasons)
            else:
                self.reason_choices.pop(job.id, None)

    def _fail(self, job: ModelJob, kind: str, reason: str, now: int, trace: str = "") -> None:
        """Enter Failed; dependents that asked to be cancelled are (and theirs with them)."""
        cascade = self._cascade(job, policy_only="failed")
        job.state = t.Failed(reason, now)
        job.error = t.ErrorInfo(kind, reason)
        self._keep_error(job, kind, reason, now, trace)
        self._apply_cascade(cascade, now)

    def expire_unstarted(self, job: ModelJob, now: int) -> None:
        """Waiting, never started, past its deadline -> Expired; dependents as for a failure."""
        assert job.past_deadline(now) and job.deadline is not None
        cascade = self._cascade(job, policy_only="expired")
        job.state = t.Expired(job.deadline, now)
        job.in_ready = False
        self._apply_cascade(cascade, now)

    def due_deadlines(self, now: int) -> dict[str, list[str]]:
        """Per queue, the jobs past their deadline at ``now``, in the deadline index's order."""
        out: dict[str, list[str]] = {}
        due = [j for j in self.jobs.values() if j.past_deadline(now)]
        for job in sorted(due, key=lambda j: (j.deadline, j.id.encode())):
            out.setdefault(job.queue, []).append(job.id)
        return out

    def _retry_or_fail(
        self, job: ModelJob, kind: str, reason: str, now: int, delay: int, trace: str = ""
    ) -> None:
        """RetryWaiting while attempts remain, else Failed."""
        if job.attempt < job.max_attempts:
            job.state = t.RetryWaiting(reason, now + delay)
            job.error = t.ErrorInfo(kind, reason)
            self._keep_error(job, kind, reason, now, trace)
            self._place(job, now)
        else:
            self._fail(job, kind, reason, now, trace)

    @staticmethod
    def _keep_error(job: ModelJob, kind: str, reason: str, now: int, trace: str) -> None:
        """docs/lifecycle.md: the failed attempt joins the job's last 5."""
        job.errors = (*job.errors, t.ErrorInfo(kind, reason, trace, job.attempt, now))[-5:]

    def _lease(self, job: ModelJob, worker_id: str, lease_ms: int, now: int) -> t.Claim:
        """A claim once its checks pass: attempt+1, fence+1, Leased."""
        job.attempt += 1
        job.fence += 1
        job.state = t.Leased(worker_id, job.fence, now + lease_ms)
        job.attempted_at = now
        job.nonce = UNKNOWN_NONCE
        job.in_ready = False
        return t.Claim(job.to_job(), job.token())

    def adopt_nonce(self, job_id: str, nonce: str) -> None:
        """The nonce the implementation gave the lease the model just granted."""
        job = self.jobs[job_id]
        assert isinstance(job.state, t.Leased)
        job.nonce = nonce

    def reconcile(self, actual: t.Job) -> None:
        """Take the implementation's choice among the acceptable reasons of a cascade."""
        choices = self.reason_choices.get(actual.id)
        job = self.jobs.get(actual.id)
        if choices is None or job is None or not isinstance(job.state, t.Cancelled):
            return
        if isinstance(actual.state, t.Cancelled) and actual.state.reason in choices:
            job.state = replace(job.state, reason=actual.state.reason)
            del self.reason_choices[actual.id]

    # --- enqueue --------------------------------------------------------------------------------

    def _pending(
        self, deps: Sequence[str], policy: str, batch: dict[str, ModelJob], resolved: list[str]
    ) -> int | t.JobError:
        """Dependencies not yet succeeded; refuses those missing or that can never succeed.
        Under "run" one that ended counts as resolved (``resolved`` gets those that failed)."""
        pending = 0
        for dep in deps:
            if dep in batch:
                pending += 1
                continue
            other = self.jobs.get(dep)
            if other is None:
                return t.MissingDependency(dep)
            state = other.state
            if policy == "run" and other.terminal:
                if not isinstance(state, t.Succeeded):
                    resolved.append(dep)
                continue
            if isinstance(state, t.Cancelled | t.Expired) or (
                isinstance(state, t.Failed) and policy == "cancel"
            ):
                return t.IncompleteDependency(dep)
            if not isinstance(state, t.Succeeded):
                pending += 1
        return pending

    @staticmethod
    def holds(job: ModelJob, dedup: Unique | Throttle | Debounce, now: int) -> bool:
        """Whether ``job`` holds its dedup key for a new job enqueued with ``dedup`` at now."""
        match dedup:
            case Unique(_, "waiting", _):
                return job.waiting
            case Unique(_, "running", _):
                return not job.terminal
            case Unique(_, "finished", ttl):
                return not job.terminal or now < (job.finished_at() or 0) + (ttl or 0)
            case Throttle(_, window):
                return now < job.inserted_at + window
            case Debounce(_, window):
                waiting = isinstance(job.state, t.Waiting) and job.attempt == 0
                return waiting and now < job.inserted_at + window
        raise AssertionError(dedup)

    def _holder(self, spec: NewJob, now: int, taken: dict[str, str]) -> str | None:
        """The job that answers ``spec`` instead of a new one, by its dedup key: an earlier job
        of the call with the key, else the job holding it."""
        if spec.dedup is None:
            return None
        key = spec.dedup.key
        assert key is not None, "the model needs explicit keys"
        if key in taken:
            return taken[key]
        holder = self.jobs.get(self.keys.get(key, ""))
        if holder is None or not self.holds(holder, spec.dedup, now):
            return None
        return holder.id

    @staticmethod
    def _supersede_check(stored: ModelJob, spec: NewJob) -> _Revision | t.JobError:
        """An enqueue of a stored id: a higher revision of a live job supersedes it."""
        if spec.input_revision < stored.input_revision:
            return t.StaleRevision(stored.id, stored.input_revision)
        if spec.input_revision == stored.input_revision or stored.terminal:
            return t.DuplicateJob(stored.id)
        return _Revision(stored, spec)

    def _revise(
        self, job: ModelJob, payload: bytes, revision: int, now: int, place: bool = True
    ) -> None:
        """A new input: Waiting again (a RetryWaiting or Leased job due now), attempts afresh;
        ``place``: indexed as it is now (a change places it once, after its other changes)."""
        job.raw_payload, job.input_revision, job.attempt = payload, revision, 0
        if not isinstance(job.state, t.Waiting):
            job.state = t.Waiting(now)
        if place:
            self._place(job, now)

    def _check_new(
        self,
        spec: NewJob,
        now: int,
        batch: dict[str, ModelJob],
        taken: dict[str, str] | None = None,
        skip: bool = False,
    ) -> ModelJob | _Revision | t.JobError | str:
        """The new job, the job it supersedes, its refusal, or the id of the job that answers
        it instead."""
        assert spec.id is not None, "the model needs explicit job ids"
        invalid = _new_job_error(spec)
        if invalid is not None:
            return invalid
        at = _available_at(spec, now)
        if isinstance(at, t.InvalidJob):
            return at
        deadline = _deadline(spec, now, at)
        if isinstance(deadline, t.InvalidJob):
            return deadline
        if spec.group is not None and " " in spec.group:
            return t.InvalidJob(
                "group must not contain whitespace, control or format characters (U+0020)"
            )
        deps = _dependency_ids(spec)
        twice = _listed_twice(deps)
        if twice is not None:
            return twice
        holder = self._holder(spec, now, {} if taken is None else taken)
        if holder is not None:
            return holder
        if spec.id in batch:
            return spec.id if skip else t.DuplicateJob(spec.id)
        stored = self.jobs.get(spec.id)
        if stored is not None:
            checked = self._supersede_check(stored, spec)
            return spec.id if skip and isinstance(checked, t.DuplicateJob) else checked
        resolved: list[str] = []
        pending = self._pending(deps, spec.on_dependency_failure, batch, resolved)
        if not isinstance(pending, int):
            return pending
        return ModelJob(
            id=spec.id,
            queue=spec.queue,
            stage=spec.stage,
            raw_payload=encode(spec.payload),
            input_ref=spec.input_ref,
            input_revision=spec.input_revision,
            dependencies=deps,
            priority=spec.priority,
            seq=0,
            max_attempts=spec.max_attempts,
            inserted_at=now,
            on_dependency_failure=spec.on_dependency_failure,
            pending=pending,
            state=t.Waiting(at),
            deadline=deadline,
            dedup=_dedup_text(spec),
            group=spec.group or None,
            resolved=tuple(resolved),
        )

    @one_call
    def enqueue_many(
        self,
        specs: Sequence[NewJob],
        now: int,
        ids_only: bool = False,
        on_duplicate: str = "refuse",
        taken: dict[str, str] | None = None,
    ) -> t.BatchResult:
        """Bulk enqueue, all or nothing; a job may depend on an earlier job of the batch. A job
        answered by another (its dedup key held; its id a duplicate, skipping them) is not
        written: that job stands at its place. ``taken``: the dedup keys the call took so far."""
        if not specs:
            return t.BatchRefused(0, t.InvalidJob("a batch must hold at least one job"))
        batch: dict[str, ModelJob] = {}
        taken = {} if taken is None else taken
        answers: list[str] = []
        held: list[int] = []
        # the rewrites of stored jobs, in the batch's order: a debounce (the held job and the
        # spec) and a supersede of one job apply one after the other as the batch lists them
        rewrites: list[_Revision | tuple[str, NewJob]] = []
        for index, spec in enumerate(specs):
            checked = self._check_new(spec, now, batch, taken, on_duplicate == "skip")
            if isinstance(checked, str):
                held.append(index)
                if self._debounces(spec, now, taken) == checked:
                    rewrites.append((checked, spec))
            elif isinstance(checked, _Revision):
                rewrites.append(checked)
                batch[checked.job.id] = checked.job
            elif not isinstance(checked, ModelJob):
                return t.BatchRefused(index, checked)
            else:
                batch[checked.id] = checked
            answers.append(checked if isinstance(checked, str) else self._id_of(checked))
            if spec.dedup is not None and spec.dedup.key is not None:
                taken[spec.dedup.key] = answers[-1]
        self._apply_batch(batch, specs, now, held, rewrites)
        ids = tuple(answers)
        if ids_only:
            return t.BatchApplied((), ids, tuple(held))
        return t.BatchApplied(tuple(self.jobs[i].to_job() for i in answers), ids, tuple(held))

    def _apply_batch(
        self,
        batch: dict[str, ModelJob],
        specs: Sequence[NewJob],
        now: int,
        held: list[int],
        rewrites: list[_Revision | tuple[str, NewJob]],
    ) -> None:
        """A checked batch's supersedes and debounces in its order, then its new jobs (neither
        those held nor revised)."""
        for rewrite in rewrites:
            if isinstance(rewrite, tuple):
                job_id, debounce = rewrite
                self._debounce(self.jobs[job_id], debounce, now)
                continue
            job, spec = rewrite.job, rewrite.spec
            job.input_ref = spec.input_ref
            self._revise(job, encode(spec.payload), spec.input_revision, now)
        revised = {r.job.id for r in rewrites if isinstance(r, _Revision)}
        written = [s for i, s in enumerate(specs) if i not in held and s.id not in revised]
        self._write_batch(batch, written, now, revised)

    @staticmethod
    def _id_of(checked: ModelJob | _Revision) -> str:
        return checked.job.id if isinstance(checked, _Revision) else checked.id

    def _debounces(self, spec: NewJob, now: int, taken: dict[str, str]) -> str | None:
        """The job a debounce rewrites: the one holding its key before this call."""
        if not isinstance(spec.dedup, Debounce) or spec.dedup.key in taken:
            return None
        return self._holder(spec, now, taken)

    def _write_batch(
        self, batch: dict[str, ModelJob], specs: Sequence[NewJob], now: int, revised: set[str]
    ) -> None:
        """The new jobs of a batch (``specs``: their specs) go in, in order, each taking its
        dedup key; those of ``revised`` were superseded in place (and take no key)."""
        for job in batch.values():
            if job.id in revised:
                continue
            self.seq += 1
            job.seq = self.seq
            job.dependency_seqs = tuple(self.jobs[d].seq for d in job.dependencies)
            self.jobs[job.id] = job
            self.known_queues.add(job.queue)
            self._place(job, now)
        for spec in specs:
            key = None if spec.dedup is None else spec.dedup.key
            if key is not None and spec.id is not None:
                self.keys[key] = spec.id

    def _debounce(self, job: ModelJob, spec: NewJob, now: int) -> None:
        """A debounced enqueue: the waiting job takes the new payload and available time."""
        at = _available_at(spec, now)
        assert isinstance(at, int)
        job.raw_payload = encode(spec.payload)
        job.state = t.Waiting(at)
        self._place(job, now)

    @one_call
    def enqueue(self, spec: NewJob, now: int, taken: dict[str, str] | None = None) -> t.JobResult:
        result = self.enqueue_many([spec], now, taken=taken)
        if isinstance(result, t.BatchApplied):
            return t.JobApplied(result.jobs[0], bool(result.deduplicated))
        return t.JobRefused(result.error)

    @one_call
    def enqueue_each(self, specs: Sequence[NewJob], now: int) -> list[t.JobResult]:
        """Many jobs in one call, each on its own: a refused one does not stop the others (the
        first job of the call with a dedup key holds it for the later ones)."""
        taken: dict[str, str] = {}
        return [self.enqueue(spec, now, taken) for spec in specs]

    # --- claims ---------------------------------------------------------------------------------

    def promote_queue(self, queue: str, now: int) -> int:
        """Due jobs of ``queue`` enter the claim index; returns how many."""
        moved = 0
        for job in self.jobs.values():
            if job.queue != queue or job.in_ready or not job.waiting or job.pending > 0:
                continue
            if job.available_at <= now:
                job.in_ready = True
                self._made_ready(job)
                moved += 1
        return moved

    @one_call
    def promote(self, now: int) -> int:
        """Every queue's due jobs enter the claim index (the promote script, unbounded)."""
        return sum(self.promote_queue(queue, now) for queue in self.queues())

    def due_leases(self, now: int) -> dict[str, list[str]]:
        """Per queue, the leases that ran out at ``now``, in the lease index's order."""
        out: dict[str, list[str]] = {}
        due = [j for j in self.jobs.values() if isinstance(j.state, t.Leased)]
        for job in sorted(due, key=lambda j: (j.expires_at, j.id.encode())):
            if job.expires_at <= now:
                out.setdefault(job.queue, []).append(job.id)
        return out

    def expire_lease(self, job_id: str, now: int) -> None:
        """The expiry edge, for a lease known to have run out."""
        job = self.jobs[job_id]
        assert isinstance(job.state, t.Leased) and job.expires_at <= now
        self._retry_or_fail(job, LEASE_EXPIRED_KIND, LEASE_EXPIRED_REASON, now, 0)

    def next_due(self, queue: str, now: int) -> int | None:
        """When the next not-yet-due job of the queue, or its next lease, comes due."""
        times = [
            j.expires_at if isinstance(j.state, t.Leased) else j.available_at
            for j in self.jobs.values()
            if j.queue == queue
            and (isinstance(j.state, t.Leased) or (j.waiting and j.pending == 0))
        ]
        later = [at for at in times if at > now]
        return min(later) if later else None

    @one_call
    def claim_many(
        self, queue: str, worker_id: str, lease_ms: int, limit: int, now: int
    ) -> t.ClaimsResult:
        """Claim by queue: maintenance of the queue first, then the best ``limit`` jobs, or with
        a flow, the jobs its limits let start and its groups' turns give; one past its deadline
        met on the way is expired instead, and the claim reads on."""
        invalid = _lease_invalid(worker_id, lease_ms)
        if invalid is not None:
            return t.ClaimRefused(invalid)
        self.promote_queue(queue, now)
        for job_id in self.due_leases(now).get(queue, []):
            self.expire_lease(job_id, now)
        flow = self.flows.get(queue)
        grouped = any(j.queue == queue and j.in_ready and j.group for j in self.jobs.values())
        self.claim_path = "plain" if flow is None else ("turns" if grouped else "limits")
        self.held_by = set()
        if flow is not None and grouped:
            return self._claim_flowed(flow, queue, worker_id, lease_ms, limit, now)
        charge: tuple[int, int] | None = None
        if flow is not None:
            limit, held, charge = self._flow_room(flow, queue, limit, now)
            if limit < 1:
                return t.ClaimRefused(t.NothingClaimable(self.flow_next(flow, queue, held, now)))
        taken = self._best_first(queue, limit, now)
        if not taken:
            return t.ClaimRefused(t.NothingClaimable(self.next_due(queue, now)))
        # docs/lifecycle.md: a claim by queue never offers a job that a claim by id would refuse.
        assert all(self.claim_error(j, worker_id, lease_ms, now) is None for j in taken)
        if flow is not None and charge is not None:
            tat, interval = charge
            flow.tat = tat + len(taken) * interval
        return t.ClaimsApplied(tuple(self._lease(j, worker_id, lease_ms, now) for j in taken))

    def _best_first(self, queue: str, limit: int, now: int) -> list[ModelJob]:
        """The best ``limit`` claimable jobs, as ready orders them (a grouped job after those
        without a group); one past its deadline is expired instead, and the pick reads on."""
        ready = [j for j in self.jobs.values() if j.queue == queue and self.claimable(j, now)]
        ready.sort(key=lambda j: (j.group is not None, j.priority, j.available_at, j.seq))
        taken: list[ModelJob] = []
        for job in ready:
            if len(taken) >= limit:
                break
            if job.past_deadline(now):
                self.expire_unstarted(job, now)
            else:
                taken.append(job)
        return taken

    def _capped(self, flow: ModelFlow, queue: str, limit: int) -> int:
        """A claim's size cut to the room the queue's cap leaves."""
        if flow.cap:
            limit = min(limit, int(flow.cap) - self.leased_count(queue))
            if limit < 1:
                self.held_by.add("cap")
        return limit

    def _flow_room(
        self, flow: ModelFlow, queue: str, limit: int, now: int
    ) -> tuple[int, int | None, tuple[int, int] | None]:
        """lua/claim.lua's flow_room, for a flowed queue with no grouped job ready: the claim's
        size cut to the room its cap and its rate (or a hold) leave; when the rate holds it, the
        time it lets a job start (µs); and the arrival time and interval that charge the rate."""
        now_us = now * 1000
        limit = self._capped(flow, queue, limit)
        if flow.hold * 1000 > now_us:
            self.held_by.add("rate")
            return 0, flow.hold * 1000, None
        rate = rate_of(flow.rate)
        if rate is None:
            return limit, None, None
        tat = max(flow.tat or 0, now_us)
        at = tat - rate[1]
        if at > now_us:
            self.held_by.add("rate")
            return 0, at, None
        return min(limit, (now_us - at) // rate[0] + 1), None, (tat, rate[0])

    def flow_next(self, flow: ModelFlow, queue: str, held: int | None, now: int) -> int | None:
        """When a flowed claim that leased nothing should come back: the soonest of the queue's
        rate (``held``, µs), the first group waiting, and ``next_due``."""
        times = [self.next_due(queue, now), *flow.gwait.values()]
        if held is not None:
            times.append(math.ceil(held / 1000))
        known = [x for x in times if x is not None]
        return min(known) if known else None

    def _claim_flowed(
        self, flow: ModelFlow, queue: str, worker_id: str, lease_ms: int, limit: int, now: int
    ) -> t.ClaimsResult:
        """lua/claim.lua's claim_flowed: the queue's cap and rate, then turn by turn the group
        at the head of the turns, or the queue's jobs without a group when their turn comes
        first."""
        now_us = now * 1000
        limit = self._capped(flow, queue, limit)
        rate = rate_of(flow.rate)
        tolerance = rate[1] if rate else 0
        tat = flow.tat or 0
        turn, uturn = flow.turn, flow.uturn or 0
        self._turns_open(flow, queue, now)
        claims: list[t.Claim] = []
        budget, held = REPAIR_MAX, None
        while len(claims) < limit and budget > 0:
            at = max(max(tat, now_us) - tolerance, flow.hold * 1000)  # (its rate, or a hold)
            if at > now_us:
                held = at
                self.held_by.add("rate")
                break
            head = flow.head()
            own = self.ready_jobs(queue, None)
            leased: ModelJob | None = None
            if own and (head is None or uturn <= head[1]):
                leased, turn = self._own_turn(own[0], now, turn)
                uturn = turn if leased else uturn
            elif head is None:
                break
            else:
                leased, turn = self._group_turn(flow, queue, head[0], now, turn)
            if leased is None:
                budget -= 1
                continue
            assert self.claim_error(leased, worker_id, lease_ms, now) is None
            claims.append(self._lease(leased, worker_id, lease_ms, now))
            if rate is not None:
                tat = max(tat, now_us) + rate[0]
        if claims:
            flow.turn, flow.uturn = turn, uturn
            if rate is not None:
                flow.tat = tat
            return t.ClaimsApplied(tuple(claims))
        return t.ClaimRefused(t.NothingClaimable(self.flow_next(flow, queue, held, now)))

    def _turns_open(self, flow: ModelFlow, queue: str, now: int) -> None:
        """Groups whose wait is over take turns again, at the current turn; so do those that
        got ready jobs in this call (lua/claim.lua: before the turns, not at the call's end)."""
        back = sorted(flow.gwait, key=lambda g: (flow.gwait[g], g.encode()))
        for group in [g for g in back if flow.gwait[g] <= now][:MAINTENANCE]:
            del flow.gwait[group]
            flow.groups.setdefault(group, flow.turn)
        for group in self._touched.pop(queue, set()):
            flow.join(group)

    def _own_turn(self, job: ModelJob, now: int, turn: int) -> tuple[ModelJob | None, int]:
        """The turn of the queue's jobs without a group: its best job, unless it expired."""
        if job.past_deadline(now):
            self.expire_unstarted(job, now)
            return None, turn
        return job, turn + 1

    def _group_turn(
        self, flow: ModelFlow, queue: str, group: str, now: int, turn: int
    ) -> tuple[ModelJob | None, int]:
        """lua/claim.lua's group_turn: the job the group's turn leases (None: its cap or its
        rate holds it, it has no ready job left, or its best one expired), and the turn."""
        now_us = now * 1000
        mine = self.ready_jobs(queue, group)
        group_rate, cap = flow.group_limits(group)
        grate = rate_of(group_rate)
        gtat = max(flow.gtat.get(group, 0) if grate else 0, now_us)
        held = flow.ghold.get(group, 0) * 1000 if flow.holds else 0
        at = max(gtat - (grate[1] if grate else 0), held)  # (its rate, or a hold)
        if cap is not None and self.group_active(queue, group) >= cap:
            del flow.groups[group]
            flow.gfull.add(group)
            self.held_by.add("gcap")
        elif at > now_us:
            del flow.groups[group]
            flow.gwait[group] = math.ceil(at / 1000)
            self.held_by.add("grate")
        elif not mine:
            del flow.groups[group]
        elif mine[0].past_deadline(now):
            self.expire_unstarted(mine[0], now)
        else:
            if grate is not None:
                flow.gtat[group] = gtat + grate[0]
            if len(mine) == 1:
                del flow.groups[group]
            else:
                turn += 1
                flow.groups[group] = turn
            return mine[0], turn
        return None, turn

    def claim(self, queue: str, worker_id: str, lease_ms: int, now: int) -> t.ClaimResult:
        result = self.claim_many(queue, worker_id, lease_ms, 1, now)
        if isinstance(result, t.ClaimsApplied):
            return t.ClaimApplied(result.claims[0])
        return result

    def claim_error(
        self, job: ModelJob, worker_id: str, lease_ms: int, now: int
    ) -> t.JobError | None:
        """A claim by id's checks, then the dependencies while the job is blocked."""
        state = job.state
        if isinstance(state, TERMINAL_STATES):
            return t.TerminalJob()
        if isinstance(state, t.Leased):
            if now < state.expires_at:
                return t.LeaseHeld(state.expires_at)
            available_at = now
        else:
            available_at = state.available_at
        return (
            _lease_invalid(worker_id, lease_ms)
            or (t.NotAvailable(available_at) if now < available_at else None)
            or (t.DeadlinePassed(job.deadline or 0) if job.past_deadline(now) else None)
            or (t.AttemptLimitReached() if job.attempt >= job.max_attempts else None)
            or (self.dependency_error(job) if job.pending > 0 else None)
        )

    @one_call
    def claim_job(self, job_id: str, worker_id: str, lease_ms: int, now: int) -> t.ClaimResult:
        job = self.jobs.get(job_id)
        if job is None:
            return t.ClaimRefused(t.MissingJob(job_id))
        error = self.claim_error(job, worker_id, lease_ms, now)
        if error is not None:
            return t.ClaimRefused(error)
        return t.ClaimApplied(self._lease(job, worker_id, lease_ms, now))

    # --- the lease holder's calls ---------------------------------------------------------------

    def _leased(
        self, token: t.LeaseToken, worker_id: str, now: int
    ) -> tuple[ModelJob | None, t.JobError | None]:
        job = self.jobs.get(token.job_id)
        if job is None:
            return None, t.MissingJob(token.job_id)
        return job, self.lease_error(job, token, worker_id, now)

    @one_call
    def complete(
        self, token: t.LeaseToken, worker_id: str, output_ref: str, result: Any, now: int
    ) -> t.JobResult:
        job, error = self._leased(token, worker_id, now)
        if error is None and output_ref == "":
            error = t.InvalidJob("output_ref must not be empty")
        if error is not None or job is None:
            return t.JobRefused(error or t.StaleLease())
        job.state = t.Succeeded(output_ref, now)
        job.raw_result = None if result is None else encode(result)
        for dependent in self.dependents(job):
            self._release(dependent, job, now)
        return t.JobApplied(job.to_job())

    @one_call
    def fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        delay: int,
        kind: str,
        now: int,
        trace: str = "",
    ) -> t.JobResult:
        job, error = self._leased(token, worker_id, now)
        if error is None and delay < 0:
            error = t.InvalidJob("retry_delay must be nonnegative")
        if error is not None or job is None:
            return t.JobRefused(error or t.StaleLease())
        self._retry_or_fail(job, kind, reason, now, delay, trace)
        return t.JobApplied(job.to_job())

    @one_call
    def permanent_fail(
        self, token: t.LeaseToken, worker_id: str, reason: str, kind: str, now: int, trace: str = ""
    ) -> t.JobResult:
        job, error = self._leased(token, worker_id, now)
        if error is None and reason == "":
            error = t.InvalidJob("reason must not be empty")
        if error is not None or job is None:
            return t.JobRefused(error or t.StaleLease())
        self._fail(job, kind, reason, now, trace)
        return t.JobApplied(job.to_job())

    @one_call
    def heartbeat(
        self, token: t.LeaseToken, worker_id: str, lease_ms: int, now: int
    ) -> t.ClaimResult:
        job, error = self._leased(token, worker_id, now)
        if error is None and lease_ms < 1:
            error = t.InvalidJob("lease_duration must be positive")
        if error is not None or job is None:
            return t.ClaimRefused(error or t.StaleLease())
        assert isinstance(job.state, t.Leased)
        job.state = replace(job.state, expires_at=now + lease_ms)
        return t.ClaimApplied(t.Claim(job.to_job(), job.token()))

    @one_call
    def report_progress(self, token: t.LeaseToken, worker_id: str, now: int) -> t.JobResult:
        """A running job's progress (lua/report_progress.lua): the lease check, where a token
        whose expiry a heartbeat has moved on since still holds; the job never changes (its
        progress fields are none of the model's)."""
        job = self.jobs.get(token.job_id)
        if job is None:
            return t.JobRefused(t.MissingJob(token.job_id))
        if isinstance(job.state, t.Leased):
            token = replace(token, expires_at=job.state.expires_at)
        error = self.lease_error(job, token, worker_id, now)
        if error is not None:
            return t.JobRefused(error)
        return t.JobApplied(job.to_job())

    @one_call
    def release(
        self, token: t.LeaseToken, worker_id: str, delay: int, now: int, hold: int | None = None
    ) -> t.JobResult:
        """Hand the job back: Waiting(now + delay), without using an attempt; the fence stays.
        A hold keeps every job of its group (its queue's without a group, for a job without
        one) from starting for ``hold`` ms."""
        job, error = self._leased(token, worker_id, now)
        if error is None and delay < 0:
            error = t.InvalidJob("delay must be nonnegative")
        if error is None and hold is not None and hold < 1:
            error = t.InvalidJob("hold must be positive")
        if error is not None or job is None:
            return t.JobRefused(error or t.StaleLease())
        job.state = t.Waiting(now + delay)
        job.attempt -= 1
        self._place(job, now)
        if hold is not None:
            self.hold(job.queue, job.group, now, hold)
        return t.JobApplied(job.to_job())

    def hold(self, queue: str, group: str | None, now: int, ms: int) -> None:
        """lua/include/flow_control.lua's hold: no job of the group (of the queue, for a job
        without one) starts before now + ``ms``; a group taking turns waits meanwhile."""
        flow = self.flows.setdefault(queue, ModelFlow())
        till = now + ms
        if group is None:
            flow.hold = max(flow.hold, till)
            return
        before = flow.ghold.get(group, 0)
        flow.ghold[group] = max(before, till)
        flow.holds = True
        if flow.groups.pop(group, None) is not None:
            flow.gwait[group] = max(till, before)

    @staticmethod
    def _count_if_capped(flow: ModelFlow, group: str | None, values: dict[str, str]) -> None:
        """A group cap set: its queue's group leases are counted from then on."""
        cap = values.get("cap") if group is not None else values.get("gcap")
        if cap not in (None, "", "none"):
            flow.counts = True

    @one_call
    def set_limits(
        self, queue: str, group: str | None, values: dict[str, str], declare: bool = False
    ) -> str | None:
        """lua/set_limits.lua with values already checked (the client checks their form): the
        refusal's reason, or None when set."""
        if group is not None and " " in group:
            return "group must not contain whitespace, control or format characters (U+0020)"
        if not values:
            return "give at least one limit"
        if queue not in self.known_queues:
            if not declare:
                return f"unknown queue '{queue}': nothing was ever enqueued to it"
            self.known_queues.add(queue)
        flow = self.flows.setdefault(queue, ModelFlow())
        self._count_if_capped(flow, group, values)
        if group is not None:
            self._set_group_limits(flow, group, values)
            return None
        for name, value in values.items():
            setattr(flow, name, value)
        if "rate" in values:
            flow.tat = None
        if "grate" in values or "gcap" in values:
            for held in [*flow.gwait, *flow.gfull]:
                flow.groups.setdefault(held, flow.turn)
            flow.gwait.clear()
            flow.gfull.clear()
        return None

    @one_call
    def report(
        self, worker_id: str, outcomes: Sequence[t.Outcome], now: int
    ) -> list[t.OutcomeResult]:
        """Many outcomes in one call, each applied or refused on its own, in order."""
        return [self._report_one(worker_id, outcome, now) for outcome in outcomes]

    def _report_one(self, worker_id: str, outcome: t.Outcome, now: int) -> t.OutcomeResult:
        result: t.JobResult
        match outcome:
            case t.Complete(token, value, output_ref):
                result = self.complete(token, worker_id, output_ref, value, now)
            case t.Fail(token, reason, delay, kind, trace):
                result = self.fail(token, worker_id, reason, delay, kind, now, trace)
            case t.PermanentFail(token, reason, kind, trace):
                result = self.permanent_fail(token, worker_id, reason, kind, now, trace)
            case t.Release(token, delay, hold):
                result = self.release(token, worker_id, delay, now, hold)
        if isinstance(result, t.JobRefused):
            return result
        return t.OutcomeApplied(result.job.id, type(result.job.state).__name__)

    @staticmethod
    def _set_group_limits(flow: ModelFlow, group: str, values: dict[str, str]) -> None:
        rate, cap = flow.glimits.get(group, ("", ""))
        if "rate" in values:
            rate = values["rate"]
            flow.gtat.pop(group, None)
        cap = values.get("cap", cap)
        if rate == "" and cap == "":
            flow.glimits.pop(group, None)
        else:
            flow.glimits[group] = (rate, cap)
        if flow.gwait.pop(group, None) is not None or group in flow.gfull:
            flow.gfull.discard(group)
            flow.groups.setdefault(group, flow.turn)

    # --- fenced calls ---------------------------------------------------------------------------

    def _fenced(self, job_id: str, fence: int | None) -> ModelJob | t.JobError:
        job = self.jobs.get(job_id)
        if job is None:
            return t.MissingJob(job_id)
        if fence is not None and fence != job.fence:
            return t.FenceChanged()
        return job

    @one_call
    def expire(self, job_id: str, expected_fence: int, now: int) -> t.JobResult:
        """The expiry edge (``expire``)."""
        job = self._fenced(job_id, expected_fence)
        if not isinstance(job, ModelJob):
            return t.JobRefused(job)
        state = job.state
        if isinstance(state, WAITING_STATES):
            return t.JobRefused(t.StaleLease())
        if isinstance(state, TERMINAL_STATES):
            return t.JobRefused(t.TerminalJob())
        if now < state.expires_at:
            return t.JobRefused(t.LeaseHeld(state.expires_at))
        self.expire_lease(job_id, now)
        return t.JobApplied(job.to_job())

    @one_call
    def cancel(
        self, job_id: str, expected_fence: int | None, reason: str, now: int
    ) -> t.CancelResult:
        """The cancel edge; dependents can never run and are cancelled too."""
        job = self._fenced(job_id, expected_fence)
        if not isinstance(job, ModelJob):
            return t.JobRefused(job)
        if job.terminal:
            return t.JobRefused(t.TerminalJob())
        cascade = self._cascade(job, policy_only=None)
        job.state = t.Cancelled(reason, now)
        job.in_ready = False
        self.reason_choices.pop(job.id, None)
        self._apply_cascade(cascade, now)
        return t.CancelApplied(job.to_job(), tuple(sorted(j.id for j in cascade.jobs)))

    @one_call
    def retry(self, job_id: str, expected_fence: int | None, reason: str, now: int) -> t.JobResult:
        """The operator retry edge."""
        job = self._fenced(job_id, expected_fence)
        if not isinstance(job, ModelJob):
            return t.JobRefused(job)
        if not isinstance(job.state, t.Failed):
            return t.JobRefused(t.NotFailed())
        job.state = t.RetryWaiting(job.state.reason, now)  # (the last error stays the job's)
        job.max_attempts += 1
        self._place(job, now)
        return t.JobApplied(job.to_job())

    @one_call
    def change(
        self, job_id: str, expected_fence: int | None, what: JobChange, now: int
    ) -> t.JobResult:
        """The change edge: a waiting job's input, priority or time, in the order of
        docs/lifecycle.md."""
        job = self._fenced(job_id, expected_fence)
        if not isinstance(job, ModelJob):
            return t.JobRefused(job)
        if job.terminal:
            return t.JobRefused(t.TerminalJob())
        if isinstance(job.state, t.Leased):
            return t.JobRefused(t.LeaseHeld(job.state.expires_at))
        at = _new_time(job, what, now)
        error = at if isinstance(at, t.InvalidJob) else _change_error(job, what)
        if error is not None:
            return t.JobRefused(error)
        if what.payload is not KEEP:
            revision = job.input_revision + 1
            if what.input_revision is not None:
                revision = what.input_revision
            # (one rewrite with the time below: a group joins the turns only if the job ends
            # the call ready, as lua/include/revise.lua writes it)
            self._revise(job, encode(what.payload), revision, now, place=False)
        if what.priority is not None:
            job.priority = what.priority
        if isinstance(job.state, t.Waiting) and isinstance(at, int):
            job.state = t.Waiting(at)
        elif isinstance(job.state, t.RetryWaiting) and isinstance(at, int):
            job.state = t.RetryWaiting(job.state.reason, at)
        self._place(job, now)
        return t.JobApplied(job.to_job())

    # --- retention -----------------------------------------------------------------------------

    def needed(self, job: ModelJob) -> bool:
        """docs/lifecycle.md: a finished job that a blocked job still depends on is never pruned."""
        return bool(self.blocked_dependents(job))

    def prune_candidates(
        self, max_age: int | None, max_count: int | None, now: int
    ) -> list[ModelJob]:
        """Finished jobs beyond ``max_count`` per queue and state (oldest first) or older than
        ``max_age``, needed or not."""
        out: list[ModelJob] = []
        for queue in self.queues():
            for state in TERMINAL_STATES:
                finished = [j for j in self.jobs.values() if j.queue == queue]
                finished = [j for j in finished if isinstance(j.state, state)]
                finished.sort(key=lambda j: (j.finished_at(), j.id.encode()))
                over = 0 if max_count is None else max(0, len(finished) - max_count)
                out += finished[:over]
                if max_age is not None:
                    out += [j for j in finished[over:] if (j.finished_at() or 0) < now - max_age]
        return out

    @one_call
    def prune(self, max_age: int | None, max_count: int | None, now: int) -> int:
        """Delete the candidates no blocked job needs; returns how many (no limit reached)."""
        window = now - RESEND_WINDOW_MS  # never a job finished within the re-send window
        victims = [
            j
            for j in self.prune_candidates(max_age, max_count, now)
            if (j.finished_at() or 0) < window and not self.needed(j)
        ]
        for job in victims:
            del self.jobs[job.id]
            self.reason_choices.pop(job.id, None)
        gone = {job.id for job in victims}
        self.keys = {k: i for k, i in self.keys.items() if i not in gone}
        return len(victims)

    # --- inspection -----------------------------------------------------------------------------

    def queues(self) -> list[str]:
        return sorted({j.queue for j in self.jobs.values()})

    def waiting_on(self, job: ModelJob) -> str | None:
        """The first dependency of a blocked waiting job that has not succeeded."""
        if not isinstance(job.state, t.Waiting) or job.pending == 0:
            return None
        run = job.on_dependency_failure == "run"
        for dep in job.dependencies:
            other = self.jobs.get(dep)
            if other is None or not (
                isinstance(other.state, t.Succeeded) or (run and other.terminal)
            ):
                return dep
        return None

    def get(self, job_id: str, now: int) -> t.JobInfo | None:
        job = self.jobs.get(job_id)
        if job is None:
            return None
        return t.JobInfo(job.to_job(), now, self.waiting_on(job), job.errors)

    @staticmethod
    def _by_score(jobs: list[ModelJob]) -> list[ModelJob]:
        """Jobs as the status indexes order them: by their time, ties by id."""

        def score(job: ModelJob) -> tuple[int, bytes]:
            match job.state:
                case t.Waiting(at) | t.RetryWaiting(_, at) | t.Leased(_, _, at):
                    return at, job.id.encode()
            return job.finished_at() or 0, job.id.encode()

        return sorted(jobs, key=score)

    def _waiting_pages(self, queue: str, status: str, now: int) -> list[ModelJob]:
        """Available: the claimable in claim order, then the due ones not yet promoted;
        Scheduled: the not yet due ones (blocked jobs are in neither)."""
        waiting = [j for j in self.jobs.values() if j.queue == queue]
        unblocked = [j for j in waiting if j.waiting and j.pending == 0]
        if status == "available":
            ready = sorted(
                (j for j in unblocked if j.in_ready),
                key=lambda j: (j.group is not None, j.priority, j.available_at, j.seq),
            )
            due = [j for j in unblocked if not j.in_ready and j.available_at <= now]
            return ready + self._by_score(due)
        later = [j for j in unblocked if isinstance(j.state, t.Waiting)]
        return self._by_score([j for j in later if j.available_at > now])

    def list_jobs(self, queue: str, status: str, offset: int, limit: int, now: int) -> list[t.Job]:
        """A page of a queue's jobs in one status (or "blocked"), as the list script orders it."""
        if status in ("available", "scheduled"):
            jobs = self._waiting_pages(queue, status, now)
        else:
            mine = [j for j in self.jobs.values() if j.queue == queue]
            if status == "blocked":
                mine = [j for j in mine if j.waiting and j.pending > 0]
            else:
                mine = [j for j in mine if j.to_job().status(now).value == status]
            jobs = self._by_score(mine)
        return [j.to_job() for j in jobs[offset : offset + limit]]

    def counts(self, queue: str, now: int) -> t.QueueCounts:
        jobs = [j for j in self.jobs.values() if j.queue == queue]

        def count(kind: type[Any]) -> int:
            return sum(1 for j in jobs if isinstance(j.state, kind))

        waiting = [j for j in jobs if j.waiting and j.pending == 0]
        later = [j for j in waiting if j.available_at > now]
        return t.QueueCounts(
            now=now,
            available=sum(1 for j in waiting if j.available_at <= now),
            scheduled=sum(1 for j in later if isinstance(j.state, t.Waiting)),
            retryable=sum(1 for j in later if isinstance(j.state, t.RetryWaiting)),
            executing=count(t.Leased),
            completed=count(t.Succeeded),
            discarded=count(t.Failed),
            cancelled=count(t.Cancelled),
            blocked=sum(1 for j in jobs if j.waiting and j.pending > 0),
            expired=count(t.Expired),
        )
