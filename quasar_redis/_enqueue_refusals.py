"""An enqueue of the task API refused, told in words: the job's task, its queue (and id, where
it has one) and why, as ``JobRefusedError`` (whose ``error`` keeps the typed refusal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _types as t
from ._calls import NewJob
from .errors import JobRefusedError


def _reason(error: Any) -> str:
    """Why an enqueue was refused, in words (the refusal's class after it)."""
    kind = type(error).__name__
    if isinstance(error, t.InvalidJob):
        return error.reason
    if isinstance(error, t.MissingDependency):
        return (
            f"its dependency {error.job_id!r} does not exist (never enqueued, or pruned) ({kind})"
        )
    if isinstance(error, t.DuplicateJob):
        return f"job {error.job_id!r} exists already, or is twice in the batch ({kind})"
    if isinstance(error, t.BatchClosed):
        return f"batch {error.batch!r} is closed: it takes no more members ({kind})"
    if isinstance(error, t.MissingBatch):
        return f"batch {error.batch!r} does not exist: open_batch makes one ({kind})"
    return repr(error)


def enqueue_refused(error: Any, jobs: Sequence[NewJob]) -> JobRefusedError:
    """``JobRefusedError`` of an enqueue of ``jobs`` refused with ``error`` (a batch's: the job
    at its index), naming the job's task, its queue (and id, where it has one) and the reason."""
    batch = isinstance(error, t.BatchRefused)
    index, cause = (error.index, error.error) if batch else (0, error)
    job = jobs[index] if 0 <= index < len(jobs) else None
    if job is None:
        return JobRefusedError(error, f"enqueue refused: {_reason(cause)}")
    named = f" (id {job.id!r})" if job.id is not None else ""
    whole = f"; job {index} of a batch of {len(jobs)}: nothing of it enqueued" if batch else ""
    return JobRefusedError(
        error,
        f"task {job.stage!r}{named}: enqueue to queue {job.queue!r} refused: "
        f"{_reason(cause)}{whole}",
    )
