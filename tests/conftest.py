"""Backends for every behaviour test: fakeredis (embedded) and a real redis-server.

The ``q`` client sends scripts (EVALSHA) on fakeredis and the function library (FCALL) on the
real server, so that every behaviour test runs once over each transport.

Each test gets its own namespace; on a real server only that namespace's keys are deleted after
it (never FLUSHDB / FLUSHALL). Without a reachable server the real-Redis half skips with a reason,
unless QUASAR_REQUIRE_REDIS=1 (CI), where it fails instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis

from quasar_redis import Quasar

REDIS_URL = os.environ.get("QUASAR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE = os.environ.get("QUASAR_REQUIRE_REDIS") == "1"
BACKENDS = ("fake", "redis")
NO_URL: dict[str, str | None] = {"QUASAR_REDIS_URL": None, "REDIS_URL": None}  # CliRunner env


def real_redis() -> redis.Redis:
    """A client of the test server, or skip (fail under QUASAR_REQUIRE_REDIS=1)."""
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=10)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        client.close()
        if REQUIRE:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but Redis at {REDIS_URL} does not answer: {exc}")
        pytest.skip(f"no Redis at {REDIS_URL} ({exc}); set QUASAR_TEST_REDIS_URL to test on one")
    return client


def delete_namespace(client: Any, namespace: str) -> None:
    keys = list(client.scan_iter(match=f"quasar:{{{namespace}}}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])


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
