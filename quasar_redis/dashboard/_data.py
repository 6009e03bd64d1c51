"""What the dashboard's pages show, read from Redis (IO through an ``AsyncQuasar``) and made
ready for the templates: nothing here writes HTML, so nothing here needs escaping."""

from __future__ import annotations

import asyncio
import inspect
import json
import pprint
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _paged as paged
from .. import _reading as reading
from .. import _types as t
from .. import _views as views
from .._binding import RECEIVED
from .._call_codec import args_of
from .._codec import unpack
from .._flow import NO_LIMIT, UNLIMITED, FlowInfo, Rate, cap_value, marker_of
from .._reading import arun
from ..aio import AsyncQuasar
from ..cli.ops._look import ORDER as LISTING_ORDER
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


# --- a queue ------------------------------------------------------------------------------------


#: The statuses in the order ``quasar queues`` and ``quasar jobs`` list them.
ORDER: tuple[t.Status, ...] = LISTING_ORDER
#: The view of every status at once (``quasar jobs`` without --status).
ALL = "all"
#: Jobs a search by id prefix looks through (the first ones listed): bounded, whatever the size
#: of the queue.
SEARCH_SCANNED = 1000
SEARCH_SHOWN = 20


def busiest(counts: t.QueueCounts) -> t.Status | None:
    """The status holding most of the queue's jobs (ties: the first in ``ORDER``); None for an
    empty queue."""
    found = max(ORDER, key=lambda s: (int(getattr(counts, s.value)), -ORDER.index(s)))
    return found if int(getattr(counts, found.value)) else None


@dataclass(frozen=True, slots=True)
class QueuePage:
    info: Any  # QueueInfo
    status: t.Status | None  # None: every status (``ALL``)
    jobs: tuple[tuple[t.Status, t.Job], ...]  # each job with the status it was listed under
    next_cursor: str | None
    events: tuple[views.Event, ...]  # the queue's pauses and resumes
    flow: FlowInfo  # its limits and groups
    held: tuple[str, ...]  # what holds it back now, in words
    progress: Mapping[str, t.Progress] = field(default_factory=dict)  # of executing jobs, by id

    @property
    def view(self) -> str:
        """The tab shown: a status's name, or ``ALL``."""
        return ALL if self.status is None else self.status.value

    @property
    def grouped(self) -> bool:
        """Whether a job of the page has a group (the list then shows a column of them)."""
        return any(job.group is not None for _, job in self.jobs)

    @property
    def running(self) -> bool:
        """Whether the page may list running jobs (the list then shows their progress)."""
        return self.status in (None, t.Status.EXECUTING)


async def queue_page(
    client: AsyncQuasar, info: Any, status: t.Status | None, after: str | None
) -> QueuePage:
    """A page of the jobs of the queue ``info`` (a ``QueueInfo``) in ``status`` (None: every
    status, in ``ORDER``); ValueError for a cursor of another listing."""
    queue = info.name
    statuses = ORDER if status is None else (status,)
    views.listing_start(statuses, after)  # (a bad cursor: refused before any read starts)
    listing, events, flow = await asyncio.gather(
        arun(client, reading.listing(client.calls, queue, statuses, after, PAGE_SIZE)),
        arun(client, reading.queue_events(client.calls, queue, EVENTS_SHOWN)),
        client.flow(queue, groups=GROUPS_SHOWN),
    )
    held = tuple(held_back(flow, info.counts.now))
    running = [job for s, job in listing.jobs if s is t.Status.EXECUTING]
    progress = await jobs_progress(client, running) if running else {}
    jobs = tuple(listing.jobs)
    return QueuePage(info, status, jobs, listing.next_cursor, tuple(events), flow, held, progress)


async def find_jobs(client: AsyncQuasar, queue: str, prefix: str) -> tuple[list[str], bool]:
    """The ids of ``queue``'s jobs that start with ``prefix`` (at most ``SEARCH_SHOWN``), among
    its first ``SEARCH_SCANNED`` listed (every status, in ``ORDER``); and whether the search
    stopped before the end of the queue."""
    found: list[str] = []
    after: str | None = None
    scanned = 0
    while scanned < SEARCH_SCANNED and len(found) < SEARCH_SHOWN:
        limit = min(PAGE_SIZE * 4, SEARCH_SCANNED - scanned)
        listing = await arun(client, reading.listing(client.calls, queue, ORDER, after, limit))
        scanned += len(listing.jobs)
        found += [job.id for _, job in listing.jobs if job.id.startswith(prefix)]
        after = listing.next_cursor
        if after is None:
            return found[:SEARCH_SHOWN], False
    return found[:SEARCH_SHOWN], True


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


def held_back(info: FlowInfo, now_ms: float) -> list[str]:
    """What holds the queue back now, in words (none: nothing does), its rate's time relative
    to ``now_ms`` (the page shows the exact time on hover)."""
    return info.held_back(lambda at: f", until {relative(at, now_ms)}")


def relative(ms: float, now_ms: float) -> str:
    """``3 min ago``, ``in 20 s``, ``just now``: ``ms`` against ``now_ms``."""
    delta = (now_ms - ms) / 1000
    if abs(delta) < 1:
        return "just now"
    return f"{span(abs(delta))} ago" if delta > 0 else f"in {span(abs(delta))}"


def span(seconds: float) -> str:
    """A length of time in its largest whole unit: ``20 s``, ``3 min``, ``5 h``, ``2 d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit}"
    return f"{max(0.0, seconds) // 1:.0f} s"


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
class At:
    """A time shown (ms since the epoch, server clock): relative, its ISO 8601 form on hover."""

    ms: int


@dataclass(frozen=True, slots=True)
class Argument:
    """A named argument of a job's call, its value as text (cut at ``ARGUMENT_MAX``)."""

    name: str
    text: str


ARGUMENT_MAX = 2_000
#: What a workflow step's first parameter gets: the result of the step before, at run time.
RECEIVED_TEXT = "(the result of the step before, when it runs)"


@dataclass(frozen=True, slots=True)
class JobPage:
    """A job whole (``JobView``), its payload and result shown as text, and the arguments of
    its call (None: the payload is not a task call)."""

    view: views.JobView
    payload: Shown | None
    result: Shown | None
    arguments: tuple[Argument, ...] | None = None

    @property
    def info(self) -> t.JobInfo:
        return self.view.info


async def job_page(client: AsyncQuasar, job_id: str, app: Any = None) -> JobPage | None:
    view = await arun(client, reading.job_view(client.calls, job_id, LINKED_MAX, EVENTS_SHOWN))
    if view is None:
        return None
    job = view.info.job
    return JobPage(view, shown(job.raw_payload), shown(job.raw_result), call_arguments(job, app))


def call_arguments(job: t.Job, app: Any = None) -> tuple[Argument, ...] | None:
    """The arguments of the call ``job`` runs, named after the parameters of its task when
    ``app`` (an ``App``) declares that task, else ``arg0``, ``arg1``... and the keywords' names;
    None if its payload is no task call."""
    if job.raw_payload is None:
        return None
    try:
        if app is None:
            payload = _decoded(job.raw_payload)
        else:
            payload = app.codec.load(job.raw_payload, "payload", job.id)
        args, kwargs = args_of(payload)
    except Exception:  # (not a task call, or the app's serializer cannot read it)
        return None
    received = [RECEIVED] if payload.get("r") is not None else []
    task = app.tasks.get(job.stage) if app is not None else None
    named = _bound(task.fn, [*received, *args], kwargs) if task is not None else None
    if named is None:
        named = [(f"arg{i}", v) for i, v in enumerate([*received, *args])] + list(kwargs.items())
    return tuple(Argument(name, _argument_text(value)) for name, value in named)


def _decoded(data: bytes) -> Any:
    try:
        return unpack(data)
    except Exception:  # not msgpack: maybe the app's JSON serializer
        return json.loads(data)


def _bound(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]] | None:
    """``args`` and ``kwargs`` by the names of ``fn``'s parameters; None if they do not fit."""
    try:
        return list(inspect.signature(fn).bind_partial(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):
        return None


def _argument_text(value: Any) -> str:
    if value is RECEIVED:
        return RECEIVED_TEXT
    text = _readable(value)
    return text if len(text) <= ARGUMENT_MAX else text[:ARGUMENT_MAX] + " …"


Field = tuple[str, "str | At"]


def job_fields(job: t.Job, now: int) -> tuple[list[Field], list[Field]]:
    """The fields of ``job`` people read first, and its internals (shown folded): each as (name,
    text or ``At``); the internals also give each time as stored (ms since the epoch)."""

    def when(ms: int | None) -> str | At:
        return "-" if ms is None else At(ms)

    state = job.state
    times = {
        "enqueued": job.inserted_at,
        "last attempt": job.attempted_at,
        "finished": job.completed_at,
        "deadline": job.deadline,
    }
    rows: list[Field] = [
        ("id", job.id),
        ("queue", job.queue),
        ("task", job.stage),
        ("status", job.status(now).value),
        ("attempt", f"{job.attempt} of {job.max_attempts}"),
        ("priority", str(job.priority)),
        *([("group", job.group)] if job.group is not None else []),
        *((name, when(ms)) for name, ms in times.items()),
        ("dependencies pending", str(job.pending_dependencies)),
    ]
    internals: list[Field] = [
        ("state", type(state).__name__),
        ("fence", str(job.fencing_version)),
        ("input", f"{job.input_ref} (revision {job.input_revision})"),
        ("on dependency failure", job.on_dependency_failure),
        ("dedup", job.dedup or "-"),
    ]
    for name in getattr(state, "__slots__", ()):
        value = getattr(state, name)
        label = f"state: {name.replace('_', ' ')}"
        if (name.endswith("_at") or name == "deadline") and isinstance(value, int):
            rows.append((label, At(value)))
            times[label] = value
        else:
            rows.append((label, str(value)))
    internals += [(f"{name} (ms)", str(ms)) for name, ms in times.items() if ms is not None]
    return rows, internals


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
