"""What the dashboard's pages show, read from Redis (IO through an ``AsyncQuasar``) and made
ready for the templates: nothing here writes HTML, so nothing here needs escaping."""

from __future__ import annotations

import asyncio
import json
import pprint
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _paged as paged
from .. import _reading as reading
from .. import _rolling as rolling
from .. import _types as t
from .. import _views as views
from .._codec import unpack
from .._flow import NO_LIMIT, UNLIMITED, FlowInfo, Rate, cap_value, marker_of
from .._reading import arun
from ..aio import AsyncQuasar
from ..errors import InvalidArgument

SHOWN_MAX = 20_000  # characters of a payload or result shown; the rest is cut
LINKED_MAX = 100  # dependencies and dependents shown with their status
EVENTS_SHOWN = 200
PAGE_SIZE = 50
GROUPS_SHOWN = 20  # groups of each kind (in turn, waiting, full) on a queue's page


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
    return await arun(client, reading.queues(client.calls))


def counts_json(infos: Sequence[Any]) -> dict[str, Any]:
    """The live numbers of the pages: per queue, each status and whether it is paused."""
    queues = {}
    for info in infos:
        entry: dict[str, Any] = dict(views.counts_of(info.counts))
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
    events: tuple[views.Event, ...]  # the queue's pauses and resumes
    flow: FlowInfo  # its limits and groups
    held: tuple[str, ...]  # what holds it back now, in words
    progress: Mapping[str, t.Progress] = field(default_factory=dict)  # of executing jobs, by id

    @property
    def grouped(self) -> bool:
        """Whether a job of the page has a group (the list then shows a column of them)."""
        return any(job.group is not None for job in self.jobs)


async def queue_page(
    client: AsyncQuasar, queue: str, status: t.Status, after: str | None
) -> QueuePage | None:
    """A page of ``queue``'s jobs in ``status``; None if the namespace has no such queue."""
    info = next((i for i in await queue_infos(client) if i.name == queue), None)
    if info is None:
        return None
    page, events, flow = await asyncio.gather(
        client.page_jobs(queue, status, after=after, limit=PAGE_SIZE),
        arun(client, reading.queue_events(client.calls, queue, EVENTS_SHOWN)),
        client.flow(queue, groups=GROUPS_SHOWN),
    )
    held = tuple(held_back(flow))
    progress = await jobs_progress(client, page.jobs) if status is t.Status.EXECUTING else {}
    return QueuePage(info, status, page.jobs, page.next_cursor, tuple(events), flow, held, progress)


async def jobs_progress(client: AsyncQuasar, jobs: Sequence[t.Job]) -> dict[str, t.Progress]:
    """The last progress of each of ``jobs`` that reported some (one read each, a page at
    most: the list of a queue's running jobs shows it)."""
    infos = await asyncio.gather(*(client.get_job(job.id) for job in jobs))
    return {i.job.id: i.progress for i in infos if i is not None and i.progress is not None}


def progress_bar(progress: t.Progress) -> float | None:
    """The width of ``progress``'s bar, in percent: its value when it looks like a percentage
    (0 to 100), else None (shown as a number)."""
    return progress.value if 0 <= progress.value <= 100 else None


# --- flow control -------------------------------------------------------------------------------

#: The limits a queue's form sets, and a group's (the names ``set_limits`` takes).
QUEUE_LIMITS = ("rate", "concurrency", "group_rate", "group_concurrency")
GROUP_LIMITS = ("rate", "concurrency")


def held_back(info: FlowInfo) -> list[str]:
    """What holds the queue back now, in words (none: nothing does)."""
    return info.held_back(lambda at: f", until {t.readable_time(at)}")


async def flows(client: AsyncQuasar, queues: Sequence[str]) -> list[FlowInfo]:
    """The limits and group counts of each of ``queues`` (no group listed), for /metrics."""
    return list(await asyncio.gather(*(client.flow(queue, groups=0) for queue in queues)))


def limit_text(value: Any) -> str:
    """A limit for people: "none" when there is none."""
    return "none" if value is None else str(value)


def own_text(value: Any) -> str:
    """A group's own limit for people: its queue's "default", "unlimited", or the limit."""
    if value is None:
        return "default"
    return NO_LIMIT if value is UNLIMITED else str(value)


def limit_changes(form: Mapping[str, str], group: bool) -> dict[str, Any]:
    """The limits a form sets, as ``set_limits`` (``set_group_limits`` when ``group``) takes
    them: a blank field leaves its limit as it is, "none" (or "-") removes it, "unlimited" is
    a group's no limit at all. ``InvalidArgument`` for any other value that is not a limit, or
    for a form that sets nothing."""
    changes: dict[str, Any] = {}
    for name in GROUP_LIMITS if group else QUEUE_LIMITS:
        value = form.get(name, "").strip()
        word, label = value.lower(), name.replace("_", " ")
        if not value:
            continue
        marked = marker_of(value)
        if marked is None:
            changes[name] = None
        elif marked is UNLIMITED:
            if not group:
                raise InvalidArgument(
                    f"{label}: 'unlimited' is a group's own limit; 'none' removes the queue's"
                )
            changes[name] = UNLIMITED
        elif "rate" in name:
            changes[name] = Rate.parse(value)
        elif word.isdigit():
            cap_value(int(word), label, group)  # (InvalidArgument out of range)
            changes[name] = int(word)
        else:
            raise InvalidArgument(f"{label} must be a whole number, 'none' or blank, not {value!r}")
    if not changes:
        raise InvalidArgument("no limit given: fill in at least one field")
    return changes


def change_words(changes: Mapping[str, Any], group: bool) -> str:
    """``limit_changes``' result for the confirmation: "rate 10/s, concurrency removed"."""
    cleared = "back to the queue's default" if group else "removed"
    words = []
    for name, value in changes.items():
        shown = cleared if value is None else own_text(value)
        words.append(f"{name.replace('_', ' ')} {shown}")
    return ", ".join(words)


# --- a job --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobPage:
    """A job whole (``JobView``), its payload and result shown as text."""

    view: views.JobView
    payload: Shown | None
    result: Shown | None

    @property
    def info(self) -> t.JobInfo:
        return self.view.info


async def job_page(client: AsyncQuasar, job_id: str) -> JobPage | None:
    view = await arun(client, reading.job_view(client.calls, job_id, LINKED_MAX, EVENTS_SHOWN))
    if view is None:
        return None
    return JobPage(view, shown(view.info.job.raw_payload), shown(view.info.job.raw_result))


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
        *([("group", job.group)] if job.group is not None else []),
        ("enqueued at", when(job.inserted_at)),
        ("last attempt at", when(job.attempted_at)),
        ("finished at", when(job.completed_at)),
        ("deadline", when(job.deadline)),
        ("fence", str(job.fencing_version)),
        ("input", f"{job.input_ref} (revision {job.input_revision})"),
        ("on dependency failure", job.on_dependency_failure),
        ("dependencies pending", str(job.pending_dependencies)),
        ("dedup", job.dedup or "-"),
    ]
    for name in getattr(state, "__slots__", ()):
        value = getattr(state, name)
        timed = name.endswith("_at") or name == "deadline"
        shown_value = when(value) if timed and isinstance(value, int) else value
        rows.append((f"state: {name.replace('_', ' ')}", str(shown_value)))
    return rows


# --- actions ------------------------------------------------------------------------------------


async def purge(client: AsyncQuasar, queue: str, status: t.Status) -> int:
    """Delete every job of ``queue`` in ``status`` (completed, discarded, cancelled or expired), by
    pages (``_paged.py``, as ``quasar purge``); returns how many were deleted."""
    return (await arun(client, paged.purge_finished(client.calls, queue, status))).purged


async def retry_all_failed(client: AsyncQuasar, queue: str) -> int:
    """Retry every failed (discarded) job of ``queue``, by pages, each job's fence passed
    (``_paged.py``, as ``quasar retry --all-failed``); returns how many were retried."""
    flow = paged.retry_failed(client.calls, queue, "retried from the dashboard")
    return (await arun(client, flow)).changed
