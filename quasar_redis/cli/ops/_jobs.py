"""``quasar jobs`` (a page of a queue's jobs) and ``quasar job`` (one job, whole)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ... import _reading as reading
from ... import _types as t
from ..._dependency_calls import DEPENDENTS_LISTED
from ..._reading import run
from ..._views import JobView
from ._context import Operator, operating, operator_options
from ._look import (
    EVENTS_SHOWN,
    ORDER,
    event_document,
    list_page,
    status_named,
    status_words,
)
from ._show import details, progress_text, shown, summary


def _statuses(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[t.Status, ...]:
    if value is None:
        return ORDER
    try:
        return (status_named(value),)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a status: one of {', '.join(status_words())}"
        ) from None


@click.command()
@click.argument("queue")
@click.option(
    "--status",
    "-s",
    "statuses",
    metavar="STATUS",
    callback=_statuses,
    help="Only jobs in this status (available, scheduled, executing, retryable, blocked, "
    "completed or succeeded, discarded or failed, cancelled, expired); default: every status.",
)
@click.option(
    "--limit",
    "-n",
    default=20,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Jobs on the page.",
)
@click.option("--after", metavar="CURSOR", help="Start after this cursor (the last page's next).")
@operator_options
def jobs(
    queue: str,
    statuses: tuple[t.Status, ...],
    limit: int,
    after: str | None,
    redis_url: str,
    namespace: str,
    as_json: bool,
) -> None:
    """A page of QUEUE's jobs, by status then oldest first; --after pages on."""
    with operating(redis_url, namespace, as_json) as op:
        op.require_queue(queue)
        try:
            listing = list_page(op.q, queue, statuses, after, limit)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--after") from None
        rows = [summary(job, status) for status, job in listing.jobs]
        if as_json:
            op.emit_json({"queue": queue, "jobs": rows, "next_cursor": listing.next_cursor})
            return
        if not rows:
            op.console.print(Text(_none_listed(queue, statuses, after)))
            return
        table = Table(box=None)
        grouped = any(row["group"] is not None for row in rows)
        names = ("id", "status", "task", "attempt", "priority", "group", "enqueued")
        for name in names if grouped else tuple(n for n in names if n != "group"):
            table.add_column(name, no_wrap=True)
        table.add_column("last error", overflow="fold")
        for row in rows:
            table.add_row(
                row["id"],
                row["status"],
                row["task"],
                f"{row['attempt']}/{row['max_attempts']}",
                str(row["priority"]),
                *([Text(row["group"] or "-")] if grouped else []),
                row["inserted_at"],
                Text(row["error"] or ""),
            )
        op.console.print(table)
        if listing.next_cursor is not None:
            op.console.print(f"more: --after {listing.next_cursor}")


def _none_listed(queue: str, statuses: tuple[t.Status, ...], after: str | None) -> str:
    """The line of a listing with no job (a listing reads on until it has some or ends)."""
    which = f" with status {statuses[0].value!r}" if len(statuses) == 1 else ""
    return f"no {'more ' if after else ''}jobs{which} in queue {queue!r}"


def _related(view: JobView) -> dict[str, Any]:
    return {
        "dependencies": {d.id: d.named("missing") for d in view.dependencies},
        "dependents_total": view.dependents.total,
        "dependents": {d.id: d.named("missing") for d in view.dependent_statuses},
        "events": [event_document(e) for e in view.events],
    }


@click.command()
@click.argument("job_id", metavar="ID")
@operator_options
def job(job_id: str, redis_url: str, namespace: str, as_json: bool) -> None:
    """One job, whole: every field, payload and result decoded, its failures with their
    tracebacks, what it waits on, its dependents and its recent events."""
    with operating(redis_url, namespace, as_json) as op:
        op.require_ids([job_id])
        view = run(op.q, reading.job_view(op.q.calls, job_id, DEPENDENTS_LISTED, EVENTS_SHOWN))
        if view is None:
            op.require_namespace()
            raise click.ClickException(f"no job {job_id!r} in namespace {namespace!r}")
        document = details(view.info) | _related(view)
        if as_json:
            op.emit_json(document)
        else:
            _print_job(op, document)


def _print_job(op: Operator, d: dict[str, Any]) -> None:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    state = ", ".join(f"{k}={v}" for k, v in d["state"].items() if k != "name")
    fields = [
        ("id", d["id"]),
        ("queue", d["queue"]),
        ("task", d["task"]),
        ("status", d["status"]),
        ("state", f"{d['state']['name']}({state})"),
        ("attempt", f"{d['attempt']} of {d['max_attempts']}"),
        ("priority", str(d["priority"])),
        *([("group", d["group"])] if d["group"] is not None else []),
        *([("batch", d["batch"])] if d.get("batch") is not None else []),
        *([("callback of batch", d["callback_of"])] if d.get("callback_of") is not None else []),
        ("fence", str(d["fencing_version"])),
        ("enqueued", d["inserted_at"]),
        ("last started", d["attempted_at"] or "-"),
        ("finished", d["completed_at"] or "-"),
        ("deadline", d["deadline"] or "-"),
        ("input", f"{d['input_ref']} (revision {d['input_revision']})"),
        ("on dependency failure", d["on_dependency_failure"]),
        ("dedup", d["dedup"] or "-"),
        ("waits on", d["waiting_on"] or "-"),
        ("progress", progress_text(d["progress"])),
    ]
    for name, value in fields:
        table.add_row(name, Text(str(value)))
    for name in ("payload", "result"):
        value = d[name]
        table.add_row(
            name, Text("-" if value is None else f"{shown(value['value'])}  ({value['format']})")
        )
    op.console.print(table)
    _print_related(op, d)
    _print_errors(op, d)
    if d["events"]:
        op.console.print(f"\n[bold]events[/bold] (newest {len(d['events'])}):")
        for e in d["events"]:
            note = f"  {e['message']}" if e.get("message") and "value" not in e else ""
            op.console.print(Text(f"  {e['at']}  {e['event']}  attempt={e['attempt']}{note}"))


def _print_related(op: Operator, d: dict[str, Any]) -> None:
    if d["dependencies"]:
        op.console.print("\n[bold]depends on[/bold]:")
        for dep, status in d["dependencies"].items():
            op.console.print(Text(f"  {dep}  {status}"))
    if d["dependents_total"]:
        op.console.print(f"\n[bold]dependents[/bold] ({d['dependents_total']}):")
        for dep, status in d["dependents"].items():
            op.console.print(Text(f"  {dep}  {status}"))
        hidden = d["dependents_total"] - len(d["dependents"])
        if hidden > 0:
            op.console.print(f"  ... and {hidden} more")


def _print_errors(op: Operator, d: dict[str, Any]) -> None:
    history = d["errors"] or ([d["error"]] if d["error"] else [])
    if not history:
        return
    op.console.print(f"\n[bold]failures[/bold] ({len(history)}, oldest first):")
    for e in history:
        head = f"  attempt {e['attempt']}" if e.get("attempt") else "  last"
        head += f" at {e['at']}" if e.get("at") else ""
        op.console.print(Text(f"{head}: {e['kind']}: {e['message']}"))
        for line in (e.get("traceback") or "").rstrip().splitlines():
            op.console.print(Text(f"    {line}"))
