"""What the dashboard's pages show, read from Redis (IO through an ``AsyncQuasar``) and made
ready for the templates: nothing here writes HTML, so nothing here needs escaping."""

from __future__ import annotations

import asyncio
import json
import pprint
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _rolling as rolling
from .. import _types as t
from .._codec import unpack
from ..aio import AsyncQuasar

SHOWN_MAX = 20_000  # characters of a payload or result shown; the rest is cut
LINKED_MAX = 100  # dependencies and dependents shown with their status
EVENTS_SCANNED = 10_000  # stream entries looked through for a job's events (the stream's cap)
EVENTS_SHOWN = 200
PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class Shown:
    """A payload or result as text: ``form`` says how it was read; ``cut`` how many characters
    were left out."""

    text: str
    form: str
    size: int
    cut: int = 0


def shown(data: bytes | None) -> Shown | None:
    """Bytes stored by a producer or a worker, decoded as msgpack, else JSON, else shown as
    bytes; cut at ``SHOWN_MAX`` characters."""
    if data is None:
        return None
    try:
        value, form = unpack(data), "msgpack"
    except Exception:  # not msgpack: maybe the app's JSON serializer
        try:
            value, form = json.loads(data), "JSON"
        except ValueError:
            value, form = data, "bytes"
    text = _readable(value)
    cut = max(0, len(text) - SHOWN_MAX)
    return Shown(text[:SHOWN_MAX], form, len(data), cut)


def _readable(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return pprint.pformat(value, width=100, sort_dicts=False)


# --- overview -----------------------------------------------------------------------------------


async def queue_infos(client: AsyncQuasar) -> list[Any]:
    """Every queue of the namespace (``QueueInfo``: name, counts, paused), by name."""
    return list(await client.queues())


def counts_json(infos: Sequence[Any]) -> dict[str, Any]:
    """The live numbers of the pages: per queue, each status and whether it is paused."""
    queues = {}
    for info in infos:
        entry: dict[str, Any] = {s.value: getattr(info.counts, s.value) for s in t.Status}
        entry["paused"] = bool(info.paused)
        queues[info.name] = entry
    return {"queues": queues}


@dataclass(frozen=True, slots=True)
class Chart:
    """A small line chart: its polyline points (in a 300 x 60 box), the largest value and the
    newest one, as text."""

    title: str
    points: str
    lone: tuple[tuple[str, str], ...]  # points with no known neighbour: drawn as dots
    top: str
    last: str
    empty: bool


CHART_W, CHART_H = 300, 60


def chart(title: str, values: Sequence[float | None], unit: str) -> Chart:
    known = [v for v in values if v is not None]
    top = max(known, default=0.0)
    scale = top or 1.0
    step = CHART_W / max(1, len(values) - 1)
    known_at = [i for i, v in enumerate(values) if v is not None]
    dots = tuple(
        (f"{i * step:.1f}", f"{CHART_H - (v / scale) * (CHART_H - 4) - 2:.1f}")
        for i, v in enumerate(values)
        if v is not None
    )
    newest = next((v for v in reversed(values) if v is not None), None)
    return Chart(
        title,
        " ".join(f"{x},{y}" for x, y in dots),
        tuple(dot for dot, i in zip(dots, known_at, strict=True) if _lone(i, values)),
        f"{top:.3g} {unit}",
        "-" if newest is None else f"{newest:.3g} {unit}",
        not known,
    )


def _lone(i: int, values: Sequence[float | None]) -> bool:
    before = i > 0 and values[i - 1] is not None
    after = i + 1 < len(values) and values[i + 1] is not None
    return not (before or after)


async def charts(client: AsyncQuasar, queue: str | None = None) -> list[Chart]:
    """Throughput, failures and enqueue-to-start latency over the last ``WINDOW`` buckets, from
    the rolling store the workers write (one pipeline)."""
    now_ms = await client.server_time_ms()
    commands = rolling.read_commands(client.keys, now_ms)
    pipe = client.redis.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    series = rolling.points(now_ms, await pipe.execute())
    return [
        chart("Jobs completed per second", rolling.throughput(series, queue), "/s"),
        chart("Failed attempts per second", rolling.failures(series, queue), "/s"),
        chart("Enqueue to start (mean)", rolling.latency_ms(series, queue), "ms"),
    ]


# --- a queue ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueuePage:
    info: Any  # QueueInfo
    status: t.Status
    jobs: tuple[t.Job, ...]
    next_cursor: str | None
    events: tuple[Event, ...]  # the queue's pauses and resumes


async def queue_page(
    client: AsyncQuasar, queue: str, status: t.Status, after: str | None
) -> QueuePage | None:
    """A page of ``queue``'s jobs in ``status``; None if the namespace has no such queue."""
    info = next((i for i in await client.queues() if i.name == queue), None)
    if info is None:
        return None
    page, events = await asyncio.gather(
        client.page_jobs(queue, status, after=after, limit=PAGE_SIZE), queue_events(client, queue)
    )
    return QueuePage(info, status, page.jobs, page.next_cursor, events)


# --- a job --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Linked:
    """A job named by another (a dependency or a dependent) and its status, if it still exists."""

    id: str
    status: str


@dataclass(frozen=True, slots=True)
class Event:
    at: str
    event: str
    queue: str
    attempt: str


@dataclass(frozen=True, slots=True)
class JobPage:
    info: t.JobInfo
    payload: Shown | None
    result: Shown | None
    errors: tuple[t.ErrorInfo, ...]  # oldest first
    dependencies: tuple[Linked, ...]
    dependents: tuple[Linked, ...]
    more_dependents: bool
    events: tuple[Event, ...]


async def job_page(client: AsyncQuasar, job_id: str) -> JobPage | None:
    info = await client.get_job(job_id)
    if info is None:
        return None
    job = info.job
    dependent_ids, more = await _dependents(client, job_id)
    dependencies, dependents, events = await asyncio.gather(
        _linked(client, job.dependencies[:LINKED_MAX]),
        _linked(client, dependent_ids),
        job_events(client, job_id),
    )
    errors = info.errors or ((job.error,) if job.error else ())
    return JobPage(
        info,
        shown(job.raw_payload),
        shown(job.raw_result),
        errors,
        dependencies,
        dependents,
        more or len(job.dependencies) > LINKED_MAX,
        events,
    )


async def _dependents(client: AsyncQuasar, job_id: str) -> tuple[list[str], bool]:
    """Up to ``LINKED_MAX`` ids of the jobs depending on ``job_id`` (SSCAN, bounded), and
    whether there are more."""
    key = client.keys.dependents(job_id)
    found: list[str] = []
    cursor: Any = 0
    for _ in range(20):
        cursor, members = await client.redis.sscan(key, cursor, count=LINKED_MAX)
        found += [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        if int(cursor) == 0 or len(found) > LINKED_MAX:
            break
    return sorted(found)[:LINKED_MAX], len(found) > LINKED_MAX or int(cursor) != 0


async def _linked(client: AsyncQuasar, ids: Sequence[str]) -> tuple[Linked, ...]:
    infos = await asyncio.gather(*(client.get_job(i) for i in ids))
    return tuple(
        Linked(i, "deleted" if info is None else info.status.value)
        for i, info in zip(ids, infos, strict=True)
    )


async def job_events(client: AsyncQuasar, job_id: str) -> tuple[Event, ...]:
    """The job's entries in the namespace's event stream (capped: older ones are gone), oldest
    first; looks through at most ``EVENTS_SCANNED`` entries, newest first, in chunks."""
    return await _scan_events(client, lambda i, fields: _events_of(job_id, i, fields))


async def queue_events(client: AsyncQuasar, queue: str) -> tuple[Event, ...]:
    """The queue's own events (``QUEUE_EVENTS``: paused, resumed), oldest first, found as a
    job's are."""
    return await _scan_events(client, lambda i, fields: _queue_event_of(queue, i, fields))


async def _scan_events(
    client: AsyncQuasar, pick: Callable[[Any, dict[Any, Any]], list[Event]]
) -> tuple[Event, ...]:
    stream, last = client.keys.events, "+"
    found: list[Event] = []
    scanned = 0
    while scanned < EVENTS_SCANNED and len(found) < EVENTS_SHOWN:
        entries = await client.redis.xrevrange(stream, max=last, count=1000)
        if last != "+":
            entries = entries[1:]  # (the boundary entry was seen already)
        if not entries:
            break
        scanned += len(entries)
        for entry_id, fields in entries:
            found += pick(entry_id, fields)
        last = entries[-1][0]
    return tuple(reversed(found[:EVENTS_SHOWN]))


def _text(fields: dict[Any, Any], name: str) -> str:
    value = fields.get(name.encode(), b"")
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _at(entry_id: Any) -> str:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return t.readable_time(int(text.split("-")[0]))


def _queue_event_of(queue: str, entry_id: Any, fields: dict[Any, Any]) -> list[Event]:
    event = _text(fields, "ev")
    if event not in t.QUEUE_EVENTS or _text(fields, "q") != queue:
        return []
    return [Event(_at(entry_id), event, queue, "")]


def _events_of(job_id: str, entry_id: Any, fields: dict[Any, Any]) -> list[Event]:
    jobs = _text(fields, "job").split(" ")
    if job_id not in jobs:
        return []
    at, attempts = _at(entry_id), _text(fields, "a").split(" ")
    made = []
    for i, name in enumerate(jobs):
        if name == job_id:
            attempt = attempts[i] if i < len(attempts) else "?"
            made.append(Event(at, _text(fields, "ev"), _text(fields, "q"), attempt))
    return list(reversed(made))  # (newest first, as the entries are read)


def job_fields(job: t.Job, now: int) -> list[tuple[str, str]]:
    """Every stored field of ``job`` as (name, text), times readable."""

    def when(ms: int | None) -> str:
        return "-" if ms is None else f"{t.readable_time(ms)} ({ms})"

    state = job.state
    rows = [
        ("id", job.id),
        ("queue", job.queue),
        ("task", job.stage),
        ("status", job.status(now).value),
        ("state", type(state).__name__),
        ("attempt", f"{job.attempt} of {job.max_attempts}"),
        ("priority", str(job.priority)),
        ("enqueued at", when(job.inserted_at)),
        ("last attempt at", when(job.attempted_at)),
        ("finished at", when(job.completed_at)),
        ("fence", str(job.fencing_version)),
        ("input", f"{job.input_ref} (revision {job.input_revision})"),
        ("on dependency failure", job.on_dependency_failure),
        ("dependencies pending", str(job.pending_dependencies)),
    ]
    for name in getattr(state, "__slots__", ()):
        value = getattr(state, name)
        shown_value = when(value) if name.endswith("_at") and isinstance(value, int) else value
        rows.append((f"state: {name.replace('_', ' ')}", str(shown_value)))
    return rows


# --- actions ------------------------------------------------------------------------------------


async def purge(client: AsyncQuasar, queue: str, status: t.Status) -> int:
    """Delete every job of ``queue`` in ``status`` (completed, discarded or cancelled), a page
    of 100 per call; returns how many were deleted."""
    deleted, after = 0, None
    while True:
        page = await client.page_jobs(queue, status, after=after, limit=100)
        if page.jobs:
            deleted += await client.purge(queue, status, [job.id for job in page.jobs])
        if page.next_cursor is None:
            return deleted
        after = page.next_cursor


async def retry_all_failed(client: AsyncQuasar, queue: str) -> int:
    """Retry every failed (discarded) job of ``queue``, a page of 100 per round trip; returns
    how many were retried."""
    retried, after = 0, None
    while True:
        page = await client.page_jobs(queue, t.Status.DISCARDED, after=after, limit=100)
        if page.jobs:
            calls = [
                client.calls.retry(job.id, None, "retried from the dashboard", None)
                for job in page.jobs
            ]
            results = await client.execute_many(calls)
            retried += sum(isinstance(r, t.JobApplied) for r in results)
        if page.next_cursor is None:
            return retried
        after = page.next_cursor
