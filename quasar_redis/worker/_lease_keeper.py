"""The lease keeper: one thread that renews a worker's leases and reports what no claim carries.

Heartbeats of one worker go through this thread, one batch (one pipeline, one round trip) at a
time, so they keep going while the event loop is busy: a job that blocks the loop, or a CPU-bound
one, cannot starve them. Outcomes (completions, failures, hand-backs) go through it too, or ride
the worker's next claim (``_reporting``): either way an outcome is sent only while no heartbeat of
its lease is in flight and none starts after, so it always carries the newest token (a heartbeat
renews the token, and the old one is then stale). Each lease is in one state (``_lease``), changed
under the keeper's lock.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import _types as t
from .._calls import Call
from .._urls import redact_text
from ..client import Quasar
from ..errors import QuasarError, RedisUnavailable
from ._health import Rounds
from ._lease import (
    BEAT,
    BEAT_ENDED,
    BEATING,
    CARRY,
    FINISH,
    HELD,
    REFUSED,
    REPORTING,
    Build,
    Lease,
    Outgoing,
    due_of,
    end_of,
    retry_wait,
)
from ._progress import FlushesProgress, FlushRequest, flush_progress, progress_waits
from ._transient import passes

log = logging.getLogger("quasar_redis.worker")

#: Called with an outcome's result (an OutcomeResult, or the exception that stopped it).
Done = Callable[[Any], None]
#: Gets the ``(handle, result)`` pairs of one batch, ``handle`` as given to ``report`` (a worker
#: hands them to its event loop in one go); the default calls each ``handle(result)``.
Dispatch = Callable[[list[tuple[Any, Any]]], None]
BATCH = 1000


_WAKE = object()  # put on the queue to make the keeper look at its leases again


class LeaseKeeper(FlushesProgress, Rounds):
    """Heartbeats every held lease at about a third of its duration and sends outcomes."""

    def __init__(
        self,
        client: Quasar,
        worker_id: str,
        retry_for: float = 30.0,
        dispatch: Dispatch | None = None,
    ) -> None:
        self.client = client
        self.wire = Wire(client, worker_id)
        self.dispatch = dispatch or _run_all
        self.worker_id = worker_id
        self.retry_for = retry_for
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._outcomes: queue.SimpleQueue[list[Outgoing] | object | None] = queue.SimpleQueue()
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
        self.hold_many([lease])

    def hold_many(self, leases: list[Lease]) -> None:
        """Keep ``leases`` renewed from now on (one lock and at most one wake-up for all)."""
        now = time.monotonic()
        for lease in leases:
            lease.renewed_at = now
            claim = lease.claim
            if lease.lease_ms != claim.token.expires_at - (claim.job.attempted_at or 0):
                lease.retry_at = now  # the task's lease differs from the claim's: renew at once
        with self._lock:
            due = self._next_due
            for lease in leases:
                self._leases[lease.claim.job.id] = lease
                due = min(due, due_of(lease))
            sooner = due < self._next_due
            self._next_due = due
        if sooner:
            self._outcomes.put(_WAKE)  # the keeper may be asleep past this lease's first renewal

    def report(self, lease: Lease, build: Build, done: Done) -> None:
        """Send the job's outcome with its newest token; ``done`` gets the result."""
        self.send([Outgoing(lease, build, done)])

    def report_many(self, items: list[tuple[Lease, Build, Any]]) -> None:
        """``report`` for many outcomes at once, each ``(lease, build, handle)``."""
        self.send([Outgoing(*item) for item in items])

    def send(self, items: list[Outgoing]) -> None:
        """Send the outcomes of ``items`` from their leases' newest tokens; the dispatch gets
        each handle with its result. The list is the keeper's from then on."""
        with self._lock:
            for item in items:
                item.lease.apply(FINISH)
        self._outcomes.put(items)

    def tokens_to_carry(self, items: list[Outgoing]) -> list[t.LeaseToken | None]:
        """For each of ``items``, the newest token of its lease if the caller may send its
        outcome itself now (in its own call, such as a claim): no heartbeat of it is in flight,
        and none starts after. None where one is in flight (its token may be stale), or its
        job's progress waits: that outcome is still the caller's, for ``send``.

        The caller sends those it took, then hands the results to ``forget``."""
        tokens: list[t.LeaseToken | None] = []
        with self._lock:
            for item in items:
                lease = item.lease
                if lease.state is BEATING or lease.beat is not None or progress_waits(lease):
                    tokens.append(None)
                else:
                    lease.apply(CARRY)
                    tokens.append(lease.token)
        return tokens

    def carry(self, items: list[Outgoing]) -> tuple[list[Outgoing], list[t.Outcome]]:
        """The outcomes of ``items`` the caller may send itself now, built from their newest
        tokens (``tokens_to_carry``); the rest go out through the keeper (``send``)."""
        tokens = self.tokens_to_carry(items)
        left = [item for item, token in zip(items, tokens, strict=True) if token is None]
        if left:
            self.send(left)
        taken = [(x, token) for x, token in zip(items, tokens, strict=True) if token is not None]
        return [x for x, _ in taken], [x.build(token) for x, token in taken]

    def forget(self, items: list[Outgoing]) -> None:
        """Stop keeping the leases of ``items``, whose outcomes were sent by the caller."""
        with self._lock:
            leases = self._leases
            for item in items:
                lease = item.lease
                job_id = lease.claim.job.id
                if leases.get(job_id) is lease:  # not a newer lease of the same job
                    del leases[job_id]

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._leases.values())

    def close(self) -> None:
        """Close its connection (once stopped)."""
        self.client.close()

    # the thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = self._take_outcomes(self._next_wait())
            if batch is None:
                break
            if batch:
                self._send_outcomes(batch)
            self._heartbeatdue_of()
        rest = self._take_outcomes(0.0) or []
        if rest:
            self._send_outcomes(rest)

    def _next_wait(self) -> float:
        """Until the earliest heartbeat is due (kept up to date by hold and each round)."""
        return max(0.0, min(self._next_due - time.monotonic(), 0.5))

    def _take_outcomes(self, wait: float) -> list[Outgoing] | None:
        batch: list[Outgoing] = []
        try:
            item = self._outcomes.get(timeout=wait) if wait > 0 else self._outcomes.get_nowait()
        except queue.Empty:
            return batch
        while True:
            if item is None:
                if batch:  # send these first; the stop is seen on the next round
                    self._outcomes.put(None)
                    return batch
                return None if self._stop.is_set() else batch
            if isinstance(item, list):
                batch.extend(item)
            elif isinstance(item, FlushRequest):
                item.run(self.client, self.worker_id)
            try:
                item = self._outcomes.get_nowait()
            except queue.Empty:
                return batch

    def _send_outcomes(self, batch: list[Outgoing]) -> None:
        """One report call per BATCH outcomes (all in one pipeline), sent until answered."""
        results = self._report(batch)
        self.forget(batch)
        self.dispatch([(item.handle, r) for item, r in zip(batch, results, strict=True)])

    def _report(self, batch: list[Outgoing]) -> list[Any]:
        """The outcomes' results. Sent again while the error can pass (``passes``) until the
        leases have surely run out (``retry_for`` at least, and past each lease's end): the same
        calls once one may have been applied (Redis unreachable); while every try was refused
        before it ran, rebuilt from the leases' newest tokens. Meanwhile the leases of every
        outcome the keeper holds are renewed (``_renew``), each waiting for its lost heartbeat's
        answer first; an outcome refused because its lease was renewed after its call was built
        goes out again from the new token (``_resent``). No wait outlasts the next renewal due."""
        started = time.monotonic()
        chunks: list[list[Outgoing]] = []
        calls: list[Call[Any]] = []
        tokens: list[t.LeaseToken] = []
        unsure, tries, backoff = False, 0, 0.05
        while True:
            error = self._renew(renew_due=tries > 0)
            if error is None:
                if not unsure:  # none sent may have been applied: built from the newest tokens
                    tokens = [item.lease.token for item in batch]
                    chunks, calls = self.wire.reports(batch)
                try:
                    return self._resent(batch, tokens, _flat(chunks, self.wire.send(calls)))
                except QuasarError as exc:
                    if not passes(exc):
                        return [exc] * len(batch)
                    error, unsure = exc, unsure or isinstance(exc, RedisUnavailable)
            why = redact_text(str(error))
            if self._ran_out(batch, started):
                log.error("%d outcomes not reported: their leases ran out (%s)", len(batch), why)
                return [error] * len(batch)
            wait = self._wait(backoff)
            if not tries:
                log.warning("Redis cannot take outcomes now (%s); retrying in %.2fs", why, wait)
            time.sleep(wait)
            self._heartbeatdue_of()  # the other leases are renewed meanwhile
            tries, backoff = tries + 1, min(backoff * 2, 2.0)

    def _resent(
        self, batch: list[Outgoing], tokens: list[t.LeaseToken], results: list[Any]
    ) -> list[Any]:
        """``results``, but for the outcomes refused ``StaleLease`` because their lease was
        renewed after their call was built (a call re-sent as it was, after an outage): those
        are reported again, from their newest tokens."""
        again = [
            i
            for i, (item, token, result) in enumerate(zip(batch, tokens, results, strict=True))
            if item.lease.token is not token
            and isinstance(result, t.JobRefused)
            and isinstance(result.error, t.StaleLease)
        ]
        if again:
            for i, result in zip(again, self._report([batch[i] for i in again]), strict=True):
                results[i] = result
        return results

    def _ran_out(self, batch: list[Outgoing], started: float) -> bool:
        """Whether to give up on ``batch``: ``retry_for`` has passed, and each lease's end."""
        now = time.monotonic()
        return now >= started + self.retry_for and all(now >= end_of(item.lease) for item in batch)

    def _wait(self, backoff: float) -> float:
        """Until the next try of a report: ``backoff``, or sooner when a renewal is due first
        (of a lease whose outcome the keeper holds, or of another)."""
        with self._lock:
            dues = [due_of(x) for x in self._leases.values() if x.state is REPORTING]
        soonest = min(dues, default=self._next_due)
        return max(0.0, min(backoff, soonest - time.monotonic(), self._next_due - time.monotonic()))

    def _renew(self, *, renew_due: bool) -> BaseException | None:
        """Heartbeats of the leases whose outcome the keeper holds (``REPORTING``): those whose
        answer was lost (sent again as they were) and, with ``renew_due``, those due. The error
        that keeps one waiting, if any. A refusal is left for the outcome to tell: its lease is
        lost, or a call that carried it was applied after all."""
        now = time.monotonic()
        with self._lock:
            leases = [
                x
                for x in self._leases.values()
                if x.state is REPORTING and (x.beat is not None or (renew_due and now >= due_of(x)))
            ]
        if not leases:
            return None
        beats = [lease.beat or self.wire.beat(lease, now) for lease in leases]
        waiting = None
        for lease, result, (_, sent_at) in zip(leases, self.wire.beats(beats), beats, strict=True):
            if isinstance(result, BaseException) and passes(result):
                waiting = result  # sent again next time
                lease.retry_at = time.monotonic() + retry_wait(lease, time.monotonic())
                continue
            lease.beat = None
            if isinstance(result, t.ClaimApplied):
                self._renewed(lease, result, sent_at)
        return waiting

    def _renewed(self, lease: Lease, result: t.ClaimApplied, sent_at: float) -> None:
        with self._lock:  # the outcome, if one is queued, goes out after this, with this token
            lease.token = result.claim.token
            lease.renewed_at = sent_at
            lease.retry_at = 0.0

    def _heartbeatdue_of(self) -> None:
        self.note_round()  # (each round, and each try of a report: its probes read it)
        now = time.monotonic()
        if now < self._next_due:
            return
        with self._lock:  # (an outcome taken into a claim is finishing: never beaten after)
            live = [x for x in self._leases.values() if x.state is HELD]
            due = [lease for lease in live if now >= due_of(lease)]
            for lease in due:
                lease.apply(BEAT)
        later = [due_of(lease) for lease in live if due_of(lease) > now]
        self._next_due = min(later, default=now + 0.5)
        if not due:
            return
        beats = [lease.beat or self.wire.beat(lease, now) for lease in due]
        try:
            results = self.wire.beats(beats)
            for lease, result, (_, sent_at) in zip(due, results, beats, strict=True):
                self._after_heartbeat(lease, result, sent_at)
                if not lease.lost:
                    self._next_due = min(self._next_due, due_of(lease))
        finally:  # only now, the new tokens in place, may a claim take these leases' outcomes
            with self._lock:
                for lease in due:
                    lease.apply(BEAT_ENDED)

    def _after_heartbeat(self, lease: Lease, result: Any, sent_at: float) -> None:
        """``sent_at``: when the heartbeat was first sent (Redis renewed the lease after)."""
        if not isinstance(result, BaseException) or not passes(result):
            lease.beat = None  # answered: the next heartbeat is a new call
        if isinstance(result, t.ClaimApplied):
            self._renewed(lease, result, sent_at)
        elif isinstance(result, t.ClaimRefused):
            with self._lock:
                lease.apply(REFUSED)
                self._leases.pop(lease.job_id, None)
            revision = lease.token.input_revision
            log_loss(self.client, lease.job_id, result.error, "its run is told to stop", revision)
            lease.on_lost(lease, result.error)
        else:  # Redis unreachable, or a damaged job: try again in a moment
            now = time.monotonic()
            lease.retry_at = now + retry_wait(lease, now)


class Wire:
    """The lease keeper's calls, on its own connection: heartbeats and reports, built from the
    leases' newest tokens."""

    __slots__ = ("client", "worker_id")

    def __init__(self, client: Quasar, worker_id: str) -> None:
        self.client = client
        self.worker_id = worker_id

    def reports(self, batch: list[Outgoing]) -> tuple[list[list[Outgoing]], list[Call[Any]]]:
        """The report calls of ``batch`` (BATCH outcomes each), from the leases' newest tokens;
        first, the progress of its jobs not sent yet is (so a finished job shows its last)."""
        self.flush_waiting(batch)
        chunks = [batch[i : i + BATCH] for i in range(0, len(batch), BATCH)]
        report = self.client.calls.report_many
        worker_id = self.worker_id
        calls = [report(worker_id, [x.build(x.lease.token) for x in chunk]) for chunk in chunks]
        return chunks, calls

    def beat(self, lease: Lease, now: float) -> tuple[Call[t.ClaimResult], float]:
        """A new heartbeat of ``lease``, kept on it until answered; it carries the job's
        progress when that changed since last sent."""
        box = lease.progress()
        report = None if box is None else box.take()
        call = self.client.calls.heartbeat(
            lease.token, self.worker_id, lease.lease_ms, progress=report
        )
        lease.beat = (call, now)
        return lease.beat

    def send(self, calls: list[Call[Any]]) -> list[Any]:
        """The replies of ``calls`` (one call without a pipeline)."""
        if len(calls) == 1:
            return [self.client.execute(calls[0])]
        return self.client.execute_many(calls)

    def flush_waiting(self, batch: list[Outgoing]) -> None:
        """Send the progress not sent yet of the jobs of ``batch`` (ahead of their outcomes)."""
        for item in batch:
            if progress_waits(item.lease):
                flush_progress(self.client, self.worker_id, item.lease)

    def beats(self, beats: list[tuple[Call[t.ClaimResult], float]]) -> list[Any]:
        """The results of heartbeats, sent once in one pipeline (an exception for each if the
        pipeline failed)."""
        try:
            return self.client.execute_many([call for call, _ in beats])
        except QuasarError as exc:
            return [exc] * len(beats)


def log_loss(
    client: Quasar, job_id: str, error: t.JobError, then: str, revision: int | None = None
) -> None:
    """Log that the lease of ``job_id`` was refused with ``error``, and ``then`` what follows.

    A job cancelled while it runs loses its lease as one taken over does (``StaleLease``), and
    so does one whose input a newer revision superseded (``revision``: the one this run has):
    one read, on this rare path only, tells which, so that a cancellation is logged as one and a
    supersede names the revision that replaced the run's.
    """
    cancelled, superseded = None, ""
    if isinstance(error, t.StaleLease):
        try:
            info = client.get_job(job_id)
        except QuasarError:
            info = None
        if info is not None and isinstance(info.job.state, t.Cancelled):
            cancelled = info.job.state.reason
        if info is not None and revision is not None and info.job.input_revision != revision:
            superseded = f", input revision {info.job.input_revision} replaced {revision}"
    if cancelled is not None:
        log.info("job %s: cancelled while running (%s); %s", job_id, cancelled, then)
    else:
        name = type(error).__name__
        log.warning("job %s: lease lost (%s)%s; %s", job_id, name, superseded, then)


def _run_all(pairs: list[tuple[Any, Any]]) -> None:
    for done, result in pairs:
        done(result)


def _flat(chunks: list[list[Outgoing]], replies: list[Any]) -> list[Any]:
    """One result per outcome from the replies of their report calls (a call's error for each
    of its outcomes)."""
    results: list[Any] = []
    for chunk, reply in zip(chunks, replies, strict=True):
        results.extend(reply if isinstance(reply, list) else [reply] * len(chunk))
    return results
