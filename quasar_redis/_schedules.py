"""Periodic schedules (docs/schedules.md): what a schedule is, its ticks, and the typed results of
its calls.

A ``Schedule`` is checked when it is made (``InvalidSchedule``, nothing written) and computes its
own ticks, in integer ms: a cron expression read by cronsim in its time zone (cronsim decides
the daylight-saving edges: a time skipped by a change fires at the first time after it, a time
that happens twice fires once, at its first occurrence, unless the hour field is ``*``), or
an interval counted from the epoch, so that every worker finds the same ticks. Lua has no cron
parser: Python computes the ticks, and lua/fire_schedule.lua holds them to the server's clock
and to the schedule's state, so that any number of workers fire each tick once.

``Ticker`` is the IO-free part of the scheduler every worker runs: which ticks to send, given
what the replies said of each schedule's next tick.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ._args import MAX_PAYLOAD_BYTES
from ._codec import EncodeError, encode
from ._general import text
from ._keys import NAME_RE
from ._replies import _refused
from .errors import CorruptKeyError, InvalidSchedule, ProtocolError

if TYPE_CHECKING:
    from ._call_base import Call

__all__ = [
    "MISSED",
    "Declared",
    "FireResult",
    "Fired",
    "NotFired",
    "Schedule",
    "ScheduleInfo",
    "Skipped",
    "Ticker",
]

Missed = Literal["skip", "once"]
MISSED = ("skip", "once")
#: A schedule whose declaration is older than this is declared by no running worker: listed as
#: such, and not fired (only the workers that declare a schedule fire it).
STALE_MS = 120_000
#: How often a worker declares its schedules again (so that they do not go stale).
DECLARE_EVERY_MS = 30_000
PRIORITY_LIMIT = 1_000_000
STAGE_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}\Z")  # (lua/include/checks.lua stage_error)
MAX_TIME_MS = 17_592_186_044_415  # (lua/include/checks.lua MAX_TIME)


def _ms(seconds: float | timedelta, what: str) -> int:
    """Seconds (or a timedelta) as whole ms; ``InvalidSchedule`` unless finite."""
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidSchedule(f"{what} must be a number of seconds, not {seconds!r}")
    if not math.isfinite(seconds):
        raise InvalidSchedule(f"{what} must be a finite number of seconds, not {seconds!r}")
    return round(seconds * 1000)


def _zone(tz: Any) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise InvalidSchedule(f"tz must be an IANA time zone name such as 'UTC', not {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidSchedule(f"unknown time zone {tz!r}") from exc


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule: the job it enqueues (``stage``, ``payload``, ``queue``,
    ``priority``, ``max_attempts``) at each tick of ``cron`` (in ``tz``) or of ``every_ms``.

    ``missed``: what becomes of ticks more than ``grace_ms`` late (no worker was running):
    ``"skip"``: no job for them; ``"once"``: one job for them all. Ticks less late are fired one
    by one, in order.
    """

    name: str
    stage: str
    cron: str | None = None
    every_ms: int | None = None
    tz: str = "UTC"
    queue: str = "default"
    payload: bytes = b""
    priority: int = 0
    max_attempts: int = 3
    missed: Missed = "skip"
    grace_ms: int = 30_000
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise InvalidSchedule(
                "a schedule's name must be 1-64 characters of letters, digits, '_', '.', '-': "
                f"got {self.name!r}"
            )
        object.__setattr__(self, "zone", _zone(self.tz))
        if (self.cron is None) == (self.every_ms is None):
            raise InvalidSchedule(f"schedule {self.name!r}: give either a cron expression or every")
        if self.cron is not None:
            self._check_cron(self.cron)
        elif isinstance(self.every_ms, bool) or not isinstance(self.every_ms, int):
            raise InvalidSchedule(f"schedule {self.name!r}: every must be a number of seconds")
        elif self.every_ms < 1:
            raise InvalidSchedule(f"schedule {self.name!r}: every must be at least 1 ms")
        self._check_job()

    def _check_cron(self, cron: Any) -> None:
        if not isinstance(cron, str):
            raise InvalidSchedule(f"schedule {self.name!r}: a cron expression is a string")
        try:
            CronSim(cron, datetime.now(self.zone))
        except (CronSimError, ValueError, IndexError) as exc:
            raise InvalidSchedule(
                f"schedule {self.name!r}: invalid cron expression {cron!r}: {exc}"
            ) from exc

    def _check_job(self) -> None:
        problems = []
        if not isinstance(self.queue, str) or not NAME_RE.match(self.queue):
            problems.append(f"queue {self.queue!r} is no queue name")
        if not isinstance(self.stage, str) or not STAGE_RE.match(self.stage):
            problems.append(
                f"its task name {self.stage!r} is no stage: 1-128 characters of letters, digits, "
                "'_', '.', '-', ':' (give the task a name)"
            )
        if self.missed not in MISSED:
            problems.append(f"missed must be 'skip' or 'once', not {self.missed!r}")
        if not _int_in(self.priority, -PRIORITY_LIMIT, PRIORITY_LIMIT):
            problems.append(f"priority must be between -{PRIORITY_LIMIT} and {PRIORITY_LIMIT}")
        if not _int_in(self.max_attempts, 1, MAX_TIME_MS):
            problems.append("max_attempts must be a positive integer")
        if not _int_in(self.grace_ms, 0, MAX_TIME_MS):
            problems.append("grace must not be negative")
        if not isinstance(self.payload, bytes) or len(self.payload) > MAX_PAYLOAD_BYTES:
            problems.append(f"payload must be bytes, at most {MAX_PAYLOAD_BYTES}")
        if problems:
            raise InvalidSchedule(f"schedule {self.name!r}: {'; '.join(problems)}")

    @classmethod
    def of(
        cls,
        name: str,
        stage: str,
        cron: str | None = None,
        *,
        every: float | timedelta | None = None,
        grace: float | timedelta = 30.0,
        payload: Any = None,
        **settings: Any,
    ) -> Schedule:
        """A schedule given its interval and grace in seconds (or timedeltas), and its jobs'
        payload as ``enqueue`` takes one (msgpack-encoded here)."""
        every_ms = None if every is None else _ms(every, "every")
        if every_ms is not None and every_ms < 1:
            raise InvalidSchedule(f"schedule {name!r}: every must be positive, not {every!r}")
        try:
            data = encode(payload)
        except EncodeError as exc:
            raise InvalidSchedule(f"schedule {name!r}: payload {exc}") from None
        grace_ms = _ms(grace, "grace")
        return cls(name, stage, cron, every_ms, payload=data, grace_ms=grace_ms, **settings)

    @property
    def spec(self) -> str:
        """What it fires on, as stored: the cron expression, or ``every <ms>``."""
        return self.cron if self.cron is not None else f"every {self.every_ms}"

    @property
    def digest(self) -> str:
        """A digest of every setting: a declaration with another one replaces the stored ones."""
        parts = (self.spec, self.tz, self.queue, self.stage, self.priority, self.max_attempts)
        text_parts = "\x00".join(map(str, (*parts, self.missed, self.grace_ms)))
        return hashlib.sha1(text_parts.encode() + b"\x00" + self.payload).hexdigest()[:16]

    # ticks ----------------------------------------------------------------------------------------

    def _at(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, self.zone)

    def latest(self, now_ms: int) -> int:
        """The latest tick at or before ``now_ms``."""
        if self.every_ms is not None:
            return now_ms - now_ms % self.every_ms
        start = self._at(now_ms)
        # (cronsim's reverse walk starts at the given second when it has a fraction of one)
        start = start.replace(microsecond=start.microsecond or 1)
        return _ms_of(next(CronSim(self.spec, start, reverse=True)))

    def after(self, tick_ms: int) -> int:
        """The first tick after ``tick_ms``."""
        if self.every_ms is not None:
            return tick_ms - tick_ms % self.every_ms + self.every_ms
        return _ms_of(next(CronSim(self.spec, self._at(tick_ms))))


def _ms_of(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


# --- results -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Declared:
    """A schedule declared: ``outcome`` "created", "updated" (other settings replaced the
    stored ones) or "unchanged"; ``next_tick``: its next tick now (ms)."""

    outcome: str
    next_tick: int


@dataclass(frozen=True, slots=True)
class Fired:
    """A tick fired (or a trigger): its job's id; ``fresh`` False when the tick's job existed
    already (it is not enqueued twice); ``next_tick``: the schedule's next tick."""

    job_id: str
    next_tick: int
    fresh: bool = True


@dataclass(frozen=True, slots=True)
class Skipped:
    """A tick later than its schedule's grace under ``missed="skip"``: no job, and the schedule
    moved on to ``next_tick``."""

    next_tick: int


@dataclass(frozen=True, slots=True)
class NotFired:
    """Nothing fired and nothing changed: ``reason`` "fired" (the tick was fired or skipped
    already: a second firing), "early" (the tick is after the server's now), "paused",
    "changed" (the stored settings are another declaration's), "missing" (no such schedule) or
    "duplicate" (a trigger in the same ms as another); ``next_tick`` the schedule's, if any."""

    reason: str
    next_tick: int | None


FireResult = Fired | Skipped | NotFired


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as stored (``schedules``); times in ms, server clock. ``declared``: a running
    worker declared it within the last two minutes (one that is not is not fired)."""

    name: str
    spec: str
    tz: str
    queue: str
    stage: str
    priority: int
    max_attempts: int
    missed: str
    grace_ms: int
    next_tick: int
    last_tick: int | None
    paused: bool
    declared_at: int
    created_at: int
    declared: bool
    last_job: str | None = None  #: the id of the job of its last tick fired


def _tag(reply: Any) -> str:
    if not isinstance(reply, list) or not reply:
        raise ProtocolError(f"malformed script reply: {reply!r}")
    return text(reply[0])


def _opt_int(value: Any) -> int | None:
    return int(value) if value not in (b"", "", None) else None


def parse_declared(reply: Any) -> Declared:
    if _tag(reply) != "Declared":
        raise _refused(reply)
    return Declared(text(reply[2]), int(reply[3]))


def parse_fire(reply: Any) -> FireResult:
    tag = _tag(reply)
    if tag == "Fired":
        return Fired(text(reply[2]), int(reply[3]), reply[4] in (b"1", "1"))
    if tag == "Skipped":
        return Skipped(int(reply[2]))
    if tag == "NotFired":
        return NotFired(text(reply[2]), _opt_int(reply[3]))
    raise _refused(reply)


def parse_changed(reply: Any) -> bool:
    if _tag(reply) != "Changed":
        raise _refused(reply)
    return reply[2] in (b"1", "1")


def parse_schedules(reply: Any) -> list[ScheduleInfo]:
    if _tag(reply) != "Schedules":
        raise _refused(reply)
    now = int(reply[1])
    out = []
    for row in reply[2:]:
        try:
            out.append(_info(now, [text(value) for value in row]))
        except ValueError:  # (a field written by hand)
            bad = CorruptKeyError(f"schedule:{text(row[0])}", "holds a field that is no integer")
            raise bad from None
    return sorted(out, key=lambda info: info.name)


def _info(now: int, row: list[str]) -> ScheduleInfo:
    name, spec, tz, queue, stage, pr, m, mi, gr, _dg, nx, ls, ps, dc, cr, lj = row
    declared_at = int(dc or 0)
    return ScheduleInfo(
        name,
        spec,
        tz,
        queue,
        stage,
        int(pr or 0),
        int(m or 3),
        mi,
        int(gr or 0),
        int(nx or 0),
        _opt_int(ls),
        ps == "1",
        declared_at,
        int(cr or 0),
        now - declared_at <= STALE_MS,
        lj or None,
    )


# --- the scheduler's choices ---------------------------------------------------------------------


@dataclass
class Ticker:
    """Which tick of each schedule to send next, from what the replies said: the schedule's next
    tick (``due``, ms, server clock), and when to send it (not before ``wait_until``, after a
    reply said it came too soon). A tick more than its grace late is sent alone, the latest
    of those missed (the script skips or fires it as ``missed`` says); any other due tick is
    sent in order, so that a worker that was briefly late loses none. Only ticks are ever sent:
    a tick the script fires is the one it names, and the ticks between the schedule's next one
    and it get no job."""

    schedules: Sequence[Schedule]
    due: dict[str, int] = field(default_factory=dict)
    wait_until: dict[str, int] = field(default_factory=dict)

    def declared(self, schedule: Schedule, result: Declared) -> None:
        self.due[schedule.name] = result.next_tick

    def tick(self, schedule: Schedule, now_ms: int) -> int | None:
        """The tick of ``schedule`` to send at ``now_ms``, or None: none is due."""
        due = self.due.get(schedule.name)
        if due is None or due > now_ms or now_ms < self.wait_until.get(schedule.name, 0):
            return None
        if now_ms - due > schedule.grace_ms:
            return max(due, schedule.latest(now_ms - schedule.grace_ms - 1))
        return due

    def took(self, schedule: Schedule, result: FireResult, now_ms: int) -> None:
        """What the reply to a tick says of the schedule's next one."""
        self.wait_until.pop(schedule.name, None)
        if isinstance(result, Fired | Skipped):
            self.due[schedule.name] = result.next_tick
            return
        if result.next_tick is not None:
            self.due[schedule.name] = result.next_tick
        # "early": not again sooner than a moment from now (the server's clock may be behind
        # ours); paused, changed, missing: looked at again in a while
        later = 200 if result.reason in ("fired", "early") else 1000
        self.wait_until[schedule.name] = now_ms + later

    def next_due(self) -> int | None:
        """When the earliest tick due of every schedule may be sent, if any is known."""
        return min(
            (max(due, self.wait_until.get(name, 0)) for name, due in self.due.items()),
            default=None,
        )

    def declaring(self, calls: Any, now: int | None = None) -> list[Call[Declared]]:
        """The declaration of every schedule (``calls``: a client's call builder)."""
        return [calls.declare_schedule(s, now) for s in self.schedules]

    def declared_all(self, results: Sequence[Declared]) -> None:
        for schedule, result in zip(self.schedules, results, strict=True):
            self.declared(schedule, result)

    def firing(self, calls: Any, now: int, *, explicit: bool = False) -> Firing:
        """The calls of the ticks due at ``now``, a batch (one per schedule) at a time, each
        sent once the replies to the one before are known (``drive``); returns how many jobs
        were enqueued. ``explicit``: the scripts take ``now`` too (tests); else their own
        clock, the server's."""
        enqueued = 0
        for _ in range(FIRE_ROUNDS):
            pending = [(s, tick) for s in self.schedules if (tick := self.tick(s, now)) is not None]
            if not pending:
                break
            at = now if explicit else None
            results = yield [calls.fire_schedule(s, tick, at) for s, tick in pending]
            for (schedule, _), result in zip(pending, results, strict=True):
                self.took(schedule, result, now)
                enqueued += isinstance(result, Fired) and result.fresh
        return enqueued


#: A scheduler's round sends at most this many batches of ticks (a worker back after a long
#: time sends one call for the ticks missed, then those less than grace late one by one).
FIRE_ROUNDS = 100
Firing = Generator[list["Call[FireResult]"], list[FireResult], int]


def drive(flow: Firing, execute_many: Callable[[list[Any]], list[Any]]) -> int:
    """Run ``flow`` with a sync client's ``execute_many``."""
    try:
        batch = next(flow)
        while True:
            batch = flow.send(execute_many(batch))
    except StopIteration as done:
        enqueued: int = done.value
        return enqueued
