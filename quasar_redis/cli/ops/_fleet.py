"""``quasar queues``, ``quasar info``, ``quasar workers``, ``quasar pause`` and ``quasar
resume``: the namespace's queues and workers, and stopping or restarting a queue."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ... import _reading as reading
from ... import _types as t
from ..._keys import check_name
from ..._reading import run
from ..._views import counts_of
from ...errors import ConfigurationError
from ._context import Operator, operating, operator_options
from ._look import ORDER
from ._show import ago, when

COLUMNS = [s.value for s in ORDER]


def queue_document(info: t.QueueInfo) -> dict[str, Any]:
    counts = counts_of(info.counts, ORDER)
    return {
        "name": info.name,
        "paused": info.paused,
        "counts": counts,
        "total": sum(counts.values()),
    }


@click.command()
@operator_options
def queues(redis_url: str, namespace: str, as_json: bool) -> None:
    """Every queue of the namespace: its jobs by status, and whether it is paused."""
    with operating(redis_url, namespace, as_json) as op:
        op.require_namespace()
        rows = [queue_document(info) for info in run(op.q, reading.queues(op.q.calls))]
        if as_json:
            op.emit_json(rows)
            return
        if not rows:
            op.console.print(Text(f"no queues in namespace {namespace!r}"))
            return
        table = Table(box=None)
        table.add_column("queue", no_wrap=True)
        table.add_column("state", no_wrap=True)
        for status in COLUMNS:
            table.add_column(status, justify="right")
        for row in rows:
            state = "paused" if row["paused"] else "running"
            table.add_row(row["name"], state, *(str(row["counts"][s]) for s in COLUMNS))
        op.console.print(table)


def info_document(op: Operator, queue: str) -> dict[str, Any]:
    found = [i for i in run(op.q, reading.queues(op.q.calls)) if i.name == queue]
    if not found:  # (gone between the two reads)
        raise click.ClickException(f"no queue {queue!r} in namespace {op.namespace!r}")
    document = queue_document(found[0])
    oldest = op.q.page_jobs(queue, t.Status.AVAILABLE, limit=1).jobs
    document["oldest_available"] = (
        {"id": oldest[0].id, "enqueued_at": oldest[0].inserted_at} if oldest else None
    )
    found_workers = run(op.q, reading.workers(op.q.calls))
    document["workers"] = [worker_document(w) for w in found_workers if queue in w.queues]
    return document


def print_info(op: Operator, d: dict[str, Any]) -> None:
    now = op.server_now()
    state = "PAUSED (nothing is leased until resume)" if d["paused"] else "running"
    click.echo(f"queue {d['name']!r} of namespace {op.namespace!r}: {state}")
    counts = ", ".join(f"{n} {s}" for s, n in d["counts"].items() if n)
    click.echo(f"jobs: {counts or 'none'} ({d['total']} in all)")
    oldest = d["oldest_available"]
    waiting = f"{oldest['id']}, enqueued {ago(oldest['enqueued_at'], now)}" if oldest else "-"
    click.echo(f"oldest available: {waiting}")
    click.echo(f"workers: {len(d['workers'])}")
    for w in d["workers"]:
        click.echo(f"  {w['id']} ({w['host']}, pid {w['pid']}, {len(w['running'])} running)")


@click.command()
@click.argument("queue")
@operator_options
def info(queue: str, redis_url: str, namespace: str, as_json: bool) -> None:
    """One queue: its jobs by status, whether it is paused, its oldest available job and the
    live workers serving it."""
    with operating(redis_url, namespace, as_json) as op:
        op.require_queue(queue)
        document = info_document(op, queue)
        if as_json:
            oldest = document["oldest_available"]
            if oldest:
                oldest["enqueued_at"] = when(oldest["enqueued_at"])
            op.emit_json(document)
        else:
            print_info(op, document)


def worker_document(w: t.WorkerInfo) -> dict[str, Any]:
    document = dataclasses.asdict(w)
    document["queues"], document["running"] = list(w.queues), list(w.running)
    document["started_at"], document["last_seen"] = when(w.started_at), when(w.last_seen)
    return document


#: The columns of ``quasar workers`` (the dashboard's workers page shows them in this order);
#: processed / failed: the runs a worker ended since it started, and those that failed.
WORKER_COLUMNS = (
    *("worker", "host", "pid", "queues", "running", "version", "up", "seen"),
    *("processed", "failed"),
)
WORKER_JUSTIFY: dict[str, Any] = {"pid": "right", "processed": "right", "failed": "right"}


@click.command()
@operator_options
def workers(redis_url: str, namespace: str, as_json: bool) -> None:
    """The live workers of the namespace: where they run, their queues and their jobs."""
    with operating(redis_url, namespace, as_json) as op:
        found = run(op.q, reading.workers(op.q.calls))
        if not found:
            op.require_namespace()
        if as_json:
            op.emit_json([worker_document(w) for w in found])
            return
        now = op.server_now()
        table = Table(box=None)
        for name in WORKER_COLUMNS:
            justify = WORKER_JUSTIFY.get(name, "left")
            table.add_column(name, no_wrap=name != "queues", justify=justify)
        for w in found:
            table.add_row(
                w.id,
                w.host,
                str(w.pid),
                ", ".join(w.queues),
                f"{len(w.running)}/{w.concurrency}",
                w.version,
                ago(w.started_at, now).removesuffix(" ago"),
                ago(w.last_seen, now),
                str(w.processed),
                str(w.failed),
            )
        op.console.print(
            table if found else Text(f"no workers are running in namespace {namespace!r}")
        )


def _switch(queue: str, op: Operator, pause: bool) -> None:
    """Pause or resume ``queue``, known or not yet (a queue is paused ahead of its first jobs)."""
    try:
        check_name(queue, "queue")
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="QUEUE") from None
    new = pause and queue not in op.known_queues()
    changed = op.q.pause(queue) if pause else op.q.resume(queue)
    if op.as_json:
        op.emit_json({"queue": queue, "paused": pause, "changed": changed})
        return
    word = "paused" if pause else "resumed"
    if changed and new:  # (named here with its namespace: a mistyped one shows)
        click.echo(
            f"queue {queue!r} of namespace {op.namespace!r} paused: it has no job yet; "
            "its workers lease none until it is resumed"
        )
    elif changed:
        click.echo(f"queue {queue!r} {word}")
    else:
        click.echo(f"queue {queue!r} was already {'paused' if pause else 'running'}: unchanged")


@click.command()
@click.argument("queue")
@operator_options
def pause(queue: str, redis_url: str, namespace: str, as_json: bool) -> None:
    """Stop QUEUE: no worker leases its jobs until resume (running jobs finish; enqueue goes
    on). A queue with no job yet can be paused ahead of its first ones. Pausing a paused queue
    changes nothing."""
    with operating(redis_url, namespace, as_json) as op:
        _switch(queue, op, pause=True)


@click.command()
@click.argument("queue")
@operator_options
def resume(queue: str, redis_url: str, namespace: str, as_json: bool) -> None:
    """Restart a paused QUEUE: its workers lease its jobs again at once. Resuming a queue that
    is not paused changes nothing."""
    with operating(redis_url, namespace, as_json) as op:
        _switch(queue, op, pause=False)
