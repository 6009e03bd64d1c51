"""The IO-free core: builds every script call and parses every reply.

The sync and asyncio clients are thin shells around this module: each of their methods builds a
``Call`` here, sends it, and hands the raw reply back to ``Call.parse``. A ``Call`` carries a call
id made here, once: when redis-py re-sends the command after a timeout or a dropped connection, the
script sees the same id and answers with what the first delivery did, changing nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from . import _types as t
from ._codec import EncodeError, encode
from ._keys import KeySpace
from ._scripts import Script, scripts
from .errors import CorruptJobError, CorruptKeyError, InvalidArgument, ProtocolError, QuasarError

T = TypeVar("T")
Arg = str | bytes

#: Refusal tags and how to build the error value from the reply's arguments.
REFUSALS: dict[str, Callable[[list[Any]], t.JobError]] = {
    "MissingJob": lambda a: t.MissingJob(_s(a[0])),
    "DuplicateJob": lambda a: t.DuplicateJob(_s(a[0])),
    "MissingDependency": lambda a: t.MissingDependency(_s(a[0])),
    "IncompleteDependency": lambda a: t.IncompleteDependency(_s(a[0])),
    "InvalidJob": lambda a: t.InvalidJob(_s(a[0])),
    "NotAvailable": lambda a: t.NotAvailable(_i(a[0])),
    "LeaseHeld": lambda a: t.LeaseHeld(_i(a[0])),
    "AttemptLimitReached": lambda a: t.AttemptLimitReached(),
    "TerminalJob": lambda a: t.TerminalJob(),
    "StaleLease": lambda a: t.StaleLease(),
    "LeaseExpired": lambda a: t.LeaseExpired(_i(a[0])),
    "NotFailed": lambda a: t.NotFailed(),
    "FenceChanged": lambda a: t.FenceChanged(),
    "NothingClaimable": lambda a: t.NothingClaimable(_i(a[0]) if a[0] else None),
}
#: Tags that raise instead (data no script of ours wrote).
FAULTS = ("CorruptJob", "CorruptKey")
#: Tags of applied replies (and of the parts inside them).
APPLIED = (
    "BatchApplied",
    "Reported",
    "ReportClaimed",
    "BatchRefused",
    "Claim",
    "ClaimApplied",
    "ClaimsApplied",
    "Counts",
    "EachResult",
    "Found",
    "JobApplied",
    "Jobs",
    "Promoted",
    "Pruned",
    "Swept",
)
POLICIES = ("block", "cancel")


def _s(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _i(value: Any) -> int:
    return int(value)


def new_call_id() -> str:
    return os.urandom(8).hex()


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits a client enforces on what it sends (checked again inside the scripts)."""

    max_payload_bytes: int = 1 << 20
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


# --- decoding ------------------------------------------------------------------------------------


def _state(f: dict[str, bytes]) -> t.JobState:
    st = f["st"]
    if st == b"W":
        return t.Waiting(int(f["at"]))
    if st == b"R":
        return t.RetryWaiting(_s(f.get("em", b"")), int(f["at"]))
    if st == b"L":
        return t.Leased(_s(f["w"]), int(f["f"]), int(f["x"]))
    if st == b"S":
        return t.Succeeded(_s(f.get("o", b"")), int(f["fin"]))
    if st == b"F":
        return t.Failed(_s(f.get("em", b"")), int(f["fin"]))
    return t.Cancelled(_s(f.get("cr", b"")), int(f["fin"]))


def _opt_int(value: bytes | None) -> int | None:
    return None if value is None else int(value)


#: Fields the scripts do not store while they hold these values (lua/_lib.lua DEFAULTS).
DEFAULTS: dict[str, bytes] = {
    "rv": b"0",
    "a": b"0",
    "f": b"0",
    "pd": b"0",
    "dp": b"",
    "ir": b"inline",
    "odf": b"block",
    "pr": b"0",
    "m": b"3",
    "q": b"default",
}
BLOB_CHUNKS = 16


def _fields(reply: Sequence[Any]) -> dict[str, bytes]:
    """The job fields of a reply: later ones win, defaults filled in, blob chunks joined."""
    f = dict(DEFAULTS)
    it = iter(reply)
    next(it)
    for name, value in zip(it, it, strict=True):
        f[name.decode() if isinstance(name, bytes) else name] = value
    for name in ("p", "res"):
        if f"{name}2" in f:
            parts = [f.get(name, b"")]
            for i in range(2, BLOB_CHUNKS + 1):
                part = f.pop(f"{name}{i}", None)
                if part is None:
                    break
                parts.append(part)
            f[name] = b"".join(parts)
    if "ins" not in f and "at" in f:
        f["ins"] = f["at"]
    return f


def parse_job(reply: Sequence[Any]) -> t.Job:
    """A job from ``{id, field, value, ...}``."""
    try:
        return _fast_job(reply)
    except Exception:  # anything unusual: the general reading decides (and raises its error)
        return _general_job(reply)


def _general_job(reply: Sequence[Any]) -> t.Job:
    job_id = _s(reply[0])
    f = _fields(reply)
    try:
        error = t.ErrorInfo(_s(f["ek"]), _s(f.get("em", b""))) if "ek" in f else None
        policy: t.DependencyPolicy = "cancel" if f.get("odf") == b"cancel" else "block"
        return t.Job(
            id=job_id,
            queue=_s(f["q"]),
            stage=_s(f["s"]),
            raw_payload=f.get("p", b""),
            input_ref=_s(f["ir"]),
            input_revision=int(f["rv"]),
            dependencies=tuple(_s(f.get("dp", b"")).split()),
            priority=int(f["pr"]),
            attempt=int(f["a"]),
            max_attempts=int(f["m"]),
            fencing_version=int(f["f"]),
            state=_state(f),
            inserted_at=int(f["ins"]),
            attempted_at=_opt_int(f.get("att")),
            completed_at=_opt_int(f.get("fin")) if f["st"] in (b"S", b"F", b"C") else None,
            error=error,
            raw_result=f.get("res") or None,
            on_dependency_failure=policy,
            pending_dependencies=int(f["pd"]),
        )
    except (KeyError, ValueError) as exc:
        raise CorruptJobError(job_id, f"cannot decode field: {exc}") from None


# The fast reading of the common reply (every name and text value bytes, as redis-py gives them
# with decode_responses=False): the same job as _general_job, built without its per-field generic
# steps. Whatever it does not expect raises, and _general_job reads the reply instead.
_DEFAULTS_B = {name.encode(): value for name, value in DEFAULTS.items()}
_CHUNKS_B = {
    name: [f"{name.decode()}{i}".encode() for i in range(2, BLOB_CHUNKS + 1)]
    for name in (b"p", b"res")
}
_TERMINAL_B = (b"S", b"F", b"C")
_text_of = bytes.decode
_job = t.builder(t.Job)
_token = t.builder(t.LeaseToken)
_claim = t.builder(t.Claim)
_leased = t.builder(t.Leased)
_outcome_applied = t.builder(t.OutcomeApplied)
_STATE_NAMES_B = {tag.encode(): name for tag, name in t.STATE_NAMES.items()}


def _joined(f: dict[bytes, Any], name: bytes) -> bytes:
    parts = [f.get(name, b"")]
    for key in _CHUNKS_B[name]:
        part = f.pop(key, None)
        if part is None:
            break
        parts.append(part)
    return b"".join(parts)


def _fast_state(f: dict[bytes, Any], st: bytes) -> t.JobState:
    if st == b"W":
        return t.Waiting(int(f[b"at"]))
    if st == b"R":
        return t.RetryWaiting(_s(f.get(b"em", b"")), int(f[b"at"]))
    if st == b"S":
        return t.Succeeded(_s(f.get(b"o", b"")), int(f[b"fin"]))
    if st == b"F":
        return t.Failed(_s(f.get(b"em", b"")), int(f[b"fin"]))
    return t.Cancelled(_s(f.get(b"cr", b"")), int(f[b"fin"]))


def _fast_job(reply: Sequence[Any]) -> t.Job:
    if type(reply[1]) is not bytes:
        raise TypeError("not the common reply")
    f = _DEFAULTS_B.copy()
    it = iter(reply)
    next(it)
    f.update(zip(it, it, strict=True))
    return _fast_job_of(reply[0], f)


def _fast_job_of(job_id: bytes, f: dict[bytes, Any]) -> t.Job:
    if b"p2" in f:
        f[b"p"] = _joined(f, b"p")
    if b"res2" in f:
        f[b"res"] = _joined(f, b"res")
    st = f[b"st"]
    fence = int(f[b"f"])
    state: t.JobState
    if st == b"L":
        state = _leased(_text_of(f[b"w"], "utf-8", "replace"), fence, int(f[b"x"]))
    else:
        state = _fast_state(f, st)
    ek = f.get(b"ek")
    att = f.get(b"att")
    return _job(
        _text_of(job_id, "utf-8", "replace"),
        _text_of(f[b"q"], "utf-8", "replace"),
        _text_of(f[b"s"], "utf-8", "replace"),
        f.get(b"p", b""),
        _text_of(f[b"ir"], "utf-8", "replace"),
        int(f[b"rv"]),
        tuple(_text_of(f[b"dp"], "utf-8", "replace").split()),
        int(f[b"pr"]),
        int(f[b"a"]),
        int(f[b"m"]),
        fence,
        state,
        int(f[b"ins"] if b"ins" in f else f[b"at"]),
        None if att is None else int(att),
        _opt_int(f.get(b"fin")) if st in _TERMINAL_B else None,
        None if ek is None else t.ErrorInfo(_s(ek), _s(f.get(b"em", b""))),
        f.get(b"res") or None,
        "cancel" if f[b"odf"] == b"cancel" else "block",
        int(f[b"pd"]),
    )


def parse_token(reply: Sequence[Any]) -> t.LeaseToken:
    try:
        return _token(
            _text_of(reply[0], "utf-8", "replace"),
            int(reply[1]),
            _text_of(reply[2], "utf-8", "replace"),
            int(reply[3]),
            int(reply[4]),
            _text_of(reply[5], "utf-8", "replace"),
        )
    except Exception:  # not the common reply: the general reading decides
        return _general_token(reply)


def _general_token(reply: Sequence[Any]) -> t.LeaseToken:
    return t.LeaseToken(
        job_id=_s(reply[0]),
        input_revision=int(reply[1]),
        worker_id=_s(reply[2]),
        fencing_version=int(reply[3]),
        expires_at=int(reply[4]),
        nonce=_s(reply[5]),
    )


def parse_claim(reply: Sequence[Any]) -> t.Claim:
    return _claim(parse_job(reply[1]), parse_token(reply[2]))


def refusal(reply: Sequence[Any]) -> t.JobError:
    """The error value of a refusal reply; raises for faults and unknown tags."""
    tag = _s(reply[0])
    build = REFUSALS.get(tag)
    if build is not None:
        return build(list(reply[1:]))
    if tag == "CorruptJob":
        raise CorruptJobError(_s(reply[1]), _s(reply[2]))
    if tag == "CorruptKey":
        raise CorruptKeyError(_s(reply[1]), _s(reply[2]))
    raise ProtocolError(f"unknown reply tag {tag!r}")


def _tag(reply: Any) -> str:
    if not isinstance(reply, list) or not reply:
        raise ProtocolError(f"malformed script reply: {reply!r}")
    return _s(reply[0])


def parse_job_result(reply: Any) -> t.JobResult:
    if _tag(reply) == "JobApplied":
        return t.JobApplied(parse_job(reply[2]))
    return t.JobRefused(refusal(reply))


def parse_cancel_result(reply: Any) -> t.CancelResult:
    if _tag(reply) == "JobApplied":
        return t.CancelApplied(parse_job(reply[2]), tuple(_s(x) for x in reply[3]))
    return t.JobRefused(refusal(reply))


def parse_claim_result(reply: Any) -> t.ClaimResult:
    if _tag(reply) == "ClaimApplied":
        return t.ClaimApplied(parse_claim(reply[2]))
    return t.ClaimRefused(refusal(reply))


def parse_leased(reply: Sequence[Any]) -> t.Claim:
    """A claim by queue as its first delivery gives it: the leased job alone, whose fields hold
    the lease (the token is its id, rv, w, f, x and n)."""
    job = parse_job(reply)
    state = job.state
    # The nonce: the last "n" field (a later field overrides an earlier one), near the end.
    nonce = next((reply[i + 1] for i in range(len(reply) - 2, 0, -2) if reply[i] == b"n"), None)
    if not isinstance(state, t.Leased) or nonce is None:
        raise ProtocolError(f"claimed job {job.id!r} is not leased")
    token = _token(
        job.id,
        job.input_revision,
        state.worker_id,
        state.fencing_version,
        state.expires_at,
        _text_of(nonce, "utf-8", "replace"),
    )
    return _claim(job, token)


def parse_claimed(
    job_id: Any, before: Sequence[Any], now: Any, worker: str, lease_ms: int, nonce: str
) -> t.Claim:
    """A job a claim's first delivery leased, from its fields as they were before the lease (the
    script's reply): the lease applied here exactly as the script applied it (st L, attempt + 1,
    fence + 1, the worker, expires_at = now + lease_ms, the nonce, attempted_at = now)."""
    try:
        if type(job_id) is not bytes or (before and type(before[0]) is not bytes):
            raise TypeError("not the common reply")
        f = _DEFAULTS_B.copy()
        it = iter(before)
        f.update(zip(it, it, strict=True))
        fence, expires = int(f[b"f"]) + 1, int(now) + lease_ms
        f[b"st"], f[b"a"], f[b"f"] = b"L", b"%d" % (int(f[b"a"]) + 1), b"%d" % fence
        f[b"w"], f[b"x"], f[b"att"] = worker.encode(), b"%d" % expires, now
        job = _fast_job_of(job_id, f)
        return _claim(job, _token(job.id, job.input_revision, worker, fence, expires, nonce))
    except Exception:  # anything unusual: the general reading decides (and raises its error)
        fields = dict(zip(map(_s, before[::2]), before[1::2], strict=True))
        attempt, fence = int(fields.get("a", b"0")) + 1, int(fields.get("f", b"0")) + 1
        lease = [b"st", b"L", b"a", b"%d" % attempt, b"f", b"%d" % fence, b"w", _b(worker)]
        lease += [b"x", b"%d" % (int(now) + lease_ms), b"n", _b(nonce), b"att", _b(now)]
        return parse_leased([job_id, *before, *lease])


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


def _first(result: t.ClaimsResult) -> t.ClaimResult:
    if isinstance(result, t.ClaimsApplied):
        if not result.claims:  # a re-sent call whose claim was taken over since
            return t.ClaimRefused(t.StaleLease())
        return t.ClaimApplied(result.claims[0])
    return result


def parse_batch_result(reply: Any) -> t.BatchResult:
    tag = _tag(reply)
    if tag == "BatchApplied":
        items = reply[2:]
        if items and not isinstance(items[0], list):  # reply="ids"
            return t.BatchApplied((), tuple(_s(i) for i in items))
        jobs = tuple(parse_job(j) for j in items)
        return t.BatchApplied(jobs, tuple(j.id for j in jobs))
    if tag == "BatchRefused":
        return t.BatchRefused(int(reply[1]) - 1, refusal(reply[2]))
    return t.BatchRefused(0, refusal(reply))


def parse_each_result(reply: Any) -> list[t.JobResult]:
    if _tag(reply) != "EachResult":
        error = refusal(reply[2]) if _tag(reply) == "BatchRefused" else refusal(reply)
        return [t.JobRefused(error)]
    return [parse_job_result(item) for item in reply[2:]]


def _new_job(group: Sequence[Arg], now: int, pending: bytes) -> t.Job:
    """A job this very call created, from what the client sent (a "slim" reply carries only its
    count of dependencies not yet succeeded): the Job a "jobs" reply would have given."""
    job_id, queue, stage, payload, input_ref, revision, deps, priority, attempts = group[:9]
    available_at, delay, policy = group[9:12]
    at = now + int(delay or 0) if available_at == "" else int(available_at)
    return _job(
        job_id,
        queue,
        stage,
        payload,
        input_ref,
        int(revision),
        tuple(str(deps).split()),
        int(priority),
        0,
        int(attempts),
        0,
        t.Waiting(at),
        now,
        None,
        None,
        None,
        None,
        "cancel" if policy == "cancel" else "block",
        int(pending),
    )


def parse_slim_batch(groups: Sequence[Sequence[Arg]]) -> Callable[[Any], t.BatchResult]:
    """The parser of a "slim" enqueue of ``groups`` (a re-sent call's jobs come whole)."""

    def parse(reply: Any) -> t.BatchResult:
        if _tag(reply) != "BatchApplied" or reply[1] == b"":
            return parse_batch_result(reply)
        now = int(reply[1])
        jobs = tuple(_new_job(g, now, pd) for g, pd in zip(groups, reply[2:], strict=True))
        return t.BatchApplied(jobs, tuple(j.id for j in jobs))

    return parse


def parse_slim_each(groups: Sequence[Sequence[Arg]]) -> Callable[[Any], list[t.JobResult]]:
    """The parser of a "slim" enqueue_each of ``groups``: one JobResult per group."""

    def parse(reply: Any) -> list[t.JobResult]:
        if _tag(reply) != "EachResult":
            return parse_each_result(reply)
        now = int(reply[1])
        out: list[t.JobResult] = []
        for group, item in zip(groups, reply[2:], strict=True):
            if _tag(item) == "JobApplied" and type(item[2]) is bytes:
                out.append(t.JobApplied(_new_job(group, now, item[2])))
            else:
                out.append(parse_job_result(item))
        return out

    return parse


def _single(result: t.BatchResult, job_id: str) -> t.JobResult:
    if isinstance(result, t.BatchApplied):
        if not result.jobs:  # a re-sent enqueue whose job was pruned since
            return t.JobRefused(t.MissingJob(job_id))
        return t.JobApplied(result.jobs[0])
    return t.JobRefused(result.error)


def parse_job_info(reply: Any) -> t.JobInfo | None:
    tag = _tag(reply)
    if tag == "Found":
        return t.JobInfo(parse_job(reply[2]), int(reply[1]), _s(reply[3]) or None)
    if tag == "MissingJob":
        return None
    raise _refused(reply)


def _refused(reply: Any) -> InvalidArgument | ProtocolError:
    error = refusal(reply)
    if isinstance(error, t.InvalidJob):
        return InvalidArgument(error.reason)
    return ProtocolError(f"unexpected refusal: {error}")


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
    return [parse_job(j) for j in reply[2:]]


def parse_sweep(reply: Any) -> t.SweepReport:
    reply = _read_only("Swept")(reply)
    return t.SweepReport(tuple(_s(x) for x in reply[2]), tuple(_s(x) for x in reply[3]))


def parse_count(tag: str) -> Callable[[Any], int]:
    def parse(reply: Any) -> int:
        return int(_read_only(tag)(reply)[2])

    return parse


# --- building calls ------------------------------------------------------------------------------


def _now(now: int | None) -> str:
    return "" if now is None else _int(now)


def _int(value: Any) -> str:
    """An integer argument as text; anything else becomes a text the script refuses by name."""
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    return str(value)


def _text(value: Any) -> Arg:
    if isinstance(value, str | bytes):
        return value
    return repr(value)


def _token_args(token: t.LeaseToken, worker_id: str) -> tuple[Arg, ...]:
    return (
        _text(token.job_id),
        _int(token.input_revision),
        _text(token.worker_id),
        _int(token.fencing_version),
        _int(token.expires_at),
        _text(token.nonce),
        _text(worker_id),
    )


def _token6(token: t.LeaseToken) -> tuple[Arg, ...]:
    """The six token arguments of a report item (``_token_args`` without the worker id)."""
    job_id, worker, nonce = token.job_id, token.worker_id, token.nonce
    rv, fence, expires = token.input_revision, token.fencing_version, token.expires_at
    if (
        type(job_id) is str
        and type(worker) is str
        and type(nonce) is str
        and type(rv) is int
        and type(fence) is int
        and type(expires) is int
    ):
        return (job_id, str(rv), worker, str(fence), str(expires), nonce)
    return _token_args(token, "")[:6]


def _outcome_group(outcome: t.Outcome) -> tuple[Arg, ...] | t.JobRefused:
    if type(outcome) is t.Complete and outcome.result is None and type(outcome.output_ref) is str:
        return ("complete", *_token6(outcome.token), outcome.output_ref, b"", "")
    token = _token6(outcome.token)
    match outcome:
        case t.Complete(_, result, output_ref):
            try:
                raw = b"" if result is None else encode(result)
            except EncodeError as exc:
                return t.JobRefused(t.InvalidJob(f"result {exc}"))
            return ("complete", *token, _text(output_ref), raw, "")
        case t.Fail(_, reason, delay, kind):
            return ("fail", *token, _text(reason), _int(delay), _text(kind))
        case t.PermanentFail(_, reason, kind):
            return ("permanent_fail", *token, _text(reason), "", _text(kind))
        case t.Release(_, delay):
            return ("release", *token, _int(delay), "", "")
    raise TypeError(f"not an outcome: {outcome!r}")


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
    """The parser of a report_claim call: the report's results and the claim's."""

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


class Protocol:
    """Builds the ``Call`` of every operation for one namespace."""

    def __init__(self, keys: KeySpace, limits: Limits | None = None) -> None:
        self.keys = keys
        self.limits = limits or Limits()
        self._scripts = scripts()

    def _call(self, name: str, args: Sequence[Arg], parse: Callable[[Any], T]) -> Call[T]:
        return Call(self._scripts[name], (new_call_id(), *args), parse)

    # enqueue ----------------------------------------------------------------------------------

    def _job_group(self, job: NewJob) -> tuple[Arg, ...] | t.InvalidJob:
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
            _text(new_call_id() if job.id is None else job.id),
            _text(job.queue),
            _text(job.stage),
            payload,
            _text(job.input_ref),
            _int(job.input_revision),
            " ".join(deps),
            _int(job.priority),
            _int(job.max_attempts),
            "" if job.available_at is None else _int(job.available_at),
            "" if job.delay_ms is None else _int(job.delay_ms),
            job.on_dependency_failure,
            "1" if job.id is None else "",  # made here at random: no record of the call needed
        )

    def _batch_size_error(self, jobs: Sequence[NewJob]) -> t.InvalidJob | None:
        if not jobs:
            return t.InvalidJob("a batch must hold at least one job")
        if len(jobs) > self.limits.max_batch:
            return t.InvalidJob(f"a batch may hold at most {self.limits.max_batch} jobs")
        return None

    def _enqueue_head(self, n: int, now: int | None, mode: str, reply: str) -> tuple[Arg, ...]:
        limits = self.limits
        return (
            _now(now),
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
        groups: list[tuple[Arg, ...]] = []
        error = self._batch_size_error(jobs)
        early: t.BatchResult | None = None if error is None else t.BatchRefused(0, error)
        for index, job in enumerate(jobs if early is None else ()):
            group = self._job_group(job)
            if isinstance(group, t.InvalidJob):
                early = t.BatchRefused(index, group)
                break
            groups.append(group)
        head = self._enqueue_head(len(jobs), now, "all", "ids" if ids_only else "slim")
        args = [arg for group in groups for arg in group]
        parse = parse_batch_result if ids_only else parse_slim_batch(groups)
        call = self._call("enqueue", (*head, *args), parse)
        return Call(call.script, call.args, call.parse, early)

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
            group = self._job_group(job)
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
        batch = self.enqueue_many([job], now)
        job_id = _s(batch.args[7]) if len(batch.args) > 7 else ""
        early = None if batch.early is None else _single(batch.early, job_id)
        parse = batch.parse
        return Call(batch.script, batch.args, lambda r: _single(parse(r), job_id), early)

    # claims and lease-holder calls --------------------------------------------------------------

    @staticmethod
    def _claim_args(
        call_id: str, queue: str, worker_id: str, lease_ms: int, limit: int, now: int | None
    ) -> tuple[Arg, ...]:
        """The arguments a claim by queue starts with (claim, report_claim)."""
        return (call_id, _now(now), _text(queue), _text(worker_id), _int(lease_ms), _int(limit))

    def claim(
        self, queue: str, worker_id: str, lease_ms: int, limit: int, now: int | None = None
    ) -> Call[t.ClaimsResult]:
        call_id = new_call_id()
        args = self._claim_args(call_id, queue, worker_id, lease_ms, limit, now)
        return Call(
            self._scripts["claim"],
            args,
            lambda reply: parse_claims_result(reply, call_id, worker_id, lease_ms),
        )

    def claim_one(
        self, queue: str, worker_id: str, lease_ms: int, now: int | None = None
    ) -> Call[t.ClaimResult]:
        many = self.claim(queue, worker_id, lease_ms, 1, now)
        return Call(many.script, many.args, lambda r: _first(many.parse(r)))

    def claim_job(
        self, job_id: str, worker_id: str, lease_ms: int, now: int | None = None
    ) -> Call[t.ClaimResult]:
        args = (_now(now), _text(job_id), _text(worker_id), _int(lease_ms))
        return self._call("claim_job", args, parse_claim_result)

    def complete(
        self,
        token: t.LeaseToken,
        worker_id: str,
        output_ref: str,
        result: Any,
        now: int | None = None,
    ) -> Call[t.JobResult]:
        early: t.JobResult | None = None
        try:
            raw = b"" if result is None else encode(result)
        except EncodeError as exc:
            raw, early = b"", t.JobRefused(t.InvalidJob(f"result {exc}"))
        args = (_now(now), *_token_args(token, worker_id), _text(output_ref), raw)
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
    ) -> Call[t.JobResult]:
        args = (
            _now(now),
            *_token_args(token, worker_id),
            _text(reason),
            _int(retry_delay_ms),
            _text(kind),
        )
        return self._call("fail", args, parse_job_result)

    def permanent_fail(
        self, token: t.LeaseToken, worker_id: str, reason: str, kind: str, now: int | None = None
    ) -> Call[t.JobResult]:
        args = (_now(now), *_token_args(token, worker_id), _text(reason), _text(kind))
        return self._call("permanent_fail", args, parse_job_result)

    def heartbeat(
        self, token: t.LeaseToken, worker_id: str, lease_ms: int, now: int | None = None
    ) -> Call[t.ClaimResult]:
        args = (_now(now), *_token_args(token, worker_id), _int(lease_ms))
        return self._call("heartbeat", args, parse_claim_result)

    def _report_items(
        self, outcomes: Sequence[t.Outcome]
    ) -> tuple[list[Arg], list[t.OutcomeResult | QuasarError] | None]:
        """A report's item count and groups, or the refusal of every outcome Python cannot send
        (none, too many, a result msgpack cannot encode)."""
        if not outcomes or len(outcomes) > self.limits.max_batch:
            reason = f"a report holds 1 to {self.limits.max_batch} outcomes"
            return [], [t.JobRefused(t.InvalidJob(reason))] * max(1, len(outcomes))
        items: list[Arg] = [str(len(outcomes))]
        for outcome in outcomes:
            group = _outcome_group(outcome)
            if isinstance(group, t.JobRefused):  # a result msgpack cannot encode
                return [], [group] * len(outcomes)
            items.extend(group)
        return items, None

    def report(
        self, worker_id: str, outcomes: Sequence[t.Outcome], now: int | None = None
    ) -> Call[list[t.OutcomeResult | QuasarError]]:
        """Many lease holders' outcomes in one call; each applied or refused on its own."""
        items, early = self._report_items(outcomes)
        args = (_now(now), _text(worker_id), *items)
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
        args = (*self._claim_args(call_id, queue, worker_id, lease_ms, limit, now), *items)
        job_ids = [o.token.job_id for o in outcomes]
        return Call(script, args, parse_report_claimed(job_ids, call_id, worker_id, lease_ms))

    def release(
        self, token: t.LeaseToken, worker_id: str, delay_ms: int, now: int | None = None
    ) -> Call[t.JobResult]:
        args = (_now(now), *_token_args(token, worker_id), _int(delay_ms))
        return self._call("release", args, parse_job_result)

    # fenced operator calls and maintenance -----------------------------------------------------

    def expire(self, job_id: str, expected_fence: int, now: int | None = None) -> Call[t.JobResult]:
        args = (_now(now), _text(job_id), _int(expected_fence))
        return self._call("expire", args, parse_job_result)

    def cancel(
        self, job_id: str, expected_fence: int | None, reason: str, now: int | None = None
    ) -> Call[t.CancelResult]:
        fence = "" if expected_fence is None else _int(expected_fence)
        args = (_now(now), _text(job_id), fence, _text(reason))
        return self._call("cancel", args, parse_cancel_result)

    def retry(
        self, job_id: str, expected_fence: int | None, reason: str, now: int | None = None
    ) -> Call[t.JobResult]:
        fence = "" if expected_fence is None else _int(expected_fence)
        args = (_now(now), _text(job_id), fence, _text(reason))
        return self._call("retry", args, parse_job_result)

    def sweep(self, limit: int, now: int | None = None) -> Call[t.SweepReport]:
        return self._call("sweep", (_now(now), _int(limit)), parse_sweep)

    def promote(self, limit: int, now: int | None = None) -> Call[int]:
        return self._call("promote", (_now(now), _int(limit)), parse_count("Promoted"))

    def prune(
        self,
        max_age_ms: int | None,
        max_count: int | None,
        limit: int,
        now: int | None = None,
    ) -> Call[int]:
        age = "" if max_age_ms is None else _int(max_age_ms)
        count = "" if max_count is None else _int(max_count)
        return self._call("prune", (_now(now), age, count, _int(limit)), parse_count("Pruned"))

    # inspection ---------------------------------------------------------------------------------

    def get(self, job_id: str, now: int | None = None) -> Call[t.JobInfo | None]:
        return self._call("get", (_now(now), _text(job_id)), parse_job_info)

    def counts(self, queue: str, now: int | None = None) -> Call[t.QueueCounts]:
        return self._call("counts", (_now(now), _text(queue)), parse_counts)

    def list_jobs(
        self, queue: str, status: t.Status | str, offset: int, limit: int, now: int | None = None
    ) -> Call[list[t.Job]]:
        name = status.value if isinstance(status, t.Status) else _text(status)
        args = (_now(now), _text(queue), name, _int(offset), _int(limit))
        return self._call("list", args, parse_jobs)
