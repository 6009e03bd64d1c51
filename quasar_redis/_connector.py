"""Where an ``App``'s clients come from: ``Connector`` makes redis-py clients of one server (or
of one embedded server), ``Clients`` holds the quasar clients one app made of its namespace."""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._base import ClientOptions
from ._connect import async_client, sync_client
from ._environment import environment_url, redis_url
from ._urls import MEMORY_URL
from .aio import AsyncQuasar
from .client import Quasar
from .errors import ConfigurationError

if TYPE_CHECKING:
    from ._memory import MemoryServer


def _memory_server() -> MemoryServer:
    # Imported here, not above: fakeredis and lupa load only when memory:// is asked for.
    module = importlib.import_module(f"{__package__}._memory")
    server: MemoryServer = module.MemoryServer()
    return server


class Connector:
    """Makes sync and asyncio clients of one Redis server, or of one embedded server.

    ``url``: a Redis URL (``redis://``, ``rediss://`` for TLS, ``unix://``; a Redis Cluster,
    ``redis+cluster://host:port[,host:port...]``; a primary that Redis Sentinel manages,
    ``redis+sentinel://host:26379[,host:port...]/service_name``: see docs/operations.md), or
    ``memory://`` for an embedded in-memory server private to this connector; ``None``: the
    URL in the environment (``QUASAR_REDIS_URL``, then ``REDIS_URL``) at the first connection,
    else ConfigurationError then: an app without a URL can be declared and imported (by tests,
    framework checks, documentation builds) without one.
    """

    def __init__(self, url: str | None = None) -> None:
        if url is not None and not isinstance(url, str):
            raise ConfigurationError(
                f"the Redis URL must be text such as 'redis://127.0.0.1:6379/0', not a "
                f"{type(url).__module__}.{type(url).__qualname__}: give the server's URL; a "
                "redis-py client you already have goes to Quasar(client, namespace) or "
                "AsyncQuasar(client, namespace)"
            )
        self._url = url  # (None: the environment's, read at the first connection)
        self._server: MemoryServer | None = None
        self._making = threading.Lock()  # (one embedded server, whichever thread asks first)

    @property
    def url(self) -> str:
        """The URL its clients connect to: the one given, else the environment's (read once);
        ConfigurationError, saying how to give one, when there is none."""
        if self._url is None:
            self._url = redis_url()
        return self._url

    @property
    def embedded(self) -> bool:
        """Whether the clients are of an embedded server (``memory://``); asking never fails."""
        return (self._url or environment_url()) == MEMORY_URL

    def _memory(self) -> MemoryServer | None:
        """The embedded server of ``memory://`` (made at the first client), else None."""
        if self.url != MEMORY_URL:
            return None
        with self._making:
            if self._server is None:
                self._server = _memory_server()
            return self._server

    def sync(self) -> Any:
        """A new sync client, on a connection pool of its own."""
        server = self._memory()
        return server.sync() if server is not None else sync_client(self.url)

    def asyncio(self) -> Any:
        """A new asyncio client, on a connection pool of its own."""
        server = self._memory()
        return server.asyncio() if server is not None else async_client(self.url)


class Clients:
    """The quasar clients of one namespace that one app made: one sync client, and one asyncio
    client per event loop. ``options`` is asked at each client made (an app's options may change
    before its first client)."""

    def __init__(
        self, connector: Connector, namespace: str, options: Callable[[], ClientOptions]
    ) -> None:
        self.connector = connector
        self.namespace = namespace
        self.options = options
        self._sync: Quasar | None = None
        self._asyncio: dict[int, AsyncQuasar] = {}

    @property
    def sync(self) -> Quasar:
        """The sync client, made at its first use."""
        if self._sync is None:
            self._sync = self.new_sync()
        return self._sync

    def new_sync(self) -> Quasar:
        """A sync client on a connection pool of its own, closed by its ``close()``."""
        return Quasar.owning(self.connector.sync(), self.namespace, **self.options())

    def asyncio(self) -> AsyncQuasar:
        """The asyncio client of the running event loop (one per loop)."""
        loop = asyncio.get_running_loop()
        client = self._asyncio.get(id(loop))
        if client is None:
            client = AsyncQuasar.owning(self.connector.asyncio(), self.namespace, **self.options())
            self._asyncio = {id(loop): client}
        return client

    async def aclose(self) -> None:
        """Close the asyncio client of the running event loop (before the loop ends)."""
        client = self._asyncio.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        """Close the sync client."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None
