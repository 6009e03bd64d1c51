"""The embedded server behind ``memory://``: an in-memory fakeredis server in this process.

Imported only when ``memory://`` is asked for, so that fakeredis (and lupa, which runs its Lua)
stay out of every process that talks to a real Redis. No other process sees this server: it
suits tests, demos and first runs, never producers and workers that must meet.
"""

from __future__ import annotations

from typing import Any

import fakeredis


class MemoryServer:
    """One embedded server; its sync and asyncio clients all see the same data."""

    def __init__(self) -> None:
        self._server = fakeredis.FakeServer()

    def sync(self) -> Any:
        return fakeredis.FakeRedis(server=self._server)

    def asyncio(self) -> Any:
        return fakeredis.FakeAsyncRedis(server=self._server)
