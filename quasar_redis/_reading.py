"""Reading the read model (``_views.py``), written once for both clients.

Each read is a flow: a generator that yields what it asks for (a ``Call``, a list of calls
sent in one pipeline, or a ``RedisAsk`` of one redis-py method) and is sent the reply.
``run`` drives a flow on a ``Quasar``, ``arun`` on an ``AsyncQuasar``: the CLI and the
Prometheus endpoint of a worker use the first, the dashboard the second. Every read is bounded
(a page, a cursor step, a capped scan).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from . import _types as t
from . import _views as views
from ._calls import Call, CallBuilder
from ._dependency_calls import Dependencies
from ._partition_ops import keys_of

if TYPE_CHECKING:
    from .aio import AsyncQuasar
    from .client import Quasar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RedisAsk:
    """One redis-py method of the client's connection, by name, with its arguments."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Ask = Call[Any] | list[Call[Any]] | RedisAsk
Read = Generator[Ask, Any, T]


def run(q: Quasar, flow: Read[T]) -> T:
    """Drive ``flow`` on the sync client."""
    try:
        ask = next(flow)
        while True:
            if isinstance(ask, RedisAsk):
                reply = getattr(q.redis, ask.method)(*ask.args, **ask.kwargs)
            else:
                reply = q.execute_many(ask) if isinstance(ask, list) else q.execute(ask)
            ask = flow.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def arun(q: AsyncQuasar, flow: Read[T]) -> T:
    """Drive ``flow`` on the asyncio client."""
    try:
        ask = next(flow)
        while True:
            if isinstance(ask, RedisAsk):
                reply = await getattr(q.redis, ask.method)(*ask.args, **ask.kwargs)
            else:
                reply = await (q.execute_many(ask) if isinstance(ask, list) else q.execute(ask))
            ask = flow.send(reply)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def server_now(calls: CallBuilder) -> Read[int]:
    """Redis's clock, in ms."""
    return views.server_ms((yield RedisAsk("time")))


def queues(calls: CallBuilder) -> Read[list[t.QueueInfo]]:
    """Every queue of the namespace, by name."""
    return list((yield calls.queues()))


def workers(calls: CallBuilder) -> Read[list[t.WorkerInfo]]:
    """The live workers of the namespace."""
    return list((yield calls.workers()))


def listing(
    calls: CallBuilder, queue: str, statuses: Sequence[t.Status], after: str | None, limit: int
) -> Read[views.Listing]:
    """Up to ``limit`` jobs of ``queue`` in ``statuses`` (in that order), from the cursor
    ``after`` (None: the start); ValueError for a cursor of another listing."""
    index, inner = views.listing_start(statuses, after)
    jobs: list[tuple[t.Status, t.Job]] = []
    while index < len(statuses) and len(jobs) < limit:
        status = statuses[index]
        page = yield calls.page_jobs(queue, status, inner, limit - len(jobs), None)
        jobs += [(status, job) for job in page.jobs]
        inner = page.next_cursor
        if inner is None:
            index += 1
    return views.Listing(jobs, views.listing_cursor(statuses, index, inner))


def statuses(calls: CallBuilder, ids: Sequence[str]) -> Read[tuple[views.Linked, ...]]:
    """The status of each job of ``ids``, in one round trip."""
    infos = (yield [calls.get_job(i) for i in ids]) if ids else []
    return views.linked(ids, infos)


def dependents(calls: CallBuilder, job_id: str, limit: int) -> Read[views.Dependents]:
    """How many jobs depend on ``job_id``, and up to ``limit`` of them (SSCAN: bounded steps)."""
    key = keys_of(calls, job_id).dependents(job_id)
    total = yield RedisAsk("scard", (key,))
    found: list[Any] = []
    cursor: Any = 0
    while len(found) < limit:
        cursor, members = yield RedisAsk("sscan", (key, cursor), {"count": limit})
        found += members
        if int(cursor) == 0:
            break
    return views.dependents(total, found, limit)


def events(
    calls: CallBuilder, job: str | None, queue: str | None, limit: int
) -> Read[list[views.Event]]:
    """Events of ``job`` (else the queue's own events of ``queue``) among the newest
    ``EVENTS_SCANNED`` entries of the stream: the newest ``limit``, oldest first."""
    found: list[views.Event] = []
    top, read, stream = "+", 0, keys_of(calls, job).events
    while read < views.EVENTS_SCANNED and len(found) < limit:
        entries = yield RedisAsk(
            "xrevrange", (stream,), {"max": top, "min": "-", "count": views.EVENT_PAGE}
        )
        decoded = [e for entry in entries for e in reversed(views.decode_event(*entry))]
        if job is not None:
            found += views.events_of_job(decoded, job)
        else:
            found += views.events_of_queue(decoded, queue or "")
        read += len(entries)
        if len(entries) < views.EVENT_PAGE:
            break
        top = f"({views.decode_event(*entries[-1])[0].id}"
    return list(reversed(found[:limit]))


def job_events(calls: CallBuilder, job_id: str, limit: int) -> Read[list[views.Event]]:
    """The job's events (see ``events``)."""
    return (yield from events(calls, job_id, None, limit))


def queue_events(calls: CallBuilder, queue: str, limit: int) -> Read[list[views.Event]]:
    """The queue's pauses and resumes (see ``events``)."""
    return (yield from events(calls, None, queue, limit))


def job_view(
    calls: CallBuilder, job_id: str, linked_max: int, events_max: int
) -> Read[views.JobView | None]:
    """The job whole (``JobView``), at most ``linked_max`` dependencies and dependents (100 at
    most: the first by id) with their statuses; None if there is no such job. The job and
    its dependencies and dependents are read in one round trip (lua/dependencies.lua)."""
    info, read = yield [calls.get_job(job_id), calls.dependencies(job_id, min(linked_max, 100))]
    if info is None or not isinstance(read, Dependencies):
        return None
    dependencies = tuple(views.Linked(d.id, d.status) for d in read.dependencies[:linked_max])
    found = views.Dependents(read.dependents_total, tuple(d.id for d in read.dependents))
    dependent_statuses = tuple(
        views.Linked(d.id, views.status_named(d.status)) for d in read.dependents
    )
    recent = yield from job_events(calls, job_id, events_max)
    return views.JobView(info, dependencies, found, dependent_statuses, tuple(recent))
