"""The lease keeper: one thread that makes every call a lease holder makes.

Heartbeats, completions, failures and hand-backs of one worker all go through this thread, one
batch (one pipeline, one round trip) at a time. That serialises them per job, so a completion
always carries the newest token (a heartbeat renews the token, and the old one is then stale),
and it keeps heartbeats going while the event loop is busy: a job that blocks the loop, or a
CPU-bound one, cannot starve them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import _types as t
from ._protocol import Call
from .client import Quasar
from .errors import QuasarError, RedisUnavailable

log = logging.getLogger("quasar_redis.worker")

#: Builds the outcome from the newest token.
Report = Callable[[t.LeaseToken], t.Outcome]
#: Called with an outcome's result (an OutcomeResult, or the exception that stopped it).
Done = Callable[[Any], None]
#: Runs the done callbacks of one batch (a worker hands them to its event loop in one go).
Dispatch = Callable[[list[tuple[Done, Any]]], None]
BATCH = 1000


@dataclass(eq=False)
class Lease:
    """A job this worker holds: its newest token and what to do if the lease is lost."""

    claim: t.Claim
    lease_ms: int
    on_lost: Callable[[t.JobError], None]
    token: t.LeaseToken = field(init=False)
    renewed_at: float = field(default=0.0)  # monotonic time of the claim or last heartbeat
    finishing: bool = False
    lost: bool = False

    def __post_init__(self) -> None:
        self.token = self.claim.token

    @property
    def job_id(self) -> str:
        return self.claim.job.id


_WAKE = object()  # put on the queue to make the keeper look at its leases again


@dataclass(eq=False)
class _Outcome:
    lease: Lease
    build: Report
    done: Done


class LeaseKeeper:
    """Heartbeats every held lease at about a third of its duration and sends outcomes."""

    def __init__(
        self,
        client: Quasar,
        worker_id: str,
        retry_for: float = 30.0,
        dispatch: Dispatch | None = None,
    ) -> None:
        self.client = client
        self.dispatch = dispatch or _run_all
        self.worker_id = worker_id
        self.retry_for = retry_for
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._outcomes: queue.SimpleQueue[_Outcome | object | None] = queue.SimpleQueue()
        self._next_due = time.monotonic() + 0.5
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quasar-lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Send what is queued, then stop."""
        self._stop.set()
        self._outcomes.put(None)
        self._thread.join(timeout)

    def hold(self, lease: Lease) -> None:
        lease.renewed_at = time.monotonic()
        granted = lease.claim.token.expires_at - (lease.claim.job.attempted_at or 0)
        if lease.lease_ms != granted:
            lease.renewed_at = 0.0  # the task's own lease differs from the claim's: renew at once
        with self._lock:
            self._leases[lease.job_id] = lease
            sooner = _due(lease) < self._next_due
            self._next_due = min(self._next_due, _due(lease))
        if sooner:
            self._outcomes.put(_WAKE)  # the keeper may be asleep past this lease's first renewal

    def report(self, lease: Lease, build: Report, done: Done) -> None:
        """Send the job's outcome with its newest token; ``done`` gets the result."""
        with self._lock:
            lease.finishing = True
        self._outcomes.put(_Outcome(lease, build, done))

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._leases.values())

    # the thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = self._take_outcomes(self._next_wait())
            if batch is None:
                break
            if batch:
                self._send_outcomes(batch)
            self._heartbeat_due()
        rest = self._take_outcomes(0.0) or []
        if rest:
            self._send_outcomes(rest)

    def _next_wait(self) -> float:
        """Until the earliest heartbeat is due (kept up to date by hold and each round)."""
        return max(0.0, min(self._next_due - time.monotonic(), 0.5))

    def _take_outcomes(self, wait: float) -> list[_Outcome] | None:
        batch: list[_Outcome] = []
        try:
            item = self._outcomes.get(timeout=wait) if wait > 0 else self._outcomes.get_nowait()
        except queue.Empty:
            return batch
        while True:
            if item is None:
                return None if not batch and self._stop.is_set() else batch
            if isinstance(item, _Outcome):
                batch.append(item)
            try:
                item = self._outcomes.get_nowait()
            except queue.Empty:
                return batch

    def _send_outcomes(self, batch: list[_Outcome]) -> None:
        """One report call per BATCH outcomes (all in one pipeline)."""
        chunks = [batch[i : i + BATCH] for i in range(0, len(batch), BATCH)]
        calls = [
            self.client.calls.report(self.worker_id, [o.build(o.lease.token) for o in chunk])
            for chunk in chunks
        ]
        results: list[Any] = []
        for chunk, reply in zip(chunks, self._execute(calls), strict=True):
            results.extend(reply if isinstance(reply, list) else [reply] * len(chunk))
        with self._lock:
            for outcome in batch:
                self._leases.pop(outcome.lease.job_id, None)
        self.dispatch([(o.done, r) for o, r in zip(batch, results, strict=True)])

    def _heartbeat_due(self) -> None:
        now = time.monotonic()
        if now < self._next_due:
            return
        live = [lease for lease in self.held() if not lease.finishing and not lease.lost]
        due = [lease for lease in live if now >= _due(lease)]
        later = [_due(lease) for lease in live if _due(lease) > now]
        self._next_due = min(later, default=now + 0.5)
        if not due:
            return
        calls = [
            self.client.calls.heartbeat(lease.token, self.worker_id, lease.lease_ms)
            for lease in due
        ]
        results = self._execute(calls, give_up_after=0.0)
        for lease, result in zip(due, results, strict=True):
            self._after_heartbeat(lease, result, now)
            if not lease.lost:
                self._next_due = min(self._next_due, _due(lease))

    def _after_heartbeat(self, lease: Lease, result: Any, sent_at: float) -> None:
        if isinstance(result, t.ClaimApplied):
            with self._lock:  # the outcome, if one is queued, goes out after this, with this token
                lease.token = result.claim.token
                lease.renewed_at = sent_at
        elif isinstance(result, t.ClaimRefused):
            with self._lock:
                lease.lost = True
                self._leases.pop(lease.job_id, None)
            log.warning(
                "job %s: lease lost (%s); its outcome will not be reported",
                lease.job_id,
                type(result.error).__name__,
            )
            lease.on_lost(result.error)
        else:  # Redis unreachable, or a damaged job: try again in a moment
            lease.renewed_at = time.monotonic() - lease.lease_ms / 3000 + 0.2

    def _execute(self, calls: list[Call[Any]], give_up_after: float | None = None) -> list[Any]:
        """Results of ``calls`` (the same calls re-sent while Redis is unreachable)."""
        deadline = time.monotonic() + (self.retry_for if give_up_after is None else give_up_after)
        delay = 0.05
        while True:
            try:
                return self.client.execute_many(calls)
            except RedisUnavailable as exc:
                if time.monotonic() >= deadline:
                    return [exc] * len(calls)
                log.warning("Redis unavailable (%s); retrying in %.2fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except QuasarError as exc:
                return [exc] * len(calls)


def _run_all(pairs: list[tuple[Done, Any]]) -> None:
    for done, result in pairs:
        done(result)


def _due(lease: Lease) -> float:
    """When the lease should be renewed: a third of the way through it."""
    return lease.renewed_at + lease.lease_ms / 3000
