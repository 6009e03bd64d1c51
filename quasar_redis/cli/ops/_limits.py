"""``quasar limits``: a queue's flow control (docs/flow-control.md): ``show`` its limits, what
holds it back now and its groups; ``set`` its limits or a group's own."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..._flow import KEEP, LIMIT_MAX, NO_LIMIT, UNLIMITED, FlowInfo, GroupFlow, Rate, marker_of
from ..._keys import check_name
from ...errors import ConfigurationError, InvalidArgument
from ._context import Operator, operating, operator_options
from ._show import ago, when

COUNTED = ("ready", "leased")
STATES = {"turn": "in turn", "wait": "waiting", "full": "at its cap", "idle": "idle"}


def own_text(value: Any) -> str | None:
    """A group's own limit as JSON has it: None for the queue's default, "unlimited"."""
    if value is None:
        return None
    return NO_LIMIT if value is UNLIMITED else str(value)


def group_document(group: GroupFlow) -> dict[str, Any]:
    return {
        "name": group.name,
        "state": group.state,
        "ready": group.ready,
        "leased": group.leased,
        "until": when(group.until),
        "rate": own_text(group.rate),
        "concurrency": own_text(group.concurrency),
    }


def held_back(info: FlowInfo, now: int) -> list[str]:
    """What holds the queue back now, in words (none: nothing does)."""
    return info.held_back(lambda at: f" (the next job starts {ago(at, now)})")


def flow_document(info: FlowInfo) -> dict[str, Any]:
    """``quasar limits show --json``: rates as ``Rate.parse`` reads them ("20/s+5")."""
    return {
        "queue": info.queue,
        "now": when(info.now),
        "rate": None if info.rate is None else str(info.rate),
        "concurrency": info.concurrency,
        "group_rate": None if info.group_rate is None else str(info.group_rate),
        "group_concurrency": info.group_concurrency,
        "leased": info.leased,
        "ready_ungrouped": info.ready_ungrouped,
        "next_at": when(info.next_at),
        "held_back_by": held_back(info, info.now),
        "groups_in_turn": info.groups_in_turn,
        "groups_waiting": info.groups_waiting,
        "groups_full": info.groups_full,
        "groups": [group_document(g) for g in info.groups],
    }


def _limit(value: Any) -> str:
    return "none" if value is None else str(value)


def _own(value: Any) -> str:
    return "default" if value is None else own_text(value) or ""


def print_flow(op: Operator, info: FlowInfo, group: str | None) -> None:
    now = info.now
    click.echo(f"queue {info.queue!r} of namespace {op.namespace!r}")
    click.echo(f"rate: {_limit(info.rate)}")
    click.echo(f"concurrency: {_limit(info.concurrency)} ({info.leased} leased now)")
    click.echo(
        f"each group: rate {_limit(info.group_rate)}, concurrency {_limit(info.group_concurrency)}"
    )
    held = held_back(info, now)
    click.echo(f"held back by: {' and '.join(held) if held else 'nothing'}")
    click.echo(f"ready without a group: {info.ready_ungrouped}")
    click.echo(
        f"groups: {info.groups_in_turn} in turn, {info.groups_waiting} waiting, "
        f"{info.groups_full} at their cap"
    )
    if not info.groups:
        return
    shown = sum((info.groups_in_turn, info.groups_waiting, info.groups_full))
    if group is None and len(info.groups) < shown:
        click.echo(f"(the first {len(info.groups)} listed: --groups N lists more)")
    table = Table(box=None)
    for name in ("group", "state", "ready", "leased", "until", "own rate", "own concurrency"):
        table.add_column(name, no_wrap=True, justify="right" if name in COUNTED else "left")
    for g in info.groups:
        table.add_row(
            Text(g.name),
            STATES[g.state],
            str(g.ready),
            str(g.leased),
            ago(g.until, now) if g.until is not None else "-",
            _own(g.rate),
            _own(g.concurrency),
        )
    op.console.print(table)


def _group_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise click.BadParameter(f"{value!r} is not a group (text without whitespace)")
    return value


@click.group()
def limits() -> None:
    """A queue's flow control: its rate and concurrency cap, its groups' (docs/flow-control.md)."""


@limits.command("show")
@click.argument("queue")
@click.option("--group", "-g", callback=_group_name, help="Only this group of the queue.")
@click.option(
    "--groups",
    "listed",
    default=20,
    show_default=True,
    type=click.IntRange(0, 1000),
    help="Groups listed of each kind (in turn, waiting, at their cap).",
)
@operator_options
def show(
    queue: str,
    group: str | None,
    listed: int,
    redis_url: str,
    namespace: str,
    as_json: bool,
) -> None:
    """QUEUE's limits, its leased jobs, what holds it back now, and its groups: those taking
    turns, those waiting on their rate (until when) and those at their cap, each with its ready
    and leased jobs and its own limits."""
    with operating(redis_url, namespace, as_json) as op:
        op.require_queue(queue)
        info = op.q.flow(queue, groups=listed, group=group)
        if as_json:
            op.emit_json(flow_document(info))
        else:
            print_flow(op, info, group)


def _rate(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return KEEP
    marked = marker_of(value)
    if marked is not KEEP:
        return marked
    try:
        return Rate.parse(value)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc)) from None


def _cap(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return KEEP
    marked, word = marker_of(value), value.strip().lower()
    if marked is not KEEP:
        return marked
    if not word.isdigit() or not 1 <= int(word) <= LIMIT_MAX:
        raise click.BadParameter(
            f"{value!r} is not a cap: a whole number from 1 to {LIMIT_MAX}, or 'none'"
        )
    return int(word)


RATE_HELP = "'100/s', '5/min', '20/10s+5' (a burst of 5), or 'none' (or '-') to remove it"


@limits.command("set")
@click.argument("queue")
@click.option("--rate", callback=_rate, help=f"Jobs started: {RATE_HELP}.")
@click.option(
    "--concurrency", callback=_cap, help="Jobs leased at once at most, or 'none' to remove it."
)
@click.option(
    "--group-rate",
    callback=_rate,
    help="Every group's rate unless it has its own (as --rate).",
)
@click.option(
    "--group-concurrency",
    callback=_cap,
    help="Every group's cap unless it has its own (as --concurrency).",
)
@click.option(
    "--group",
    "-g",
    callback=_group_name,
    help="Set this group's own --rate and --concurrency: 'none' goes back to the queue's "
    "default for groups, 'unlimited' means no limit for it.",
)
@click.option("--declare", is_flag=True, help="Accept a queue nothing was enqueued to yet.")
@operator_options
def set_limits(
    queue: str,
    rate: Any,
    concurrency: Any,
    group_rate: Any,
    group_concurrency: Any,
    group: str | None,
    declare: bool,
    redis_url: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Set QUEUE's limits (or its group's, with --group); those not given stay as they are.
    Every worker's next claim follows them."""
    given = {
        "--rate": rate,
        "--concurrency": concurrency,
        "--group-rate": group_rate,
        "--group-concurrency": group_concurrency,
    }
    _check_given(given, group)
    with operating(redis_url, namespace, as_json) as op:
        if declare:
            try:
                check_name(queue, "queue")
            except ConfigurationError as exc:
                raise click.BadParameter(str(exc), param_hint="QUEUE") from None
        else:
            op.require_queue(queue)
        if group is None:
            op.q.set_limits(
                queue,
                rate=rate,
                concurrency=concurrency,
                group_rate=group_rate,
                group_concurrency=group_concurrency,
                declare=declare,
            )
        else:
            op.q.set_group_limits(queue, group, rate=rate, concurrency=concurrency)
        _print_set(op, op.q.flow(queue, groups=0, group=group), group)


def _check_given(given: dict[str, Any], group: str | None) -> None:
    """A usage error for limits that do not go together (nothing is changed)."""
    if all(v is KEEP for v in given.values()):
        raise click.UsageError(
            "give a limit to set: --rate, --concurrency, --group-rate or --group-concurrency"
        )
    if group is not None:
        for name in ("--group-rate", "--group-concurrency"):
            if given[name] is not KEEP:
                raise click.UsageError(
                    f"{name} is the queue's default for its groups: with --group, give "
                    "--rate and --concurrency (the group's own)"
                )
    else:
        for name, value in given.items():
            if value is UNLIMITED:
                raise click.BadParameter(
                    f"'{NO_LIMIT}' is a group's own limit (with --group): give 'none' to "
                    "remove the queue's",
                    param_hint=f"'{name}'",
                )


def _print_set(op: Operator, info: FlowInfo, group: str | None) -> None:
    if op.as_json:
        op.emit_json(flow_document(info))
    elif group is None:
        click.echo(
            f"queue {info.queue!r}: rate {_limit(info.rate)}, concurrency "
            f"{_limit(info.concurrency)}; each group: rate {_limit(info.group_rate)}, "
            f"concurrency {_limit(info.group_concurrency)}"
        )
    else:
        own = info.groups[0]
        click.echo(
            f"group {group!r} of queue {info.queue!r}: rate {_own(own.rate)}, "
            f"concurrency {_own(own.concurrency)}"
        )
