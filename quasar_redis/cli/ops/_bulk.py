"""``quasar retry``, ``quasar cancel`` and ``quasar purge``: changes to many jobs, made in
batches of ``BATCH`` calls (each call its own short script, sent in one pipeline), with a
progress bar on a terminal and a count of what changed at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ... import _types as t
from ..._calls import Call
from ._context import Operator, done, operating, operator_options
from ._durations import parse_duration
from ._look import status_named

BATCH = 100  # calls per pipeline: each is one short script, so Redis is never held for long
PAGE = 500  # jobs read per page of a queue (``page_jobs``: by cursor, bounded)
REFUSALS_SHOWN = 20
REASON = "retried by operator"


@dataclass
class Tally:
    """What a bulk command changed and what was refused, by id."""

    changed: int = 0
    cascaded: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "cascaded": self.cascaded,
            "refused": [{"id": i, "reason": r} for i, r in self.refused],
        }


@contextmanager
def progress(op: Operator, what: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A callback that advances a progress bar on stderr (a terminal only) by n."""
    if not op.interactive:
        yield lambda n: None
        return
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=op.err, transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def refusal_text(error: t.JobError) -> str:
    reasons = {
        t.NotFailed: "not failed",
        t.TerminalJob: "already finished",
        t.MissingJob: "no such job",
        t.AttemptLimitReached: "out of attempts",
        t.FenceChanged: "changed meanwhile, left as it is",
    }
    for kind, text in reasons.items():
        if isinstance(error, kind):
            return text
    return type(error).__name__


def check_ids(op: Operator, job_ids: Sequence[str]) -> None:
    """A one-line error, before anything changes, when an id is malformed or names no job."""
    op.require_ids(job_ids)
    missing: list[str] = []
    for start in range(0, len(job_ids), BATCH):
        chunk = list(job_ids[start : start + BATCH])
        infos = op.q.execute_many([op.q.calls.get_job(i) for i in chunk])  # (malformed: raises)
        missing += [i for i, info in zip(chunk, infos, strict=True) if info is None]
    if missing:
        op.require_namespace()
        shown = ", ".join(repr(i) for i in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise click.ClickException(
            f"no job {shown}{more} in namespace {op.namespace!r}: nothing was changed"
        )


def apply(op: Operator, calls: Sequence[tuple[str, Call[Any]]], tally: Tally) -> None:
    """Send ``calls`` (id, call) in one pipeline and count what each did."""
    results = op.q.execute_many([call for _, call in calls])
    for (job_id, _), result in zip(calls, results, strict=True):
        if isinstance(result, t.JobRefused):
            tally.refused.append((job_id, refusal_text(result.error)))
        else:
            tally.changed += 1
            tally.cascaded += len(getattr(result, "cascaded", ()))


def by_ids(
    op: Operator, given: Sequence[str], what: str, build: Callable[[str], Call[Any]]
) -> Tally:
    job_ids = list(dict.fromkeys(given))  # (an id given twice is changed once)
    check_ids(op, job_ids)
    tally = Tally()
    with progress(op, what, len(job_ids)) as advance:
        for start in range(0, len(job_ids), BATCH):
            chunk = job_ids[start : start + BATCH]
            apply(op, [(i, build(i)) for i in chunk], tally)
            advance(len(chunk))
    return tally


def report(op: Operator, tally: Tally, verb: str, extra: dict[str, Any] | None = None) -> None:
    """The outcome: JSON, or a line per refusal and a count; exit 1 if any was refused."""
    if op.as_json:
        op.emit_json(tally.document() | (extra or {}))
    else:
        for job_id, reason in tally.refused[:REFUSALS_SHOWN]:
            click.echo(f"{job_id}: not {verb}: {reason}", err=True)
        if len(tally.refused) > REFUSALS_SHOWN:
            click.echo(f"... and {len(tally.refused) - REFUSALS_SHOWN} more refused", err=True)
        cascade = f" (and {tally.cascaded} dependents with them)" if tally.cascaded else ""
        refused = f"; {len(tally.refused)} refused" if tally.refused else ""
        click.echo(f"{verb} {tally.changed} job(s){cascade}{refused}")
    done(not tally.refused)


def finished_at(job: t.Job) -> int:
    state: Any = job.state
    return int(job.completed_at or getattr(state, "failed_at", 0) or state.cancelled_at)


def finished_pages(
    op: Operator, queue: str, status: t.Status, before: int
) -> Iterator[list[t.Job]]:
    """Pages of the queue's jobs in a finished ``status`` that finished before ``before``
    (pages run by finish time: the walk ends at the first later one)."""
    cursor: str | None = None
    while True:
        page = op.q.page_jobs(queue, status, after=cursor, limit=PAGE)
        jobs = [job for job in page.jobs if finished_at(job) < before]
        if jobs:
            yield jobs
        if page.next_cursor is None or len(jobs) < len(page.jobs):
            return
        cursor = page.next_cursor


def ids_or_queue(job_ids: tuple[str, ...], queue: str | None, flag: str) -> None:
    if bool(job_ids) == bool(queue):
        raise click.UsageError(f"give job IDs or {flag} QUEUE (one of the two)")


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[ID]...")
@click.option(
    "--all-failed",
    "queue",
    metavar="QUEUE",
    help="Retry every failed (discarded) job of QUEUE that failed before now.",
)
@operator_options
def retry(
    job_ids: tuple[str, ...], queue: str | None, redis_url: str, namespace: str, as_json: bool
) -> None:
    """Retry failed jobs: each runs again, with one more attempt allowed."""
    ids_or_queue(job_ids, queue, "--all-failed")
    with operating(redis_url, namespace, as_json) as op:
        if queue is None:
            tally = by_ids(op, job_ids, "retrying", lambda i: op.q.calls.retry(i, None, REASON))
            report(op, tally, "retried")
            return
        op.require_queue(queue)
        tally, start = Tally(), op.server_now()
        total = op.q.counts(queue).discarded
        with progress(op, f"retrying {queue}", total) as advance:
            for jobs in finished_pages(op, queue, t.Status.DISCARDED, start + 1):
                for s in range(0, len(jobs), BATCH):
                    chunk = jobs[s : s + BATCH]
                    calls = [
                        (j.id, op.q.calls.retry(j.id, j.fencing_version, REASON)) for j in chunk
                    ]
                    apply(op, calls, tally)
                    advance(len(chunk))
        report(op, tally, "retried", {"queue": queue})


REASON = "retried by operator"


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@operator_options
def cancel(job_ids: tuple[str, ...], redis_url: str, namespace: str, as_json: bool) -> None:
    """Cancel jobs that have not finished (and their dependents that can then never run)."""
    with operating(redis_url, namespace, as_json) as op:
        tally = by_ids(
            op, job_ids, "cancelling", lambda i: op.q.calls.cancel(i, None, "cancelled by operator")
        )
        report(op, tally, "cancelled")


PURGEABLE = (t.Status.COMPLETED, t.Status.DISCARDED, t.Status.CANCELLED)


def _purge_status(ctx: click.Context, param: click.Parameter, value: str) -> t.Status:
    try:
        status = status_named(value)
    except ValueError:
        status = None
    if status not in PURGEABLE:
        raise click.BadParameter(
            f"{value!r}: purge takes succeeded (completed), failed (discarded) or cancelled"
        )
    return status


def _older_than(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("queue")
@click.option(
    "--status",
    "-s",
    required=True,
    metavar="STATUS",
    callback=_purge_status,
    help="succeeded (completed), failed (discarded) or cancelled.",
)
@click.option(
    "--older-than",
    metavar="DURATION",
    callback=_older_than,
    help="Only jobs finished longer ago than this (90s, 15m, 2h, 7d, 1h30m).",
)
@operator_options
def purge(
    queue: str,
    status: t.Status,
    older_than: int | None,
    redis_url: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Delete QUEUE's finished jobs in STATUS for good. Jobs finished in the last minute stay
    (a worker's re-sent report must still find them), as do jobs a blocked job depends on."""
    with operating(redis_url, namespace, as_json) as op:
        op.require_queue(queue)
        before = op.server_now() - (older_than or 0)
        total = op.q.counts(queue).by_status()[status]
        purged = seen = 0
        with progress(op, f"purging {queue}", total) as advance:
            for jobs in finished_pages(op, queue, status, before):
                for s in range(0, len(jobs), BATCH):
                    ids = [j.id for j in jobs[s : s + BATCH]]
                    purged += op.q.purge(queue, status, ids, finished_before=before)
                    seen += len(ids)
                    advance(len(ids))
        kept = seen - purged
        if as_json:
            op.emit_json({"queue": queue, "status": status.value, "purged": purged, "kept": kept})
            return
        why = " (finished in the last minute, or a blocked job depends on them)" if kept else ""
        click.echo(
            f"purged {purged} {status.value} job(s) of queue {queue!r}"
            + (f"; kept {kept}{why}" if kept else "")
        )
