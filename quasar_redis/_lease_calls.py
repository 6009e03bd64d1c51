"""The calls of a lease holder: claims, then the outcome of each claimed job (complete, fail,
release, heartbeat, a report of many)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _types as t
from ._args import Arg, int_arg, lease_args, now_arg, outcome_group, result_arg, text_arg
from ._call_base import BuilderBase, Call, new_call_id
from ._progress import progress_args
from ._replies import (
    first_claim,
    parse_claim_result,
    parse_claims_result,
    parse_job_result,
    parse_report,
    parse_report_claimed,
)
from .errors import QuasarError


def _claim_args(
    call_id: str, queue: str, worker_id: str, lease_ms: int, limit: int, now: int | None
) -> tuple[Arg, ...]:
    """The arguments a claim by queue starts with (claim_many, report_and_claim)."""
    return (
        call_id,
        now_arg(now),
        text_arg(queue),
        text_arg(worker_id),
        int_arg(lease_ms),
        int_arg(limit),
    )


class LeaseCalls(BuilderBase):
    """Builds the calls that claim jobs and report a lease holder's outcomes."""

    def claim_many(
        self,
        queue: str,
        worker_id: str,
        lease_ms: int,
        limit: int,
        now: int | None = None,
        *,
        call_id: str | None = None,
    ) -> Call[t.ClaimsResult]:
        """``call_id``: the id to send it with (a claim of several partitions makes one per
        partition as it is built, so that it is sent again with the same ones)."""
        call_id = call_id or new_call_id()
        args = _claim_args(call_id, queue, worker_id, lease_ms, limit, now)
        return Call(
            self._scripts["claim"],
            args,
            lambda reply: parse_claims_result(reply, call_id, worker_id, lease_ms),
        )

    def claim(
        self, queue: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> Call[t.ClaimResult]:
        """The best claimable job of ``queue``: ``claim_many`` of one. (``now`` by keyword: a
        call written for ``claim_many``'s arguments fails here rather than read ``limit`` as
        ``now``.)"""
        many = self.claim_many(queue, worker_id, lease_ms, 1, now)
        return Call(many.script, many.args, lambda r: first_claim(many.parse(r)))

    def claim_job(
        self, job_id: str, worker_id: str, lease_ms: int, now: int | None = None
    ) -> Call[t.ClaimResult]:
        rest = (text_arg(worker_id), int_arg(lease_ms))
        return self._by_id("claim_job", job_id, now, rest, parse_claim_result, t.ClaimRefused)

    def complete(
        self,
        token: t.LeaseToken,
        worker_id: str,
        output_ref: str,
        result: Any,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        raw = result_arg(result, self.limits.max_payload_bytes)
        early = raw if isinstance(raw, t.JobRefused) else None
        sent = b"" if isinstance(raw, t.JobRefused) else raw
        args = (now_arg(now), *lease_args(token, worker_id), text_arg(output_ref), sent)
        call = self._call("complete", args, parse_job_result)
        return Call(call.script, call.args, call.parse, early)

    def fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        retry_delay_ms: int,
        kind: str,
        now: int | None = None,
        traceback: str = "",
    ) -> Call[t.JobResult]:
        args = (
            now_arg(now),
            *lease_args(token, worker_id),
            text_arg(reason),
            int_arg(retry_delay_ms),
            text_arg(kind),
            text_arg(traceback),
        )
        return self._call("fail", args, parse_job_result)

    def permanent_fail(
        self,
        token: t.LeaseToken,
        worker_id: str,
        reason: str,
        kind: str,
        now: int | None = None,
        traceback: str = "",
    ) -> Call[t.JobResult]:
        args = (
            now_arg(now),
            *lease_args(token, worker_id),
            text_arg(reason),
            text_arg(kind),
            text_arg(traceback),
        )
        return self._call("permanent_fail", args, parse_job_result)

    def heartbeat(
        self,
        token: t.LeaseToken,
        worker_id: str,
        lease_ms: int,
        now: int | None = None,
        *,
        progress: tuple[str, str] | None = None,
    ) -> Call[t.ClaimResult]:
        """``progress``: a report's text (``progress_args``) the heartbeat carries, if any."""
        args = (now_arg(now), *lease_args(token, worker_id), int_arg(lease_ms), *(progress or ()))
        return self._call("heartbeat", args, parse_claim_result)

    def report_progress(
        self,
        token: t.LeaseToken,
        worker_id: str,
        value: float,
        message: str | None = None,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        """The job's progress, sent at once (InvalidArgument for a bad value or message)."""
        args = (now_arg(now), *lease_args(token, worker_id), *progress_args(value, message))
        return self._call("report_progress", args, parse_job_result)

    def _report_items(
        self, outcomes: Sequence[t.Outcome]
    ) -> tuple[list[Arg], list[t.OutcomeResult | QuasarError] | None]:
        """A report's item count and groups, or the refusal of every outcome Python cannot send
        (none, too many, a result msgpack cannot encode or over the payload limit)."""
        if not outcomes or len(outcomes) > self.limits.max_batch:
            reason = f"a report holds 1 to {self.limits.max_batch} outcomes"
            return [], [t.JobRefused(t.InvalidJob(reason))] * max(1, len(outcomes))
        items: list[Arg] = [str(len(outcomes))]
        for outcome in outcomes:
            group = outcome_group(outcome, self.limits.max_payload_bytes)
            if isinstance(group, t.JobRefused):  # a result unencodable or over the limit
                return [], [group] * len(outcomes)
            items.extend(group)
        return items, None

    def report_many(
        self, worker_id: str, outcomes: Sequence[t.Outcome], now: int | None = None
    ) -> Call[list[t.OutcomeResult | QuasarError]]:
        """Many lease holders' outcomes in one call; each applied or refused on its own."""
        items, early = self._report_items(outcomes)
        args = (now_arg(now), text_arg(worker_id), *items)
        call = self._call("report_many", args, parse_report([o.token.job_id for o in outcomes]))
        return Call(call.script, call.args, call.parse, early)

    def report_and_claim(
        self,
        worker_id: str,
        outcomes: Sequence[t.Outcome],
        queue: str,
        lease_ms: int,
        limit: int,
        now: int | None = None,
    ) -> Call[t.ReportedAndClaimed]:
        """Outcomes (as ``report_many``), then a claim of up to ``limit`` jobs of ``queue``, in
        one call."""
        script = self._scripts["report_and_claim"]
        items, refused = self._report_items(outcomes)
        if refused is not None:  # nothing is sent: the claim is refused with the outcomes
            first = refused[0]
            assert isinstance(first, t.JobRefused)
            early = t.ReportedAndClaimed(tuple(refused), t.ClaimRefused(first.error))
            return Call(script, (), lambda _: early, early)
        call_id = new_call_id()
        args = (*_claim_args(call_id, queue, worker_id, lease_ms, limit, now), *items)
        job_ids = [o.token.job_id for o in outcomes]
        return Call(script, args, parse_report_claimed(job_ids, call_id, worker_id, lease_ms))

    def release(
        self,
        token: t.LeaseToken,
        worker_id: str,
        delay_ms: int,
        now: int | None = None,
        *,
        hold_ms: int | None = None,
    ) -> Call[t.JobResult]:
        hold = "" if hold_ms is None else int_arg(hold_ms)
        args = (now_arg(now), *lease_args(token, worker_id), int_arg(delay_ms), hold)
        return self._call("release", args, parse_job_result)
