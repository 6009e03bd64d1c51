"""Retry policies, and the exceptions a task raises to steer its own job.

A policy answers "how long until the next attempt?" for a failed attempt: a delay in seconds, or
``None`` for "do not retry" (the job fails for good). Whether attempts remain is the job's
``max_attempts``, checked atomically in Redis.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

from .errors import InvalidArgument

#: Redis keeps times below this (ms since the epoch, year 2527): no job can be due later.
LAST_TIME_MS = 17592186044415


def delay_ms(seconds: Any, what: str) -> int:
    """``seconds`` as whole milliseconds; InvalidArgument unless it is a finite, nonnegative
    number that does not take the job past the last time Redis keeps (``LAST_TIME_MS``)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgument(f"{what} must be a finite, nonnegative number of seconds: {seconds}")
    ms = round(seconds * 1000)
    if ms > LAST_TIME_MS - time.time() * 1000:
        raise InvalidArgument(f"{what} of {seconds}s goes past the year 2527")
    return ms


class Snooze(Exception):
    """Raised by a task: run me again after ``delay`` seconds, without using an attempt.

    InvalidArgument (a ValueError) for a delay that is not a finite, nonnegative number."""

    def __init__(self, delay: float = 0.0) -> None:
        delay_ms(delay, "a snooze delay")
        super().__init__(f"snoozed for {delay}s")
        self.delay = delay

    def __reduce__(self) -> tuple[type[Snooze], tuple[float]]:  # from a task's own process
        return (Snooze, (self.delay,))


class RateLimited(Snooze):
    """Raised by a task: the service it calls said "slow down" (an HTTP 429, a quota): run this
    job again after ``retry_after`` seconds, without using an attempt, and start no other job of
    its group (of its queue, for a job without a group) before then, across the whole fleet
    (docs/flow-control.md).

    InvalidArgument (a ValueError) for a delay that is not a finite, positive number."""

    def __init__(self, retry_after: float) -> None:
        if delay_ms(retry_after, "a retry_after") < 1:
            raise InvalidArgument(f"retry_after must be at least 1 ms, not {retry_after!r}")
        Exception.__init__(self, f"rate limited for {retry_after}s")
        self.delay = retry_after
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[type[Snooze], tuple[float]]:  # from a task's own process
        return (RateLimited, (self.retry_after,))


class PermanentFailure(Exception):
    """Raised by a task: fail this job for good, whatever attempts remain (no retry)."""


@runtime_checkable
class RetryPolicy(Protocol):
    def delay(self, attempt: int, error: BaseException) -> float | None:
        """Seconds to wait before the next attempt after ``attempt`` failed, or None: give up."""
        ...


@dataclass(frozen=True, slots=True)
class Fixed:
    """The same delay after every failed attempt."""

    seconds: float = 0.0

    def delay(self, attempt: int, error: BaseException) -> float | None:
        return self.seconds


@dataclass(frozen=True, slots=True)
class Exponential:
    """``base * factor ** (attempt - 1)`` seconds, at most ``cap``, spread by +/- ``jitter``."""

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.1

    def delay(self, attempt: int, error: BaseException) -> float | None:
        raw = min(self.cap, self.base * self.factor ** max(0, attempt - 1))
        spread = raw * self.jitter
        return max(0.0, min(self.cap, raw + random.uniform(-spread, spread)))


@dataclass(frozen=True, slots=True)
class Never:
    """No retries: the first failure is final."""

    def delay(self, attempt: int, error: BaseException) -> float | None:
        return None


@dataclass(frozen=True, slots=True)
class FromFunction:
    """A policy from ``fn(attempt, error) -> seconds | None``."""

    fn: Callable[[int, BaseException], float | None]

    def delay(self, attempt: int, error: BaseException) -> float | None:
        return self.fn(attempt, error)


PolicyLike: TypeAlias = RetryPolicy | Callable[[int, BaseException], float | None] | float | None


def as_policy(value: PolicyLike) -> RetryPolicy:
    """A policy from a policy, a function, a fixed number of seconds, or None (never retry)."""
    if value is None:
        return Never()
    if isinstance(value, RetryPolicy):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        delay_ms(value, "a retry delay")
        return Fixed(float(value))
    if callable(value):
        return FromFunction(value)
    raise TypeError(f"not a retry policy: {value!r}")
