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

from quasar_redis import App, AsyncQuasar, Worker, cli
from quasar_redis._keys import KeySpace
from quasar_redis._waits import block_ms, block_slice, socket_timeout

from .helpers import app_url

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
                cli.follow_stream(client, stream, b"0-0")
        finally:
            add.join()
            client.close()
