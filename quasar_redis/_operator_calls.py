"""The operator calls: fenced changes of a job (expire, cancel, retry), maintenance (sweep,
cascade, promote, prune, purge), inspection, queues and workers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _types as t
from ._args import Arg, int_arg, name_arg, now_arg, text_arg
from ._call_base import KEEP, BuilderBase, Call, JobChange, WorkerEntry
from ._codec import EncodeError, encode
from ._ids import id_error
from ._replies import (
    parse_cancel_result,
    parse_cascade,
    parse_count,
    parse_counts,
    parse_flag,
    parse_job_info,
    parse_job_result,
    parse_jobs,
    parse_now,
    parse_page,
    parse_queues,
    parse_sweep,
    parse_workers,
)
from .errors import InvalidArgument


def _cancelled_too(result: t.CancelResult, step: t.CascadeReport) -> t.CancelResult:
    if isinstance(result, t.CancelApplied):
        return t.CancelApplied(result.job, result.cascaded + step.cancelled)
    return result


def _damaged_too(result: t.SweepReport, step: t.CascadeReport) -> t.SweepReport:
    return t.SweepReport(result.expired, result.damaged + step.damaged)


def _refused(exc: EncodeError) -> t.JobResult:
    return t.JobRefused(t.InvalidJob(f"payload {exc}"))


def status_arg(status: t.Status | str) -> Arg:
    """A status as the scripts take it: its name."""
    return status.value if isinstance(status, t.Status) else text_arg(status)


class OperatorCalls(BuilderBase):
    """Builds the calls of operators and maintenance, and the reads."""

    # fenced operator calls and maintenance -----------------------------------------------------

    def expire(self, job_id: str, expected_fence: int, now: int | None = None) -> Call[t.JobResult]:
        rest = (int_arg(expected_fence),)
        return self._by_id("expire", job_id, now, rest, parse_job_result, t.JobRefused)

    def cancel(
        self, job_id: str, expected_fence: int | None, reason: str, now: int | None = None
    ) -> Call[t.CancelResult]:
        fence = "" if expected_fence is None else int_arg(expected_fence)
        rest = (fence, text_arg(reason))
        call = self._by_id("cancel", job_id, now, rest, parse_cancel_result, t.JobRefused)
        return Call(call.script, call.args, call.parse, call.early, absorb=_cancelled_too)

    def retry(
        self, job_id: str, expected_fence: int | None, reason: str, now: int | None = None
    ) -> Call[t.JobResult]:
        fence = "" if expected_fence is None else int_arg(expected_fence)
        rest = (fence, text_arg(reason))
        return self._by_id("retry", job_id, now, rest, parse_job_result, t.JobRefused)

    def change(
        self,
        job_id: str,
        expected_fence: int | None = None,
        what: JobChange | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """A waiting job changed (lua/change.lua): ``what`` holds a new payload (and its
        revision), its priority, its time or promoted; what holds its default is kept."""
        what = what or JobChange()
        new_input: tuple[Arg, ...] = ("", "")
        if what.payload is not KEEP:
            try:
                new_input = ("1", encode(what.payload))
            except EncodeError as exc:
                return Call(self._scripts["change"], (), parse_job_result, _refused(exc))
        promote = what.promote
        rest = (
            "" if expected_fence is None else int_arg(expected_fence),
            str(self.limits.max_payload_bytes),
            *new_input,
            *(
                "" if value is None else int_arg(value)
                for value in (what.input_revision, what.priority, what.available_at, what.delay_ms)
            ),
            "1" if promote is True else "" if promote is False else repr(promote),
        )
        return self._by_id("change", job_id, now, rest, parse_job_result, t.JobRefused)

    # (the variants of change: one thing each, sending change.lua; a partitioned namespace's
    # builder routes them through its own change)

    def update_input(
        self,
        job_id: str,
        payload: Any,
        input_revision: int | None = None,
        expected_fence: int | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        return self.change(job_id, expected_fence, JobChange(payload, input_revision), now)

    def change_priority(
        self, job_id: str, priority: int, expected_fence: int | None = None, now: int | None = None
    ) -> Call[t.JobResult]:
        return self.change(job_id, expected_fence, JobChange(priority=priority), now)

    def reschedule(
        self,
        job_id: str,
        available_at: int | None = None,
        delay_ms: int | None = None,
        expected_fence: int | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        what = JobChange(available_at=available_at, delay_ms=delay_ms)
        return self.change(job_id, expected_fence, what, now)

    def promote(
        self, job_id: str, expected_fence: int | None = None, now: int | None = None
    ) -> Call[t.JobResult]:
        return self.change(job_id, expected_fence, JobChange(promote=True), now)

    def sweep_expired(self, limit: int, now: int | None = None) -> Call[t.SweepReport]:
        call = self._call("sweep_expired", (now_arg(now), int_arg(limit)), parse_sweep)
        return Call(call.script, call.args, call.parse, absorb=_damaged_too)

    def resume_cascades(self, now: int | None = None) -> Call[t.CascadeReport]:
        """One bounded step of the cascade work of any call whose client went away
        (lua/resume_cascades.lua)."""
        return self._call("resume_cascades", (now_arg(now), ""), parse_cascade)

    def carry_on(self, call: Call[Any]) -> Call[t.CascadeReport]:
        """The next step of the cascade work ``call`` left, at ``call``'s ``now``: the script of
        ``resume_cascades`` given ``call``'s id, so that it carries on that call's work."""
        return self._call("resume_cascades", (call.args[1], call.call_id), parse_cascade)

    def promote_due(self, limit: int, now: int | None = None) -> Call[int]:
        return self._call("promote_due", (now_arg(now), int_arg(limit)), parse_count("Promoted"))

    def prune(
        self,
        max_age_ms: int | None,
        max_count: int | None,
        limit: int,
        now: int | None = None,
    ) -> Call[int]:
        age = "" if max_age_ms is None else int_arg(max_age_ms)
        count = "" if max_count is None else int_arg(max_count)
        return self._call(
            "prune", (now_arg(now), age, count, int_arg(limit)), parse_count("Pruned")
        )

    def purge(
        self,
        queue: str,
        status: t.Status | str,
        job_ids: Sequence[str],
        finished_before: int | None,
        now: int | None = None,
    ) -> Call[int]:
        before = "" if finished_before is None else int_arg(finished_before)
        head = (now_arg(now), text_arg(queue), status_arg(status), before)
        return self._call(
            "purge", head + tuple(text_arg(i) for i in job_ids), parse_count("Purged")
        )

    # inspection ---------------------------------------------------------------------------------

    def get_job(self, job_id: str, now: int | None = None) -> Call[t.JobInfo | None]:
        bad = id_error(job_id, "job_id")
        if bad is not None:  # a read: refused as an exception, before anything is sent
            raise InvalidArgument(bad)
        return self._call("get_job", (now_arg(now), text_arg(job_id)), parse_job_info)

    def counts(self, queue: str, now: int | None = None) -> Call[t.QueueCounts]:
        return self._call("counts", (now_arg(now), text_arg(queue)), parse_counts)

    def list_jobs(
        self, queue: str, status: t.Status | str, offset: int, limit: int, now: int | None = None
    ) -> Call[list[t.Job]]:
        args = (now_arg(now), text_arg(queue), status_arg(status), int_arg(offset), int_arg(limit))
        return self._call("list_jobs", args, parse_jobs)

    def page_jobs(
        self, queue: str, status: t.Status | str, after: str | None, limit: int, now: int | None
    ) -> Call[t.JobPage]:
        if after is not None and not (isinstance(after, str) and after.isascii()):
            raise InvalidArgument("after must be a cursor a page of this status returned")
        cursor = "" if after is None else after
        args = (now_arg(now), text_arg(queue), status_arg(status), "0", int_arg(limit), cursor)
        return self._call("list_jobs", args, parse_page)

    # queues and workers -------------------------------------------------------------------------

    def pause(self, queue: str, now: int | None = None) -> Call[bool]:
        return self._call("pause", (now_arg(now), name_arg(queue)), parse_flag("Paused"))

    def resume(self, queue: str, now: int | None = None) -> Call[bool]:
        return self._call("resume", (now_arg(now), name_arg(queue)), parse_flag("Resumed"))

    def queues(self, now: int | None = None) -> Call[list[t.QueueInfo]]:
        return self._call("queues", (now_arg(now),), parse_queues)

    def announce(self, worker: WorkerEntry, ttl_ms: int, now: int | None = None) -> Call[int]:
        """The worker registry's entry of a live worker, lapsing ``ttl_ms`` from now."""
        args = (
            now_arg(now),
            text_arg(worker.id),
            int_arg(ttl_ms),
            text_arg(worker.host),
            int_arg(worker.pid),
            " ".join(worker.queues),
            int_arg(worker.concurrency),
            " ".join(worker.running),
            text_arg(worker.version),
            int_arg(worker.processed),
            int_arg(worker.failed),
        )
        return self._call("announce", args, parse_now("Announced"))

    def retire(self, worker_id: str, now: int | None = None) -> Call[bool]:
        """The worker's registry entry removed (it stops)."""
        return self._call("retire", (now_arg(now), text_arg(worker_id)), parse_flag("Retired"))

    def workers(self, now: int | None = None) -> Call[list[t.WorkerInfo]]:
        return self._call("workers", (now_arg(now),), parse_workers)
