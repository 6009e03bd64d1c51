"""Chain, group and chord: workflows of task calls, written in a few lines, on dependencies and
batches (docs/workflows.md).

::

    chain(fetch.s(url), resize.s(width=200), store.s()).enqueue()
    group(resize.s(image, width=w) for w in (100, 200, 400)).enqueue()
    chord(group(count_words.s(chunk) for chunk in chunks), total.s()).enqueue()

A chain is its steps' jobs, each depending on the one before and receiving its result as its
first argument; a group is a batch of its members' jobs; a chord a group whose batch enqueues the
callback, with the members' results in order as its first argument, when every member has
succeeded. Each is enqueued in one call, all or nothing, when its jobs fit one call
(``Limits.max_batch``); a larger one in several, with ids made from the workflow's id, so that
enqueuing it again with the same ``id`` finishes what an interrupted enqueue began.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _types as t
from ._app_batches import amember_results
from ._batch import BatchInfo, BatchOpenRefused, BatchOpenResult
from ._calls import NewJob
from ._dependency_calls import DependencyResult
from ._enqueue_refusals import enqueue_refused
from ._handles import JobHandle
from ._ids import id_error
from ._partitions import hashed
from .errors import InvalidTaskCall, JobRefusedError, JobTimeoutError, QuasarError

if TYPE_CHECKING:
    from ._tasks import Task
    from .app import App

__all__ = ["Chain", "Chord", "Group", "Signature", "WorkflowHandle", "chain", "chord", "group"]

#: What a job's payload says it receives first, before its own arguments: its dependency's result
#: (a chain's step after the first), or the results of its batch's members in order (a chord's
#: callback): the worker reads them with one call and passes them as the first argument.
RECEIVES_RESULT = "d"
RECEIVES_RESULTS = "b"


@dataclass(frozen=True, slots=True)
class Signature:
    """A task call not enqueued yet (``task.s(...)``): the task with its options, and the
    arguments. In a chain after the first step, or as a chord's callback, its function is called
    with one more argument first: the previous step's result, or the list of the group's."""

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def job(self, job_id: str, *, receives: str | None = None, **opts: Any) -> NewJob:
        """The job of this call with id ``job_id`` and the workflow's options ``opts``;
        ``InvalidTaskCall`` when the function cannot take the call (with the argument it
        receives first, if any)."""
        task = self.task.options(id=job_id, **opts)
        return task.job_of(self.args, self.kwargs, receives=receives)

    def job_of_callback(self, receives: str) -> NewJob:
        """The job of this call as a batch's callback (its id the batch's to make), receiving
        the batch's results first."""
        return self.task.job_of(self.args, self.kwargs, receives=receives)


def _made_id(app: App, given: str | None) -> tuple[str, str]:
    """The workflow's id (given, or made), and how its jobs' ids begin: in a partitioned
    namespace they are made in the partition of the workflow's id, so that every job of it,
    and its batch, is in one partition (docs/scaling.md)."""
    wid = uuid.uuid4().hex if given is None else given
    if (bad := id_error(wid, "workflow id")) is not None:
        raise InvalidTaskCall("workflow", t.InvalidJob(bad))
    count = app.partitions
    return wid, "" if not count else f"{hashed(wid, count)}~"


def _app_of(sigs: Sequence[Signature]) -> App:
    if not sigs:
        raise InvalidTaskCall("workflow", t.InvalidJob("a workflow needs at least one task call"))
    app = sigs[0].task.app
    if any(s.task.app is not app for s in sigs):
        raise InvalidTaskCall("workflow", t.InvalidJob("every task call must be of one App"))
    return app


def _enqueue_all(app: App, jobs: Sequence[NewJob]) -> None:
    """``jobs`` enqueued: in one call, all or nothing, when they fit one; else in calls of
    ``Limits.max_batch``, each skipping the jobs an earlier enqueue of the workflow made."""
    size = app.client.calls.limits.max_batch
    for start in range(0, len(jobs), size):
        chunk = jobs[start : start + size]
        result = app.client.enqueue_many(chunk, ids_only=True, on_duplicate="skip")
        if isinstance(result, t.BatchRefused):
            raise enqueue_refused(result, chunk)


async def _aenqueue_all(app: App, jobs: Sequence[NewJob]) -> None:
    client = app.aclient()
    size = client.calls.limits.max_batch
    for start in range(0, len(jobs), size):
        chunk = jobs[start : start + size]
        result = await client.enqueue_many(chunk, ids_only=True, on_duplicate="skip")
        if isinstance(result, t.BatchRefused):
            raise enqueue_refused(result, chunk)


class WorkflowHandle:
    """A workflow enqueued: its id, its jobs' handles, and its result (the last step's, the
    callback's, or the group's list of results)."""

    def __init__(self, app: App, workflow_id: str, handles: Sequence[JobHandle], kind: str):
        self.app = app
        self.id = workflow_id
        self.handles = list(handles)
        self.kind = kind

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.kind}, {self.id!r}, {len(self.handles)} jobs)"

    @property
    def last(self) -> JobHandle:
        """The job whose result is the workflow's: a chain's last step, a chord's callback."""
        return self.handles[-1]

    def result(self, timeout: float | None = None) -> Any:
        """Block until the workflow ends; its result: a group's list of its members' results in
        order, else the last job's (JobFailedError and the like as ``JobHandle.result``). A
        chord whose members have all ended without every one succeeding raises the first
        failed member's error (an operator may still retry it: wait again after)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.kind == "group":
            return [h.result(_left(deadline)) for h in self.handles]
        if self.kind == "chord":
            pause = _FIRST_PAUSE
            while (
                failed := _callback_state(self, (info := self.app.client.batch(self.id)))
            ) is None:
                time.sleep(_pause(pause, deadline, self, timeout, info))
                pause = min(2 * pause, _LAST_PAUSE)
            if failed:
                return JobHandle(self.app, _first_failed(self, self.app.client)).result(0)
        return self.last.result(_left(deadline))

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result`` for asyncio code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.kind == "group":
            return [await h.aresult(_left(deadline)) for h in self.handles]
        if self.kind == "chord":
            client, pause = self.app.aclient(), _FIRST_PAUSE
            while (failed := _callback_state(self, (info := await client.batch(self.id)))) is None:
                await asyncio.sleep(_pause(pause, deadline, self, timeout, info))
                pause = min(2 * pause, _LAST_PAUSE)
            if failed:
                first = await _afirst_failed(self, client)
                return await JobHandle(self.app, first).aresult(0)
        return await self.last.aresult(_left(deadline))


#: How long a chord's waiter pauses between reads of its batch, at first and at most (s).
_FIRST_PAUSE, _LAST_PAUSE = 0.02, 0.5


def _callback_state(handle: WorkflowHandle, info: BatchInfo | None) -> bool | None:
    """Whether a chord's callback will not come (True: a member did not succeed), False once
    it is enqueued, None while the batch waits for its members."""
    if info is None:
        raise QuasarError(f"batch {handle.id!r} does not exist (or was deleted)")
    fired = info.callback("on_success")
    if fired is not None and fired.refused:
        raise QuasarError(f"the callback of batch {handle.id!r} was refused: {fired.refused}")
    if fired is not None and fired.job_id:
        return False
    return True if info.closed and info.pending == 0 else None


def _pause(
    pause: float,
    deadline: float | None,
    handle: WorkflowHandle,
    timeout: float | None,
    info: BatchInfo | None,
) -> float:
    """How long a chord's waiter pauses; ``JobTimeoutError`` of its callback past ``deadline``,
    saying how many members it waits for."""
    left = _left(deadline)
    if left is not None and left <= 0:
        pending = 0 if info is None else info.pending
        waits = f"it waits for {pending} member(s) of chord {handle.id!r} to end"
        raise JobTimeoutError(handle.last.id, timeout or 0.0, waits)
    return pause if left is None else min(pause, left)


def _first_failed(handle: WorkflowHandle, client: Any) -> str:
    """The id of the chord's first member that did not succeed."""
    start: int | None = 0
    while start is not None:
        page = client.batch_results(handle.id, start=start)
        for member in page.members:
            if member.job is None or not isinstance(member.job.state, t.Succeeded):
                return str(member.id)
        start = page.next_start
    return handle.last.id  # (every member succeeded meanwhile: the callback's own result)


async def _afirst_failed(handle: WorkflowHandle, client: Any) -> str:
    start: int | None = 0
    while start is not None:
        page = await client.batch_results(handle.id, start=start)
        for member in page.members:
            if member.job is None or not isinstance(member.job.state, t.Succeeded):
                return str(member.id)
        start = page.next_start
    return handle.last.id


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


@dataclass(frozen=True, slots=True)
class Chain:
    """Steps run one after another, each receiving the previous step's result first."""

    steps: tuple[Signature, ...]

    def jobs(self, id: str | None = None) -> tuple[str, list[NewJob]]:
        """The workflow's id and its jobs, step ``k`` as ``<id>.<k>`` (from 1)."""
        app = _app_of(self.steps)
        wid, begin = _made_id(app, id)
        jobs: list[NewJob] = []
        for k, step in enumerate(self.steps, 1):
            job_id = f"{begin}{wid}.{k}"
            if jobs:
                jobs.append(step.job(job_id, receives=RECEIVES_RESULT, depends_on=[jobs[-1].id]))
            else:
                jobs.append(step.job(job_id))
        return wid, jobs

    def enqueue(self, id: str | None = None) -> WorkflowHandle:
        """Enqueue every step (a step depending on the one before); enqueuing the same ``id``
        again adds nothing twice."""
        wid, jobs = self.jobs(id)
        app = _app_of(self.steps)
        _enqueue_all(app, jobs)
        return WorkflowHandle(app, wid, [JobHandle(app, str(j.id)) for j in jobs], "chain")

    async def aenqueue(self, id: str | None = None) -> WorkflowHandle:
        """``enqueue`` for asyncio code."""
        wid, jobs = self.jobs(id)
        app = _app_of(self.steps)
        await _aenqueue_all(app, jobs)
        return WorkflowHandle(app, wid, [JobHandle(app, str(j.id)) for j in jobs], "chain")


def chain(*steps: Signature) -> Chain:
    """``steps`` one after another, each step after the first receiving the previous one's
    result as its first argument. A step that fails for good stops the chain there: the next
    step stays blocked (an operator's retry of the failed step carries the chain on)."""
    return Chain(tuple(steps))


@dataclass(frozen=True, slots=True)
class Group:
    """Calls run side by side as one batch; their results come back in order."""

    members: tuple[Signature, ...]

    def jobs(self, id: str | None = None) -> tuple[str, list[NewJob]]:
        """The workflow's batch id and its members' jobs, member ``i`` as ``<id>.<i>`` (from 1);
        in a partitioned namespace the batch's id begins as its members' do (``k~``)."""
        app = _app_of(self.members)
        wid, begin = _made_id(app, id)
        bid = f"{begin}{wid}"
        return bid, [m.job(f"{bid}.{i}", batch=bid) for i, m in enumerate(self.members, 1)]

    def enqueue(self, id: str | None = None) -> WorkflowHandle:
        """Enqueue every member in one batch, closed once they are all in."""
        return Chord(self, None).enqueue(id)

    async def aenqueue(self, id: str | None = None) -> WorkflowHandle:
        """``enqueue`` for asyncio code."""
        return await Chord(self, None).aenqueue(id)


def group(*members: Signature | Iterable[Signature]) -> Group:
    """``members`` side by side, as one batch (``group(a.s(1), b.s(2))`` or
    ``group(a.s(i) for i in range(n))``); the group's result is theirs, in order."""
    flat: list[Signature] = []
    for m in members:
        flat.extend([m] if isinstance(m, Signature) else m)
    return Group(tuple(flat))


@dataclass(frozen=True, slots=True)
class Chord:
    """A group, then a callback that receives the list of the members' results, in order, as
    its first argument, when every member has succeeded."""

    header: Group
    callback: Signature | None

    def _plan(self, id: str | None) -> tuple[App, str, list[NewJob], NewJob | None]:
        sigs = self.header.members + (() if self.callback is None else (self.callback,))
        app = _app_of(sigs)
        wid, jobs = self.header.jobs(id)
        if self.callback is None:
            return app, wid, jobs, None
        receives = f"{RECEIVES_RESULTS}:{wid}"
        return app, wid, jobs, self.callback.job_of_callback(receives)

    def enqueue(self, id: str | None = None) -> WorkflowHandle:
        """Open the batch (with the callback, if any), enqueue the members, close it: in one
        call, all or nothing, when the members fit one (``Limits.max_batch``); else in several,
        and enqueuing the same ``id`` again finishes an interrupted enqueue and adds nothing
        twice."""
        app, wid, jobs, callback = self._plan(id)
        client = app.client
        if len(jobs) <= client.calls.limits.max_batch:  # one call: all or nothing
            _opened(client.open_batch(wid, on_success=callback, jobs=jobs, close=True))
        else:
            _opened(client.open_batch(wid, on_success=callback))
            _enqueue_all(app, jobs)
            client.close_batch(wid)
        return self._handle(app, wid, jobs, callback)

    async def aenqueue(self, id: str | None = None) -> WorkflowHandle:
        """``enqueue`` for asyncio code."""
        app, wid, jobs, callback = self._plan(id)
        client = app.aclient()
        if len(jobs) <= client.calls.limits.max_batch:
            _opened(await client.open_batch(wid, on_success=callback, jobs=jobs, close=True))
        else:
            _opened(await client.open_batch(wid, on_success=callback))
            await _aenqueue_all(app, jobs)
            await client.close_batch(wid)
        return self._handle(app, wid, jobs, callback)

    def _handle(
        self, app: App, wid: str, jobs: list[NewJob], callback: NewJob | None
    ) -> WorkflowHandle:
        handles = [JobHandle(app, str(j.id)) for j in jobs]
        if callback is None:
            return WorkflowHandle(app, wid, handles, "group")
        callback_id = f"{wid}@on_success"  # (the id the batch gives its callback)
        return WorkflowHandle(app, wid, [*handles, JobHandle(app, callback_id)], "chord")


def chord(header: Group | Iterable[Signature], callback: Signature) -> Chord:
    """``header``'s members side by side, then ``callback`` once every one has succeeded, with
    the list of their results in order as its first argument. A member that fails for good keeps
    the callback from running (an operator's retry of it, once it succeeds, lets it run)."""
    return Chord(header if isinstance(header, Group) else group(header), callback)


def _opened(result: BatchOpenResult) -> None:
    """``open_batch``'s refusal raised (``JobRefusedError``)."""
    if isinstance(result, BatchOpenRefused):
        refused = result.error
        raise JobRefusedError(
            refused if result.index is None else t.BatchRefused(result.index, refused)
        )


class MissingResults(Exception):
    """A workflow's job found no result where it expected one (its dependency or a member of
    its batch was pruned, or had not succeeded): the job fails for good."""


async def received(
    app: App, job: t.Job, receives: str, dependencies: Sequence[DependencyResult]
) -> Any:
    """What the workflow's job ``job`` receives first (``receives`` as its payload says): its
    dependency's result (of ``dependencies``, as the worker read them for the job), or the list
    of its batch's members' results, in order (a call per 1,000 members)."""
    if receives == RECEIVES_RESULT:
        if len(dependencies) != 1:
            raise MissingResults(f"job {job.id!r} receives a result but has {len(dependencies)}")
        return _value(job.id, dependencies[0])
    kind, _, batch = receives.partition(":")
    if kind != RECEIVES_RESULTS or not batch:
        raise MissingResults(f"job {job.id!r}: its payload receives {receives!r}, unknown here")
    return [_value(job.id, r) for r in await amember_results(app, app.aclient(), batch)]


def _value(job_id: str, result: DependencyResult) -> Any:
    if not result.succeeded:
        raise MissingResults(f"job {job_id!r}: {result.id!r} is {result.status}, not completed")
    return result.value
