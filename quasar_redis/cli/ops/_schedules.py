"""``quasar schedules``: the namespace's periodic schedules (docs/schedules.md): ``list`` them
with their last and next tick and whether a running worker still declares them; ``pause``,
``resume``, ``trigger`` (a job now) or ``remove`` one."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from rich.table import Table

from ..._schedules import Fired, NotFired, ScheduleInfo
from ._context import Operator, operating, operator_options
from ._show import ago, when


def schedule_document(info: ScheduleInfo) -> dict[str, Any]:
    document = dataclasses.asdict(info)
    for name in ("next_tick", "last_tick", "declared_at", "created_at"):
        document[name] = when(document[name])
    return document


@click.group()
def schedules() -> None:
    """The periodic schedules of the namespace (declared by its workers' apps)."""


@schedules.command("list")
@operator_options
def list_schedules(redis_url: str, namespace: str, as_json: bool) -> None:
    """Every schedule: what it fires on, its last and next tick, whether it is paused, and
    whether a running worker declares it (one that none declares is not fired)."""
    with operating(redis_url, namespace, as_json) as op:
        found = op.q.schedules()
        if as_json:
            op.emit_json([schedule_document(info) for info in found])
            return
        if not found:
            op.console.print(f"no schedule in namespace {namespace!r}")
            return
        now = op.server_now()
        table = Table(box=None)
        for name in ("schedule", "spec", "tz", "task", "queue", "last", "next", "state"):
            table.add_column(name, no_wrap=True)
        for info in found:
            state = "paused" if info.paused else "active"
            if not info.declared:
                state += ", declared by no running worker"
            table.add_row(
                info.name,
                info.spec,
                info.tz,
                info.stage,
                info.queue,
                ago(info.last_tick, now),
                ago(info.next_tick, now),
                state,
            )
        op.console.print(table)


def _change(op: Operator, name: str, action: str) -> None:
    change = {
        "pause": op.q.pause_schedule,
        "resume": op.q.resume_schedule,
        "remove": op.q.remove_schedule,
    }[action]
    changed = change(name)
    if op.as_json:
        op.emit_json({"schedule": name, "action": action, "changed": changed})
        return
    done = {"pause": "paused", "resume": "resumed", "remove": "removed"}[action]
    click.echo(f"schedule {name!r} {done}" if changed else f"schedule {name!r}: unchanged")


def _changing(action: str, summary: str) -> None:
    """The command ``quasar schedules <action> NAME``."""

    def command(name: str, redis_url: str, namespace: str, as_json: bool) -> None:
        with operating(redis_url, namespace, as_json) as op:
            _change(op, name, action)

    command.__doc__ = summary
    schedules.command(action)(click.argument("name")(operator_options(command)))


_changing("pause", "Stop the schedule NAME firing until resume (a trigger still runs it).")
_changing("resume", "Fire the paused schedule NAME again (missed ticks as its setting says).")
_changing("remove", "Delete the schedule NAME (a worker that still declares it writes it again).")


@schedules.command()
@click.argument("name")
@operator_options
def trigger(name: str, redis_url: str, namespace: str, as_json: bool) -> None:
    """Enqueue the job of the schedule NAME now (its ticks are unchanged)."""
    with operating(redis_url, namespace, as_json) as op:
        result = op.q.trigger_schedule(name)
        if isinstance(result, NotFired):
            why = "no such schedule" if result.reason == "missing" else result.reason
            raise click.ClickException(f"schedule {name!r} not triggered: {why}")
        assert isinstance(result, Fired)
        if as_json:
            op.emit_json({"schedule": name, "job_id": result.job_id})
            return
        click.echo(f"schedule {name!r} triggered: job {result.job_id}")
