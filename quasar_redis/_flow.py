"""Flow control (docs/flow-control.md): rates, the limits of a queue and of its groups, and the
typed result of reading them.

A queue may hold a rate (at most ``limit`` jobs started per ``per`` seconds across the whole
fleet, ``burst`` more at once) and a concurrency cap (at most so many leased at once), and
give every group of its jobs a default rate and cap, which a group may override
(``UNLIMITED``: no limit for that group whatever the default). lua/include/flow_control.lua
applies them inside the claim.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any, Final, Literal

from ._general import text
from ._replies import _refused, _tag
from .errors import InvalidArgument

__all__ = [
    "KEEP",
    "UNLIMITED",
    "FlowInfo",
    "GroupFlow",
    "Rate",
]

#: The most a cap or a burst may be, and the longest window: lua/set_limits.lua's.
LIMIT_MAX = 1_000_000
WINDOW_MAX_MS = 7 * 24 * 3600 * 1000
_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([a-z]+)\s*(?:\+\s*(\d+)\s*)?$")


class _Marker(Enum):
    KEEP = "keep"
    UNLIMITED = "none"


#: Leave this limit as it is (the default of every argument of ``set_limits``).
KEEP: Final = _Marker.KEEP
#: A group's override: no limit for this group, whatever its queue's default for groups.
UNLIMITED: Final = _Marker.UNLIMITED


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``limit`` jobs started per ``per`` seconds, and ``burst`` more at once: in any
    window of ``per`` seconds at most ``limit + burst`` start (a generic cell rate algorithm:
    one start every ``per / limit`` seconds, the burst its tolerance).

    ``Rate(100)`` is 100 a second; ``Rate(5, per=60)`` 5 a minute; ``Rate.parse("20/s+5")``
    20 a second with a burst of 5. ``InvalidArgument`` for a limit under 1, a window under 1 ms
    or over 7 days, more than 1000 starts a ms, or a negative burst."""

    limit: int
    per: float = 1.0
    burst: int = 0

    def __post_init__(self) -> None:
        per = self.per.total_seconds() if isinstance(self.per, timedelta) else self.per
        object.__setattr__(self, "per", per)
        limit, burst = self.limit, self.burst
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidArgument(f"a rate's limit must be a whole number >= 1, not {limit!r}")
        if isinstance(per, bool) or not isinstance(per, int | float) or not math.isfinite(per):
            raise InvalidArgument(f"a rate's window must be a number of seconds, not {per!r}")
        window = round(per * 1000)
        if window < 1 or window > WINDOW_MAX_MS:
            raise InvalidArgument(f"a rate's window must be 1 ms to 7 days, not {per!r} s")
        if limit > window * 1000:
            raise InvalidArgument("a rate may start at most 1000 jobs a ms")
        if isinstance(burst, bool) or not isinstance(burst, int) or not 0 <= burst <= LIMIT_MAX:
            raise InvalidArgument(f"a rate's burst must be 0 to {LIMIT_MAX}, not {burst!r}")

    @property
    def window_ms(self) -> int:
        return round(self.per * 1000)

    @classmethod
    def parse(cls, spec: str) -> Rate:
        """``"<limit>/<window>[+<burst>]"``, the window a unit with an optional number before
        it: ``"100/s"``, ``"5/min"``, ``"20/10s+5"``, ``"1/500ms"``."""
        found = _RATE_RE.match(spec.lower()) if isinstance(spec, str) else None
        if found is None or found.group(3) not in _UNITS:
            raise InvalidArgument(
                f"a rate is '<limit>/<window>[+<burst>]', such as '100/s' or '20/10s+5', "
                f"not {spec!r}"
            )
        count, scale = found.group(2), _UNITS[found.group(3)]
        per = (float(count) if count else 1.0) * scale
        return cls(int(found.group(1)), per, int(found.group(4) or 0))

    def arg(self) -> str:
        """The script's form: ``"<limit> <window ms> <burst>"``."""
        return f"{self.limit} {self.window_ms} {self.burst}"

    @classmethod
    def from_arg(cls, value: str) -> Rate | None:
        parts = value.split()
        if len(parts) != 3:
            return None
        return cls(int(parts[0]), int(parts[1]) / 1000, int(parts[2]))

    def __str__(self) -> str:
        window = self.window_ms
        unit, count = "ms", window
        for name, ms in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
            if window % ms == 0:
                unit, count = name, window // ms
                break
        spec = unit if count == 1 else f"{count}{unit}"
        return f"{self.limit}/{spec}" + (f"+{self.burst}" if self.burst else "")


#: What clears a limit given as text (the command line, the dashboard's forms), and what gives a
#: group no limit at all.
CLEAR = ("none", "-")
NO_LIMIT = "unlimited"


def marker_of(text: str) -> Any:
    """A limit given as text: None for a word that clears it, ``UNLIMITED`` for "unlimited",
    ``KEEP`` for any other text (a rate or a cap, for the caller to read)."""
    word = text.strip().lower()
    if word in CLEAR:
        return None
    return UNLIMITED if word == NO_LIMIT else KEEP


RateArg = Rate | str | None | Literal[_Marker.KEEP, _Marker.UNLIMITED]
CapArg = int | None | Literal[_Marker.KEEP, _Marker.UNLIMITED]


def _marked(value: Any, name: str, group: bool) -> str | None:
    """The script's form of ``KEEP`` (None), ``None`` ("") and ``UNLIMITED`` ("none"), or
    None for any other value (the caller reads it)."""
    if value is None:
        return ""
    if value is UNLIMITED:
        if not group:
            raise InvalidArgument(f"UNLIMITED is a group's override: give {name}=None instead")
        return "none"
    return None


def rate_value(value: Any, name: str, group: bool) -> str | None:
    """A rate argument of ``set_limits`` as the script takes it; None for ``KEEP``."""
    if value is KEEP:
        return None
    marked = _marked(value, name, group)
    if marked is not None:
        return marked
    if isinstance(value, str):
        value = Rate.parse(value)
    if not isinstance(value, Rate):
        raise InvalidArgument(f"{name} must be a Rate, a rate such as '100/s', or None")
    return value.arg()


def cap_value(value: Any, name: str, group: bool) -> str | None:
    """A concurrency argument of ``set_limits`` as the script takes it; None for ``KEEP``."""
    if value is KEEP:
        return None
    marked = _marked(value, name, group)
    if marked is not None:
        return marked
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIMIT_MAX:
        raise InvalidArgument(f"{name} must be a whole number from 1 to {LIMIT_MAX}, or None")
    return str(value)


GroupState = Literal["turn", "wait", "full", "idle"]


@dataclass(frozen=True, slots=True)
class GroupFlow:
    """One group of a queue as its flow holds it."""

    name: str
    #: "turn": it has ready jobs and takes turns; "wait": its rate (or a hold) holds it until
    #: ``until``; "full": it is at its concurrency cap; "idle": no ready job
    state: GroupState
    ready: int  #: its jobs ready to start
    leased: int | None  #: its jobs leased now (None: not counted, as no group cap was set)
    until: int | None  #: for a group waiting: when its rate (or a hold) lets it start one (ms)
    #: its own rate / cap: None = the queue's default for groups, UNLIMITED = no limit
    rate: Rate | Literal[_Marker.UNLIMITED] | None
    concurrency: int | Literal[_Marker.UNLIMITED] | None


@dataclass(frozen=True, slots=True)
class FlowInfo:
    """A queue's limits and what holds it back (``Quasar.flow``)."""

    queue: str
    now: int
    rate: Rate | None  #: the queue's rate (all its jobs), None: none
    concurrency: int | None  #: the queue's cap on leased jobs, None: none
    group_rate: Rate | None  #: every group's rate unless it has its own
    group_concurrency: int | None  #: every group's cap unless it has its own
    leased: int  #: the queue's leased jobs now
    ready_ungrouped: int  #: its ready jobs without a group
    next_at: int | None  #: when the queue's rate lets the next job start, if after now (ms)
    groups_in_turn: int  #: groups with ready jobs taking turns
    groups_waiting: int  #: groups held by their rate or a hold
    groups_full: int  #: groups held at their cap
    groups: tuple[GroupFlow, ...]  #: the first groups of each kind (or the one asked for)

    def held_back(
        self, rate: Callable[[int], str] = lambda at: f", until {at} ms", *, groups: bool = True
    ) -> list[str]:
        """What holds the queue back now, in words (none: nothing does): its cap, its rate
        (``rate`` words the time its next job may start), and with ``groups``, every group
        with ready jobs waiting on its rate or at its cap."""
        held = []
        if self.concurrency is not None and self.leased >= self.concurrency:
            held.append(f"its concurrency cap ({self.leased}/{self.concurrency} leased)")
        if self.next_at is not None:
            held.append(f"its rate{rate(self.next_at)}")
        stuck = self.groups_in_turn == 0 and self.ready_ungrouped == 0
        if groups and stuck and (self.groups_waiting or self.groups_full):
            held.append("every group with ready jobs waits on its rate or is at its cap")
        return held

    @property
    def waiting_on(self) -> str:
        """What holds the queue's own limits back now, in words: "" when nothing does."""
        return " and ".join(self.held_back(groups=False))


def _own(value: str, parse: Any) -> Any:
    if value == "":
        return None
    if value == "none":
        return UNLIMITED
    return parse(value)


def _opt_int(value: str) -> int | None:
    return int(value) if value else None


def parse_limits(queue: str, reply: Any) -> FlowInfo:
    if _tag(reply) != "Flow":
        raise _refused(reply)
    head = [text(v) for v in reply[1:12]]
    now, rate, cap, grate, gcap, leased, own, next_at, turns, waiting, full = head
    groups = []
    for row in reply[12:]:
        name, state, ready, active, until, own_rate, own_cap = (text(v) for v in row)
        groups.append(
            GroupFlow(
                name,
                state,  # type: ignore[arg-type]
                int(ready),
                _opt_int(active),
                _opt_int(until),
                _own(own_rate, Rate.from_arg),
                _own(own_cap, int),
            )
        )
    return FlowInfo(
        queue,
        int(now),
        Rate.from_arg(rate) if rate else None,
        _opt_int(cap),
        Rate.from_arg(grate) if grate else None,
        _opt_int(gcap),
        int(leased),
        int(own),
        _opt_int(next_at),
        int(turns),
        int(waiting),
        int(full),
        tuple(groups),
    )


def parse_limits_set(reply: Any) -> int:
    if _tag(reply) != "LimitsSet":
        raise _refused(reply)
    return int(reply[1])
