"""Telling clients that their connection pool connected (again): the server they reach may have
changed since they asked it something (a restart, a failover, its connections killed).

redis-py runs a connection's ``redis_connect_func`` in place of its own set-up (``on_connect``:
AUTH, HELLO, SELECT) each time the connection connects, in redis-py 5 to 8, sync and asyncio. A
watch set there runs the connection's set-up (or the function that was there before it), then
calls back every client registered with it (held weakly: a client gone is forgotten). One watch
per pool, however many clients share it. A SELECT the server refuses (a database number it does
not have) is raised with how many databases it has, asked on the same connection.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.exceptions as rex

from ._access import DatabaseOutOfRange, databases_in, out_of_range

__all__ = ["watch_connections", "watched"]


class Watch:
    """A pool's ``redis_connect_func``: ``connected`` (sync) or ``aconnected`` (asyncio)."""

    def __init__(self, before: Any) -> None:
        self.before = before  # the pool's redis_connect_func before this, if any
        self.callbacks: list[weakref.WeakMethod[Callable[[], None]]] = []

    def add(self, callback: Callable[[], None]) -> None:
        self.callbacks = [ref for ref in self.callbacks if ref() is not None]
        self.callbacks.append(weakref.WeakMethod(callback))

    def _tell(self) -> None:
        for ref in self.callbacks:
            callback = ref()
            if callback is not None:
                callback()

    def connected(self, conn: Any) -> None:
        try:
            if self.before is None:
                conn.on_connect()
            else:
                self.before(conn)
        except rex.ResponseError as exc:
            if not out_of_range(exc):
                raise
            raise DatabaseOutOfRange(str(exc), _count(conn)) from exc
        self._tell()

    async def aconnected(self, conn: Any) -> None:
        try:
            done = conn.on_connect() if self.before is None else self.before(conn)
            if inspect.isawaitable(done):
                await done
        except rex.ResponseError as exc:
            if not out_of_range(exc):
                raise
            raise DatabaseOutOfRange(str(exc), await _acount(conn)) from exc
        self._tell()


def _count(conn: Any) -> int | None:
    """How many databases the server has, asked on ``conn`` (still on database 0 after its
    SELECT was refused); None where it does not say."""
    try:
        conn.send_command("CONFIG", "GET", "databases", check_health=False)
        return databases_in(conn.read_response())
    except Exception:  # (CONFIG refused, on a managed Redis or by an ACL: not known)
        return None


async def _acount(conn: Any) -> int | None:
    """``_count`` on an asyncio connection."""
    try:
        await conn.send_command("CONFIG", "GET", "databases", check_health=False)
        return databases_in(await conn.read_response())
    except Exception:  # (CONFIG refused, on a managed Redis or by an ACL: not known)
        return None


def watch_connections(client: Any, callback: Callable[[], None]) -> bool:
    """Call ``callback`` (a bound method) each time a connection of ``client``'s pool connects;
    False where there is no pool to watch (a cluster client: each node has pools of its own)."""
    watch = watched(client)
    if watch is None:
        return False
    watch.add(callback)
    return True


def watched(client: Any) -> Watch | None:
    """The watch of ``client``'s pool, set there if it has none (None: no pool to watch). A
    watch also tells a database number the server does not have with how many it has
    (``DatabaseOutOfRange``): every client made from a URL has one (``_connect``)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    current = kwargs.get("redis_connect_func")
    watch = getattr(current, "__self__", None)
    if not isinstance(watch, Watch):
        watch = Watch(current)
        is_async = isinstance(pool, redis.asyncio.ConnectionPool)
        kwargs["redis_connect_func"] = func = watch.aconnected if is_async else watch.connected
        for conn in _made(client, pool):  # (connections made before: a client passed in)
            if getattr(conn, "redis_connect_func", None) is current:
                conn.redis_connect_func = func
    return watch


def _made(client: Any, pool: Any) -> list[Any]:
    """The connections ``pool`` (or a single-connection client) has made so far."""
    made = [getattr(client, "connection", None)]
    for name in ("_available_connections", "_in_use_connections"):
        made += list(getattr(pool, name, None) or ())
    return [conn for conn in made if conn is not None]
