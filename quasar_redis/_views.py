"""The operator's read model of a namespace, IO-free: what the ``quasar`` commands, the
dashboard and the Prometheus metrics show, as plain values made from client replies.

``_reading.py`` reads them (its flows run on either client); each place only presents them.
The event stream is decoded here, once: an entry lists the jobs of one run of the same event,
space-separated, with their attempts; an event of a queue (``QUEUE_EVENTS``: a pause, a
resume) names no job; a ``progress`` event carries its value and message, an operator retry's
``retryable`` event its reason (as the message).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _types as t

EVENTS_SCANNED = 10_000  # stream entries looked through, newest first, for one job's events
EVENT_PAGE = 1000  # stream entries read per call
#: The event of an operator's action taken from the dashboard (docs/observability.md): its
#: ``act``, ``who`` did it and its outcome (``out``), of jobs (``job``) or of a queue (``q``).
AUDIT = "audit"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Event:
    """One state change of the event stream: of ``job`` (with its ``attempt``), or of the
    queue itself when ``job`` is None."""

    id: str
    at_ms: int
    event: str
    queue: str
    job: str | None = None
    attempt: str | None = None
    value: float | None = None  # a ``progress`` event's (docs/observability.md)
    message: str | None = None  # ... and its message, if any; an operator retry's reason

    @property
    def at(self) -> str:
        """``at_ms`` as readable UTC time."""
        return t.readable_time(self.at_ms)


def decode_event(entry_id: Any, fields: dict[Any, Any]) -> list[Event]:
    """A stream entry as its events, one per job named (one of no job for a queue's own)."""
    entry = _text(entry_id)
    at_ms = int(entry.split("-")[0])

    def get(name: str) -> str | None:
        value = fields.get(name.encode(), fields.get(name))
        return None if value is None else _text(value)

    event, queue, jobs = get("ev") or "?", get("q") or "?", get("job")
    if event == AUDIT:  # an operator's action (the dashboard's): what, by whom, its outcome
        said = f"{get('act') or '?'} by {get('who') or '?'}: {get('out') or '?'}"
        named = get("schedule")
        said += f" (schedule {named})" if named else ""
        targets: list[str | None] = list(jobs.split(" ")) if jobs else [None]
        return [Event(entry, at_ms, event, queue, job, message=said) for job in targets]
    if jobs is None:
        return [Event(entry, at_ms, event, queue)]
    attempts = (get("a") or "").split(" ")
    message = get("pm") or None  # (a progress event's; an operator retry's reason)
    if event == "progress":  # (one job an entry, with its value and message)
        return [Event(entry, at_ms, event, queue, jobs, attempts[0], _number(get("pv")), message)]
    attempt = dict(enumerate(attempts))
    return [
        Event(entry, at_ms, event, queue, job, attempt.get(i), None, message)
        for i, job in enumerate(jobs.split(" "))
    ]


def _number(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


def events_of_job(events: Iterable[Event], job_id: str) -> list[Event]:
    return [e for e in events if e.job == job_id]


def events_of_queue(events: Iterable[Event], queue: str) -> list[Event]:
    """The queue's own events (``QUEUE_EVENTS``)."""
    return [e for e in events if e.job is None and e.queue == queue and e.event in t.QUEUE_EVENTS]


@dataclass(frozen=True, slots=True)
class Linked:
    """A job named by another (a dependency or a dependent) and its status; None: gone."""

    id: str
    status: t.Status | None

    def named(self, gone: str) -> str:
        """The status's name, ``gone`` for a job that no longer exists."""
        return gone if self.status is None else self.status.value


_STATUSES = {s.value: s for s in t.Status}


def status_named(name: str) -> t.Status | None:
    """The status of that name; None for another word (a job gone: "missing")."""
    return _STATUSES.get(name)


def linked(ids: Sequence[str], infos: Sequence[t.JobInfo | None]) -> tuple[Linked, ...]:
    """Each job of ``ids`` with the status its ``get`` reply gives."""
    return tuple(
        Linked(i, None if info is None else info.status) for i, info in zip(ids, infos, strict=True)
    )


@dataclass(frozen=True, slots=True)
class Dependents:
    """How many jobs depend on one, and some of their ids (sorted)."""

    total: int
    ids: tuple[str, ...]

    @property
    def more(self) -> bool:
        """Whether some are not among ``ids``."""
        return self.total > len(self.ids)


def dependents(total: int, members: Iterable[Any], limit: int) -> Dependents:
    """``Dependents`` from SCARD's reply and SSCAN's members, at most ``limit`` ids."""
    return Dependents(int(total), tuple(sorted(_text(m) for m in members)[:limit]))


@dataclass(frozen=True, slots=True)
class JobView:
    """A job whole: its reply, its failures (oldest first), what it depends on and what
    depends on it (with their statuses), and its recent events (oldest first)."""

    info: t.JobInfo
    dependencies: tuple[Linked, ...]
    dependents: Dependents
    dependent_statuses: tuple[Linked, ...]
    events: tuple[Event, ...]

    @property
    def errors(self) -> tuple[t.ErrorInfo, ...]:
        """The failed attempts kept, else the last error alone."""
        job = self.info.job
        return tuple(self.info.errors) or ((job.error,) if job.error else ())

    @property
    def more_dependencies(self) -> bool:
        return len(self.info.job.dependencies) > len(self.dependencies)


@dataclass(frozen=True, slots=True)
class Listing:
    """A page of jobs across statuses: each with the status it was listed under."""

    jobs: list[tuple[t.Status, t.Job]]
    next_cursor: str | None


def listing_start(statuses: Sequence[t.Status], after: str | None) -> tuple[int, str | None]:
    """Where a listing resumes: the index of its status and the page cursor within it, from
    ``after`` (``<status>:<page cursor>``, as ``Listing.next_cursor`` gives it)."""
    if not after:
        return 0, None
    word, _, rest = after.partition(":")
    try:
        index = [s.value for s in statuses].index(word)
    except ValueError:
        raise ValueError(f"{after!r} is not a cursor of this listing") from None
    return index, rest or None


def listing_cursor(statuses: Sequence[t.Status], index: int, inner: str | None) -> str | None:
    """The cursor of the rest of a listing (None: the end)."""
    if index >= len(statuses):
        return None
    return f"{statuses[index].value}:{inner or ''}"


def counts_of(counts: t.QueueCounts, statuses: Iterable[t.Status] = t.Status) -> dict[str, int]:
    """A queue's counts by status name, in the order of ``statuses``."""
    return {s.value: int(getattr(counts, s.value)) for s in statuses}


def slots_of(workers: Iterable[t.WorkerInfo]) -> list[tuple[str, int, int]]:
    """Each worker's (id, jobs running, concurrency)."""
    return [(w.id, len(w.running), w.concurrency) for w in workers]


def finished_at(job: t.Job) -> int:
    """When a finished job finished (ms)."""
    state: Any = job.state
    return int(
        job.completed_at
        or getattr(state, "failed_at", 0)
        or getattr(state, "expired_at", 0)
        or state.cancelled_at
    )


def server_ms(reply: Sequence[Any]) -> int:
    """Redis's clock (a ``TIME`` reply) in ms: the clock every stored time is on."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000
