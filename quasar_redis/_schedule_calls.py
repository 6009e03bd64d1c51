"""The calls of periodic schedules (docs/schedules.md): declare, fire a tick, trigger, list,
pause, resume and remove, each one script (lua/declare_schedule.lua, fire_schedule.lua,
schedules.lua, change_schedule.lua)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._args import int_arg, now_arg, text_arg
from ._call_base import BuilderBase, Call
from ._schedules import (
    Declared,
    FireResult,
    Schedule,
    ScheduleInfo,
    parse_changed,
    parse_declared,
    parse_fire,
    parse_schedules,
)
from .errors import InvalidArgument, InvalidSchedule

if TYPE_CHECKING:
    from ._calls import CallBuilder

T = TypeVar("T")


class ScheduleCalls(BuilderBase):
    """Builds the calls of periodic schedules. A namespace of several partitions keeps its
    schedules in partition 0, and their jobs there too, so that a tick is still one call: their
    ids start with ``0~``, which places them there (``_partitions``)."""

    def _routed(self, build: Callable[[ScheduleCalls], Call[T]]) -> Call[T]:
        """``build``'s call, on partition 0 of a partitioned namespace."""
        if getattr(self, "count", 1) > 1:
            routed: Call[T] = cast(Any, self)._at(0, build)
            return routed
        return build(self)

    def declare_schedule(self, schedule: Schedule, now: int | None = None) -> Call[Declared]:
        if not isinstance(schedule, Schedule):
            raise InvalidSchedule(f"expected a Schedule, got {schedule!r}")
        return self._routed(lambda b: b._declaring(schedule, now))

    def _declaring(self, schedule: Schedule, now: int | None) -> Call[Declared]:
        at = round(time.time() * 1000) if now is None else now
        args = (
            now_arg(now),
            text_arg(schedule.name),
            schedule.digest,
            text_arg(schedule.spec),
            text_arg(schedule.tz),
            text_arg(schedule.queue),
            text_arg(schedule.stage),
            schedule.payload,
            int_arg(schedule.priority),
            int_arg(schedule.max_attempts),
            schedule.missed,
            int_arg(schedule.grace_ms),
            int_arg(schedule.after(at)),
            int_arg(self.limits.max_payload_bytes),
        )
        return self._call("declare_schedule", args, parse_declared)

    def fire_schedule(
        self, schedule: Schedule, tick: int, now: int | None = None
    ) -> Call[FireResult]:
        if isinstance(tick, bool) or not isinstance(tick, int) or tick < 0:
            raise InvalidArgument(f"tick must be a nonnegative integer (ms), not {tick!r}")
        after, digest = int_arg(schedule.after(tick)), schedule.digest
        head = (now_arg(now), text_arg(schedule.name), int_arg(tick), after, digest)
        return self._routed(lambda b: b._call("fire_schedule", (*head, b._job_prefix), parse_fire))

    def trigger_schedule(self, name: str, now: int | None = None) -> Call[FireResult]:
        head = (now_arg(now), text_arg(name), "", "", "")
        return self._routed(lambda b: b._call("fire_schedule", (*head, b._job_prefix), parse_fire))

    @property
    def _job_prefix(self) -> str:
        """How the ids of the jobs of this builder's schedules begin: ``0~`` in partition 0 of a
        partitioned namespace (``_partition_ops.PartCalls``), else nothing."""
        return str(getattr(self, "_id_prefix", ""))

    def schedules(self, now: int | None = None) -> Call[list[ScheduleInfo]]:
        return self._routed(lambda b: b._call("schedules", (now_arg(now),), parse_schedules))

    def change_schedule(self, name: str, action: str, now: int | None = None) -> Call[bool]:
        args: Any = (now_arg(now), text_arg(name), text_arg(action))
        return self._routed(lambda b: b._call("change_schedule", args, parse_changed))

    def pause_schedule(self, name: str, now: int | None = None) -> Call[bool]:
        return self.change_schedule(name, "pause", now)

    def resume_schedule(self, name: str, now: int | None = None) -> Call[bool]:
        return self.change_schedule(name, "resume", now)

    def remove_schedule(self, name: str, now: int | None = None) -> Call[bool]:
        return self.change_schedule(name, "remove", now)


class ScheduleOperations:
    """The public calls of periodic schedules, as ``Operations`` has them (``self`` is the
    client)."""

    calls: CallBuilder

    def declare_schedule(self, schedule: Schedule, *, now: int | None = None) -> Call[Declared]:
        """Write ``schedule``, or update it in place when its settings changed (an upsert);
        what a worker does for each schedule of its app, at start and every 30 s."""
        return self.calls.declare_schedule(schedule, now)

    def fire_schedule(
        self, schedule: Schedule, tick: int, *, now: int | None = None
    ) -> Call[FireResult]:
        """Enqueue the job of ``schedule``'s tick ``tick`` (ms), id ``<name>@<tick>``, and move
        the schedule on, at most once per tick however many callers send it."""
        return self.calls.fire_schedule(schedule, tick, now)

    def trigger_schedule(self, name: str, *, now: int | None = None) -> Call[FireResult]:
        """Enqueue the job of the schedule ``name`` now (id ``<name>@<now>``), paused or not;
        its ticks are unchanged."""
        return self.calls.trigger_schedule(name, now)

    def schedules(self, *, now: int | None = None) -> Call[list[ScheduleInfo]]:
        """The namespace's periodic schedules (at most 1000), by name: settings, last and next
        tick, paused, and whether a running worker still declares them."""
        return self.calls.schedules(now)

    def change_schedule(self, name: str, action: str, *, now: int | None = None) -> Call[bool]:
        """Pause, resume or remove the schedule ``name`` (``action``: ``"pause"``,
        ``"resume"`` or ``"remove"``): what the three calls below send."""
        return self.calls.change_schedule(name, action, now)

    def pause_schedule(self, name: str, *, now: int | None = None) -> Call[bool]:
        """No tick of the schedule ``name`` fires until ``resume_schedule``. True if it was
        not paused; InvalidArgument for a schedule that does not exist."""
        return self.calls.pause_schedule(name, now)

    def resume_schedule(self, name: str, *, now: int | None = None) -> Call[bool]:
        """The schedule ``name`` fires again (ticks missed meanwhile as its ``missed`` says).
        True if it was paused."""
        return self.calls.resume_schedule(name, now)

    def remove_schedule(self, name: str, *, now: int | None = None) -> Call[bool]:
        """Delete the schedule ``name`` (a worker that still declares it writes it again).
        True; InvalidArgument for a schedule that does not exist."""
        return self.calls.remove_schedule(name, now)
