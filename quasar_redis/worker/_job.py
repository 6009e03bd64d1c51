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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .. import _types as t
from .._app_batches import amember_results, member_results, task_app
from .._dependency_calls import DependenciesResult, DependencyResult, results_of
from .._hooks import WorkerContext, serving
from .._progress import progress_args
from ..errors import QuasarError
from ._lease import Lease, PhaseError
from ._progress import ProgressBox

if TYPE_CHECKING:
    from ..app import App
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
    #: Its dependencies' results read before its run (a task in a process of its own), or None.
    read: tuple[DependencyResult, ...] | None = None
    progress_box: ProgressBox = field(default_factory=ProgressBox, repr=False, compare=False)

    @property
    def attempt(self) -> int:
        return self.job.attempt

    def dependency_results(self) -> list[DependencyResult]:
        """How each of the job's dependencies ended, in the order it lists them: status,
        result (decoded with the app's serializer), error kind and message. One read of
        Redis for them all (none for a job without dependencies); from a task in a process of
        its own (``Worker(processes=N)``), read before it started. From async code:
        ``adependency_results``."""
        if self.read is not None or not self.job.dependencies:
            return list(self.read or ())
        app = self._app()
        return _results(app, self.job.id, app.client.dependencies(self.job.id))

    async def adependency_results(self) -> list[DependencyResult]:
        """``dependency_results`` for async tasks."""
        if self.read is not None or not self.job.dependencies:
            return list(self.read or ())
        app = self._app()
        return _results(app, self.job.id, await app.aclient().dependencies(self.job.id))

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

    @property
    def batch_id(self) -> str | None:
        """The batch this job is a callback of (docs/workflows.md, "Batches"), or None."""
        return self.job.callback_of

    def batch_results(self) -> list[DependencyResult]:
        """For a batch's callback: every member's result, in the order they joined, decoded
        with the app's serializer (one call per 1,000 members). LookupError for a job that is
        no callback."""
        app, batch_id = self._batch_app()
        return member_results(app, app.client, batch_id)

    async def abatch_results(self) -> list[DependencyResult]:
        """``batch_results`` on the running event loop's client."""
        app, batch_id = self._batch_app()
        return await amember_results(app, app.aclient(), batch_id)

    def _batch_app(self) -> tuple[App, str]:
        if self.job.callback_of is None:
            raise LookupError(f"job {self.job.id!r} is the callback of no batch")
        app = self.worker.app if self.worker is not None else task_app.get(None)
        if app is None:
            raise LookupError("no app to read the batch with: run the task in a worker")
        return app, self.job.callback_of

    def _app(self) -> App:
        if self.worker is None:
            raise LookupError("the job's dependencies are read by the worker that runs it")
        return self.worker.app

    def __reduce__(self) -> tuple[Callable[..., JobContext], tuple[Any, ...]]:
        # Sent to a task's process (``Worker(processes=N)``) as the job, the worker id and the
        # dependencies read: the worker's context and the flag live in the worker's process.
        return (_in_process, (self.job, self.worker_id, self.read))


def _in_process(
    job: t.Job, worker_id: str, read: tuple[DependencyResult, ...] | None
) -> JobContext:
    return JobContext(job, worker_id, CancelFlag(), None, read)  # (its progress: ``_run``'s)


def _results(app: App, job_id: str, read: DependenciesResult) -> list[DependencyResult]:
    if isinstance(read, t.JobRefused):
        raise QuasarError(f"the dependencies of job {job_id!r} cannot be read: {read.error}")
    return results_of(read, app.result_of)


async def read_before_run(app: App, ctx: JobContext) -> JobContext:
    """``ctx`` with its dependencies' results read (for a task in a process of its own, which
    has no connection to Redis): itself when it has none."""
    if not ctx.job.dependencies or ctx.read is not None:
        return ctx
    read = await app.aclient().dependencies(ctx.job.id)
    found = tuple(_results(app, ctx.job.id, read))
    return replace(ctx, read=found)


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
