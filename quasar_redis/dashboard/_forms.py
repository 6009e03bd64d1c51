"""The dashboard's forms: what an action's confirmation asks and checks, the page an action
returns to, and the notice it shows there (no IO: the pages and actions in ``_app`` use them)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import quote

from .. import _types as t
from .._keys import NAME_RE
from . import _data as data
from ._actions import (
    ACTIONS,
    BULK_MAX,
    BULK_WORDS,
    LIMIT_ACTIONS,
    Problem,
    limits_asked,
    plausible_id,
)

NOTICES = {
    "retried": "Job retried.",
    "cancelled": "Job cancelled ({n} dependents with it).",
    "promoted": "Job due now.",
    "jobs-retry": "{n} of {total} jobs retried.",
    "jobs-cancel": "{n} of {total} jobs cancelled.",
    "jobs-promote": "{n} of {total} jobs due now.",
    "retried-all": "{n} failed jobs retried.",
    "purged": "{n} jobs deleted.",
    "paused": "Queue paused.",
    "resumed": "Queue resumed.",
    "unchanged": "Nothing changed: it already was.",
    "refused": "Refused: {why}.",
    "not-found": "No job with that id.",
    "schedule-paused": "Schedule paused.",
    "schedule-resumed": "Schedule resumed.",
    "schedule-triggered": "Schedule triggered: job {job} enqueued.",
    "schedule-removed": "Schedule removed.",
    "schedule-missing": "No schedule with that name (it may have been removed).",
    "limits-set": "Limits set: every worker's next claim follows them.",
    "denied": (
        "Not allowed: the dashboard's Redis user lacks a permission this action needs "
        "({grant}); docs/security.md lists each role's."
    ),
}
#: What a notice of several jobs adds when some were refused.
REFUSED_TOO = " {m} refused: their status does not allow it (or they are gone)."
PURGEABLE = frozenset(s.value for s in t.TERMINAL_STATUSES)
#: The statuses in the order ``quasar queues`` shows them.
STATUS_ORDER = data.ORDER
#: The views of a queue's jobs: each status, and every status at once.
VIEWS = frozenset([data.ALL, *(s.value for s in STATUS_ORDER)])


def confirm_page(action: str, params: Any) -> tuple[str, dict[str, Any]] | Problem:
    """The confirmation page of ``action`` on what ``params`` names, or why it is refused."""
    if action not in ACTIONS:
        return Problem(404, "No such action.", action)
    what, words = ACTIONS[action]
    targets = targets_of(params.getlist(what))
    target = targets[0] if targets else ""
    status = params.get("status", "")
    bad = bad_targets(what, targets) if what == "job" else None
    if bad is not None:
        return Problem(400, bad, ", ".join(targets))
    if action == "purge" and status not in PURGEABLE:
        msg = "Only completed, discarded, cancelled and expired jobs can be deleted."
        return Problem(400, msg, status, f"/queues/{target}", target)
    if what == "schedule" and not NAME_RE.match(target):
        return Problem(404, "No such schedule.", target, "/schedules", "the schedules")
    extra: list[tuple[str, str]] = []
    changes = ""
    group = params.get("group", "")
    if action in LIMIT_ACTIONS:
        asked = limits_form(action, target, params)
        if isinstance(asked, Problem):
            return asked
        changes, extra = asked
    from_queue = from_queue_of(params)
    if what == "job" and from_queue:
        extra += [("from_queue", from_queue[0]), ("from_view", from_queue[1])]
    question = words.format(target=target, status=status, changes=changes, group=group)
    if len(targets) > 1:
        question = BULK_WORDS[action].format(n=len(targets))
    return "confirm.html", {
        "title": "Confirm",
        "action": action,
        "what": what,
        "targets": targets if what == "job" else [target],
        "status": status if action == "purge" else "",
        "extra": extra,
        "question": question,
        "back": back_path(what, targets, from_queue),
    }


def action_asked(
    action: str, fields: dict[str, list[str]], form: dict[str, str]
) -> tuple[str, list[str], str] | Problem:
    """A posted action's kind of target, its targets and status, or why it is refused (an
    unknown action: 404; targets or a status it does not take: 400)."""
    if action not in ACTIONS:
        return Problem(404, "No such action.", action)
    what, _ = ACTIONS[action]
    targets = targets_of(fields.get(what, []))
    bad = bad_targets(what, targets)
    status = form.get("status", "")
    if bad is None and action == "purge" and status not in PURGEABLE:
        bad = "Only completed, discarded, cancelled and expired jobs can be deleted."
    if bad is not None:
        return Problem(400, bad, ", ".join(targets))
    return what, targets, status


def limits_form(
    action: str, queue: str, params: Any
) -> tuple[str, list[tuple[str, str]]] | Problem:
    """The words of the limits a confirmation of ``action`` sets, and the fields its form
    passes on; or why they are refused."""
    if not NAME_RE.match(queue):
        return Problem(404, f"No queue named {queue}.", queue)
    made = limits_asked(action, dict(params))
    if isinstance(made, Problem):
        return back_to_queue(made, queue)
    group = LIMIT_ACTIONS[action]
    names = data.GROUP_LIMITS if group else data.QUEUE_LIMITS
    extra = [(n, params.get(n, "").strip()) for n in names]
    extra += [("group", params.get("group", ""))] if group else []
    return data.change_words(made, group), extra


def back_to_queue(problem: Problem, queue: str) -> Problem:
    """``problem`` of a form of ``queue``'s page, back to that page."""
    return dataclasses.replace(problem, back=f"/queues/{queue}", back_name=f"queue {queue}")


def targets_of(given: list[str]) -> list[str]:
    """The targets a form names, each once, in order."""
    return list(dict.fromkeys(given))


def bad_targets(what: str, targets: list[str]) -> str | None:
    """Why an action's targets are refused (400), or None."""
    if what == "job":
        if not targets:
            return "Select one job or more."
        if not all(plausible_id(job) for job in targets):
            return "No such job."
        return f"At most {BULK_MAX} jobs at once." if len(targets) > BULK_MAX else None
    if len(targets) != 1 or not NAME_RE.match(targets[0]):
        return f"No such {what}."
    return None


def from_queue_of(params: Any) -> tuple[str, str] | None:
    """The queue page (queue, view) a job action was asked from, to go back to; None if none."""
    queue, view = params.get("from_queue", ""), params.get("from_view", "")
    return (queue, view) if NAME_RE.match(queue) and view in VIEWS else None


def notice_text(params: Any) -> str:
    done = params.get("done", "")
    text = NOTICES.get(done, "")
    why = re.sub(r"[^A-Za-z]", "", params.get("why", ""))[:40]
    grant = re.sub(r"[^\w +~|:{}*.-]", "", params.get("grant", ""))[:80]
    job = params.get("job", "")
    count, refused = (count_of(params.get(name, "0")) for name in ("n", "m"))
    if done.startswith("jobs-") and refused:
        text += REFUSED_TOO
    return text.format(
        n=count,
        m=refused,
        total=count + refused,
        why=why or "unknown",
        grant=grant or "Redis did not say which",
        job=job if plausible_id(job) else "?",
    )


def count_of(text: str) -> int:
    return int(text) if text.isdigit() and len(text) < 10 else 0


def back_path(what: str, targets: list[str], from_queue: tuple[str, str] | None = None) -> str:
    """The page an action on ``targets`` (a ``what``) is made from, and returns to."""
    if from_queue is not None:
        return f"/queues/{from_queue[0]}?status={from_queue[1]}"
    if what == "job":
        return f"/jobs/{quote(targets[0], safe='')}" if len(targets) == 1 else "/"
    return "/schedules" if what == "schedule" else f"/queues/{targets[0]}"
