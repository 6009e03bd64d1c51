"""How many jobs a worker holds beyond its running ones (``prefetch``), learnt under "auto"."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Literal

from ._job import QUEUED, RUNS, HeldJob

# prefetch="auto": hold as many jobs beyond the running ones as can be expected to start within
# PREFETCH_WAIT_S (at most ``concurrency``), judged by the moving average of recent run times
# (each new one weighs RUN_AVG_WEIGHT); none before the first job has run.
PREFETCH_WAIT_S = 0.01
RUN_AVG_WEIGHT = 0.1
# ... and when a job has waited for a slot this long all the same (long jobs came after short
# ones, and every slot is taken), the waiting jobs go back to their queue for an idle worker.
PREFETCH_STALE_S = 1.0


class Prefetch:
    """``extra``: the jobs a worker may hold beyond ``concurrency`` now; ``lanes``: its claim
    loops (two with prefetch, so that one's call is in flight while the other's jobs start)."""

    __slots__ = ("auto", "concurrency", "extra", "lanes", "run_avg")

    def __init__(self, prefetch: int | Literal["auto"], concurrency: int) -> None:
        self.concurrency = concurrency
        self.auto = prefetch == "auto"
        self.extra = 0 if isinstance(prefetch, str) else prefetch
        self.run_avg: float | None = None  # seconds, moving average (prefetch="auto")
        self.lanes = 2 if prefetch else 1

    def learn(self, seconds: float) -> None:
        """prefetch="auto": a job ran for ``seconds``. The k-th job waiting for a slot starts
        after about k / concurrency run times, so hold as many as start within PREFETCH_WAIT_S:
        ``concurrency`` for jobs of 10 ms or less, none once they take longer than
        ``concurrency`` times that."""
        avg = self.run_avg
        self.set_run_avg(seconds if avg is None else avg + (seconds - avg) * RUN_AVG_WEIGHT)

    def set_run_avg(self, avg: float) -> None:
        self.run_avg = avg
        c = self.concurrency
        self.extra = c if avg <= 0 else min(c, int(PREFETCH_WAIT_S * c / avg))

    def stale(self, queued: Iterable[HeldJob], held: Iterable[HeldJob]) -> float | None:
        """prefetch="auto": how long the oldest job waiting for a slot has waited, if longer than
        PREFETCH_STALE_S (the jobs running now are long ones, the average learnt from short
        ones: the waiting ones should go back to their queue). The average is then raised to
        the longest run going on, which ends prefetch until short runs bring it down again."""
        if not self.auto:
            return None
        now = time.monotonic()
        oldest = next((job for job in queued if job.phase is QUEUED), None)
        if oldest is None or now - oldest.started < PREFETCH_STALE_S:
            return None
        runs = (now - job.started for job in held if job.phase in RUNS)
        self.set_run_avg(max(self.run_avg or 0.0, *runs, PREFETCH_STALE_S))
        return now - oldest.started
