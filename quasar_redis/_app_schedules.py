"""The periodic schedules of an app's tasks (docs/schedules.md): ``App.periodic`` declares a
task run on a schedule, ``App.schedule`` puts a task of the app on one. The app keeps them in
``schedules``; every worker of the app declares and fires them (``worker/_scheduler.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._schedules import Missed, Schedule
from ._tasks import Task
from .errors import InvalidSchedule

if TYPE_CHECKING:
    from .app import App

R = TypeVar("R")


class Periodic:
    """What ``App`` does with periodic schedules."""

    def periodic(
        self,
        cron: str | None = None,
        /,
        *,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        name: str | None = None,
        missed: Missed = "skip",
        grace: float | timedelta = 30.0,
        **task_settings: Any,
    ) -> Callable[[Callable[[], R]], Task[[], R]]:
        """Declare a task run on a schedule: ``@app.periodic("*/5 * * * *", tz="Europe/Paris")``
        (a cron expression, read by cronsim) or ``@app.periodic(every=30)`` (seconds). The
        function takes no arguments; ``task_settings`` are ``task``'s (queue, max_attempts, ...).
        ``name``: the schedule's (default: the task's); ``missed``: what becomes of ticks more
        than ``grace`` seconds late, after a time without workers: ``"skip"`` (no job) or
        ``"once"`` (one job for them all). InvalidSchedule for bad settings."""

        app = cast("App", self)
        # (checked before the task is declared, so that bad settings declare nothing)
        queue = task_settings.get("queue", "default")
        Schedule.of(
            name or "-", "-", cron, every=every, tz=tz, missed=missed, grace=grace, queue=queue
        )

        def declare(f: Callable[[], R]) -> Task[[], R]:
            task: Task[[], R] = app.task(f, **task_settings)
            try:
                self.schedule(task, cron, every=every, tz=tz, name=name, missed=missed, grace=grace)
            except BaseException:
                app.tasks.pop(task.name, None)
                raise
            return task

        return declare

    def schedule(
        self,
        task: Task[Any, Any],
        cron: str | None = None,
        /,
        *,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        name: str | None = None,
        missed: Missed = "skip",
        grace: float | timedelta = 30.0,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Schedule:
        """Run ``task`` (of this app) with ``args`` and ``kwargs`` on a schedule, as
        ``periodic`` does; a task may have several schedules, each its own ``name``."""
        app = cast("App", self)
        label = name or task.name
        if label in app.schedules:
            raise InvalidSchedule(f"a schedule named {label!r} is declared twice")
        payload = app.encode_call(task, args, kwargs or {})
        made = Schedule.of(
            label,
            task.name,
            cron,
            every=every,
            tz=tz,
            missed=missed,
            grace=grace,
            payload=payload,
            queue=task.queue,
            priority=task.priority,
            max_attempts=task.max_attempts,
        )
        app.schedules[label] = made
        return made
