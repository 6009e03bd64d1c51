"""What a run comes to (``Outcome``, of a kind ``OutcomeKind``) and the worker's counts of them."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from traceback import format_exception
from types import TracebackType
from typing import Any

from .. import _hooks
from .. import _types as t
from .._args import MAX_PAYLOAD_BYTES
from .._codec import Encoded
from ..app import Task
from ..errors import InvalidArgument
from ..retry import RateLimited, Snooze, delay_ms
from ..serializers import MSGPACK, name_of
from ._lease import Build

REASON_MAX = 8000
#: The bytes of a failure's traceback kept with it: the end, where its innermost frames and the
#: exception itself are.
TRACEBACK_MAX = 4096
CUT = "... (earlier lines left out)\n"
#: ``OutcomeApplied.state`` of a failure that will be retried (state names are the states' names).
RETRY_WAITING = t.RetryWaiting.__name__
#: The error kind of a job whose outcome the worker could not make (``worker_error``).
WORKER_ERROR = "WorkerError"
#: The error kinds of a result the worker cannot send: one its serializer cannot encode, one over
#: the size limit. Permanent failures: the same code would make the same result again.
BAD_RESULT = "BadResult"
RESULT_TOO_LARGE = "ResultTooLarge"


class OutcomeKind(enum.Enum):
    """How a run ended. Its log line says the status the job entered, and why where that helps
    (``describe``)."""

    COMPLETED = "completed"
    FAILED = "failed"  # an error with a retry delay: RETRYING if attempts remain
    RETRYING = "retrying"  # (known from Redis's answer only)
    FAILED_PERMANENTLY = "failed permanently"
    SNOOZED = "snoozed"
    RATE_LIMITED = "rate limited"  # a snooze that holds the job's group (or queue) too
    HANDED_BACK = "handed back"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to report for a run: its ``kind``; ``build`` makes the call from the newest token.
    A failure also keeps what it was (``error``: ``Kind: message``) and the exception that made
    it, if any, for its log line."""

    kind: OutcomeKind
    build: Build
    delay_ms: int | None = None  # when the job comes back (a retry or a hand-back), if it does
    error: str = ""
    exception: BaseException | None = None


@dataclass
class WorkerStats:
    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    snoozed: int = 0
    handed_back: int = 0
    lost: int = 0


_complete = t.builder(t.Complete)


def _complete_empty(token: t.LeaseToken) -> t.Outcome:
    return _complete(token, None, "inline", None)


COMPLETED = Outcome(OutcomeKind.COMPLETED, _complete_empty)  # a run that returned None


def success(value: Any, task: Task[Any, Any] | None = None) -> Outcome:
    """A run of ``task`` that returned ``value``, encoded by its app's serializer (msgpack with
    no task), kept as long as the task's ``result_ttl`` says."""
    ttl = None if task is None else task.result_ttl_ms
    if value is None and ttl is None:
        return COMPLETED
    data: Encoded | None = None
    if value is not None:
        serializer = MSGPACK if task is None else task.app.serializer
        try:
            data = Encoded(serializer.dumps(value))
        except Exception as exc:  # a serializer may raise anything: the result is what is wrong
            reason = f"the result cannot be encoded as {name_of(serializer)}: {exc}"
            return permanent(BAD_RESULT, reason, exc)
        limit = result_limit(task)
        if len(data.data) > limit:
            reason = f"result is {len(data.data)} bytes, over the limit of {limit}"
            return permanent(RESULT_TOO_LARGE, reason)
    return Outcome(OutcomeKind.COMPLETED, lambda tok: _complete(tok, data, "inline", ttl))


def result_limit(task: Task[Any, Any] | None) -> int:
    """The most bytes an encoded result of ``task`` may have: its app's clients refuse to send
    more (``Limits.max_payload_bytes``)."""
    limits = None if task is None else task.app.limits
    return MAX_PAYLOAD_BYTES if limits is None else limits.max_payload_bytes


def failure(
    task: Task[Any, Any], job: t.Job, exc: BaseException, kind: str, reason: str
) -> Outcome:
    """A run that raised ``exc``: retried after the task's policy's delay, or failed for good
    (``WorkerError`` if the policy raises or answers no delay Redis can keep)."""
    policy = task.retry
    try:
        delay = policy.delay(job.attempt, exc)
        if delay is None:
            return permanent(kind, reason, exc)
        ms = delay_ms(delay, "a retry delay")
    except Exception as error:
        return worker_error(f"the retry policy {policy!r} after {kind}: {reason}", error)
    text, trace = _reason(reason), traceback_of(exc)
    build: Build = lambda tok: t.Fail(tok, text, ms, kind, trace)  # noqa: E731
    return Outcome(OutcomeKind.FAILED, build, ms, f"{kind}: {reason}", exc)


def snoozed(snooze: Snooze) -> Outcome:
    """A run that raised ``snooze``: back to waiting after its delay (``WorkerError`` if the
    delay is none Redis can keep, as from a subclass that skipped the check)."""
    try:
        ms = delay_ms(snooze.delay, "a snooze delay")
    except (InvalidArgument, AttributeError) as error:
        return worker_error("a snooze", error)
    if isinstance(snooze, RateLimited):
        return Outcome(OutcomeKind.RATE_LIMITED, lambda tok: t.Release(tok, ms, max(ms, 1)), ms)
    return release(ms, OutcomeKind.SNOOZED)


def worker_error(what: str, error: BaseException) -> Outcome:
    """The worker could not make an outcome of ``what``, which raised ``error``: the job fails
    for good (kind ``WorkerError``), so that its lease is freed."""
    return permanent(WORKER_ERROR, f"{what}: {error_kind(error)}: {error}", error)


def permanent(kind: str, reason: str, exc: BaseException | None = None) -> Outcome:
    """A run that failed for good with ``kind: reason`` (raising ``exc``, if any)."""
    text, trace = _reason(reason), "" if exc is None else traceback_of(exc)
    build: Build = lambda tok: t.PermanentFail(tok, text, kind, trace)  # noqa: E731
    return Outcome(OutcomeKind.FAILED_PERMANENTLY, build, None, f"{kind}: {reason}", exc)


def release(delay_ms: int, kind: OutcomeKind) -> Outcome:
    """A snooze, or a hand-back: the job waits again, no attempt used."""
    return Outcome(kind, lambda tok: t.Release(tok, delay_ms), delay_ms)


HANDED_BACK = release(0, OutcomeKind.HANDED_BACK)


def error_kind(exc: BaseException) -> str:
    return re.sub(r"[^\w.\-]", "_", type(exc).__name__)[:64] or "Error"


def traceback_of(exc: BaseException) -> str:
    """``exc``'s traceback (with its causes) as Python prints it, the task's own frames (and a
    middleware's) without the worker's and the executor's among them, cut to its last
    ``TRACEBACK_MAX`` bytes at a frame's start."""
    text = "".join(format_exception(type(exc), exc, _own_frames(exc.__traceback__)))
    data = text.encode("utf-8", "replace")
    if len(data) <= TRACEBACK_MAX:
        return text
    tail = data[len(data) - TRACEBACK_MAX + len(CUT) :]
    frame = tail.find(b"\n  File ") + 1  # a whole frame first, else a whole line
    start = frame or tail.find(b"\n") + 1  # (0 when one line is that long: cut inside it)
    return CUT + tail[start:].decode("utf-8", "ignore")


#: The modules of the worker's running of a task: the worker's, the middleware chain's, asyncio's
#: and an executor's.
_MACHINERY = (f"{__package__}.", _hooks.__name__, "asyncio.", "concurrent.futures.")


def _own_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the frames of the worker's running of a task (``_machinery``) that come
    before the last frame of the user's code: those before the task, and those between a
    middleware and the rest of the chain. What the last user frame called is kept whole (an
    error raised inside a library call, for one); with no user frame, the last frame alone."""
    frames: list[TracebackType] = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    own = {i for i, f in enumerate(frames) if not _machinery(f.tb_frame.f_globals)}
    last = max(own, default=len(frames) - 1)
    kept = [f for i, f in enumerate(frames) if i >= last or i in own]
    made: TracebackType | None = None
    for frame in reversed(kept):
        made = TracebackType(made, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return made


def _machinery(module_globals: dict[str, Any]) -> bool:
    """Whether a frame is the worker's running of a task (or asyncio's, or an executor's)."""
    return str(module_globals.get("__name__", "")).startswith(_MACHINERY)


def _reason(text: str) -> str:
    data = text.encode("utf-8", "replace")[:REASON_MAX]
    return data.decode("utf-8", "ignore") or "error"


def kind_of(outcome: Outcome, result: Any) -> OutcomeKind:
    """The outcome's kind once applied: a failure Redis made RetryWaiting is RETRYING."""
    if (
        outcome.kind is OutcomeKind.FAILED
        and isinstance(result, t.OutcomeApplied)
        and result.state == RETRY_WAITING
    ):
        return OutcomeKind.RETRYING
    return outcome.kind


#: The status each kind leaves the job in (a release: scheduled when it has a delay), and why.
_STATUS_OF: dict[OutcomeKind, tuple[t.Status, str]] = {
    OutcomeKind.COMPLETED: (t.Status.COMPLETED, ""),
    OutcomeKind.FAILED: (t.Status.DISCARDED, "out of attempts"),
    OutcomeKind.RETRYING: (t.Status.RETRYABLE, "retry in {delay}"),
    OutcomeKind.FAILED_PERMANENTLY: (t.Status.DISCARDED, "failed permanently"),
    OutcomeKind.SNOOZED: (t.Status.AVAILABLE, "snoozed"),
    OutcomeKind.RATE_LIMITED: (t.Status.AVAILABLE, "rate limited"),
    OutcomeKind.HANDED_BACK: (t.Status.AVAILABLE, "handed back"),
}


def describe(outcome: Outcome, kind: OutcomeKind) -> str:
    """The status an applied outcome of ``kind`` (``kind_of``) left its job in, and why:
    ``retryable (retry in 0.5s)``, ``available (handed back)``, ``completed``."""
    status, why = _STATUS_OF[kind]
    delay = outcome.delay_ms
    if delay and status is t.Status.AVAILABLE:
        status, why = t.Status.SCHEDULED, f"{why} for {{delay}}"
    if why and delay is not None:
        why = why.format(delay=f"{delay / 1000:g}s")
    return f"{status.value} ({why})" if why else status.value


def count(stats: WorkerStats, kind: OutcomeKind) -> None:
    """Count an applied outcome of ``kind`` (``kind_of``) in ``stats``."""
    if kind is OutcomeKind.COMPLETED:
        stats.completed += 1
    elif kind is OutcomeKind.RETRYING:
        stats.retried += 1
    elif kind is OutcomeKind.SNOOZED or kind is OutcomeKind.RATE_LIMITED:
        stats.snoozed += 1
    elif kind is OutcomeKind.HANDED_BACK:
        stats.handed_back += 1
    else:
        stats.failed += 1
