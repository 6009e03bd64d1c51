"""``quasar retry``, ``quasar cancel``, ``quasar promote`` and ``quasar purge``: changes to many
jobs, made in
batches of ``BATCH`` calls (each call its own short script, sent in one pipeline), with a
progress bar on a terminal and a count of what changed at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ... import _paged as paged
from ... import _types as t
from ..._call_base import JobChange
from ..._paged import BATCH, Tally
from ..._reading import run
from ._context import Operator, done, operating, operator_options
from ._durations import parse_duration
from ._look import status_named

REFUSALS_SHOWN = 20
REASON = "retried by operator"


def document(tally: Tally) -> dict[str, Any]:
    return {
        "changed": tally.changed,
        "cascaded": tally.cascaded,
        "refused": [{"id": i, "reason": refusal_text(e)} for i, e in tally.refused],
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
        t.LeaseHeld: "running",
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


def by_ids(op: Operator, given: Sequence[str], what: str, build: Callable[[str], Any]) -> Tally:
    job_ids = list(dict.fromkeys(given))  # (an id given twice is changed once)
    check_ids(op, job_ids)
    with progress(op, what, len(job_ids)) as advance:
        return run(op.q, paged.by_ids(job_ids, build, advance))


def report(op: Operator, tally: Tally, verb: str, extra: dict[str, Any] | None = None) -> None:
    """The outcome: JSON, or a line per refusal and a count; exit 1 if any was refused."""
    if op.as_json:
        op.emit_json(document(tally) | (extra or {}))
    else:
        for job_id, error in tally.refused[:REFUSALS_SHOWN]:
            click.echo(f"{job_id}: not {verb}: {refusal_text(error)}", err=True)
        if len(tally.refused) > REFUSALS_SHOWN:
            click.echo(f"... and {len(tally.refused) - REFUSALS_SHOWN} more refused", err=True)
        cascade = f" (and {tally.cascaded} dependents with them)" if tally.cascaded else ""
        refused = f"; {len(tally.refused)} refused" if tally.refused else ""
        click.echo(f"{verb} {tally.changed} job(s){cascade}{refused}")
    done(not tally.refused)


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
        total = op.q.counts(queue).discarded
        with progress(op, f"retrying {queue}", total) as advance:
            tally = run(op.q, paged.retry_failed(op.q.calls, queue, REASON, advance))
        report(op, tally, "retried", {"queue": queue})


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@click.option(
    "--priority", type=int, default=None, help="Also give them this priority (lowest runs first)."
)
@operator_options
def promote(
    job_ids: tuple[str, ...], priority: int | None, redis_url: str, namespace: str, as_json: bool
) -> None:
    """Make jobs waiting to run due now: scheduled ones, or retries waiting out their delay (one
    due already keeps its place). Running and finished jobs are left as they are."""
    what = JobChange(priority=priority, promote=True)
    with operating(redis_url, namespace, as_json) as op:
        tally = by_ids(op, job_ids, "promoting", lambda i: op.q.calls.change(i, None, what))
        report(op, tally, "promoted")


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


PURGEABLE = (t.Status.COMPLETED, t.Status.DISCARDED, t.Status.CANCELLED, t.Status.EXPIRED)


def _purge_status(ctx: click.Context, param: click.Parameter, value: str) -> t.Status:
    try:
        status = status_named(value)
    except ValueError:
        status = None
    if status not in PURGEABLE:
        raise click.BadParameter(
            f"{value!r}: purge takes succeeded (completed), failed (discarded), cancelled"
            " or expired"
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
    help="succeeded (completed), failed (discarded), cancelled or expired.",
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
        total = op.q.counts(queue).by_status()[status]
        with progress(op, f"purging {queue}", total) as advance:
            flow = paged.purge_finished(op.q.calls, queue, status, older_than or 0, advance)
            outcome = run(op.q, flow)
        purged, kept = outcome.purged, outcome.kept
        if as_json:
            op.emit_json({"queue": queue, "status": status.value, "purged": purged, "kept": kept})
            return
        why = " (finished in the last minute, or a blocked job depends on them)" if kept else ""
        click.echo(
            f"purged {purged} {status.value} job(s) of queue {queue!r}"
            + (f"; kept {kept}{why}" if kept else "")
        )
