"""The calls of batches (docs/workflows.md, "Batches"): open one with its callbacks, close it,
read it and page its members (lua/open_batch.lua, close_batch.lua, batch.lua,
batch_results.lua). Members join by ``NewJob(batch=...)`` through the enqueue calls."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _types as t
from ._args import Arg, int_arg, now_arg, text_arg
from ._batch import (
    CALLBACK_KINDS,
    PAGE_MAX,
    BatchInfo,
    BatchOpenRefused,
    BatchOpenResult,
    BatchPage,
    parse_batch,
    parse_closed,
    parse_opened,
    parse_page,
)
from ._call_base import BuilderBase, Call, NewJob
from ._codec import EncodeError, encode
from ._enqueue_calls import _job_group
from ._general import text
from .errors import InvalidArgument

if TYPE_CHECKING:
    from ._calls import CallBuilder

#: What a callback's ``NewJob`` may not give (a callback is enqueued with a made-up id, now, on
#: its own): each field's default.
_NOT_FOR_CALLBACKS = {
    "id": None,
    "dependencies": (),
    "available_at": None,
    "delay_ms": None,
    "deadline": None,
    "expires_in_ms": None,
    "dedup": None,
    "group": None,
    "batch": None,
    "flow": None,
    "input_ref": "inline",
    "input_revision": 0,
}


def _callback_args(kind: str, job: NewJob | None) -> tuple[Arg, ...] | t.InvalidJob:
    """The six arguments of one callback (lua/open_batch.lua), or why it cannot be sent."""
    if job is None:
        return ("", "", "", "", "", "")
    if not isinstance(job, NewJob):
        return t.InvalidJob(f"{kind} must be a NewJob, not {type(job).__name__}")
    for name, default in _NOT_FOR_CALLBACKS.items():
        value = getattr(job, name)
        if value != default and not (name == "dependencies" and not value):
            return t.InvalidJob(f"{kind} cannot give {name}: a callback is enqueued as it fires")
    try:
        payload = encode(job.payload)
    except EncodeError as exc:
        return t.InvalidJob(f"{kind} payload {exc}")
    return (
        "1",
        text_arg(job.queue),
        text_arg(job.stage),
        payload,
        int_arg(job.priority),
        int_arg(job.max_attempts),
    )


class BatchCalls(BuilderBase):
    """Builds the calls of batches."""

    def open_batch(
        self,
        batch_id: str,
        on_success: NewJob | None = None,
        on_failure: NewJob | None = None,
        on_complete: NewJob | None = None,
        now: int | None = None,
        *,
        jobs: Sequence[NewJob] = (),
        close: bool = False,
    ) -> Call[BatchOpenResult]:
        args: list[Arg] = [now_arg(now), text_arg(batch_id), str(self.limits.max_payload_bytes)]
        given = {"on_success": on_success, "on_failure": on_failure, "on_complete": on_complete}
        refused: BatchOpenRefused | None = None
        for kind in CALLBACK_KINDS:
            callback = _callback_args(kind, given[kind])
            if isinstance(callback, t.InvalidJob):
                refused = BatchOpenRefused(callback)
                break
            args += callback
        members = self._members(batch_id, jobs) if refused is None else []
        if isinstance(members, BatchOpenRefused):
            refused, members = members, []
        ids = tuple(text(group[0]) for group in members)
        parse = functools.partial(parse_opened, str(batch_id), ids)
        if refused is not None:
            return Call(self._scripts["open_batch"], (), parse, refused)
        limits = self.limits
        args += ["1" if close else "", str(limits.max_dependencies), str(len(members))]
        return self._call("open_batch", [*args, *(a for g in members for a in g)], parse)

    def _members(
        self, batch_id: str, jobs: Sequence[NewJob]
    ) -> list[tuple[Arg, ...]] | BatchOpenRefused:
        """The argument groups of the members given to ``open_batch``, each joining the batch
        (one given another batch is left for the script to refuse), or the first that Python
        cannot send."""
        if len(jobs) > self.limits.max_batch:
            problem = f"a batch may hold at most {self.limits.max_batch} jobs"
            return BatchOpenRefused(t.InvalidJob(problem), 0)
        groups = []
        for index, job in enumerate(jobs):
            member = job if job.batch is not None else dataclasses.replace(job, batch=batch_id)
            group = _job_group(member, self._new_id)
            if isinstance(group, t.InvalidJob):
                return BatchOpenRefused(group, index)
            groups.append(group)
        return groups

    def close_batch(self, batch_id: str, now: int | None = None) -> Call[bool]:
        return self._call("close_batch", (now_arg(now), text_arg(batch_id)), parse_closed)

    def batch(self, batch_id: str, now: int | None = None) -> Call[BatchInfo | None]:
        return self._call("batch", (now_arg(now), text_arg(batch_id)), parse_batch)

    def batch_results(
        self, batch_id: str, start: int = 0, count: int = PAGE_MAX, now: int | None = None
    ) -> Call[BatchPage]:
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise InvalidArgument(f"start must be a nonnegative integer, not {start!r}")
        args = (now_arg(now), text_arg(batch_id), int_arg(start), int_arg(count))
        return self._call("batch_results", args, lambda reply: parse_page(start, reply))


class BatchOperations:
    """The public calls of batches, as ``Operations`` has them (``self`` is the client)."""

    calls: CallBuilder

    def open_batch(
        self,
        batch_id: str,
        *,
        on_success: NewJob | None = None,
        on_failure: NewJob | None = None,
        on_complete: NewJob | None = None,
        jobs: Sequence[NewJob] = (),
        close: bool = False,
        now: int | None = None,
    ) -> Call[BatchOpenResult]:
        """Open the batch ``batch_id`` (at most 240 bytes) with its callbacks, each a ``NewJob``
        of a queue, stage, payload, priority and max_attempts: once the batch is closed and
        every member ended, ``on_complete`` is enqueued, ``on_failure`` too when a member did
        not succeed, ``on_success`` when all did; each at most once, ever, with the id
        ``"<batch_id>@<kind>"``. Opening it again with the same callbacks is answered
        ``BatchOpened(created=False)``; with others ``BatchOpenRefused(BatchExists)``.

        ``jobs`` (up to ``Limits.max_batch``) join it in the same call, and ``close`` closes
        it: all or nothing, as ``enqueue_many`` (a refused member is
        ``BatchOpenRefused(error, index)``, and nothing is written)."""
        return self.calls.open_batch(
            batch_id, on_success, on_failure, on_complete, now, jobs=jobs, close=close
        )

    def close_batch(self, batch_id: str, *, now: int | None = None) -> Call[bool]:
        """Take no more members into ``batch_id`` (an enqueue into it is then refused
        ``BatchClosed``); its callbacks fire now if every member ended. True if this call
        closed it; InvalidArgument when there is no such batch."""
        return self.calls.close_batch(batch_id, now)

    def batch(self, batch_id: str, *, now: int | None = None) -> Call[BatchInfo | None]:
        """The batch's counts, whether it is closed, and its callbacks (which fired, as which
        job); None if there is no such batch."""
        return self.calls.batch(batch_id, now)

    def batch_results(
        self, batch_id: str, *, start: int = 0, count: int = PAGE_MAX, now: int | None = None
    ) -> Call[BatchPage]:
        """Members ``start`` .. ``start + count - 1`` (``count`` 1-1000) of the batch, in the
        order they joined, each with its job as stored (its status, result and last error);
        page on from ``next_start``. InvalidArgument when there is no such batch."""
        return self.calls.batch_results(batch_id, start, count, now)
