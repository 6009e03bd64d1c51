"""A running job's progress on its way to Redis (``current_job().progress``).

A report only replaces the job's pending progress (no IO): the lease keeper's next heartbeat of
the job carries it when it differs from the last one sent, so a task reporting a thousand times
a second writes at most once a heartbeat interval. A flush has it sent at once (the lease
keeper's ``flush_soon``: a call fenced by the lease, from the keeper's thread, so that reports
reach Redis in the order they were made), and the keeper sends what is left before the job's
outcome, so that a finished job shows its last report. In a task's process
(``Worker(processes=N)``) reports go to the worker's process through the task's pipe
(``ChildProgress``), at most every FORWARD_S seconds, at once when flushed, and before the
run's answer.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _types as t
from .._urls import redact_text

if TYPE_CHECKING:
    from ..client import Quasar
    from ._lease import Lease

log = logging.getLogger("quasar_redis.worker")

#: In a task's process: the shortest time between two reports sent to the worker's process.
FORWARD_S = 0.05
#: The longest a task's flush of its progress waits for the lease keeper (which may be retrying
#: outcomes while Redis is away); the report stays pending past it.
FLUSH_WAIT_S = 10.0

#: A report as the scripts take it: the value's text and the message ("" for none).
Report = tuple[str, str]


class ProgressReport(NamedTuple):
    """A report sent from a task's process to the worker's (``flush``: send it at once)."""

    report: Report
    flush: bool


class ProgressBox:
    """The last report of a job and the last one sent (lock-free: a report only replaces
    ``pending``; a race sends the newer report at the next heartbeat instead)."""

    __slots__ = ("flusher", "pending", "sending", "sent")

    def __init__(self) -> None:
        self.pending: Report | None = None
        self.sent: Report | None = None
        self.sending = False  # a flush of it is on its way (its outcome must wait)
        # has the pending report sent now, waiting for Redis or not (``wait``): set by the
        # worker running the job (its lease keeper's ``flush_soon``)
        self.flusher: Callable[[bool], Any] | None = None

    def put(self, report: Report) -> None:
        self.pending = report

    def take(self) -> Report | None:
        """The pending report if it differs from the last sent (then counted as sent)."""
        report = self.pending
        if report is None or report == self.sent:
            return None
        self.sent = report
        return report

    def unsent(self) -> bool:
        """A report not sent yet, or being flushed."""
        return self.sending or (self.pending is not None and self.pending != self.sent)

    def forget(self, report: Report) -> None:
        """``report`` did not reach Redis: the next heartbeat sends it again."""
        if self.sent is report:
            self.sent = None

    def flush(self, wait: bool = True) -> None:
        """Have the pending report sent now, where a worker runs the job; with ``wait``, block
        until it is."""
        if self.flusher is not None:
            self.flusher(wait)


class ChildProgress(ProgressBox):
    """In a task's process: reports go through ``send`` (the task's pipe) to the worker's
    process, which keeps the job's ``ProgressBox``."""

    __slots__ = ("last", "send")

    def __init__(self, send: Callable[[ProgressReport], None]) -> None:
        super().__init__()
        self.send = send
        self.last = 0.0

    def put(self, report: Report) -> None:
        self.pending = report
        if time.monotonic() - self.last >= FORWARD_S:
            self.forward(flush=False)

    def flush(self, wait: bool = True) -> None:
        self.forward(flush=True)  # (the worker's process sends it: never waited for here)

    def forward(self, *, flush: bool) -> None:
        report = self.take()
        if report is None and flush:  # sent already, not yet flushed by the worker's process
            report = self.pending
        if report is not None:
            self.last = time.monotonic()
            self.send(ProgressReport(report, flush))


# --- in the worker's process: the lease keeper's side -------------------------------------------


def progress_waits(lease: Lease) -> bool:
    """Whether ``lease``'s job reported progress not sent yet (or being sent)."""
    box = lease.progress()
    return box is not None and box.unsent()


class FlushRequest(NamedTuple):
    """A task's ask to send its job's progress now (``LeaseKeeper.flush_soon``), put on the
    keeper's queue so that reports reach Redis in the order they were made, with heartbeats and
    outcomes; ``done`` once sent."""

    lease: Lease
    done: threading.Event

    def ask(self, requests: queue.SimpleQueue[Any], wait: bool) -> None:
        """Queue it; with ``wait``, wait until it is sent, up to FLUSH_WAIT_S."""
        requests.put(self)
        if wait:
            self.done.wait(FLUSH_WAIT_S)

    def run(self, client: Quasar, worker_id: str) -> None:
        flush_progress(client, worker_id, self.lease)
        self.done.set()


class FlushesProgress:
    """The lease keeper's side of a task's flush (a base of ``LeaseKeeper``, whose thread takes
    the requests off its queue)."""

    _outcomes: queue.SimpleQueue[Any]

    def flush_soon(self, lease: Lease, wait: bool = True) -> None:
        """Have the keeper's thread send ``lease``'s job's progress now (``FlushRequest``)."""
        FlushRequest(lease, threading.Event()).ask(self._outcomes, wait)


def flush_progress(client: Quasar, worker_id: str, lease: Lease) -> None:
    """Send the progress of ``lease``'s job now if it changed since last sent (its task asked,
    or its run ended), from the lease keeper's thread. Never raises: a refusal (the lease is
    lost) drops it, an error leaves it for the next heartbeat."""
    box = lease.progress()
    # (a heartbeat whose answer was lost goes again as it was, maybe with an older report:
    # this one waits for the heartbeat after it rather than be overwritten)
    if box is None or lease.beat is not None:
        return
    box.sending = True  # (before taking it, until answered: its outcome goes after it)
    try:
        _send(client, worker_id, lease, box)
    finally:
        box.sending = False


def _send(client: Quasar, worker_id: str, lease: Lease, box: ProgressBox) -> None:
    report = box.take()
    if report is None:
        return
    value, message = float(report[0]), report[1] or None
    try:
        result = client.report_progress(lease.token, worker_id, value, message)
    except Exception as exc:  # (Redis unreachable, say)
        box.forget(report)
        log.debug("job %s: progress not sent now (%s)", lease.job_id, redact_text(str(exc)))
        return
    if isinstance(result, t.JobRefused):
        log.debug("job %s: progress refused (%s)", lease.job_id, type(result.error).__name__)
