"""Calling a job's task: its arguments decoded, its middleware and span around it, its timeout
kept, in a thread, a process or on the event loop; and the outcome its run comes to."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._hooks import Around, chain
from .._tracing import Consuming
from .._workflows import MissingResults, received
from ..app import Task
from ..errors import CorruptDataError
from ..retry import PermanentFailure, Snooze
from . import _outcomes as o
from ._job import HANDING_BACK, LOST, HeldJob, JobContext, read_before_run
from ._processes import ProcessPool

#: A call's positional and keyword arguments.
Call = tuple[list[Any], dict[str, Any]]
#: Outcomes a run's span shows as an error.
_FAILED = frozenset({o.OutcomeKind.FAILED, o.OutcomeKind.FAILED_PERMANENTLY})
#: What a run's span says when the run was cancelled, by the job's phase.
_ENDED = {HANDING_BACK: "handed back", LOST: "lost"}


class Invoker:
    """Runs one job's task and makes its outcome; the runner decides when (``Runner``)."""

    def __init__(
        self,
        *,
        worker_id: str,
        pool: ThreadPoolExecutor,
        processes: ProcessPool | None,
        middleware: tuple[Around, ...],
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.worker_id = worker_id
        self.pool = pool
        self.processes = processes  # plain functions run here when set, else in ``pool``
        self.middleware = middleware  # around every run, the first outermost

    async def outcome_of(self, running: HeldJob, task: Task[Any, Any] | None) -> o.Outcome:
        """Run the job's task and make its outcome (CancelledError if its run is told to end)."""
        job = running.ctx.job
        if task is None:
            return o.permanent("UnknownTask", f"no task named {job.stage!r} in this worker")
        app = task.app
        tracer = app.tracer() if app.tracing else None
        try:
            args, kwargs, trace, receives = app.codec.run_of(job)
        except (TypeError, CorruptDataError) as exc:
            return o.permanent("BadPayload", str(exc), exc)
        if receives is not None:  # a workflow's step: the results it is given first
            try:  # (its dependencies read once: a task in a process of its own gets them too)
                running.ctx = await read_before_run(app, running.ctx)
                args.insert(0, await received(app, job, receives, running.ctx.read or ()))
            except MissingResults as exc:
                return o.permanent("MissingResults", str(exc), exc)
            except Exception as exc:  # Redis away: tried again as the task's failure would be
                return o.failure(task, job, exc, o.error_kind(exc), str(exc) or repr(exc))
        if tracer is None:
            return await self._outcome(running, task, (args, kwargs), None)
        span = Consuming(tracer, job, task.name, trace, self.worker_id, app.namespace)
        try:
            outcome = await self._outcome(running, task, (args, kwargs), span)
        except BaseException:  # cancelled: its lease was lost, or the worker hands it back
            span.end(_ENDED.get(running.phase, "cancelled"), failed=False)
            raise
        span.end(outcome.kind.value, failed=outcome.kind in _FAILED)
        return outcome

    async def _outcome(
        self, running: HeldJob, task: Task[Any, Any], call: Call, span: Consuming | None
    ) -> o.Outcome:
        """Run the task (inside its middleware and span, if any) and make its outcome."""
        job = running.ctx.job
        args, kwargs = call
        try:
            if self.middleware or span is not None:
                value = await self._wrapped(running, task, call, span)
            else:
                value = await self._timed(task, args, kwargs, running.ctx)
        except Snooze as snooze:
            return o.snoozed(snooze)
        except PermanentFailure as exc:
            return o.permanent(o.error_kind(exc), str(exc) or "permanent failure", exc)
        except (TimeoutError, asyncio.TimeoutError) as exc:  # one class from Python 3.11 on
            running.ctx.cancelled.set()
            timed_out = task.timeout is not None and _past(running.started, task.timeout)
            reason = f"timed out after {task.timeout}s" if timed_out else str(exc) or "timeout"
            kind = "Timeout" if timed_out else o.error_kind(exc)
            return o.failure(task, job, exc, kind, reason)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit / KeyboardInterrupt from a task fail the job only
            return o.failure(task, job, exc, o.error_kind(exc), str(exc) or repr(exc))
        return o.success(value, task)

    def _wrapped(
        self, running: HeldJob, task: Task[Any, Any], call: Call, span: Consuming | None
    ) -> Any:
        """The run inside the middleware (the task's timeout counts the task alone), inside the
        span: an awaitable."""

        def inner() -> Any:
            return self._timed(task, *call, running.ctx)

        run = chain(self.middleware, running.ctx, inner) if self.middleware else inner()
        return run if span is None else span.watch(run)

    def _timed(
        self, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any], job: JobContext
    ) -> Any:
        """The task's call, within its timeout (a process of the pool keeps a plain function's
        timeout itself): an awaitable."""
        if task.timeout is None or (self.processes is not None and not task.is_async):
            return self._call(task, args, kwargs, job)
        return asyncio.wait_for(self._call(task, args, kwargs, job), task.timeout)

    async def _call(
        self, task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any], job: JobContext
    ) -> Any:
        if task.is_async:
            return await task.fn(*args, **kwargs)
        if self.processes is not None:  # its timeout counts from when its process takes it
            app = job.worker.app if job.worker is not None else task.app
            job = await read_before_run(app, job)
            return await self.processes.run(task, args, kwargs, job, task.timeout)
        ctx = contextvars.copy_context()
        call = functools.partial(ctx.run, task.fn, *args, **kwargs)
        return await self.loop.run_in_executor(self.pool, call)


def _past(started: float, seconds: float) -> bool:
    return time.monotonic() - started >= seconds * 0.999
