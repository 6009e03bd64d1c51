"""Blocking reads (``XREAD BLOCK``, ``BLPOP``) that fit inside the client's socket timeout.

redis-py gives up on a read after the connection's ``socket_timeout`` (5 s by default from
redis-py 8 on, or whatever the URL's ``?socket_timeout=`` says), and the reply of a blocking
command comes only when its block ends: a block as long as the socket timeout fails with
``TimeoutError``. Every blocking read the library makes on a client it does not configure itself
blocks in slices shorter than that timeout; a slice that ends with nothing reads as a wait that
found nothing, and its caller waits again.
"""

from __future__ import annotations

from typing import Any

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
