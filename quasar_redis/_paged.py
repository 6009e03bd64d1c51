"""Retry, cancel and purge of many jobs, written once for the CLI and the dashboard.

Each is a flow of ``_reading.py`` (``run``, ``arun``): it walks a queue by cursor, ``PAGE``
jobs a page, and sends ``BATCH`` calls per pipeline, each call its own short script, so that
Redis is never held for long. A retry passes each job's fence as its page read it: a job that
changed meanwhile is refused (``FenceChanged``) and left as it is. ``advance(n)`` is told of
every batch sent (a progress bar, or nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import _types as t
from . import _views as views
from ._calls import Call, CallBuilder
from ._partition_ops import every_keys
from ._reading import Read, server_now

PAGE = 500  # jobs read per page of a queue (``page_jobs``: by cursor, bounded)
BATCH = 100  # calls per pipeline

Advance = Callable[[int], None]


def _nothing(n: int) -> None:
    return None


@dataclass
class Tally:
    """What a change of many jobs did: how many changed (and dependents cancelled with them),
    and each refusal by id."""

    changed: int = 0
    cascaded: int = 0
    refused: list[tuple[str, t.JobError]] = field(default_factory=list)

    def count(self, job_ids: Sequence[str], results: Sequence[object]) -> None:
        for job_id, result in zip(job_ids, results, strict=True):
            if isinstance(result, t.JobRefused):
                self.refused.append((job_id, result.error))
            else:
                self.changed += 1
                self.cascaded += len(getattr(result, "cascaded", ()))


@dataclass
class Purged:
    """What a purge did: how many jobs it deleted of those it was shown."""

    purged: int = 0
    seen: int = 0

    @property
    def kept(self) -> int:
        return self.seen - self.purged


def _batches(
    calls: CallBuilder, queue: str, status: t.Status, before: int, act: Callable[..., Read[None]]
) -> Read[None]:
    """Run ``act(batch)`` on every batch of the queue's jobs in a finished ``status`` that
    finished before ``before``; pages run by finish time, so the walk ends at the first later
    one."""
    cursor: str | None = None
    partitioned = len(every_keys(calls)) > 1  # (pages in finish order within a partition only)
    while True:
        page = yield calls.page_jobs(queue, status, cursor, PAGE, None)
        jobs = [job for job in page.jobs if views.finished_at(job) < before]
        for start in range(0, len(jobs), BATCH):
            yield from act(jobs[start : start + BATCH])
        if page.next_cursor is None or (len(jobs) < len(page.jobs) and not partitioned):
            return
        cursor = page.next_cursor


def retry_failed(
    calls: CallBuilder, queue: str, reason: str, advance: Advance = _nothing
) -> Read[Tally]:
    """Retry every failed (discarded) job of ``queue`` that failed before now."""
    tally = Tally()

    def act(jobs: list[t.Job]) -> Read[None]:
        results = yield [calls.retry(j.id, j.fencing_version, reason) for j in jobs]
        tally.count([j.id for j in jobs], results)
        advance(len(jobs))

    before = (yield from server_now(calls)) + 1
    yield from _batches(calls, queue, t.Status.DISCARDED, before, act)
    return tally


def purge_finished(
    calls: CallBuilder,
    queue: str,
    status: t.Status,
    older_than_ms: int = 0,
    advance: Advance = _nothing,
) -> Read[Purged]:
    """Delete the queue's jobs in a finished ``status`` that finished more than
    ``older_than_ms`` ago (the script keeps those of the last minute, and those a blocked job
    depends on)."""
    done = Purged()
    before = (yield from server_now(calls)) - older_than_ms

    def act(jobs: list[t.Job]) -> Read[None]:
        ids = [j.id for j in jobs]
        done.purged += yield calls.purge(queue, status, ids, before)
        done.seen += len(ids)
        advance(len(ids))

    yield from _batches(calls, queue, status, before, act)
    return done


def by_ids(
    job_ids: Sequence[str], build: Callable[[str], Call[object]], advance: Advance = _nothing
) -> Read[Tally]:
    """Send ``build(id)`` for each id (once each), ``BATCH`` per pipeline."""
    unique = list(dict.fromkeys(job_ids))
    tally = Tally()
    for start in range(0, len(unique), BATCH):
        chunk = unique[start : start + BATCH]
        tally.count(chunk, (yield [build(i) for i in chunk]))
        advance(len(chunk))
    return tally
