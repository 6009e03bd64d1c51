"""The asyncio client's coalescing of concurrent enqueues: the jobs enqueued in one turn of the
event loop go to Redis as one call (``enqueue_each``: each job checked and applied on its own),
and a large batch as two when nothing else is in flight. An enqueue alone in its turn goes at
once, as the batch of one it would have been."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from . import _types as t
from ._calls import Call, CallBuilder, NewJob, dependency_id

# A coalesced batch this large or larger is sent as two calls when no other call is in flight.
SPLIT_MIN = 16

Pending = tuple[NewJob, "asyncio.Future[t.JobResult]"]


def _halves(batch: list[Pending]) -> tuple[list[Pending], ...]:
    """A coalesced batch as two calls, when its halves cannot tell the difference: each job is
    checked and applied on its own (mode "each"), so only a job naming another of the batch (a
    dependency on it, or the same id) depends on the order Redis runs the two in, as does a job
    with a dedup key (another may share it); then, or when the batch is small, the batch whole.
    (Jobs enqueued concurrently have no order between them: the halves' sequence numbers may
    come in either order.)"""
    if len(batch) < SPLIT_MIN or any(job.dedup is not None for job, _ in batch):
        return (batch,)
    named = [job.id for job, _ in batch if job.id is not None]
    if named:
        ids = set(named)
        if len(ids) < len(named):
            return (batch,)
        for job, _ in batch:
            for dep in job.dependencies:
                dep_id = dependency_id(dep)
                if isinstance(dep_id, str) and dep_id in ids:
                    return (batch,)
    half = (len(batch) + 1) // 2
    return batch[:half], batch[half:]


def alone(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether no other callback is to run in this turn of ``loop`` (so no other enqueue can
    join a batch made now). asyncio's own loops keep the ready callbacks in ``_ready``; on a
    loop that does not (uvloop), never known: False, and calls are coalesced as always."""
    ready = getattr(loop, "_ready", None)
    return ready is not None and not ready


class Coalescing:
    """The coalescing part of ``AsyncQuasar``, which sets the attributes below."""

    calls: CallBuilder
    _pending: list[Pending]
    _flush_scheduled: bool
    _flushes: set[asyncio.Task[None]]
    _lone: int  # enqueues sent at once, alone in their turn, still in flight

    if TYPE_CHECKING:

        async def execute(self, call: Call[Any]) -> Any: ...

    async def _coalesced(self, job: NewJob) -> t.JobResult:
        loop = asyncio.get_running_loop()
        if not self._pending and alone(loop):
            # Nothing else runs in this turn, so its batch would hold this job alone: the same
            # call, sent now, without the turns a batch waits for its flush and task.
            self._lone += 1
            try:
                results = await self.execute(self.calls.enqueue_each([job]))
            finally:
                self._lone -= 1
            result: t.JobResult = results[0]
            return result
        future: asyncio.Future[t.JobResult] = loop.create_future()
        self._pending.append((job, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._start_flush)
        return await future

    def _start_flush(self) -> None:
        limit = self.calls.limits.max_batch
        batch, self._pending = self._pending[:limit], self._pending[limit:]
        self._flush_scheduled = bool(self._pending)
        if self._pending:
            asyncio.get_running_loop().call_soon(self._start_flush)
        # Nothing in flight: two calls, so that Redis runs the second while this process reads
        # the first's reply and its callers make the next batch (one call at a time, the two
        # took turns: on 2 cores, about twice the jobs a second with two).
        for part in _halves(batch) if not (self._flushes or self._lone) else (batch,):
            task = asyncio.ensure_future(self._flush(part))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _flush(self, batch: list[Pending]) -> None:
        try:
            results = await self.execute(self.calls.enqueue_each([job for job, _ in batch]))
        except BaseException as exc:  # every caller of the batch gets the exception
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
