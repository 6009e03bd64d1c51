"""The periodic schedules of an app's tasks (docs/schedules.md): ``App.periodic`` declares a
task run on a schedule, ``App.schedule`` puts a task of the app on one. The app keeps them in
``schedules``; every worker of the app declares and fires them (``worker/_scheduler.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

from ._schedules import Missed, Schedule
from ._tasks import Task
from .errors import InvalidSchedule

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover
    from typing_extensions import Unpack

if TYPE_CHECKING:
    from .app import App

R = TypeVar("R")


class When(TypedDict, total=False):
    """When a schedule fires, besides its cron expression: ``every`` (seconds or a timedelta,
    instead of a cron expression), ``tz`` (an IANA name, "UTC" by default), ``name`` (the
    schedule's; its task's by default), ``missed`` ("skip" or "once": what becomes of ticks more
    than ``grace`` seconds late, 30 by default)."""

    every: float | timedelta | None
    tz: str
    name: str | None
    missed: Missed
    grace: float | timedelta


class Periodic:
    """What ``App`` does with periodic schedules."""

    def periodic(
        self,
        cron: str | None = None,
        /,
        *,
        queue: str = "default",
        max_attempts: int = 3,
        priority: int = 0,
        lease_ms: int | None = None,
        timeout: float | None = None,
        **when: Unpack[When],
    ) -> Callable[[Callable[[], R]], Task[[], R]]:
        """Declare a task run on a schedule: ``@app.periodic("*/5 * * * *", tz="Europe/Paris")``
        (a cron expression, read by cronsim) or ``@app.periodic(every=30)`` (seconds); ``when``
        as ``When`` says. The function takes no arguments; ``queue`` to ``timeout`` are the
        task's settings, as ``App.task`` takes them (for others, declare the task with
        ``App.task`` and put it on a schedule with ``App.schedule``). InvalidSchedule for bad
        settings, before anything is declared."""
        app = cast("App", self)
        # (checked before the task is declared, so that bad settings declare nothing)
        _made(when.get("name") or "-", "-", cron, when, queue=queue)

        def declare(f: Callable[[], R]) -> Task[[], R]:
            made: Task[[], R] = app.task(
                f,
                queue=queue,
                max_attempts=max_attempts,
                priority=priority,
                lease_ms=lease_ms,
                timeout=timeout,
            )
            try:
                self.schedule(made, cron, **when)
            except BaseException:
                app.tasks.pop(made.name, None)
                raise
            return made

        return declare

    def schedule(
        self,
        task: Task[Any, Any],
        cron: str | None = None,
        /,
        *,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **when: Unpack[When],
    ) -> Schedule:
        """Run ``task`` (of this app) with ``args`` and ``kwargs`` on a schedule, as
        ``periodic`` does; a task may have several schedules, each its own ``name``."""
        app = cast("App", self)
        label = when.get("name") or task.name
        if label in app.schedules:
            raise InvalidSchedule(f"a schedule named {label!r} is declared twice")
        payload = app.encode_call(task, args, kwargs or {})
        made = _made(
            label,
            task.name,
            cron,
            when,
            payload=payload,
            queue=task.queue,
            priority=task.priority,
            max_attempts=task.max_attempts,
        )
        app.schedules[label] = made
        return made


def _made(name: str, stage: str, cron: str | None, when: When, **job: Any) -> Schedule:
    return Schedule.of(
        name,
        stage,
        cron,
        every=when.get("every"),
        tz=when.get("tz", "UTC"),
        missed=when.get("missed", "skip"),
        grace=when.get("grace", 30.0),
        **job,
    )
