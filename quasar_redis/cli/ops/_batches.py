"""``quasar batch``: a batch's counts, its callbacks and the first page of its members
(docs/workflows.md, "Batches")."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..._batch import BatchInfo, BatchPage
from ._context import operating, operator_options
from ._show import summary, when


def batch_document(info: BatchInfo, page: BatchPage) -> dict[str, Any]:
    """A batch for people and for ``--json``: counts, callbacks, a page of members."""
    return {
        "id": info.id,
        "closed": info.closed,
        "total": info.total,
        "pending": info.pending,
        "succeeded": info.succeeded,
        "failed": info.failed,
        "cancelled": info.cancelled,
        "expired": info.expired,
        "created_at": when(info.created_at),
        "closed_at": when(info.closed_at),
        "callbacks": [
            {
                "kind": c.kind,
                "task": c.stage,
                "queue": c.queue,
                "job_id": c.job_id,
                "refused": c.refused,
            }
            for c in info.callbacks
        ],
        "members": [
            summary(m.job, m.job.status(page.now)) if m.job is not None else {"id": m.id}
            for m in page.members
        ],
        "next_start": page.next_start,
    }


@click.command("batch")
@click.argument("batch_id", metavar="ID")
@click.option(
    "--members",
    "-n",
    "count",
    default=20,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Members listed, in the order they joined.",
)
@click.option("--start", default=0, type=click.IntRange(0), help="The first member listed.")
@operator_options
def batch(
    batch_id: str, count: int, start: int, redis_url: str, namespace: str, as_json: bool
) -> None:
    """A batch: its counts, whether it is closed, its callbacks and which job each enqueued,
    and a page of its members."""
    with operating(redis_url, namespace, as_json) as op:
        if not batch_id or len(batch_id.encode()) > 240:
            raise click.BadParameter("a batch id is 1 to 240 bytes", param_hint="ID")
        info = op.q.batch(batch_id)
        if info is None:
            op.require_namespace()
            raise click.ClickException(f"no batch {batch_id!r} in namespace {namespace!r}")
        document = batch_document(info, op.q.batch_results(batch_id, start=start, count=count))
        if as_json:
            op.emit_json(document)
            return
        state = "closed" if info.closed else "open"
        op.console.print(
            Text(
                f"batch {info.id}: {state}, {info.total} members, {info.pending} pending, "
                f"{info.succeeded} succeeded, {info.failed} failed, {info.cancelled} cancelled, "
                f"{info.expired} expired"
            )
        )
        for c in document["callbacks"]:
            fired = c["job_id"] or (f"refused: {c['refused']}" if c["refused"] else "not yet")
            op.console.print(Text(f"  {c['kind']}: {c['task']} (queue {c['queue']}): {fired}"))
        if not document["members"]:
            beyond = f" from --start {start} on" if start else ""
            op.console.print(Text(f"no members{beyond} in batch {info.id!r}"))
            return
        table = Table(box=None)
        for name in ("id", "status", "task", "attempt", "finished", "last error"):
            table.add_column(name, no_wrap=name != "last error")
        for m in document["members"]:
            if "status" not in m:
                table.add_row(m["id"], "gone", "", "", "", "")
                continue
            table.add_row(
                m["id"],
                m["status"],
                m["task"],
                f"{m['attempt']}/{m['max_attempts']}",
                m["finished_at"] or "-",
                Text(m["error"] or ""),
            )
        op.console.print(table)
        if document["next_start"] is not None:
            op.console.print(f"more: --start {document['next_start']}")
