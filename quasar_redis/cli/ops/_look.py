"""What ``quasar job`` and ``quasar jobs`` read: pages of jobs across statuses by cursor, a
job's dependents, its dependencies' statuses and its recent events, each read bounded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import _types as t
from ...client import Quasar
from ._show import when

#: statuses in the order ``quasar jobs`` lists a queue without --status
ORDER = (
    t.Status.EXECUTING,
    t.Status.AVAILABLE,
    t.Status.SCHEDULED,
    t.Status.RETRYABLE,
    t.Status.BLOCKED,
    t.Status.DISCARDED,
    t.Status.CANCELLED,
    t.Status.COMPLETED,
)
#: what people call some statuses (``--status failed``), and the status each names
ALIASES = {
    "failed": t.Status.DISCARDED,
    "succeeded": t.Status.COMPLETED,
    "running": t.Status.EXECUTING,
    "waiting": t.Status.AVAILABLE,
    "delayed": t.Status.SCHEDULED,
}
RELATED_SHOWN = 50  # dependents and dependencies shown with their statuses
EVENT_SCAN = 10_000  # stream entries read, newest first, to find a job's events
EVENT_PAGE = 1000
EVENTS_SHOWN = 50


def status_named(word: str) -> t.Status:
    """The status ``word`` names: a status (``discarded``) or a common word (``failed``)."""
    word = word.lower()
    if word in ALIASES:
        return ALIASES[word]
    return t.Status(word)


def status_words() -> list[str]:
    return [s.value for s in t.Status] + list(ALIASES)


@dataclass(frozen=True)
class Listing:
    """A page of ``quasar jobs``: each job with the status it was listed under."""

    jobs: list[tuple[t.Status, t.Job]]
    next_cursor: str | None


def list_page(
    q: Quasar, queue: str, statuses: Sequence[t.Status], after: str | None, limit: int
) -> Listing:
    """Up to ``limit`` jobs of ``queue`` in ``statuses`` (in that order), from the cursor
    ``after`` (``<status>:<page cursor>``, as ``next_cursor`` gives it; None: the start)."""
    index, inner = 0, None
    if after:
        word, _, rest = after.partition(":")
        try:
            index = [s.value for s in statuses].index(word)
        except ValueError:
            raise ValueError(f"{after!r} is not a cursor of this listing") from None
        inner = rest or None
    jobs: list[tuple[t.Status, t.Job]] = []
    while index < len(statuses) and len(jobs) < limit:
        status = statuses[index]
        page = q.page_jobs(queue, status, after=inner, limit=limit - len(jobs))
        jobs += [(status, job) for job in page.jobs]
        inner = page.next_cursor
        if inner is None:
            index += 1
    if index >= len(statuses):
        return Listing(jobs, None)
    return Listing(jobs, f"{statuses[index].value}:{inner or ''}")


def statuses_of(q: Quasar, ids: Sequence[str]) -> dict[str, str]:
    """The status of each job of ``ids`` (``missing`` for one that is gone), in one round trip."""
    infos = q.execute_many([q.calls.get_job(i) for i in ids]) if ids else []
    return {
        i: "missing" if info is None else info.status.value
        for i, info in zip(ids, infos, strict=True)
    }


def dependents(q: Quasar, job_id: str) -> tuple[int, list[str]]:
    """How many jobs depend on ``job_id``, and up to ``RELATED_SHOWN`` of them (SSCAN: bounded
    steps)."""
    key = q.keys.dependents(job_id)
    total = int(q.redis.scard(key))
    found: list[str] = []
    cursor: Any = 0
    while len(found) < RELATED_SHOWN:
        cursor, members = q.redis.sscan(key, cursor, count=RELATED_SHOWN)
        found += [m.decode("utf-8", "replace") for m in members]
        if int(cursor) == 0:
            break
    return total, sorted(found[:RELATED_SHOWN])


def _entry(entry_id: Any, fields: dict[Any, Any], job_id: str) -> dict[str, Any] | None:
    """The event of ``job_id`` in one stream entry, if it names the job (an entry lists the
    jobs of one run of the same event, space-separated, with their attempts)."""
    jobs = fields.get(b"job", b"").decode("utf-8", "replace").split(" ")
    if job_id not in jobs:
        return None
    attempts = fields.get(b"a", b"").decode().split(" ")
    position = jobs.index(job_id)
    ms = int((entry_id.decode() if isinstance(entry_id, bytes) else entry_id).split("-")[0])
    return {
        "at": when(ms),
        "event": fields.get(b"ev", b"?").decode("utf-8", "replace"),
        "queue": fields.get(b"q", b"?").decode("utf-8", "replace"),
        "attempt": attempts[position] if position < len(attempts) else None,
    }


def recent_events(q: Quasar, job_id: str) -> list[dict[str, Any]]:
    """The job's events among the newest ``EVENT_SCAN`` entries of the namespace's stream,
    oldest first (at most ``EVENTS_SHOWN``, the newest ones)."""
    found: list[dict[str, Any]] = []
    top, read = "+", 0
    while read < EVENT_SCAN and len(found) < EVENTS_SHOWN:
        entries = q.redis.xrevrange(q.keys.events, max=top, min="-", count=EVENT_PAGE)
        for entry_id, fields in entries:
            event = _entry(entry_id, fields, job_id)
            if event is not None:
                found.append(event)
        read += len(entries)
        if len(entries) < EVENT_PAGE:
            break
        top = f"({entries[-1][0].decode()}"
    return list(reversed(found[:EVENTS_SHOWN]))
