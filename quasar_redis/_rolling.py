"""The workers' recent counts, in Redis: a small rolling store the dashboard charts.

Time is cut into buckets of ``BUCKET_S`` seconds (Redis's clock). Each worker adds what it
counted since its last write into the hash of the current bucket (``KeySpace.stats``), one
HINCRBY per changed field, a few times a minute at most and never per job: each field is
``<queue>:<measure>``, and the hash expires ``TTL_S`` after its last write, so the store holds
at most ``TTL_S / BUCKET_S`` small hashes whatever the traffic. Reading the last ``WINDOW``
buckets is one pipeline of HGETALLs.

Measures (``MEASURES``): ``completed``, ``failed`` (an attempt that raised, retried or not),
``started`` (jobs claimed for their first attempt) and ``latency_ms`` (the sum, over those, of
the time from enqueue to claim), so a bucket's mean enqueue-to-start latency is
``latency_ms / started``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._keys import KeySpace

BUCKET_S = 10
WINDOW = 60  # buckets charted: the last 10 minutes
TTL_S = WINDOW * BUCKET_S + 300
MEASURES = ("completed", "failed", "started", "latency_ms")

Command = tuple[Any, ...]


def bucket_of(now_ms: float) -> int:
    """The bucket a time (ms since the epoch) falls in: its start in seconds."""
    return int(now_ms // 1000) // BUCKET_S * BUCKET_S


class Tally:
    """What a worker counted since its last write, by queue and measure (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def add(self, queue: str, measure: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[queue, measure] += amount

    def take(self) -> Counter[tuple[str, str]]:
        """Everything counted so far, emptying the tally."""
        with self._lock:
            taken, self._counts = self._counts, Counter()
        return taken

    def give_back(self, counts: Counter[tuple[str, str]]) -> None:
        """Counts whose write failed: they go with the next one."""
        with self._lock:
            self._counts.update(counts)


def write_commands(
    keys: KeySpace, counts: Counter[tuple[str, str]], now_ms: float
) -> list[Command]:
    """The commands that add ``counts`` to the bucket of ``now_ms`` (none if nothing counted)."""
    items = [(f"{queue}:{measure}", n) for (queue, measure), n in sorted(counts.items()) if n]
    if not items:
        return []
    key = keys.stats(bucket_of(now_ms))
    commands: list[Command] = [("HINCRBY", key, field, n) for field, n in items]
    commands.append(("EXPIRE", key, TTL_S))
    return commands


def read_commands(keys: KeySpace, now_ms: float, window: int = WINDOW) -> list[Command]:
    """HGETALL of the last ``window`` buckets, oldest first, the current one last."""
    last = bucket_of(now_ms)
    return [("HGETALL", keys.stats(last - i * BUCKET_S)) for i in range(window - 1, -1, -1)]


@dataclass(frozen=True, slots=True)
class Point:
    """One bucket: its start (s since the epoch) and its counts by (queue, measure)."""

    at: int
    counts: dict[tuple[str, str], int]

    def total(self, measure: str, queue: str | None = None) -> int:
        return sum(n for (q, m), n in self.counts.items() if m == measure and queue in (None, q))


def points(now_ms: float, replies: Sequence[Any], window: int = WINDOW) -> list[Point]:
    """The buckets read by ``read_commands`` (its replies, in order), oldest first."""
    last = bucket_of(now_ms)
    made = []
    for i, reply in enumerate(replies):
        at = last - (window - 1 - i) * BUCKET_S
        made.append(Point(at, _counts(reply or {})))
    return made


def _counts(reply: dict[Any, Any]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for raw_field, raw_value in reply.items():
        field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
        queue, _, measure = field.rpartition(":")
        try:
            counts[queue, measure] = int(raw_value)
        except ValueError:  # not a count we wrote: left out
            continue
    return counts


def throughput(series: Iterable[Point], queue: str | None = None) -> list[float]:
    """Jobs completed per second in each bucket."""
    return [p.total("completed", queue) / BUCKET_S for p in series]


def failures(series: Iterable[Point], queue: str | None = None) -> list[float]:
    """Failed attempts per second in each bucket."""
    return [p.total("failed", queue) / BUCKET_S for p in series]


def latency_ms(series: Iterable[Point], queue: str | None = None) -> list[float | None]:
    """The mean enqueue-to-start latency of each bucket, in ms (None: nothing started)."""
    means: list[float | None] = []
    for p in series:
        started = p.total("started", queue)
        means.append(p.total("latency_ms", queue) / started if started else None)
    return means
