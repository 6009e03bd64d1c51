"""A job the worker holds: what its task can see (``current_job()``) and its phase.

A held job is in exactly one phase (``JobPhase``); ``PHASE_CHANGES`` lists every change allowed,
and ``HeldJob.move_to`` refuses any other (``PhaseError``: a bug in the worker). Its lease, kept by
the lease keeper's thread, has a state of its own (``LeaseState``, in ``_lease``).
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import _types as t
from .._hooks import WorkerContext, serving
from .._progress import progress_args
from ._lease import Lease, PhaseError
from ._progress import ProgressBox

if TYPE_CHECKING:
    from ._outcomes import Outcome


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
    worker: WorkerContext | None = None  # the worker that runs it (``current_worker()``)
    progress_box: ProgressBox = field(default_factory=ProgressBox, repr=False, compare=False)

    @property
    def attempt(self) -> int:
        return self.job.attempt

    def progress(self, value: float, message: str | None = None, *, flush: bool = False) -> None:
        """Report how far the job is: ``value`` a finite int or float, ``message`` None or at
        most 200 characters (InvalidArgument otherwise, nothing kept). No IO: the job's next
        heartbeat takes it to Redis if it changed since the last one sent (docs/workflows.md,
        "Progress"). ``flush=True`` sends it at once: from a plain function, waiting for Redis;
        from a coroutine (on the worker's event loop) or in a task process, without waiting
        (``aflush_progress`` waits)."""
        self.progress_box.put(progress_args(value, message))
        if flush:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self.progress_box.flush(wait=True)
            else:
                self.progress_box.flush(wait=False)

    async def aflush_progress(self) -> None:
        """Send the last report now, waiting for Redis without blocking the event loop (and
        for a heartbeat on its way with it: the lease keeper sends one after the other)."""
        await asyncio.get_running_loop().run_in_executor(None, self.progress_box.flush)

    def __reduce__(self) -> tuple[type[JobContext], tuple[t.Job, str]]:
        # Sent to a task's process (``Worker(processes=N)``) as the job and the worker id alone:
        # the worker's context, the flag and the progress live in the worker's process.
        return (JobContext, (self.job, self.worker_id))


current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("quasar_job")


def current_job() -> JobContext:
    """The job the calling task runs for (LookupError outside a job).

    A plain-function task should check ``current_job().cancelled.is_set()`` now and then: it is
    set when the job's lease was lost, its timeout passed, or the worker hands it back.
    """
    return current.get()


def current_worker() -> WorkerContext:
    """The worker that runs the calling task, or whose hook is running (LookupError elsewhere):
    its ``state`` holds what its startup hooks opened (docs/hooks.md)."""
    job = current.get(None)
    if job is not None and job.worker is not None:
        return job.worker
    return serving.get()


class JobPhase(enum.Enum):
    """Where a job the worker holds is, from its claim until the worker lets it go."""

    QUEUED = "queued"  # claimed, waiting for a slot (prefetched)
    STARTING = "starting"  # its task is made (a slot taken) but has not begun
    RUNNING = "running"  # its task runs it
    HANDING_BACK = "handing back"  # a stop told its run to end: the outcome is a hand-back
    LOST = "lost"  # its lease was lost while it ran: the run is told to end, nothing is reported
    REPORTING = "reporting"  # its outcome is on its way (with a claim, or by the lease keeper)
    DONE = "done"  # let go: its outcome's result is back, or it has nothing to report

    # Hashed by identity (Enum's own hash calls Python code): one look-up per change of every job.
    __hash__ = object.__hash__


# The members by name: a member read off its class costs a Python call (Enum's), these do not.
QUEUED = JobPhase.QUEUED
STARTING = JobPhase.STARTING
RUNNING = JobPhase.RUNNING
HANDING_BACK = JobPhase.HANDING_BACK
LOST = JobPhase.LOST
REPORTING = JobPhase.REPORTING
DONE = JobPhase.DONE
#: Every phase change allowed; ``HeldJob.move_to`` refuses the rest.
PHASE_CHANGES: dict[JobPhase, frozenset[JobPhase]] = {
    # a slot frees / a stop or a wait too long hands it back / its lease is lost: it never runs
    QUEUED: frozenset({STARTING, REPORTING, DONE}),
    # its task begins / a stop hands it back / its lease is lost: the task is cancelled unbegun
    STARTING: frozenset({RUNNING, REPORTING, DONE}),
    # a stop past its grace / its lease is lost / its run ends with an outcome, or with none
    # (the lease keeper found the lease lost first, or the task cancelled itself)
    RUNNING: frozenset({HANDING_BACK, LOST, REPORTING, DONE}),
    HANDING_BACK: frozenset({LOST, REPORTING, DONE}),
    LOST: frozenset({DONE}),  # its run has ended
    REPORTING: frozenset({DONE}),  # the outcome's result is back
    DONE: frozenset(),
}
#: Phases in which its task runs it (begun, not ended).
RUNS = frozenset({RUNNING, HANDING_BACK, LOST})


class HeldJob(Lease):
    """A job this worker holds: its lease (kept by the lease keeper), its phase and its run."""

    __slots__ = ("ctx", "duration", "outcome", "phase", "started", "task")

    def __init__(
        self,
        claim: t.Claim,
        lease_ms: int,
        on_lost: Callable[[Lease, t.JobError], None],
        ctx: JobContext,
        started: float,
    ) -> None:
        super().__init__(claim, lease_ms, on_lost)
        self.phase = QUEUED
        self.ctx = ctx
        self.started = started  # its claim, then the start of its run
        self.task: asyncio.Task[None] | None = None  # made as it leaves QUEUED for a slot
        self.outcome: Outcome | None = None  # handed to the reporter
        self.duration = 0.0  # from its start (its claim, unless prefetched) to the outcome

    def progress(self) -> ProgressBox:
        return self.ctx.progress_box

    def move_to(self, phase: JobPhase) -> None:
        """Change to ``phase``; PhaseError if ``PHASE_CHANGES`` does not allow it."""
        if phase not in PHASE_CHANGES[self.phase]:
            raise PhaseError(f"job {self.job_id}: no change from {self.phase} to {phase}")
        self.phase = phase
