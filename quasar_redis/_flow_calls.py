"""The calls of flow control (docs/flow-control.md): set a queue's limits or a group's, and read
them with what holds the queue back (lua/set_limits.lua, lua/limits.lua)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._args import int_arg, now_arg, text_arg
from ._call_base import BuilderBase, Call
from ._flow import (
    KEEP,
    CapArg,
    FlowInfo,
    RateArg,
    cap_value,
    parse_limits,
    parse_limits_set,
    rate_value,
)
from .errors import InvalidArgument

if TYPE_CHECKING:
    from ._calls import CallBuilder

#: How many groups of each kind (in turn, waiting, full) ``flow`` lists by default, at most.
GROUPS_LISTED = 20


def limit_pairs(group: bool, **values: Any) -> list[str]:
    """The name / value arguments of lua/set_limits.lua for the limits given (not ``KEEP``)."""
    names = {"rate": "rate", "concurrency": "cap", "group_rate": "grate"}
    names["group_concurrency"] = "gcap"
    pairs: list[str] = []
    for name, value in values.items():
        kind = rate_value if "rate" in name else cap_value
        arg = kind(value, name, group)
        if arg is not None:
            pairs += [names[name], arg]
    return pairs  # (none: the script refuses the call, InvalidArgument)


class FlowCalls(BuilderBase):
    """Builds the calls of flow control."""

    def set_limits(
        self,
        queue: str,
        *,
        rate: RateArg = KEEP,
        concurrency: CapArg = KEEP,
        group_rate: RateArg = KEEP,
        group_concurrency: CapArg = KEEP,
        declare: bool = False,
        now: int | None = None,
    ) -> Call[int]:
        pairs = limit_pairs(
            False,
            rate=rate,
            concurrency=concurrency,
            group_rate=group_rate,
            group_concurrency=group_concurrency,
        )
        args = (now_arg(now), text_arg(queue), "", "1" if declare else "", *pairs)
        return self._call("set_limits", args, parse_limits_set)

    def set_group_limits(
        self,
        queue: str,
        group: str,
        *,
        rate: RateArg = KEEP,
        concurrency: CapArg = KEEP,
        now: int | None = None,
    ) -> Call[int]:
        if not isinstance(group, str) or not group:
            raise InvalidArgument(f"group must be a non-empty text, not {group!r}")
        pairs = limit_pairs(True, rate=rate, concurrency=concurrency)
        args = (now_arg(now), text_arg(queue), text_arg(group), "", *pairs)
        return self._call("set_limits", args, parse_limits_set)

    def flow(
        self,
        queue: str,
        *,
        groups: int = GROUPS_LISTED,
        group: str | None = None,
        now: int | None = None,
    ) -> Call[FlowInfo]:
        if group is not None and (not isinstance(group, str) or not group):
            raise InvalidArgument(f"group must be a non-empty text, not {group!r}")
        args = (now_arg(now), text_arg(queue), int_arg(groups), "" if group is None else group)
        return self._call("flow", args, lambda reply: parse_limits(queue, reply))


class FlowOperations:
    """The public calls of flow control, as ``Operations`` has them (``self`` is the client)."""

    calls: CallBuilder

    def set_limits(
        self,
        queue: str,
        *,
        rate: RateArg = KEEP,
        concurrency: CapArg = KEEP,
        group_rate: RateArg = KEEP,
        group_concurrency: CapArg = KEEP,
        declare: bool = False,
        now: int | None = None,
    ) -> Call[int]:
        """Set the limits of ``queue`` named here, the others unchanged (``None`` removes
        one): ``rate`` and ``concurrency`` hold all its jobs (a ``Rate``, or text such as
        ``"100/s"``; at most that many leased at once); ``group_rate`` and
        ``group_concurrency`` hold each of its groups unless the group has its own
        (``set_group_limits``). Stored in Redis: every worker's next claim follows them.
        ``declare`` accepts a queue nothing was enqueued to yet (else ``InvalidArgument``).
        Returns the server's time (ms)."""
        return self.calls.set_limits(
            queue,
            rate=rate,
            concurrency=concurrency,
            group_rate=group_rate,
            group_concurrency=group_concurrency,
            declare=declare,
            now=now,
        )

    def set_group_limits(
        self,
        queue: str,
        group: str,
        *,
        rate: RateArg = KEEP,
        concurrency: CapArg = KEEP,
        now: int | None = None,
    ) -> Call[int]:
        """Set the group ``group``'s own limits in ``queue`` (over the queue's defaults for its
        groups): ``None`` goes back to the default, ``UNLIMITED`` means no limit for it.
        Returns the server's time (ms)."""
        return self.calls.set_group_limits(
            queue, group, rate=rate, concurrency=concurrency, now=now
        )

    def flow(
        self,
        queue: str,
        *,
        groups: int = GROUPS_LISTED,
        group: str | None = None,
        now: int | None = None,
    ) -> Call[FlowInfo]:
        """The limits of ``queue``, what holds it back now, and up to ``groups`` (0-1000) of
        its groups of each kind (taking turns, waiting on their rate, at their cap), or only
        ``group``."""
        return self.calls.flow(queue, groups=groups, group=group, now=now)
