"""Backends for every behaviour test: fakeredis (embedded) and a real redis-server.

The ``q`` client sends scripts (EVALSHA) on fakeredis and the function library (FCALL) on the
real server, so that every behaviour test runs once over each transport; and it is once the
blocking ``Quasar`` and once the asyncio ``AsyncQuasar`` (``tests/clients.py``), so that every
transition is tested through both clients.

Each test gets its own namespace; on a real server only that namespace's keys are deleted after
it (never FLUSHDB / FLUSHALL). Without a reachable server the real-Redis half skips with a reason,
unless QUASAR_REQUIRE_REDIS=1 (CI), where it fails instead. A test marked ``own_server`` changes
what the whole server holds (SCRIPT FLUSH, FUNCTION DELETE): its real-Redis half runs on a
redis-server of this test session's own, so that another copy of the suite can run beside this
one on the shared server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from quasar_redis import App, Connector, Quasar

from .clients import KINDS, clients
from .helpers import REDIS_URL, delete_namespace, real_redis, report_header
from .proxy import HOST, Proxy
from .servers import RedisServer, server_in

BACKENDS = ("fake", "redis")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which servers this run tests on, in the header of the run's log."""
    return report_header()


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _cleaned_after(url: str, namespace: str) -> Iterator[redis.Redis]:
    client = real_redis(url)
    try:
        yield client
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture
def upstream(namespace: str) -> Iterator[redis.Redis]:
    """A client of the real Redis of the tests, its namespace's keys deleted afterwards."""
    yield from _cleaned_after(REDIS_URL, namespace)


@pytest.fixture
def proxy(upstream: redis.Redis) -> Iterator[Proxy]:
    """A proxy in front of ``upstream`` (``tests/proxy.py``): cuts connections where told."""
    kwargs = upstream.connection_pool.connection_kwargs
    with Proxy(str(kwargs.get("host", HOST)), int(kwargs.get("port", 6379))) as running:
        yield running


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def private_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of this test session's own (no persistence), started on first use."""
    with server_in(Path(tmp_path_factory.mktemp("private-redis")), durable=False) as server:
        server.start()
        yield server


@pytest.fixture
def counted(private_server: RedisServer, namespace: str) -> Iterator[redis.Redis]:
    """A client of the private server (for a test that counts the commands Redis runs)."""
    yield from _cleaned_after(private_server.url, namespace)


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> str:
    """The real server of this test: the shared one, or for a test marked ``own_server`` the
    session's private one."""
    if request.node.get_closest_marker("own_server") is None:
        return REDIS_URL
    server: RedisServer = request.getfixturevalue("private_server")
    return server.url


@pytest.fixture
def redis_client(request: pytest.FixtureRequest, backend: str, namespace: str) -> Iterator[Any]:
    if backend == "fake":
        client: Any = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        yield client
        client.close()
        return
    client = real_redis(request.getfixturevalue("redis_url"))
    try:
        yield client
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture(params=KINDS)
def q(
    request: pytest.FixtureRequest, redis_client: Any, backend: str, namespace: str
) -> Iterator[Quasar]:
    """The client under test, once blocking (``Quasar``) and once asyncio (``AsyncQuasar``,
    driven to each call's end: see ``tests/clients.py``)."""
    with clients(str(request.param), redis_client) as make:
        yield make(namespace, functions=backend == "redis")


@pytest.fixture
def sync_q(redis_client: Any, backend: str, namespace: str) -> Quasar:
    """The blocking client alone (for a test that calls it from other threads)."""
    return Quasar(redis_client, namespace, functions=backend == "redis")


@pytest.fixture
def app(backend: str, namespace: str) -> Iterator[App]:
    """An App of the test's namespace, on each backend (memory:// and the real server)."""
    if backend == "fake":
        made = App(connector=Connector("memory://"), namespace=namespace)
        yield made
        made.client.redis.close()
        return
    real_redis().close()  # skip (or fail under QUASAR_REQUIRE_REDIS=1) without a server
    made = App(REDIS_URL, namespace=namespace)
    try:
        yield made
    finally:
        delete_namespace(made.client.redis, namespace)
        made.client.redis.close()
