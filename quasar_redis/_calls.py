"""The call builders: the ``Call`` value and the ``CallBuilder`` that makes every script call.

This is the IO-free core with ``_args`` (how values become script arguments) and ``_replies``
(how replies become typed results): the sync and asyncio clients are thin shells around it. Each
of their methods builds a ``Call`` here, sends it, and hands the raw reply back to
``Call.parse``. A ``Call`` carries a call id made here, once: when redis-py re-sends the command
after a timeout or a dropped connection, the script sees the same id and answers with what the
first delivery did, changing nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from . import _types as t
from ._args import (
    MAX_PAYLOAD_BYTES,
    Arg,
    int_arg,
    lease_args,
    now_arg,
    outcome_group,
    result_arg,
    text_arg,
)
from ._codec import EncodeError, encode
from ._general import text
from ._keys import KeySpace
from ._replies import (
    first_claim,
    parse_batch_result,
    parse_cancel_result,
    parse_claim_result,
    parse_claims_result,
    parse_count,
    parse_counts,
    parse_each_result,
    parse_flag,
    parse_job_info,
    parse_job_result,
    parse_jobs,
    parse_now,
    parse_page,
    parse_queues,
    parse_report,
    parse_report_claimed,
    parse_slim_batch,
    parse_slim_each,
    parse_sweep,
    parse_workers,
    single_result,
)
from ._scripts import Script, scripts
from .errors import QuasarError

T = TypeVar("T")

POLICIES = ("block", "cancel")


def new_call_id() -> str:
    return os.urandom(8).hex()


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits a client enforces on what it sends (checked again inside the scripts)."""

    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    max_dependencies: int = 100
    max_batch: int = 1000


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One script call, ready to send: ``args`` after KEYS[1]; ``parse`` reads the reply.

    ``early`` is a result known without Redis (a refusal of input Python cannot even encode).
    """

    script: Script
    args: tuple[Arg, ...]
    parse: Callable[[Any], T] = field(repr=False)
    early: T | None = None

    @property
    def call_id(self) -> str:
        """The id the script records the call under (its first argument, ARGV[1]): a re-sent
        call carries the same one."""
        return str(self.args[0])


def dependency_id(dep: Any) -> Any:
    """The id a dependency names: a job id as given, or a ``Job``'s id (anything else as is, for
    the caller to refuse)."""
    return dep.id if isinstance(dep, t.Job) else dep


@dataclass(frozen=True, slots=True)
class NewJob:
    """What to enqueue. ``available_at`` (absolute ms) wins over ``delay_ms`` (from server now)."""

    stage: str
    payload: Any = None
    id: str | None = None
    queue: str = "default"
    input_ref: str = "inline"
    input_revision: int = 0
    dependencies: Sequence[str | t.Job] = ()
    priority: int = 0
    max_attempts: int = 3
    available_at: int | None = None
    delay_ms: int | None = None
    on_dependency_failure: t.DependencyPolicy = "block"


def _job_group(job: NewJob) -> tuple[Arg, ...] | t.InvalidJob:
    """A job's group of 13 arguments (lua/enqueue.lua), or the refusal of what Python cannot
    send (a payload msgpack cannot encode, a dependency that is no job id, an unknown policy)."""
    try:
        payload = encode(job.payload)
    except EncodeError as exc:
        return t.InvalidJob(f"payload {exc}")
    deps: list[str] = []
    for dep in job.dependencies:
        dep_id = dependency_id(dep)
        if not isinstance(dep_id, str) or not dep_id or any(c.isspace() for c in dep_id):
            return t.InvalidJob(f"dependency {dep_id!r} is not a job id")
        deps.append(dep_id)
    if job.on_dependency_failure not in POLICIES:
        return t.InvalidJob("on_dependency_failure must be 'block' or 'cancel'")
    return (
        text_arg(new_call_id() if job.id is None else job.id),
        text_arg(job.queue),
        text_arg(job.stage),
        payload,
        text_arg(job.input_ref),
        int_arg(job.input_revision),
        " ".join(deps),
        int_arg(job.priority),
        int_arg(job.max_attempts),
        "" if job.available_at is None else int_arg(job.available_at),
        "" if job.delay_ms is None else int_arg(job.delay_ms),
        job.on_dependency_failure,
        "1" if job.id is None else "",  # made here at random: no record of the call needed
    )


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """What a live worker announces of itself in the registry (``announce``)."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    running: tuple[str, ...]
    version: str


def _status_arg(status: t.Status | str) -> Arg:
    return status.value if isinstance(status, t.Status) else text_arg(status)


def _claim_args(
    call_id: str, queue: str, worker_id: str, lease_ms: int, limit: int, now: int | None
) -> tuple[Arg, ...]:
    """The arguments a claim by queue starts with (claim, report_claim)."""
    return (
        call_id,
        now_arg(now),
        text_arg(queue),
        text_arg(worker_id),
        int_arg(lease_ms),
        int_arg(limit),
    )


class CallBuilder:
    """Builds the ``Call`` of every operation for one namespace."""

    def __init__(self, keys: KeySpace, limits: Limits | None = None) -> None:
        self.keys = keys
        self.limits = limits or Limits()
        self._scripts = scripts()

    def _call(self, name: str, args: Sequence[Arg], parse: Callable[[Any], T]) -> Call[T]:
        return Call(self._scripts[name], (new_call_id(), *args), parse)

    # enqueue ----------------------------------------------------------------------------------

    def _batch_size_error(self, jobs: Sequence[NewJob]) -> t.InvalidJob | None:
        if not jobs:
            return t.InvalidJob("a batch must hold at least one job")
        if len(jobs) > self.limits.max_batch:
            return t.InvalidJob(f"a batch may hold at most {self.limits.max_batch} jobs")
        return None

    def _enqueue_head(self, n: int, now: int | None, mode: str, reply: str) -> tuple[Arg, ...]:
        limits = self.limits
        return (
            now_arg(now),
            str(limits.max_payload_bytes),
            str(limits.max_dependencies),
            str(n),
            mode,
            reply,
        )

    def enqueue_many(
        self, jobs: Sequence[NewJob], now: int | None = None, *, ids_only: bool = False
    ) -> Call[t.BatchResult]:
        """Enqueue all of ``jobs`` or none of them."""
        return self._enqueue_all(jobs, now, ids_only)[0]

    def _enqueue_all(
        self, jobs: Sequence[NewJob], now: int | None, ids_only: bool
    ) -> tuple[Call[t.BatchResult], list[tuple[Arg, ...]]]:
        """``enqueue_many``'s call, and the argument group of each job it sends."""
        groups: list[tuple[Arg, ...]] = []
        error = self._batch_size_error(jobs)
        early: t.BatchResult | None = None if error is None else t.BatchRefused(0, error)
        for index, job in enumerate(jobs if early is None else ()):
            group = _job_group(job)
            if isinstance(group, t.InvalidJob):
                early = t.BatchRefused(index, group)
                break
            groups.append(group)
        head = self._enqueue_head(len(jobs), now, "all", "ids" if ids_only else "slim")
        args = [arg for group in groups for arg in group]
        parse = parse_batch_result if ids_only else parse_slim_batch(groups)
        call = self._call("enqueue", (*head, *args), parse)
        return Call(call.script, call.args, call.parse, early), groups

    def enqueue_each(self, jobs: Sequence[NewJob], now: int | None = None) -> Call[list[Any]]:
        """Enqueue each of ``jobs`` on its own (one call); a JobResult per job, in order.

        Jobs Python cannot even encode get their refusal here and are not sent.
        """
        error = self._batch_size_error(jobs)
        if error is not None:
            return Call(scripts()["enqueue"], (), parse_each_result, [t.JobRefused(error)])
        groups: list[tuple[Arg, ...]] = []
        sent: list[int] = []
        local: dict[int, t.JobResult] = {}
        for index, job in enumerate(jobs):
            group = _job_group(job)
            if isinstance(group, t.InvalidJob):
                local[index] = t.JobRefused(group)
            else:
                groups.append(group)
                sent.append(index)
        parse_slim = parse_slim_each(groups)

        def parse(reply: Any) -> list[Any]:
            results: list[Any] = [local.get(i) for i in range(len(jobs))]
            answers = parse_slim(reply)
            if len(answers) == 1 and len(sent) > 1:  # the whole call was refused
                answers = answers * len(sent)
            for i, result in zip(sent, answers, strict=True):
                results[i] = result
            return results

        head = self._enqueue_head(len(sent), now, "each", "slim")
        early = [local[i] for i in range(len(jobs))] if not sent else None
        args = [arg for group in groups for arg in group]
        return Call(self._scripts["enqueue"], (new_call_id(), *head, *args), parse, early)

    def enqueue(self, job: NewJob, now: int | None = None) -> Call[t.JobResult]:
        batch, groups = self._enqueue_all([job], now, ids_only=False)
        job_id = text(groups[0][0]) if groups else ""  # the id sent (made here when none given)
        early = None if batch.early is None else single_result(batch.early, job_id)
        parse = batch.parse
        return Call(batch.script, batch.args, lambda r: single_result(parse(r), job_id), early)

    # claims and lease-holder calls --------------------------------------------------------------

    def claim(
        self, queue: str, worker_id: str, lease_ms: int, limit: int, now: int | None = None
    ) -> Call[t.ClaimsResult]:
        call_id = new_call_id()
        args = _claim_args(call_id, queue, worker_id, lease_ms, limit, now)
        return Call(
            self._scripts["claim"],
            args,
            lambda reply: parse_claims_result(reply, call_id, worker_id, lease_ms),
        )

    def claim_one(
        self, queue: str, worker_id: str, lease_ms: int, now: int | None = None
    ) -> Call[t.ClaimResult]:
        many = self.claim(queue, worker_id, lease_ms, 1, now)
        return Call(many.script, many.args, lambda r: first_claim(many.parse(r)))

    def claim_job(
        self, job_id: str, worker_id: str, lease_ms: int, now: int | None = None
    ) -> Call[t.ClaimResult]:
        args = (now_arg(now), text_arg(job_id), text_arg(worker_id), int_arg(lease_ms))
        return self._call("claim_job", args, parse_claim_result)

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
        self, token: t.LeaseToken, worker_id: str, lease_ms: int, now: int | None = None
    ) -> Call[t.ClaimResult]:
        args = (now_arg(now), *lease_args(token, worker_id), int_arg(lease_ms))
        return self._call("heartbeat", args, parse_claim_result)

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

    def report(
        self, worker_id: str, outcomes: Sequence[t.Outcome], now: int | None = None
    ) -> Call[list[t.OutcomeResult | QuasarError]]:
        """Many lease holders' outcomes in one call; each applied or refused on its own."""
        items, early = self._report_items(outcomes)
        args = (now_arg(now), text_arg(worker_id), *items)
        call = self._call("report", args, parse_report([o.token.job_id for o in outcomes]))
        return Call(call.script, call.args, call.parse, early)

    def report_claim(
        self,
        worker_id: str,
        outcomes: Sequence[t.Outcome],
        queue: str,
        lease_ms: int,
        limit: int,
        now: int | None = None,
    ) -> Call[t.ReportedAndClaimed]:
        """Outcomes (as ``report``), then a claim of up to ``limit`` jobs of ``queue``: one call."""
        script = self._scripts["report_claim"]
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
        self, token: t.LeaseToken, worker_id: str, delay_ms: int, now: int | None = None
    ) -> Call[t.JobResult]:
        args = (now_arg(now), *lease_args(token, worker_id), int_arg(delay_ms))
        return self._call("release", args, parse_job_result)

    # fenced operator calls and maintenance -----------------------------------------------------

    def expire(self, job_id: str, expected_fence: int, now: int | None = None) -> Call[t.JobResult]:
        args = (now_arg(now), text_arg(job_id), int_arg(expected_fence))
        return self._call("expire", args, parse_job_result)

    def cancel(
        self, job_id: str, expected_fence: int | None, reason: str, now: int | None = None
    ) -> Call[t.CancelResult]:
        fence = "" if expected_fence is None else int_arg(expected_fence)
        args = (now_arg(now), text_arg(job_id), fence, text_arg(reason))
        return self._call("cancel", args, parse_cancel_result)

    def retry(
        self, job_id: str, expected_fence: int | None, reason: str, now: int | None = None
    ) -> Call[t.JobResult]:
        fence = "" if expected_fence is None else int_arg(expected_fence)
        args = (now_arg(now), text_arg(job_id), fence, text_arg(reason))
        return self._call("retry", args, parse_job_result)

    def sweep(self, limit: int, now: int | None = None) -> Call[t.SweepReport]:
        return self._call("sweep", (now_arg(now), int_arg(limit)), parse_sweep)

    def promote(self, limit: int, now: int | None = None) -> Call[int]:
        return self._call("promote", (now_arg(now), int_arg(limit)), parse_count("Promoted"))

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

    # inspection ---------------------------------------------------------------------------------

    def get(self, job_id: str, now: int | None = None) -> Call[t.JobInfo | None]:
        return self._call("get", (now_arg(now), text_arg(job_id)), parse_job_info)

    def counts(self, queue: str, now: int | None = None) -> Call[t.QueueCounts]:
        return self._call("counts", (now_arg(now), text_arg(queue)), parse_counts)

    def list_jobs(
        self, queue: str, status: t.Status | str, offset: int, limit: int, now: int | None = None
    ) -> Call[list[t.Job]]:
        args = (now_arg(now), text_arg(queue), _status_arg(status), int_arg(offset), int_arg(limit))
        return self._call("list", args, parse_jobs)

    def page_jobs(
        self, queue: str, status: t.Status | str, after: str | None, limit: int, now: int | None
    ) -> Call[t.JobPage]:
        cursor = "" if after is None else text_arg(after)
        args = (now_arg(now), text_arg(queue), _status_arg(status), "0", int_arg(limit), cursor)
        return self._call("list", args, parse_page)

    # queues and workers -------------------------------------------------------------------------

    def pause(self, queue: str, now: int | None = None) -> Call[bool]:
        return self._call("pause", (now_arg(now), text_arg(queue)), parse_flag("Paused"))

    def resume(self, queue: str, now: int | None = None) -> Call[bool]:
        return self._call("resume", (now_arg(now), text_arg(queue)), parse_flag("Resumed"))

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
        )
        return self._call("announce", args, parse_now("Announced"))

    def retire(self, worker_id: str, now: int | None = None) -> Call[bool]:
        """The worker's registry entry removed (it stops)."""
        return self._call("retire", (now_arg(now), text_arg(worker_id)), parse_flag("Retired"))

    def workers(self, now: int | None = None) -> Call[list[t.WorkerInfo]]:
        return self._call("workers", (now_arg(now),), parse_workers)
