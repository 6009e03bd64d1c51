"""Batches (docs/workflows.md, "Batches"): what ``open_batch``, ``batch`` and ``batch_results``
answer, read from the replies of lua/open_batch.lua, lua/batch.lua and lua/batch_results.lua."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _types as t
from ._fast import parse_job
from ._general import text
from ._replies import refusal
from .errors import InvalidArgument, ProtocolError

#: The callback kinds, as the batch hash names them (lua/include/batches.lua CALLBACKS).
CALLBACK_KINDS = {"on_success": "s", "on_failure": "f", "on_complete": "c"}
#: How many members ``batch_results`` reads in one call, at most.
PAGE_MAX = 1000


@dataclass(frozen=True, slots=True)
class BatchOpened:
    """``open_batch`` applied: ``created`` is False when the batch existed already with the same
    callbacks (a repeated open: then none of the members given was enqueued). ``job_ids``: the
    members this call enqueued, in order."""

    batch_id: str
    created: bool
    job_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchOpenRefused:
    """``open_batch`` refused, nothing written: ``BatchExists`` (other callbacks),
    ``InvalidJob`` (the id or a callback's job), ``DuplicateJob`` (a job holds a callback's id),
    or a member's refusal, ``index`` its place in ``jobs`` (0-based; None: no member's)."""

    error: t.JobError
    index: int | None = None


BatchOpenResult = BatchOpened | BatchOpenRefused


@dataclass(frozen=True, slots=True)
class BatchCallback:
    """One callback of a batch: its kind (``on_success``, ``on_failure``, ``on_complete``), its
    job's queue and stage, and once it fired the id of the job enqueued (``job_id``) or the
    refusal that kept it out (``refused``, e.g. ``"InvalidJob ..."``)."""

    kind: str
    queue: str
    stage: str
    job_id: str | None = None
    refused: str | None = None

    @property
    def fired(self) -> bool:
        return self.job_id is not None or self.refused is not None


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """A batch as stored: its members so far (``total``), how many of them ended in each
    terminal status, whether it is closed, and its callbacks."""

    id: str
    total: int
    succeeded: int
    failed: int
    cancelled: int
    expired: int
    closed: bool
    created_at: int
    closed_at: int | None
    callbacks: tuple[BatchCallback, ...]
    now: int

    @property
    def finished(self) -> int:
        """Members in a terminal status."""
        return self.succeeded + self.failed + self.cancelled + self.expired

    @property
    def pending(self) -> int:
        """Members not yet in a terminal status."""
        return self.total - self.finished

    @property
    def done(self) -> bool:
        """Closed, and every member ended: its callbacks are due (or fired)."""
        return self.closed and self.pending == 0

    def callback(self, kind: str) -> BatchCallback | None:
        """The callback of ``kind`` (``on_success`` ...), or None."""
        return next((c for c in self.callbacks if c.kind == kind), None)


@dataclass(frozen=True, slots=True)
class BatchMember:
    """One member of a batch page: its id and the job as stored (None when it is gone)."""

    id: str
    job: t.Job | None


@dataclass(frozen=True, slots=True)
class BatchPage:
    """Members ``start`` .. of a batch, in the order they joined; ``next_start`` is where the next
    page starts (None: this one reaches the end)."""

    total: int
    start: int
    members: tuple[BatchMember, ...]
    now: int

    @property
    def next_start(self) -> int | None:
        end = self.start + len(self.members)
        return end if end < self.total and self.members else None


def _tag(reply: Any) -> str:
    if not isinstance(reply, list) or not reply:
        raise ProtocolError(f"malformed script reply: {reply!r}")
    return text(reply[0])


def _raise_refusal(reply: Any) -> None:
    error = refusal(reply)
    if isinstance(error, t.InvalidJob):
        raise InvalidArgument(error.reason)
    if isinstance(error, t.MissingBatch):
        raise InvalidArgument(f"no batch {error.batch!r}")
    raise ProtocolError(f"unexpected refusal: {error}")


def parse_opened(batch_id: str, job_ids: tuple[str, ...], reply: Any) -> BatchOpenResult:
    tag = _tag(reply)
    if tag == "BatchOpened":
        created = text(reply[2]) == "1"
        return BatchOpened(batch_id, created, job_ids if created else ())
    if tag == "BatchRefused":
        return BatchOpenRefused(refusal(reply[2]), int(reply[1]) - 1)
    return BatchOpenRefused(refusal(reply))


def parse_closed(reply: Any) -> bool:
    if _tag(reply) == "BatchClosing":
        return text(reply[2]) == "1"
    _raise_refusal(reply)
    raise AssertionError  # pragma: no cover


def _callbacks(f: dict[str, str]) -> tuple[BatchCallback, ...]:
    out = []
    for kind, k in CALLBACK_KINDS.items():
        if f"{k}.s" in f:
            out.append(
                BatchCallback(kind, f[f"{k}.q"], f[f"{k}.s"], f.get(f"{k}.id"), f.get(f"{k}.x"))
            )
    return tuple(out)


def parse_batch(reply: Any) -> BatchInfo | None:
    tag = _tag(reply)
    if tag == "MissingBatch":
        return None
    if tag != "BatchFound":
        _raise_refusal(reply)
    fields: Sequence[Any] = reply[2]
    f = {text(k): text(v) for k, v in zip(fields[1::2], fields[2::2], strict=True)}
    closed_at = f.get("ca")
    return BatchInfo(
        id=text(fields[0]),
        total=int(f.get("n", 0)),
        succeeded=int(f.get("nS", 0)),
        failed=int(f.get("nF", 0)),
        cancelled=int(f.get("nC", 0)),
        expired=int(f.get("nE", 0)),
        closed=f.get("cl") == "1",
        created_at=int(f.get("ct", 0)),
        closed_at=None if closed_at is None else int(closed_at),
        callbacks=_callbacks(f),
        now=int(reply[1]),
    )


def parse_page(start: int, reply: Any) -> BatchPage:
    if _tag(reply) != "BatchPage":
        _raise_refusal(reply)
    members = tuple(
        BatchMember(text(item[0]), parse_job(item) if len(item) > 1 else None) for item in reply[3:]
    )
    return BatchPage(int(reply[2]), start, members, int(reply[1]))
