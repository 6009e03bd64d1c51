"""The public calls that change a job waiting to run (``change`` and its one-change forms),
written once as ``Operations`` writes the others, which it extends with these."""

from __future__ import annotations

from typing import Any

from . import _types as t
from ._call_base import KEEP, JobChange, Keep
from ._calls import Call, CallBuilder


class ChangeOperations:
    """The change of a waiting job (lua/change.lua), as each client method sends it."""

    calls: CallBuilder

    def change(
        self,
        job_id: str,
        *,
        payload: Any | Keep = KEEP,
        input_revision: int | None = None,
        priority: int | None = None,
        available_at: int | None = None,
        delay_ms: int | None = None,
        promote: bool = False,
        expected_fence: int | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """Change a job that waits to run (Waiting or RetryWaiting); what is not given is kept.

        ``payload``: a new input, of revision ``input_revision`` (default: the stored one + 1;
        not above it: ``StaleRevision``): the job is Waiting again with its attempts afresh.
        ``priority``; its time: ``available_at`` (absolute ms), ``delay_ms`` (from now) or
        ``promote`` (due now), one of them. Refused ``LeaseHeld`` while a worker holds it,
        ``TerminalJob`` once finished (docs/lifecycle.md, "change")."""
        what = JobChange(payload, input_revision, priority, available_at, delay_ms, promote)
        return self.calls.change(job_id, expected_fence, what, now)

    def update_input(
        self,
        job_id: str,
        payload: Any,
        *,
        input_revision: int | None = None,
        expected_fence: int | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """``change(job_id, payload=..., input_revision=...)``: a waiting job's new input, of
        ``input_revision`` (default: the stored one + 1); Waiting again, attempts afresh."""
        return self.calls.update_input(job_id, payload, input_revision, expected_fence, now)

    def change_priority(
        self,
        job_id: str,
        priority: int,
        *,
        expected_fence: int | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """``change(job_id, priority=...)``: a waiting job's place in the claim order."""
        return self.calls.change_priority(job_id, priority, expected_fence, now)

    def reschedule(
        self,
        job_id: str,
        *,
        available_at: int | None = None,
        delay_ms: int | None = None,
        expected_fence: int | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """``change(job_id, available_at=...)`` or ``delay_ms=`` (from now): when a waiting job
        becomes due."""
        return self.calls.reschedule(job_id, available_at, delay_ms, expected_fence, now)

    def promote(
        self, job_id: str, *, expected_fence: int | None = None, now: int | None = None
    ) -> Call[t.JobResult]:
        """``change(job_id, promote=True)``: a waiting job due now (one due already keeps its
        place)."""
        return self.calls.promote(job_id, expected_fence, now)
