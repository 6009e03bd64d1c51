"""Which errors of a call can pass: the worker sends the same call again (same call id) while
its lease allows, rather than dropping what it reports."""

from __future__ import annotations

import redis.exceptions as rex

from ..errors import ProtocolError, RedisFull, RedisUnavailable

#: Redis error codes of a server that cannot answer now but will: busy with a script, loading its
#: data, out of memory, a replica, a cluster moving slots or without a master, a script or
#: function flushed (reloaded by the client, then missing again under a flush storm).
CODES = ("BUSY", "LOADING", "OOM", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "NOSCRIPT")
#: The redis-py classes of those codes (which drop the code from the message); the older
#: redis-py versions supported lack some.
CLASSES = tuple(
    cls
    for name in (
        "OutOfMemoryError",
        "ReadOnlyError",
        "NoScriptError",
        "TryAgainError",
        "ClusterDownError",
        "MasterDownError",
        "BusyLoadingError",
    )
    if isinstance(cls := getattr(rex, name, None), type)
)


def passes(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a call, may pass: Redis unreachable or out of memory
    (``RedisFull``), or an error of ``CODES``."""
    if isinstance(exc, RedisUnavailable | RedisFull):
        return True
    if not isinstance(exc, ProtocolError):
        return False
    cause = exc.__cause__
    if isinstance(cause, CLASSES):
        return True
    text = str(cause if cause is not None else exc).removeprefix("script error: ")
    return text.startswith(CODES) or text.lower().startswith("function not found")
