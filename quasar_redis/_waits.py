"""Blocking reads (``XREAD BLOCK``, ``BLPOP``) that fit inside the client's socket timeout.

redis-py gives up on a read after the connection's ``socket_timeout`` (5 s by default from
redis-py 8 on, or whatever the URL's ``?socket_timeout=`` says), and the reply of a blocking
command comes only when its block ends: a block as long as the socket timeout fails with
``TimeoutError``. Every blocking read the library makes on a client it does not configure itself
blocks in slices shorter than that timeout; a slice that ends with nothing reads as a wait that
found nothing, and its caller waits again.

A wait also goes on through a connection that breaks under it (a restart, a failover, a dropped
socket): redis-py re-sends a command a few times, then gives up, and the wait tries again after a
pause (``Outage``) for as long as Redis stays away up to ``OUTAGE_S``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex

from ._sending import map_error
from .errors import RedisUnavailable

#: What a read meets on Redis Cluster while a primary fails over or a slot moves, once the
#: cluster client's own retries are spent: no primary for the slot yet, a slot in migration, a
#: node loading or turned replica, no node reachable for a moment. And on any primary turned
#: replica, a blocked read (XREAD BLOCK) let go with "UNBLOCKED ... instance state changed".
PASSING = (
    rex.ClusterError,
    rex.TryAgainError,
    rex.MasterDownError,
    rex.BusyLoadingError,
    rex.ReadOnlyError,
    rex.MovedError,
    rex.RedisClusterException,
)


def passing(exc: BaseException) -> bool:
    """Whether ``exc`` breaks a wait only for as long as a failover or a migration takes."""
    return isinstance(exc, PASSING) or (
        isinstance(exc, rex.ResponseError) and str(exc).startswith("UNBLOCKED")
    )


#: How long a wait goes on trying a Redis it cannot reach before it raises RedisUnavailable.
OUTAGE_S = 30.0
#: The pauses between its tries: doubling from the first to the last.
FIRST_PAUSE_S = 0.05
LAST_PAUSE_S = 1.0

#: The read timeout assumed when a client's settings do not name one (redis-py 8's default).
REDIS_PY_DEFAULT = 5.0


def socket_timeout(redis: Any) -> float | None:
    """The read timeout of ``redis``'s connections in seconds (None: none), plain or cluster."""
    kwargs = getattr(getattr(redis, "connection_pool", None), "connection_kwargs", None)
    if kwargs is None:  # a cluster client: its nodes' settings
        holder = getattr(redis, "nodes_manager", redis)
        kwargs = getattr(holder, "connection_kwargs", None) or {}
    # A client made from a URL without ?socket_timeout= has none in its settings: its connections
    # take redis-py's own default (5 s from redis-py 8, which keeps it as orig_socket_timeout;
    # none before). Unknown counts as 5 s: a slice then costs one more call every 4 s at worst.
    value = kwargs.get("socket_timeout", kwargs.get("orig_socket_timeout", REDIS_PY_DEFAULT))
    return None if value is None else float(value)


def block_slice(redis: Any, seconds: float) -> float:
    """``seconds``, cut to a block that ends well before ``redis``'s socket timeout does."""
    timeout = socket_timeout(redis)
    if timeout is None:
        return seconds
    return min(seconds, max(timeout / 2, timeout - 1.0))


def block_ms(redis: Any, ms: int) -> int:
    """``block_slice`` for a block in milliseconds (at least 1: ``BLOCK 0`` waits for ever)."""
    return max(1, min(ms, int(block_slice(redis, ms / 1000) * 1000)))


@dataclass
class Outage:
    """A wait's connection failures in a row: ``failed`` says how long to pause before trying
    again, or raises once Redis has been away for ``OUTAGE_S`` (``RedisUnavailable``) or the
    error is not one of a connection (mapped as every call's errors are, for the client's
    ``database``); ``ok`` ends it."""

    clock: Callable[[], float] = time.monotonic
    since: float | None = None
    pause: float = FIRST_PAUSE_S
    database: int | None = None

    def failed(self, exc: BaseException) -> float:
        mapped = map_error(exc, self.database)
        if not isinstance(mapped, RedisUnavailable) and not passing(exc):
            raise mapped from exc
        now = self.clock()
        if self.since is None:
            self.since = now
        if now - self.since >= OUTAGE_S:
            raise RedisUnavailable(f"Redis was away for {OUTAGE_S:g}s: {exc}") from exc
        pause, self.pause = self.pause, min(LAST_PAUSE_S, self.pause * 2)
        return pause

    def ok(self) -> None:
        self.since, self.pause = None, FIRST_PAUSE_S


async def first_of(waits: list[Coroutine[Any, Any, Any]]) -> bool:
    """Run blocking pops together (a partition's each, on a cluster); whether the first to end
    popped a token. The others are cancelled: a token one of them took meanwhile is lost, which
    costs nothing (a token is a hint: a woken worker claims what there is)."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        return any(task.result() is not None for task in done)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
