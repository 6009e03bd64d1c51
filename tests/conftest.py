"""Backends for every behaviour test: fakeredis (embedded) and a real redis-server.

The ``q`` client sends scripts (EVALSHA) on fakeredis and the function library (FCALL) on the
real server, so that every behaviour test runs once over each transport.

Each test gets its own namespace; on a real server only that namespace's keys are deleted after
it (never FLUSHDB / FLUSHALL). Without a reachable server the real-Redis half skips with a reason,
unless QUASAR_REQUIRE_REDIS=1 (CI), where it fails instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from quasar_redis import Quasar

from .helpers import delete_namespace, real_redis

BACKENDS = ("fake", "redis")


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def redis_client(backend: str, namespace: str) -> Iterator[Any]:
    if backend == "fake":
        client: Any = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        yield client
        client.close()
        return
    client = real_redis()
    try:
        yield client
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture
def q(redis_client: Any, backend: str, namespace: str) -> Quasar:
    return Quasar(redis_client, namespace, functions=backend == "redis")
