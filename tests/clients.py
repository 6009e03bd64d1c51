"""Both clients behind one face: a test written for ``Quasar`` runs through ``AsyncQuasar`` too.

``client(kind, ...)`` gives a ``Quasar`` ("sync"), or an ``AsyncQuasar`` driven on an event loop
of its own ("async", see ``Driven``) over the same server: its calls take and return what the
blocking client's do, and ``redis`` stays the blocking redis-py client the test looks with.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import fakeredis
import pytest
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from quasar_redis import AsyncQuasar, Quasar

KINDS = ("sync", "async")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Which client a test runs through."""
    return str(request.param)


class Driven:
    """An ``AsyncQuasar`` whose coroutines run to their end on ``loop`` when called."""

    def __init__(self, client: AsyncQuasar, loop: asyncio.AbstractEventLoop, sync: Any) -> None:
        self.client, self.loop, self.redis = client, loop, sync

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.client, name)
        if not inspect.iscoroutinefunction(value):
            return value

        def run(*args: Any, **kwargs: Any) -> Any:
            return self.loop.run_until_complete(value(*args, **kwargs))

        return run


def async_redis(sync: Any) -> Any:
    """An asyncio redis-py client of the server ``sync`` talks to (fakeredis, the real one, or a
    Redis Cluster)."""
    if isinstance(sync, redis.cluster.RedisCluster):
        cluster: Any = sync  # (redis-py's cluster methods are untyped)
        node = cluster.get_default_node()
        return redis.asyncio.cluster.RedisCluster(host=node.host, port=node.port)
    server = sync.connection_pool.connection_kwargs.get("server")
    if isinstance(server, fakeredis.FakeServer):
        return fakeredis.FakeAsyncRedis(server=server)
    kwargs = sync.connection_pool.connection_kwargs
    same = ("host", "port", "db", "username", "password", "socket_timeout")
    return redis.asyncio.Redis(**{k: kwargs[k] for k in same if k in kwargs})


@contextmanager
def clients(kind: str, sync: Any) -> Iterator[Callable[..., Quasar]]:
    """Makes clients of ``kind`` over the server of ``sync`` (``make(namespace, **options)``),
    as long as the block lasts."""
    if kind == "sync":
        yield lambda namespace, **options: Quasar(sync, namespace, **options)
        return
    loop = asyncio.new_event_loop()
    opened: list[Any] = []

    def make(namespace: str, **options: Any) -> Quasar:
        opened.append(async_redis(sync))
        # (typed as the blocking client it stands for: its calls take and give the same)
        return cast(Quasar, Driven(AsyncQuasar(opened[-1], namespace, **options), loop, sync))

    try:
        yield make
    finally:
        for client in opened:
            loop.run_until_complete(client.aclose())
        loop.close()
