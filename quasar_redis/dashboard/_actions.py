"""The dashboard's actions (retry, cancel, promote, pause, purge, schedules, limits): what each
acts on and asks to confirm, what it does once confirmed (``Actions``, a part of
``_app.Dashboard``), and the audit line each leaves in the log and in the event stream."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from .. import _types as t
from .._partition_ops import keys_of
from .._schedules import Fired, NotFired
from .._views import AUDIT
from ..aio import AsyncQuasar
from ..errors import AccessDenied, InvalidArgument, PermissionDenied, QuasarError
from . import _data as data

log = logging.getLogger("quasar_redis.dashboard")

#: Each action: what it acts on ("job", "queue" or "schedule"), and its confirmation's words.
ACTIONS = {
    "retry": ("job", "Retry job {target}: run it again, with one more attempt allowed?"),
    "cancel": ("job", "Cancel job {target} and every job that depends on it?"),
    "promote": ("job", "Run job {target} now, rather than at its scheduled time?"),
    "retry-all": ("queue", "Retry every failed job of queue {target}?"),
    "purge": ("queue", "Delete every {status} job of queue {target}, for good?"),
    "pause": ("queue", "Pause queue {target}: workers lease none of its jobs until resumed?"),
    "resume": ("queue", "Resume queue {target}?"),
    "pause-schedule": (
        "schedule",
        "Pause schedule {target}: none of its ticks fires until resumed (a trigger still does)?",
    ),
    "resume-schedule": (
        "schedule",
        "Resume schedule {target}: its ticks fire again, those missed as its setting says?",
    ),
    "trigger-schedule": ("schedule", "Enqueue the job of schedule {target} now (its ticks stay)?"),
    "remove-schedule": (
        "schedule",
        "Remove schedule {target}? A worker that still declares it writes it again.",
    ),
    "set-limits": ("queue", "Set the limits of queue {target}: {changes}?"),
    "set-group-limits": ("queue", "Set the limits of group {group} of queue {target}: {changes}?"),
}
#: The job actions' words for several jobs at once (selected on a queue's page).
BULK_WORDS = {
    "retry": "Retry these {n} jobs: run each again, with one more attempt allowed?",
    "cancel": "Cancel these {n} jobs and every job that depends on them?",
    "promote": "Run these {n} jobs now, rather than at their scheduled time?",
}
#: Jobs one action may name at once (a page of a queue holds ``_data.PAGE_SIZE``).
BULK_MAX = 100
#: What the event stream keeps, about (as the scripts' own events: lua/include/events.lua).
EVENTS_MAX = 10_000
#: The actions that set limits (docs/flow-control.md), and whether each is a group's.
LIMIT_ACTIONS = {"set-limits": False, "set-group-limits": True}
#: The schedule actions that ``change_schedule`` makes, by their change.
SCHEDULE_CHANGES = {
    "pause-schedule": "pause",
    "resume-schedule": "resume",
    "remove-schedule": "remove",
}


@dataclass(frozen=True, slots=True)
class Problem:
    """A request the dashboard cannot serve, shown as a page of its own: 404 (nothing there:
    ``looked_for`` names what was asked for) or 400 (bad input, nothing changed); ``back`` is
    the page to go back to (a path under the dashboard's root) and its name."""

    status: int
    text: str
    looked_for: str = ""
    back: str = "/"
    back_name: str = "the overview"


class Actions:
    """What the dashboard does for a confirmed action (``self.client``: its client)."""

    @property
    def client(self) -> AsyncQuasar:
        raise NotImplementedError

    async def _acting_on_jobs(self, action: str, jobs: list[str]) -> dict[str, str]:
        """``action`` (retry, cancel or promote) done to each of ``jobs`` in turn: a lone job's
        notice as ``_acting``'s, several jobs' counts (``n`` done, ``m`` refused)."""
        if len(jobs) == 1:
            return await self._guarded(self._apply(action, jobs[0], ""))
        done = 0
        for job in jobs:
            made = await self._guarded(self._apply(action, job, ""))
            if made["done"] == "denied":
                return made  # (checked before any write: the next jobs would be refused too)
            done += made["done"] != "refused"
        return {"done": f"jobs-{action}", "n": str(done), "m": str(len(jobs) - done)}

    async def _acting(
        self, action: str, target: str, status: str, form: dict[str, str]
    ) -> dict[str, str] | Problem:
        """The notice of ``action`` done, or a refusal of its form (nothing changed)."""
        if action not in LIMIT_ACTIONS:
            return await self._guarded(self._apply(action, target, status))
        changes = limits_asked(action, form)
        if isinstance(changes, Problem):
            return changes
        group = form.get("group") if LIMIT_ACTIONS[action] else None
        return await self._guarded(self._set_limits(target, group, changes))

    async def _guarded(self, acting: Awaitable[dict[str, str]]) -> dict[str, str]:
        """``acting``'s notice, or that the dashboard's Redis user may not do it."""
        try:
            return await acting
        except AccessDenied as exc:  # (checked before any write: nothing changed)
            grant = exc.permission if isinstance(exc, PermissionDenied) else None
            return {"done": "denied", "grant": f"grant {grant}" if grant else ""}

    async def _apply(self, action: str, target: str, status: str) -> dict[str, str]:
        client = self.client
        if ACTIONS[action][0] == "schedule":
            return await self._apply_to_schedule(action, target)
        if action == "retry":
            return _outcome(
                await client.retry(target, reason="retried from the dashboard"), "retried"
            )
        if action == "cancel":
            result = await client.cancel(target, reason="cancelled from the dashboard")
            if isinstance(result, t.CancelApplied):
                return {"done": "cancelled", "n": str(len(result.cascaded))}
            return _outcome(result, "cancelled")
        if action == "promote":
            return _outcome(await client.promote(target), "promoted")
        if action == "retry-all":
            return {"done": "retried-all", "n": str(await data.retry_all_failed(client, target))}
        if action == "purge":
            return {"done": "purged", "n": str(await data.purge(client, target, t.Status(status)))}
        if action == "pause":
            return {"done": "paused" if await client.pause(target) else "unchanged"}
        return {"done": "resumed" if await client.resume(target) else "unchanged"}

    async def _apply_to_schedule(self, action: str, name: str) -> dict[str, str]:
        """What ``quasar schedules pause|resume|remove|trigger`` does; a schedule removed since
        the page was shown is told as such, not as an error."""
        if action == "trigger-schedule":
            fired = await self.client.trigger_schedule(name)
            if isinstance(fired, Fired):
                return {"done": "schedule-triggered", "job": fired.job_id}
            if isinstance(fired, NotFired) and fired.reason == "missing":
                return {"done": "schedule-missing"}
            return {"done": "refused", "why": getattr(fired, "reason", "skipped")}
        change = SCHEDULE_CHANGES[action]
        try:
            changed = await self.client.change_schedule(name, change)
        except InvalidArgument:  # (name and change are valid: the schedule does not exist)
            return {"done": "schedule-missing"}
        return {"done": f"schedule-{change}d" if changed else "unchanged"}

    async def _set_limits(
        self, queue: str, group: str | None, changes: dict[str, Any]
    ) -> dict[str, str]:
        """What ``quasar limits set`` does; a queue gone meanwhile is told as refused."""
        try:
            if group is None:
                await self.client.set_limits(queue, **changes)
            else:
                await self.client.set_group_limits(queue, group, **changes)
        except InvalidArgument:  # (checked values: the queue is unknown)
            return {"done": "refused", "why": "InvalidArgument"}
        return {"done": "limits-set"}

    async def _audit(
        self, request: Request, action: str, targets: list[str], made: dict[str, str]
    ) -> None:
        """Say who did ``action`` to ``targets`` (jobs, a queue or a schedule) and its outcome:
        a line of the ``quasar_redis.dashboard`` log, and an ``audit`` entry of the namespace's
        event stream (``quasar events``). A stream that cannot be written is told in the log; the
        action stands."""
        what = ACTIONS[action][0]
        who = user_of(request)
        address = request.client.host if request.client else "-"
        outcome = outcome_words(made)
        shown = ", ".join(targets)
        log.info(
            "dashboard action %s on %s %s by %s from %s: %s",
            action, what, shown, who, address, outcome,
        )  # fmt: skip
        fields = {"ev": AUDIT, "act": action, "who": who, "out": outcome}
        fields["q"] = targets[0] if what == "queue" else made.get("queue", "-")
        if what == "schedule":
            fields["schedule"] = targets[0]
        streams = audit_streams(self.client, targets if what == "job" else [])
        try:
            for stream, jobs in streams.items():
                entry = {**fields, "job": " ".join(jobs)} if jobs else fields
                await self.client.redis.xadd(stream, entry, maxlen=EVENTS_MAX, approximate=True)
        except (RedisError, QuasarError, OSError) as exc:
            log.warning("dashboard action %s: its audit event was not written: %s", action, exc)


def audit_streams(client: AsyncQuasar, jobs: list[str]) -> dict[str, list[str]]:
    """The event streams an audit entry goes to, each with the jobs it names there: that of each
    job's partition (its page's timeline reads it), or for no job the first partition's (as a
    queue's pauses); a namespace of one partition has one stream."""
    if not jobs:
        return {keys_of(client.calls).events: []}
    streams: dict[str, list[str]] = {}
    for job in jobs:
        streams.setdefault(keys_of(client.calls, job).events, []).append(job)
    return streams


def user_of(request: Request) -> str:
    """Who made ``request``: the basic-auth user of the standalone server, the user the
    application the dashboard is mounted in authenticated, else ``anonymous``."""
    named = request.scope.get("quasar.user")
    if named:
        return str(named)
    user = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        name = getattr(user, "display_name", None) or getattr(user, "username", None)
        if name:
            return str(name)
    return "anonymous"


def outcome_words(made: dict[str, str]) -> str:
    """An action's outcome (its notice's fields) in a few words: ``retried``, ``refused:
    InvalidState``, ``2 done, 1 refused``."""
    done = made.get("done", "?")
    if done.startswith("jobs-"):
        return f"{made.get('n', '0')} done, {made.get('m', '0')} refused"
    if done == "refused":
        return f"refused: {made.get('why', 'unknown')}"
    return f"{done}: {made['n']}" if "n" in made else done


def refusal(text: str, status: int = 403) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain; charset=utf-8")


def limits_asked(action: str, form: dict[str, str]) -> dict[str, Any] | Problem:
    """The limits a form of ``action`` sets (``_data.limit_changes``), with its group's name for
    a group's, else a refusal (400) that says what is wrong; nothing is changed."""
    group = LIMIT_ACTIONS[action]
    if group and not plausible_id(form.get("group", "")):
        return Problem(400, "Give the group's name (no whitespace or control characters).")
    try:
        return data.limit_changes(form, group)
    except InvalidArgument as exc:
        return Problem(400, f"Nothing changed: {exc}.")


def _outcome(result: Any, done: str) -> dict[str, str]:
    if isinstance(result, t.JobRefused):
        return {"done": "refused", "why": type(result.error).__name__}
    return {"done": done}


def plausible_id(job_id: str) -> bool:
    """An id a job can have (no whitespace or control characters, at most 256 bytes)."""
    return 0 < len(job_id.encode("utf-8", "replace")) <= 256 and not any(
        c.isspace() or ord(c) < 32 or ord(c) == 127 for c in job_id
    )
