"""A job's dependencies and dependents in one read (lua/dependencies.lua): each dependency as it
is now (its status, result and last error), in the order the job lists them, and a page of the
jobs that depend on it, for a running task (``current_job().dependency_results()``), the CLI and
the dashboard."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _types as t
from ._args import int_arg, now_arg, text_arg
from ._call_base import BuilderBase, Call
from ._fast import parse_job
from ._general import text
from ._ids import id_error
from ._replies import _refused, _tag, refusal
from .errors import InvalidArgument

if TYPE_CHECKING:
    from ._calls import CallBuilder

#: Dependents a read lists at most (lua/dependencies.lua's DEPENDENTS.limit).
DEPENDENTS_LISTED = 100


@dataclass(frozen=True, slots=True)
class Dependency:
    """One dependency of a job as it is now: its job (None when it is gone: pruned) and status."""

    id: str
    job: t.Job | None
    status: t.Status | None


@dataclass(frozen=True, slots=True)
class Dependent:
    """A job that depends on the one read, and its status (a ``Status`` value; "missing" for
    one gone, "damaged" for one whose state cannot be read)."""

    id: str
    status: str


@dataclass(frozen=True, slots=True)
class Dependencies:
    """A job's dependencies, in the order it lists them, and the first of its dependents by id
    (at most 100) with how many there are (``dependents_total``); ``now``: the server's time."""

    job_id: str
    now: int
    dependencies: tuple[Dependency, ...]
    dependents: tuple[Dependent, ...]
    dependents_total: int


DependenciesResult = Dependencies | t.JobRefused


@dataclass(frozen=True, slots=True)
class DependencyResult:
    """How a job the running job waits on ended, as its task sees it: one of its dependencies
    (``current_job().dependency_results()``) or, in a batch's callback, one of the batch's
    members (``current_job().batch_results()``). Its ``status`` (a ``Status`` value such as
    "completed", or "missing" for one pruned), its result decoded as ``JobHandle.result()``
    decodes it (None unless it succeeded), and, when it failed, was cancelled or expired, why:
    ``error_kind`` and ``error_message`` (its last error; "Cancelled" and the cancel reason;
    "Expired" and its deadline)."""

    id: str
    status: str
    value: Any = None
    error_kind: str | None = None
    error_message: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == t.Status.COMPLETED.value


def _why(job: t.Job) -> tuple[str | None, str | None]:
    """The error kind and message of a dependency that ended without success, else Nones."""
    state = job.state
    if isinstance(state, t.Cancelled):
        return "Cancelled", state.reason
    if isinstance(state, t.Expired):
        return "Expired", f"not started by its deadline ({t.readable_time(state.deadline)})"
    if isinstance(state, t.Failed):
        error = job.error
        return (error.kind, error.message) if error else ("Failed", state.reason)
    return None, None


def result_of(
    job_id: str, job: t.Job | None, status: t.Status | None, decode: Callable[[t.Job], Any]
) -> DependencyResult:
    """How the job ``job_id`` (``job`` as read, None when gone, in ``status``) ended as a task
    sees it, ``decode`` reading a result."""
    if job is None or status is None:
        return DependencyResult(job_id, "missing")
    value = decode(job) if isinstance(job.state, t.Succeeded) else None
    return DependencyResult(job_id, status.value, value, *_why(job))


def results_of(read: Dependencies, decode: Callable[[t.Job], Any]) -> list[DependencyResult]:
    """The read's dependencies as a task sees them, ``decode`` reading a result."""
    return [result_of(dep.id, dep.job, dep.status, decode) for dep in read.dependencies]


def parse_dependencies(job_id: str, reply: Any) -> DependenciesResult:
    tag = _tag(reply)
    if tag == "Dependencies":
        now = int(reply[1])
        deps = []
        for item in reply[2]:
            if len(item) == 1:
                deps.append(Dependency(text(item[0]), None, None))
            else:
                job = parse_job(item)
                deps.append(Dependency(job.id, job, job.status(now)))
        page = reply[4]
        dependents = tuple(
            Dependent(text(page[i]), text(page[i + 1])) for i in range(0, len(page), 2)
        )
        return Dependencies(job_id, now, tuple(deps), dependents, int(reply[3]))
    if tag in ("MissingJob", "InvalidJob"):
        return t.JobRefused(refusal(reply))
    raise _refused(reply)


class DependencyCalls(BuilderBase):
    """Builds the read of a job's dependencies."""

    def dependencies(
        self, job_id: str, dependents: int = DEPENDENTS_LISTED, now: int | None = None
    ) -> Call[DependenciesResult]:
        if not isinstance(dependents, int) or not 0 <= dependents <= DEPENDENTS_LISTED:
            raise InvalidArgument(f"dependents must be between 0 and {DEPENDENTS_LISTED}")
        parse = lambda reply: parse_dependencies(str(job_id), reply)  # noqa: E731
        bad = id_error(job_id, "job_id")
        if bad is not None:
            return Call(self._scripts["dependencies"], (), parse, t.JobRefused(t.InvalidJob(bad)))
        args = (now_arg(now), text_arg(job_id), int_arg(dependents))
        return self._call("dependencies", args, parse)


class DependencyOperations:
    """The public read of a job's dependencies, as ``Operations`` has it (``self`` is the
    client)."""

    calls: CallBuilder

    def dependencies(
        self, job_id: str, *, dependents: int = DEPENDENTS_LISTED, now: int | None = None
    ) -> Call[DependenciesResult]:
        """The job's dependencies as they are now, in the order it lists them (each with its
        job: status, result, last error; None for one pruned), and the first ``dependents``
        (at most 100) of the jobs that depend on it, by id, with their statuses and how many
        there are. ``JobRefused(MissingJob)`` when there is no such job, ``JobRefused(
        InvalidJob)`` for an id no job may have. One read, bounded (docs/lifecycle.md)."""
        return self.calls.dependencies(job_id, dependents, now)
