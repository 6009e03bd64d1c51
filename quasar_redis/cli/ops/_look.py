"""What ``quasar job`` and ``quasar jobs`` read, through the read model (``_reading.py``):
pages of jobs across statuses by cursor, a job's dependents, its dependencies' statuses and
its recent events, each read bounded; and the words of statuses on the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import _reading as reading
from ... import _types as t
from ..._reading import run
from ..._views import Event, Listing
from ...client import Quasar
from ._show import when

#: statuses in the order ``quasar jobs`` lists a queue without --status
ORDER = (
    t.Status.EXECUTING,
    t.Status.AVAILABLE,
    t.Status.SCHEDULED,
    t.Status.RETRYABLE,
    t.Status.BLOCKED,
    t.Status.DISCARDED,
    t.Status.CANCELLED,
    t.Status.EXPIRED,
    t.Status.COMPLETED,
)
#: what people call some statuses (``--status failed``), and the status each names
ALIASES = {
    "failed": t.Status.DISCARDED,
    "succeeded": t.Status.COMPLETED,
    "running": t.Status.EXECUTING,
    "waiting": t.Status.AVAILABLE,
    "delayed": t.Status.SCHEDULED,
}
RELATED_SHOWN = 50  # dependents and dependencies shown with their statuses
EVENTS_SHOWN = 50


def status_named(word: str) -> t.Status:
    """The status ``word`` names: a status (``discarded``) or a common word (``failed``)."""
    word = word.lower()
    if word in ALIASES:
        return ALIASES[word]
    return t.Status(word)


def status_words() -> list[str]:
    return [s.value for s in t.Status] + list(ALIASES)


def list_page(
    q: Quasar, queue: str, statuses: Sequence[t.Status], after: str | None, limit: int
) -> Listing:
    """Up to ``limit`` jobs of ``queue`` in ``statuses`` (in that order), from the cursor
    ``after`` (``<status>:<page cursor>``, as ``next_cursor`` gives it; None: the start)."""
    return run(q, reading.listing(q.calls, queue, statuses, after, limit))


def dependents(q: Quasar, job_id: str) -> tuple[int, list[str]]:
    """How many jobs depend on ``job_id``, and up to ``RELATED_SHOWN`` of them."""
    found = run(q, reading.dependents(q.calls, job_id, RELATED_SHOWN))
    return found.total, list(found.ids)


def event_document(event: Event) -> dict[str, Any]:
    document: dict[str, Any] = {
        "at": when(event.at_ms),
        "event": event.event,
        "queue": event.queue,
        "attempt": event.attempt,
    }
    if event.value is not None:  # a progress event
        document |= {"value": event.value, "message": event.message}
    elif event.message is not None:  # an operator retry's reason
        document["message"] = event.message
    return document


def recent_events(q: Quasar, job_id: str) -> list[dict[str, Any]]:
    """The job's events among the newest entries of the namespace's stream, oldest first (at
    most ``EVENTS_SHOWN``, the newest ones)."""
    return [event_document(e) for e in run(q, reading.job_events(q.calls, job_id, EVENTS_SHOWN))]
