"""The job model: states, statuses, jobs and tokens (``_result_types``: refusals and the results
of transitions; ``_types`` gathers both).

A job's ``Status`` (available, scheduled, blocked, executing, retryable, completed, discarded,
cancelled, expired) is what users see: logs, events, the CLI and the docs all speak of
statuses. Inside, a job is in exactly one state (``Waiting`` ... ``Expired``), and its status
is how that state shows at a given time (``status_of``: a waiting job is blocked while a
dependency has not succeeded, else available or scheduled by its ``available_at``).
docs/lifecycle.md writes down every status, state and edge, and each edge's refusals in the
order they are checked.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Literal, TypeAlias, TypeVar

from ._codec import decode

_T = TypeVar("_T")


def builder(cls: type[_T]) -> Callable[..., _T]:
    """A fast constructor of the frozen, slotted dataclass ``cls``: every field, positionally.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, which costs
    several times a plain attribute store. This builds a plain slotted twin of ``cls`` (the same
    slots, in the same order) with an ordinary ``__init__``, then gives the new object the class
    ``cls``, which CPython allows between classes of the same layout. The object is an ordinary
    ``cls`` from then on (frozen, equal to one made by ``cls(...)``). Where that retyping is not
    possible, or ``cls`` checks its fields in ``__post_init__``, this is ``cls`` itself.
    """
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if tuple(names) != getattr(cls, "__slots__", None) or hasattr(cls, "__post_init__"):
        return cls
    params = "".join(f", {n}" for n in names)
    stores = "".join(f"\n        self.{n} = {n}" for n in names) or "\n        pass"
    source = (
        f"class Twin(*bases):\n    __slots__ = {tuple(names)!r}\n"
        f"    def __init__(self{params}):{stores}\n"
        f"def build({params[2:]}):\n    made = Twin({params[2:]})\n    made.__class__ = cls\n"
        "    return made\n"
    )
    bases = getattr(cls, "__orig_bases__", cls.__bases__)  # (a Generic[T] one: its own base)
    space: dict[str, Any] = {"cls": cls, "bases": bases}
    exec(source, space)  # only field names, which are identifiers, go into the source
    build: Callable[..., _T] = space["build"]
    try:
        probe = build(*([None] * len(names)))
    except TypeError:  # not a layout CPython lets us retype (another interpreter, say)
        return cls
    return build if type(probe) is cls else cls


def readable_time(ms: int) -> str:
    """A time in integer milliseconds since the epoch as people read it: ISO 8601, UTC, to the
    millisecond (``2025-01-31T12:00:00.250Z``)."""
    when = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# --- states ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Waiting:
    """Enqueued; claimable from ``available_at`` on, once every dependency has succeeded."""

    available_at: int


@dataclass(frozen=True, slots=True)
class RetryWaiting:
    """Failed an attempt (or was retried by an operator); claimable again from ``available_at``."""

    reason: str
    available_at: int


@dataclass(frozen=True, slots=True)
class Leased:
    """Held by ``worker_id`` under fence ``fencing_version`` until ``expires_at``."""

    worker_id: str
    fencing_version: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class Succeeded:
    """Completed with ``output_ref``."""

    output_ref: str
    completed_at: int


@dataclass(frozen=True, slots=True)
class Failed:
    """Gave up: out of attempts, failed permanently, or its lease expired on the last attempt."""

    reason: str
    failed_at: int


@dataclass(frozen=True, slots=True)
class Cancelled:
    """Cancelled by an operator, or because a dependency was cancelled."""

    reason: str
    cancelled_at: int


@dataclass(frozen=True, slots=True)
class Expired:
    """Not started by its ``deadline``: it never ran, and never will."""

    deadline: int
    expired_at: int


JobState: TypeAlias = Waiting | RetryWaiting | Leased | Succeeded | Failed | Cancelled | Expired


class Status(enum.Enum):
    """How a job's state shows at a given time (``status_of``; grouped as ``TERMINAL_STATUSES``
    and ``ACTIVE_STATUSES``): the one vocabulary of logs, events, the CLI and the docs."""

    AVAILABLE = "available"
    SCHEDULED = "scheduled"
    EXECUTING = "executing"
    COMPLETED = "completed"
    RETRYABLE = "retryable"
    DISCARDED = "discarded"
    CANCELLED = "cancelled"
    BLOCKED = "blocked"  # waiting on a dependency that has not succeeded (yet, or ever)
    EXPIRED = "expired"  # not started by its deadline: never ran


TERMINAL_STATUSES = frozenset(
    {Status.COMPLETED, Status.DISCARDED, Status.CANCELLED, Status.EXPIRED}
)
#: The event stream's events of a queue rather than of a job (no ``job`` field): a pause and a
#: resume that changed the queue. Every other event is the ``Status`` a job enters.
QUEUE_EVENTS = frozenset({"paused", "resumed"})
ACTIVE_STATUSES = frozenset(set(Status) - TERMINAL_STATUSES)


def status_of(state: JobState, now: int, pending_dependencies: int = 0) -> Status:
    """The status a state shows at ``now`` (integer milliseconds), for a job with
    ``pending_dependencies`` not yet succeeded."""
    match state:
        case Waiting(available_at):
            if pending_dependencies:
                return Status.BLOCKED
            return Status.AVAILABLE if available_at <= now else Status.SCHEDULED
        case RetryWaiting(_, available_at):  # (its time come, a claim takes it as any other)
            return Status.AVAILABLE if available_at <= now else Status.RETRYABLE
        case Leased():
            return Status.EXECUTING
        case Succeeded():
            return Status.COMPLETED
        case Failed():
            return Status.DISCARDED
        case Cancelled():
            return Status.CANCELLED
        case Expired():
            return Status.EXPIRED
    raise AssertionError(state)  # pragma: no cover


# --- jobs and tokens -------------------------------------------------------------------------

DependencyPolicy: TypeAlias = Literal["block", "cancel", "run"]


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error of a job: its kind (an exception's class name, ``Timeout``, ``LeaseExpired``
    ...) and its message. In a failure history (``JobInfo.errors``) also its traceback (the
    worker keeps its last 4 KB; empty when there is none), the attempt that failed and when
    (ms, server clock); ``Job.error``, the job's last error, has the kind and message only."""

    kind: str
    message: str
    traceback: str = ""
    attempt: int = 0
    at: int = 0


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored, at the moment of the reply that carried it."""

    id: str
    queue: str
    stage: str
    raw_payload: bytes = field(repr=False)
    input_ref: str
    input_revision: int
    dependencies: tuple[str, ...]
    priority: int
    attempt: int
    max_attempts: int
    fencing_version: int
    state: JobState
    inserted_at: int
    attempted_at: int | None = None
    completed_at: int | None = None
    error: ErrorInfo | None = None
    raw_result: bytes | None = field(default=None, repr=False)
    on_dependency_failure: DependencyPolicy = "block"
    pending_dependencies: int = 0
    #: When it must have started by (ms, server clock), or it expires unstarted; None: no deadline
    deadline: int | None = None
    #: How it was enqueued with a dedup key, ``"<mode> <window ms> <key>"`` (mode: waiting,
    #: running, finished, throttle or debounce; docs/deduplication.md), or None.
    dedup: str | None = None
    #: Its flow group (docs/flow-control.md), or None.
    group: str | None = None
    #: The batch it is a member of (docs/workflows.md, "Batches"), or None.
    batch: str | None = None
    #: The batch it is a callback of (enqueued when that batch ended), or None.
    callback_of: str | None = None

    @property
    def payload(self) -> Any:
        """The payload, decoded from msgpack."""
        return decode(self.raw_payload, "payload of job", self.id)

    @property
    def result(self) -> Any:
        """The result a worker stored on completion, decoded from msgpack (None if none)."""
        if not self.raw_result:
            return None
        return decode(self.raw_result, "result of job", self.id)

    def status(self, now: int) -> Status:
        """The job's status at ``now`` (integer milliseconds, server time)."""
        return status_of(self.state, now, self.pending_dependencies)


@dataclass(frozen=True, slots=True)
class LeaseToken:
    """The capability a claim hands to one worker: every field must match for it to act."""

    job_id: str
    input_revision: int
    worker_id: str
    fencing_version: int
    expires_at: int
    nonce: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Claim:
    job: Job
    token: LeaseToken


@dataclass(frozen=True, slots=True)
class Progress:
    """What a running job last reported of how far it is (``current_job().progress``): its
    ``value``, its ``message`` (None: none), when it reached Redis (``at_ms``, server time) and
    the attempt that reported it (a retried job keeps its last attempt's until it reports)."""

    value: float
    message: str | None
    at_ms: int
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class JobInfo:
    """Inspection of one job: the job, the server time, the dependency it waits on, its last
    failed attempts (at most 5, oldest first) and its last progress (None: none reported)."""

    job: Job
    now: int
    waiting_on: str | None
    errors: tuple[ErrorInfo, ...] = ()
    progress: Progress | None = None

    @property
    def status(self) -> Status:
        return self.job.status(self.now)
