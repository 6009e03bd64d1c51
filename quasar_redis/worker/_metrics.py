"""What a worker measures of its own runs, in process: outcomes, latencies, run times, lost
leases. ``quasar_redis.prometheus`` exposes them; every few seconds the maintenance loop adds
the recent counts to the namespace's rolling store (``_rolling``) that the dashboard charts.

Counting costs a lock and a few dict updates per job; nothing here talks to Redis.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import _types as t
from .._rolling import Tally
from ._outcomes import OutcomeKind

#: Upper bounds (seconds) of the histograms' buckets; the last, +Inf, is implied.
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

#: The outcome label of each kind; a failed attempt shows as retried or failed.
OUTCOME_LABELS = {
    OutcomeKind.COMPLETED: "completed",
    OutcomeKind.FAILED: "failed",
    OutcomeKind.RETRYING: "retried",
    OutcomeKind.FAILED_PERMANENTLY: "failed",
    OutcomeKind.SNOOZED: "snoozed",
    OutcomeKind.RATE_LIMITED: "rate_limited",
    OutcomeKind.HANDED_BACK: "handed_back",
}


@dataclass
class Histogram:
    """Observations (seconds) by bucket of ``BOUNDS``, with their sum; cumulative on export."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BOUNDS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus writes them, ending with ``+Inf``."""
        running, pairs = 0, []
        for bound, n in zip((*map(str, BOUNDS), "+Inf"), self.counts, strict=True):
            running += n
            pairs.append((bound, running))
        return pairs

    def copy(self) -> Histogram:
        return Histogram(list(self.counts), self.total)


@dataclass(frozen=True)
class MetricsSnapshot:
    """A consistent copy of a worker's measures (see ``WorkerMetrics``)."""

    worker_id: str
    concurrency: int
    running: int
    outcomes: dict[tuple[str, str, str], int]  # (queue, task, outcome)
    latency: dict[tuple[str, str], Histogram]  # (queue, task): enqueue to first claim
    run_time: dict[tuple[str, str], Histogram]  # (queue, task)
    lost: dict[tuple[str, str], int]  # (queue, reason): StaleLease, LeaseExpired, ...
    expired: int  # leases this worker's maintenance found run out (any worker's)


class WorkerMetrics:
    """A worker's measures since it started (thread-safe: a scrape reads from another thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: Counter[tuple[str, str, str]] = Counter()
        self._latency: dict[tuple[str, str], Histogram] = {}
        self._run_time: dict[tuple[str, str], Histogram] = {}
        self._lost: Counter[tuple[str, str]] = Counter()
        self._expired = 0
        self.tally = Tally()  # the counts not yet added to the rolling store
        # set by the worker while it serves
        self.worker_id = ""
        self.concurrency = 0
        self.running: Callable[[], int] = lambda: 0  # how many of its jobs run now

    def claimed(self, jobs: list[t.Job]) -> None:
        """Jobs just claimed: a first attempt's enqueue-to-claim time is its latency."""
        with self._lock:
            for job in jobs:
                if job.attempt != 1 or job.attempted_at is None:
                    continue
                wait_ms = max(0, job.attempted_at - job.inserted_at)
                key = (job.queue, job.stage)
                histogram = self._latency.get(key)
                if histogram is None:
                    histogram = self._latency[key] = Histogram()
                histogram.observe(wait_ms / 1000)
                self.tally.add(job.queue, "started")
                self.tally.add(job.queue, "latency_ms", wait_ms)

    def ended(self, job: t.Job, kind: OutcomeKind, duration: float | None) -> None:
        """A run's outcome, applied by Redis (``duration``: None for a job that never ran)."""
        label = OUTCOME_LABELS[kind]
        with self._lock:
            self._outcomes[job.queue, job.stage, label] += 1
            if duration is not None and kind is not OutcomeKind.HANDED_BACK:
                key = (job.queue, job.stage)
                histogram = self._run_time.get(key)
                if histogram is None:
                    histogram = self._run_time[key] = Histogram()
                histogram.observe(duration)
        if label in ("completed", "failed"):
            self.tally.add(job.queue, label)
        elif label == "retried":
            self.tally.add(job.queue, "failed")

    def lost_lease(self, job: t.Job, error: t.JobError) -> None:
        """A lease lost: a heartbeat or an outcome refused (``StaleLease``, ``LeaseExpired``...)."""
        with self._lock:
            self._lost[job.queue, type(error).__name__] += 1

    def expired_leases(self, n: int) -> None:
        with self._lock:
            self._expired += n

    def snapshot(self) -> MetricsSnapshot:
        with self._lock:
            return MetricsSnapshot(
                worker_id=self.worker_id,
                concurrency=self.concurrency,
                running=self.running(),
                outcomes=dict(self._outcomes),
                latency={k: h.copy() for k, h in self._latency.items()},
                run_time={k: h.copy() for k, h in self._run_time.items()},
                lost=dict(self._lost),
                expired=self._expired,
            )
