"""Every blocking read works whatever socket timeout the user's client has: a job that runs past
it is still waited for, and an idle worker still waits (on a real Redis, with the client settings
the URL gives, as a user gets them)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import click
import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from quasar_redis import App, AsyncQuasar, Connector, Worker
from quasar_redis._keys import KeySpace
from quasar_redis._waits import OUTAGE_S, Outage, block_ms, block_slice, socket_timeout
from quasar_redis.cli._events import follow_stream
from quasar_redis.errors import AuthenticationError, ProtocolError, RedisUnavailable

from .helpers import app_url, wait_for
from .proxy import HOST, Proxy, has

SOCKET_TIMEOUT = 1.0
RUNS_FOR = 2.5  # longer than the socket timeout


@pytest.fixture
def short_url(namespace: str) -> Iterator[str]:
    with app_url("redis", namespace, f"socket_timeout={SOCKET_TIMEOUT}") as url:
        yield url


def slow_app(url: str, namespace: str) -> App:
    app = App(url, namespace=namespace)

    @app.task(name="slow")
    def slow(x: int) -> int:
        time.sleep(RUNS_FOR)
        return x * 2

    return app


def test_result_outlives_the_clients_socket_timeout(short_url: str, namespace: str) -> None:
    with slow_app(short_url, namespace) as app, Worker(app, idle_wait=2.0):
        assert socket_timeout(app.client.redis) == SOCKET_TIMEOUT
        started = time.monotonic()
        assert app.tasks["slow"].enqueue(4).result(timeout=30) == 8
        assert time.monotonic() - started >= RUNS_FOR


def test_a_seven_second_job_is_waited_for_on_redis_pys_own_settings(namespace: str) -> None:
    # As a user met it: no client settings of ours (redis-py 8 reads with a 5 s socket timeout;
    # older versions wait for ever) and a task that runs 7 s.
    with app_url("redis", namespace) as url, App(url, namespace=namespace) as app:

        @app.task(name="seven")
        def seven() -> str:
            time.sleep(7.0)
            return "done"

        with Worker(app, idle_wait=2.0):
            started = time.monotonic()
            assert seven.enqueue().result(timeout=30) == "done"
            assert time.monotonic() - started >= 7.0


def test_aresult_outlives_the_clients_socket_timeout(short_url: str, namespace: str) -> None:
    app = slow_app(short_url, namespace)

    async def scenario() -> Any:
        try:
            async with Worker(app, idle_wait=2.0):
                handle = await app.tasks["slow"].aenqueue(5)
                return await handle.aresult(timeout=30)
        finally:
            await app.aclose()
            app.close()

    assert asyncio.run(scenario()) == 10


def test_an_idle_wait_outlives_the_clients_socket_timeout(namespace: str) -> None:
    async def scenario(url: str) -> bool:
        async with AsyncQuasar.from_url(url, namespace) as client:
            return await client.wait_for_work(["nothing"], 1.2)

    with app_url("redis", namespace, "socket_timeout=0.5") as url:
        assert asyncio.run(scenario(url)) is False


def test_blocks_are_cut_to_fit_the_socket_timeout() -> None:
    assert socket_timeout(redis.Redis()) in (None, 5.0)  # redis-py's own default (5 s from 8.0)
    assert block_slice(redis.Redis(socket_timeout=None), 30.0) == 30.0
    assert block_slice(redis.Redis(socket_timeout=5), 30.0) == 4.0
    assert block_slice(redis.Redis(socket_timeout=1), 30.0) == 0.5
    assert block_slice(redis.Redis(socket_timeout=5), 0.2) == 0.2
    assert block_ms(redis.Redis(socket_timeout=0.0001), 5000) == 1  # never BLOCK 0 (for ever)
    cluster_like = type("Cluster", (), {"nodes_manager": type("N", (), {})()})()
    cluster_like.nodes_manager.connection_kwargs = {"socket_timeout": 2}
    assert socket_timeout(cluster_like) == 2.0


class Followed(Exception):
    """Raised by the patched ``click.echo``: following printed its first event."""


def test_following_events_outlives_the_clients_socket_timeout(
    namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def echo(line: str) -> None:
        raise Followed(line)

    monkeypatch.setattr(click, "echo", echo)
    stream = KeySpace(namespace).events
    with app_url("redis", namespace, "socket_timeout=0.5") as url:
        client = redis.Redis.from_url(url)
        add = threading.Timer(1.2, lambda: client.xadd(stream, {"ev": "enqueued", "job": "j"}))
        add.start()
        try:
            with pytest.raises(Followed, match="job=j event=enqueued"):
                follow_stream(client, stream, b"0-0")
        finally:
            add.join()
            client.close()


class Unretried(Connector):
    """Clients through a proxy at ``port`` that never send a command again: a connection that
    breaks reaches the library's own code as redis-py's ``ConnectionError``."""

    def __init__(self, port: int, db: int) -> None:
        super().__init__(f"redis://{HOST}:{port}/{db}")
        self.port, self.db = port, db

    def sync(self) -> Any:
        return redis.Redis(host=HOST, port=self.port, db=self.db, retry=Retry(NoBackoff(), 0))

    def asyncio(self) -> Any:
        retry = AsyncRetry(NoBackoff(), 0)
        return redis.asyncio.Redis(host=HOST, port=self.port, db=self.db, retry=retry)


def double(x: int) -> int:
    return 2 * x


def proxy_of(app: App) -> Proxy:
    """A proxy in front of ``app``'s Redis."""
    kwargs = app.client.redis.connection_pool.connection_kwargs
    return Proxy(str(kwargs.get("host", HOST)), int(kwargs.get("port", 6379)))


def db_of(app: App) -> int:
    return int(app.client.redis.connection_pool.connection_kwargs.get("db", 0))


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_wait_for_a_result_goes_on_through_a_dropped_connection(
    namespace: str, kind: str
) -> None:
    # The wait's XREAD gets its answer (the job's end) from Redis, and the proxy loses it and
    # cuts the connection, as a failover or a restart would: the wait reads the job again.
    with (
        app_url("redis", namespace) as url,
        App(url, namespace=namespace) as workers,
        proxy_of(workers) as proxy,
        App(connector=Unretried(proxy.port, db_of(workers)), namespace=namespace) as app,
    ):
        handle = app.task(double, name="double").enqueue(21)
        proxy.cut_after_next(has(b"XREAD"))
        got: list[Any] = []

        async def wait_async() -> Any:
            try:
                return await handle.aresult(timeout=30)
            finally:
                await app.aclose()

        def wait() -> None:
            try:
                got.append(handle.result(30) if kind == "sync" else asyncio.run(wait_async()))
            except Exception as exc:
                got.append(exc)

        waiting = threading.Thread(target=wait)
        waiting.start()
        wait_for(lambda: proxy.forwarded(b"XREAD"), 10, "the wait to read the stream")
        workers.task(double, name="double")
        with Worker(workers, idle_wait=1.0):
            waiting.join(30)
        assert got == [42]
        assert not proxy.armed and len(proxy.dropped) == 1, "no connection was cut"


def test_a_wait_pauses_longer_each_time_and_gives_up_after_its_outage_bound() -> None:
    now = [100.0]
    outage = Outage(clock=lambda: now[0])
    gone = redis.ConnectionError("Connection closed by server.")
    assert [outage.failed(gone) for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    now[0] += OUTAGE_S
    with pytest.raises(RedisUnavailable, match="Redis was away for 30s: Timeout reading"):
        outage.failed(redis.TimeoutError("Timeout reading from socket"))
    outage.ok()
    assert outage.failed(gone) == 0.05  # a new outage
    # what no retry mends ends the wait at once, as every call's errors do
    with pytest.raises(AuthenticationError):
        outage.failed(redis.AuthenticationError("invalid password"))
    with pytest.raises(ProtocolError):
        Outage().failed(redis.ResponseError("WRONGTYPE"))


@pytest.mark.parametrize(
    "error",
    [
        redis.ResponseError("UNBLOCKED force unblock from blocking operation, instance state"),
        redis.exceptions.ClusterDownError("The cluster is down"),
        redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"),
        redis.exceptions.RedisClusterException("Redis Cluster cannot be connected"),
    ],
)
def test_a_failover_or_a_migration_pauses_a_wait_rather_than_ending_it(error: Exception) -> None:
    assert Outage().failed(error) == 0.05
