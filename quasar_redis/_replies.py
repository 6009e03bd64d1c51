"""The reply vocabulary: every tag a script replies with, and each call's reply as a typed result.

A script replies ``{tag, ...}``: an applied tag (``APPLIED``) with what it applied, or a refusal
tag (``REFUSALS``) with its arguments, which becomes a typed ``JobError`` value. A fault tag
(``FAULTS``) names data no script of ours wrote and raises instead. tests/test_api.py checks that
every tag in lua/ is known here and back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import _types as t
from ._fast import Group, created_job, parse_claim, parse_claimed, parse_job
from ._general import text
from ._progress import progress_of
from .errors import CorruptJobError, CorruptKeyError, InvalidArgument, ProtocolError, QuasarError

#: Refusal tags and how to build the error value from the reply's arguments.
REFUSALS: dict[str, Callable[[list[Any]], t.JobError]] = {
    "MissingJob": lambda a: t.MissingJob(text(a[0])),
    "DuplicateJob": lambda a: t.DuplicateJob(text(a[0])),
    "MissingDependency": lambda a: t.MissingDependency(text(a[0])),
    "IncompleteDependency": lambda a: t.IncompleteDependency(text(a[0])),
    "InvalidJob": lambda a: t.InvalidJob(text(a[0])),
    "NotAvailable": lambda a: t.NotAvailable(int(a[0])),
    "DeadlinePassed": lambda a: t.DeadlinePassed(int(a[0])),
    "LeaseHeld": lambda a: t.LeaseHeld(int(a[0])),
    "AttemptLimitReached": lambda a: t.AttemptLimitReached(),
    "TerminalJob": lambda a: t.TerminalJob(),
    "StaleLease": lambda a: t.StaleLease(),
    "LeaseExpired": lambda a: t.LeaseExpired(int(a[0])),
    "NotFailed": lambda a: t.NotFailed(),
    "FenceChanged": lambda a: t.FenceChanged(),
    "NothingClaimable": lambda a: t.NothingClaimable(int(a[0]) if a[0] else None),
    "QueuePaused": lambda a: t.QueuePaused(text(a[0])),
    "StaleRevision": lambda a: t.StaleRevision(text(a[0]), int(a[1])),
    "MissingBatch": lambda a: t.MissingBatch(text(a[0])),
    "BatchClosed": lambda a: t.BatchClosed(text(a[0])),
    "BatchExists": lambda a: t.BatchExists(text(a[0])),
}
#: Tags that raise instead (data no script of ours wrote).
FAULTS = ("CorruptJob", "CorruptKey")
#: Tags of applied replies (and of the parts inside them).
APPLIED = (
    "Announced",
    "BatchClosing",
    "BatchFound",
    "BatchOpened",
    "BatchPage",
    "Changed",
    "Declared",
    "Fired",
    "Flow",
    "NotFired",
    "Schedules",
    "Skipped",
    "BatchApplied",
    "Reported",
    "ReportClaimed",
    "BatchRefused",
    "Cascaded",
    "Claim",
    "ClaimApplied",
    "ClaimsApplied",
    "Counts",
    "Dependencies",
    "EachResult",
    "Found",
    "JobApplied",
    "JobDeduplicated",
    "Jobs",
    "More",
    "Page",
    "LimitsSet",
    "Paused",
    "Promoted",
    "Pruned",
    "Purged",
    "Queues",
    "Resumed",
    "Retired",
    "Swept",
    "Workers",
)

_outcome_applied = t.builder(t.OutcomeApplied)
_STATE_NAMES_B = {tag.encode(): name for tag, name in t.STATE_NAMES.items()}


def refusal(reply: Sequence[Any]) -> t.JobError:
    """The error value of a refusal reply; raises for faults and unknown tags."""
    tag = text(reply[0])
    build = REFUSALS.get(tag)
    if build is not None:
        return build(list(reply[1:]))
    if tag == "CorruptJob":
        raise CorruptJobError(text(reply[1]), text(reply[2]))
    if tag == "CorruptKey":
        raise CorruptKeyError(text(reply[1]), text(reply[2]))
    raise ProtocolError(f"unknown reply tag {tag!r}")


def _tag(reply: Any) -> str:
    if not isinstance(reply, list) or not reply:
        raise ProtocolError(f"malformed script reply: {reply!r}")
    return text(reply[0])


def _refused(reply: Any) -> InvalidArgument | ProtocolError:
    """What a call that has no refusal result raises for a refusal reply."""
    error = refusal(reply)
    if isinstance(error, t.InvalidJob):
        return InvalidArgument(error.reason)
    return ProtocolError(f"unexpected refusal: {error}")


# --- lease transitions and claims ----------------------------------------------------------------


def parse_job_result(reply: Any) -> t.JobResult:
    tag = _tag(reply)
    if tag == "JobApplied":
        return t.JobApplied(parse_job(reply[2]))
    if tag == "JobDeduplicated":  # (an enqueue answered with the job holding its dedup key)
        return t.JobApplied(parse_job(reply[2]), True)
    return t.JobRefused(refusal(reply))


def parse_cancel_result(reply: Any) -> t.CancelResult:
    if _tag(reply) == "JobApplied":
        return t.CancelApplied(parse_job(reply[2]), tuple(text(x) for x in reply[3]))
    return t.JobRefused(refusal(reply))


def parse_claim_result(reply: Any) -> t.ClaimResult:
    if _tag(reply) == "ClaimApplied":
        return t.ClaimApplied(parse_claim(reply[2]))
    return t.ClaimRefused(refusal(reply))


def parse_claims_result(reply: Any, call_id: str, worker: str, lease_ms: int) -> t.ClaimsResult:
    """A claim's reply; a first delivery's needs the call's id, worker id and lease duration."""
    if _tag(reply) == "ClaimsApplied":
        if reply[1] == b"":  # a re-sent call: each claim with the token first handed out
            return t.ClaimsApplied(tuple([parse_claim(c) for c in reply[2:]]))
        now, items = reply[1], reply[2:]
        return t.ClaimsApplied(
            tuple(
                [
                    parse_claimed(
                        items[i], items[i + 1], now, worker, lease_ms, f"{call_id}.{i // 2 + 1}"
                    )
                    for i in range(0, len(items), 2)
                ]
            )
        )
    return t.ClaimRefused(refusal(reply))


def first_claim(result: t.ClaimsResult) -> t.ClaimResult:
    """The one claim of a claim by queue with a limit of one."""
    if isinstance(result, t.ClaimsApplied):
        if not result.claims:  # a re-sent call whose claim was taken over since
            return t.ClaimRefused(t.StaleLease())
        return t.ClaimApplied(result.claims[0])
    return result


def _report_results(
    job_ids: Sequence[str], items: Sequence[Any]
) -> list[t.OutcomeResult | QuasarError]:
    """The results of a report's outcomes for ``job_ids``, in order: an applied outcome comes
    back as the job's new state tag alone, a refused one as its refusal."""
    out: list[t.OutcomeResult | QuasarError] = []
    for job_id, item in zip(job_ids, items, strict=True):
        if type(item) is bytes:
            out.append(_outcome_applied(job_id, _STATE_NAMES_B.get(item, "?")))
            continue
        try:
            out.append(t.JobRefused(refusal(item)))
        except QuasarError as exc:  # a damaged job: the other outcomes still count
            out.append(exc)
    return out


def parse_report(job_ids: Sequence[str]) -> Callable[[Any], list[t.OutcomeResult | QuasarError]]:
    """The parser of a report of outcomes for ``job_ids`` (``_report_results``)."""

    def parse(reply: Any) -> list[t.OutcomeResult | QuasarError]:
        if _tag(reply) != "Reported":
            raise _refused(reply)
        return _report_results(job_ids, reply[2:])

    return parse


def parse_report_claimed(
    job_ids: Sequence[str], call_id: str, worker: str, lease_ms: int
) -> Callable[[Any], t.ReportedAndClaimed]:
    """The parser of a report_and_claim call: the report's results and the claim's."""

    def parse(reply: Any) -> t.ReportedAndClaimed:
        if _tag(reply) != "ReportClaimed":
            raise _refused(reply)
        claim: t.ClaimsResult | Exception
        try:
            claim = parse_claims_result(reply[3], call_id, worker, lease_ms)
        except QuasarError as exc:  # damaged data on the claim's side: the outcomes still count
            claim = exc
        return t.ReportedAndClaimed(tuple(_report_results(job_ids, reply[2])), claim)

    return parse


# --- enqueue -------------------------------------------------------------------------------------


def _deduplicated(items: Sequence[Any]) -> tuple[list[Any], tuple[int, ...]]:
    """A batch reply's items with each deduplicated one (a list of one: the job that answered
    it, lua/enqueue.lua) unwrapped, and the indexes of those."""
    out, marked = list(items), []
    for i, item in enumerate(items):
        if type(item) is list and len(item) == 1:
            out[i] = item[0]
            marked.append(i)
    return out, tuple(marked)


def parse_batch_result(reply: Any) -> t.BatchResult:
    tag = _tag(reply)
    if tag == "BatchApplied":
        items, marked = _deduplicated(reply[2:])
        if items and not isinstance(items[0], list):  # reply="ids"
            return t.BatchApplied((), tuple(text(i) for i in items), marked)
        jobs = tuple(parse_job(j) for j in items)
        return t.BatchApplied(jobs, tuple(j.id for j in jobs), marked)
    if tag == "BatchRefused":
        return t.BatchRefused(int(reply[1]) - 1, refusal(reply[2]))
    return t.BatchRefused(0, refusal(reply))


def parse_each_result(reply: Any) -> list[t.JobResult]:
    if _tag(reply) != "EachResult":
        error = refusal(reply[2]) if _tag(reply) == "BatchRefused" else refusal(reply)
        return [t.JobRefused(error)]
    return [parse_job_result(item) for item in reply[2:]]


def parse_slim_batch(groups: Sequence[Group]) -> Callable[[Any], t.BatchResult]:
    """The parser of a "slim" enqueue of ``groups`` (a re-sent call's jobs come whole)."""

    def parse(reply: Any) -> t.BatchResult:
        if _tag(reply) != "BatchApplied" or reply[1] == b"":
            return parse_batch_result(reply)
        now, items = int(reply[1]), reply[2:]
        if any(type(item) is list for item in items):  # some answered by another job
            # (or superseded: a job an enqueue revised comes whole, the client did not send
            # its state)
            items, marked = _deduplicated(items)
            jobs = tuple(
                created_job(g, now, item) if type(item) is bytes else parse_job(item)
                for g, item in zip(groups, items, strict=True)
            )
            return t.BatchApplied(jobs, tuple(j.id for j in jobs), marked)
        jobs = tuple(created_job(g, now, pd) for g, pd in zip(groups, items, strict=True))
        return t.BatchApplied(jobs, tuple(j.id for j in jobs))

    return parse


def parse_slim_each(groups: Sequence[Group]) -> Callable[[Any], list[t.JobResult]]:
    """The parser of a "slim" enqueue_each of ``groups``: one JobResult per group."""

    def parse(reply: Any) -> list[t.JobResult]:
        if _tag(reply) != "EachResult":
            return parse_each_result(reply)
        now = int(reply[1])
        out: list[t.JobResult] = []
        for group, item in zip(groups, reply[2:], strict=True):
            if _tag(item) == "JobApplied" and type(item[2]) is bytes:
                out.append(t.JobApplied(created_job(group, now, item[2])))
            else:
                out.append(parse_job_result(item))
        return out

    return parse


def parse_slim_one(group: Group, job_id: str) -> Callable[[Any], t.JobResult]:
    """The parser of a "slim" enqueue of one job, ``group`` (its id ``job_id``, "" when none
    was sent): ``single_result`` of ``parse_slim_batch``'s reading. The usual reply, the job
    created (``{"BatchApplied", now, pending}``), is read without a batch result made first."""

    def parse(reply: Any) -> t.JobResult:
        if (
            type(reply) is list
            and len(reply) == 3
            and reply[0] == b"BatchApplied"
            and type(reply[2]) is bytes
            and reply[1] != b""
        ):
            return t.JobApplied(created_job(group, int(reply[1]), reply[2]))
        return single_result(parse_slim_batch((group,) if group else ())(reply), job_id)

    return parse


def single_result(result: t.BatchResult, job_id: str) -> t.JobResult:
    """The result of a batch of one job, ``job_id``."""
    if isinstance(result, t.BatchApplied):
        if not result.jobs:  # a re-sent enqueue whose job was pruned since
            return t.JobRefused(t.MissingJob(job_id))
        return t.JobApplied(result.jobs[0], bool(result.deduplicated))
    return t.JobRefused(result.error)


# --- inspection and maintenance ------------------------------------------------------------------


def parse_error_entry(entry: bytes) -> t.ErrorInfo:
    """An entry of a failure history: ``<attempt> <at> <kind> <n>:<message><traceback>``, the
    message ``n`` bytes long."""
    attempt, at, kind, rest = entry.split(b" ", 3)
    size, _, rest = rest.partition(b":")
    n = int(size)
    return t.ErrorInfo(text(kind), text(rest[:n]), text(rest[n:]), int(attempt), int(at))


def parse_job_info(reply: Any) -> t.JobInfo | None:
    tag = _tag(reply)
    if tag == "Found":
        errors = tuple(parse_error_entry(e) for e in reversed(reply[4]))
        job, now, waiting_on = parse_job(reply[2]), int(reply[1]), text(reply[3]) or None
        return t.JobInfo(job, now, waiting_on, errors, progress_of(reply[2]))
    if tag == "MissingJob":
        return None
    raise _refused(reply)


def _read_only(tag: str) -> Callable[[Any], Any]:
    def check(reply: Any) -> Any:
        if _tag(reply) != tag:
            raise _refused(reply)
        return reply

    return check


def parse_counts(reply: Any) -> t.QueueCounts:
    reply = _read_only("Counts")(reply)
    return t.QueueCounts(*(int(x) for x in reply[1:]))


def parse_jobs(reply: Any) -> list[t.Job]:
    reply = _read_only("Jobs")(reply)
    return [parse_job(j) for j in reply[3:]]


def parse_page(reply: Any) -> t.JobPage:
    reply = _read_only("Page")(reply)
    cursor = text(reply[2])
    return t.JobPage(tuple(parse_job(j) for j in reply[3:]), cursor or None)


def parse_sweep(reply: Any) -> t.SweepReport:
    reply = _read_only("Swept")(reply)
    return t.SweepReport(
        tuple(text(x) for x in reply[2]),
        tuple(text(x) for x in reply[3]),
        tuple(text(x) for x in reply[4]),
    )


def parse_cascade(reply: Any) -> t.CascadeReport:
    reply = _read_only("Cascaded")(reply)
    return t.CascadeReport(
        tuple(text(x) for x in reply[3]), tuple(text(x) for x in reply[4]), reply[2] == b"1"
    )


def work_left(reply: Any) -> tuple[Any, bool]:
    """A reply and whether its call left cascade work (``{"More", reply}``: the client carries
    it on with lua/resume_cascades.lua before it hands the result over)."""
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == b"More":
        return reply[1], True
    return reply, False


def parse_count(tag: str) -> Callable[[Any], int]:
    def parse(reply: Any) -> int:
        return int(_read_only(tag)(reply)[2])

    return parse


def parse_now(tag: str) -> Callable[[Any], int]:
    """The parser of a reply ``{tag, now}``: the server's now."""

    def parse(reply: Any) -> int:
        return int(_read_only(tag)(reply)[1])

    return parse


def parse_flag(tag: str) -> Callable[[Any], bool]:
    """The parser of a reply ``{tag, now, "1" | "0"}`` (pause, resume, retire)."""

    def parse(reply: Any) -> bool:
        return bool(int(_read_only(tag)(reply)[2]))

    return parse


def parse_queues(reply: Any) -> list[t.QueueInfo]:
    reply = _read_only("Queues")(reply)
    now = int(reply[1])
    return [
        t.QueueInfo(text(q[0]), t.QueueCounts(now, *(int(x) for x in q[2:])), q[1] == b"1")
        for q in reply[2:]
    ]


def _words(value: Any) -> tuple[str, ...]:
    return tuple(text(value).split())


def parse_workers(reply: Any) -> list[t.WorkerInfo]:
    reply = _read_only("Workers")(reply)
    return [
        t.WorkerInfo(
            id=text(w[0]),
            host=text(w[1]),
            pid=int(w[2]),
            queues=_words(w[3]),
            concurrency=int(w[4]),
            running=_words(w[5]),
            version=text(w[6]),
            started_at=int(w[7]),
            last_seen=int(w[8]),
            processed=int(w[9]) if len(w) > 9 else 0,
            failed=int(w[10]) if len(w) > 10 else 0,
        )
        for w in reply[2:]
    ]
