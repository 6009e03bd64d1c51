"""A worker's health as orchestrators probe it: live (its event loop and its lease keeper make
progress) and ready (it serves, claims and reaches Redis). ``_endpoints`` serves both over HTTP
(``/livez``, ``/readyz``); docs/deploy.md says how Kubernetes, Docker and systemd use them.

Nothing here talks to Redis: the worker's parts note what they see (a turn of the loop, a round
of the lease keeper, a claim answered or failed) and a probe reads the notes, from any thread.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._urls import redact_text

#: How often the worker's event loop notes that it turns.
TICK_S = 1.0
#: The least time the loop or the lease keeper may go without a turn before the worker is not
#: live: a call to an unreachable Redis may block either for its socket timeout.
STALL_MIN_S = 30.0


class Rounds:
    """A thread that works in rounds (the lease keeper) notes when each begins, for the probes
    (``last_round``); its ``_stop`` is set and its ``_thread`` ends when it stops as asked."""

    _stop: threading.Event
    _thread: threading.Thread
    _round_at: float | None = None

    def note_round(self) -> None:
        self._round_at = time.monotonic()

    def last_round(self) -> float | None:
        """When its last round began (``time.monotonic()``); None before the first and once it
        stopped as asked. A thread that died keeps its last round, which grows old."""
        if self._stop.is_set() and not self._thread.is_alive():
            return None
        return self._round_at


class WorkerPhase(enum.Enum):
    """Where a worker is in its life: ready only while ``SERVING``."""

    STARTING = "starting"  # reaching Redis, startup hooks
    SERVING = "serving"  # claiming and running jobs
    DRAINING = "draining"  # stopping: no more claims, running jobs get their grace
    STOPPED = "stopped"


@dataclass(frozen=True)
class HealthReport:
    """What ``/livez`` and ``/readyz`` answer: each verdict, and the reasons against them."""

    phase: WorkerPhase
    live: bool
    ready: bool
    problems: tuple[str, ...]  # why it is not live, or not ready
    loop_s: float  # seconds since the event loop last turned (or since the worker was made)
    lease_keeper_s: float | None  # since the lease keeper's last round; None: none runs
    stall_s: float  # the bound of both

    def as_json(self) -> dict[str, Any]:
        keeper_s = self.lease_keeper_s
        return {
            "live": self.live,
            "ready": self.ready,
            "phase": self.phase.value,
            "problems": list(self.problems),
            "loop_s": round(self.loop_s, 3),
            "lease_keeper_s": None if keeper_s is None else round(keeper_s, 3),
            "stall_s": self.stall_s,
        }


class WorkerHealth:
    """The notes a worker's parts keep for its probes (thread-safe: probes read from another
    thread). ``stall_s``: how long the loop or the lease keeper may go without a turn, the
    worker's lease (a keeper that stalls that long lets leases run out) and at least
    ``STALL_MIN_S``."""

    def __init__(self, lease_ms: int) -> None:
        self.stall_s = max(lease_ms / 1000, STALL_MIN_S)
        self._lock = threading.Lock()
        self._loop_at = time.monotonic()
        self._stopping: asyncio.Event | None = None
        self._serving = False
        self._stopped = False
        self._keeper: Callable[[], float | None] | None = None
        self._claim_error: str | None = None

    # what the worker notes ------------------------------------------------------------------------

    def begin(self, stopping: asyncio.Event) -> None:
        """A serve begins (``stopping``: set when it stops)."""
        with self._lock:
            self._loop_at = time.monotonic()
            self._stopping, self._serving, self._stopped = stopping, False, False
            self._keeper, self._claim_error = None, None

    async def tick(self) -> None:
        """Note every ``TICK_S`` that the loop turns (a task of the worker's loop)."""
        while True:
            self._loop_at = time.monotonic()
            await asyncio.sleep(TICK_S)

    def serving(self, keeper_round: Callable[[], float | None]) -> None:
        """It claims from now on; ``keeper_round``: when its lease keeper's last round began
        (None once the keeper stopped)."""
        with self._lock:
            self._serving, self._keeper = True, keeper_round

    def claimed(self) -> None:
        """A claim (or an idle wait) was answered."""
        self._claim_error = None

    def claim_failed(self, error: BaseException) -> None:
        self._claim_error = redact_text(str(error)) or type(error).__name__

    def end(self) -> None:
        with self._lock:
            self._stopped, self._keeper = True, None

    # what the probes read -------------------------------------------------------------------------

    def phase(self) -> WorkerPhase:
        if self._stopped:
            return WorkerPhase.STOPPED
        if self._stopping is not None and self._stopping.is_set():
            return WorkerPhase.DRAINING
        return WorkerPhase.SERVING if self._serving else WorkerPhase.STARTING

    def report(self, redis_error: str | None = None, *, now: float | None = None) -> HealthReport:
        """The verdicts at ``now`` (``time.monotonic()``; default: now); ``redis_error``: why the
        probe's own PING failed, if it did."""
        now = time.monotonic() if now is None else now
        phase = self.phase()
        with self._lock:
            keeper = self._keeper
        loop_s = now - self._loop_at
        keeper_at = keeper() if keeper is not None else None
        keeper_s = None if keeper_at is None else max(0.0, now - keeper_at)
        dead = []
        if phase is WorkerPhase.STOPPED:
            dead.append("the worker stopped")
        if loop_s > self.stall_s:
            dead.append(f"its event loop has not turned for {loop_s:.1f}s")
        if keeper_s is not None and keeper_s > self.stall_s:
            dead.append(f"its lease keeper has not turned for {keeper_s:.1f}s")
        unready = [] if phase is WorkerPhase.SERVING else [f"the worker is {phase.value}"]
        if self._claim_error is not None:
            unready.append(f"its last claim failed: {self._claim_error}")
        if redis_error is not None:
            unready.append(f"Redis does not answer: {redis_error}")
        return HealthReport(
            phase=phase,
            live=not dead,
            ready=not dead and not unready,
            problems=(*dead, *unready),
            loop_s=loop_s,
            lease_keeper_s=keeper_s,
            stall_s=self.stall_s,
        )
