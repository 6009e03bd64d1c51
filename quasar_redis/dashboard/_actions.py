"""The dashboard's actions (retry, cancel, promote, pause, purge, schedules, limits): what each
acts on and asks to confirm, and what it does once confirmed (``Actions``, a part of
``_app.Dashboard``)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from .. import _types as t
from .._schedules import Fired, NotFired
from ..aio import AsyncQuasar
from ..errors import AccessDenied, InvalidArgument, PermissionDenied
from . import _data as data

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
#: The actions that set limits (docs/flow-control.md), and whether each is a group's.
LIMIT_ACTIONS = {"set-limits": False, "set-group-limits": True}
#: The schedule actions that ``change_schedule`` makes, by their change.
SCHEDULE_CHANGES = {
    "pause-schedule": "pause",
    "resume-schedule": "resume",
    "remove-schedule": "remove",
}


class Actions:
    """What the dashboard does for a confirmed action (``self.client``: its client)."""

    @property
    def client(self) -> AsyncQuasar:
        raise NotImplementedError

    async def _acting(
        self, action: str, target: str, status: str, form: dict[str, str]
    ) -> dict[str, str] | Response:
        """The notice of ``action`` done, or a refusal of its form (nothing changed)."""
        changes = limits_asked(action, form) if action in LIMIT_ACTIONS else {}
        if isinstance(changes, Response):
            return changes
        try:
            if action in LIMIT_ACTIONS:
                group = form.get("group") if LIMIT_ACTIONS[action] else None
                return await self._set_limits(target, group, changes)
            return await self._apply(action, target, status)
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


def refusal(text: str, status: int = 403) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain; charset=utf-8")


def limits_asked(action: str, form: dict[str, str]) -> dict[str, Any] | Response:
    """The limits a form of ``action`` sets (``_data.limit_changes``), with its group's name for
    a group's, else a refusal (400) that says what is wrong; nothing is changed."""
    group = LIMIT_ACTIONS[action]
    if group and not plausible_id(form.get("group", "")):
        return refusal("Give the group's name (no whitespace or control characters).", 400)
    try:
        return data.limit_changes(form, group)
    except InvalidArgument as exc:
        return refusal(f"Nothing changed: {exc}.", 400)


def _outcome(result: Any, done: str) -> dict[str, str]:
    if isinstance(result, t.JobRefused):
        return {"done": "refused", "why": type(result.error).__name__}
    return {"done": done}


def plausible_id(job_id: str) -> bool:
    """An id a job can have (no whitespace or control characters, at most 256 bytes)."""
    return 0 < len(job_id.encode("utf-8", "replace")) <= 256 and not any(
        c.isspace() or ord(c) < 32 or ord(c) == 127 for c in job_id
    )
