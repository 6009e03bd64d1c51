"""Making and closing clients: typed keyword-only options, ``from_url``, ``with`` / ``async with``.

mypy checks this file too (``tests/`` is in its files, strict: an unused ``type: ignore`` is an
error): each ``type: ignore[...]`` below marks a call a type checker must refuse, so the file
fails mypy the day an option stops being checked.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any
from unittest import mock

import fakeredis
import pytest
import redis
import redis.asyncio

from quasar_redis import AsyncQuasar, Limits, Quasar

from .helpers import REDIS_URL, applied, delete_namespace, real_redis


def test_every_option_is_keyword_only_and_checked() -> None:
    server = fakeredis.FakeRedis()
    q = Quasar(
        server,
        "ns",
        limits=Limits(max_batch=10),
        tag="t",
        key_prefix="p",
        check_eviction_policy=False,
        events=False,
        functions=False,
    )
    assert (q.namespace, q.calls.limits.max_batch, q.functions) == ("ns", 10, False)
    assert q.keys.root.startswith("p:")
    with pytest.raises(TypeError):
        Quasar(server, "ns", limit=Limits())  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quasar(server, "ns", None)  # type: ignore[call-arg]
    aio = fakeredis.FakeAsyncRedis()
    aq = AsyncQuasar(aio, "ns", coalesce=False, key_prefix="p", events=False)
    assert not aq.coalesce and aq.keys.root.startswith("p:")
    with pytest.raises(TypeError):
        AsyncQuasar(aio, "ns", coalesce=False, evnets=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quasar.from_url(REDIS_URL, namespace="ns", function=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        AsyncQuasar.from_url(REDIS_URL, tags="t")  # type: ignore[call-arg]


def test_calls_take_their_options_by_keyword_and_give_their_result_type() -> None:
    q = Quasar(fakeredis.FakeRedis(), "ns")
    job = applied(q.enqueue("s", queue="mail", priority=2))
    with pytest.raises(TypeError):
        q.enqueue("s", queu="mail")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        q.claim("mail", "w", 1000, 5)  # type: ignore[call-arg]
    counts: int = q.counts("mail").available
    assert counts == 1
    wrong: str = q.counts("mail")  # type: ignore[assignment]
    assert wrong
    assert job.queue == "mail"


def redis_spy(client: Any, method: str) -> Any:
    """Records the calls of ``client.method`` (and still makes them)."""
    return mock.patch.object(client, method, wraps=getattr(client, method))


def test_from_url_makes_a_client_the_with_block_closes() -> None:
    real_redis().close()  # (skip without a server)
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    try:
        with Quasar.from_url(REDIS_URL, namespace, key_prefix="quasar", events=False) as q:
            assert isinstance(q.redis, redis.Redis)
            applied(q.enqueue("s", id="a"))
            assert q.counts("default").available == 1
            assert q.keys.events not in q._script_keys
            spy = redis_spy(q.redis, "close").start()
        spy.assert_called_once()
        q.close()  # (again: nothing more to do)
    finally:
        direct = real_redis()
        delete_namespace(direct, namespace)
        direct.close()


def test_a_redis_client_passed_in_stays_its_owners() -> None:
    client = fakeredis.FakeRedis()
    with redis_spy(client, "close") as spy, Quasar(client, "ns") as q:
        applied(q.enqueue("s"))
    q.close()
    spy.assert_not_called()
    assert client.ping()

    async def flow() -> None:
        aclient = fakeredis.FakeAsyncRedis()
        with redis_spy(aclient, "aclose") as aspy:
            async with AsyncQuasar(aclient, "ns") as aq:
                applied(await aq.enqueue("s"))
            await aq.aclose()
            aspy.assert_not_called()
        assert await aclient.ping()
        await aclient.aclose()

    asyncio.run(flow())


def test_async_from_url_makes_a_client_the_async_with_block_closes() -> None:
    real_redis().close()  # (skip without a server)
    namespace = f"t-{uuid.uuid4().hex[:12]}"

    async def flow() -> None:
        async with AsyncQuasar.from_url(REDIS_URL, namespace, coalesce=False) as aq:
            assert isinstance(aq.redis, redis.asyncio.Redis) and not aq.coalesce
            applied(await aq.enqueue("s", id="a"))
            assert (await aq.counts("default")).available == 1
            spy = redis_spy(aq.redis, "aclose").start()
        spy.assert_called_once()

    try:
        asyncio.run(flow())
    finally:
        direct = real_redis()
        delete_namespace(direct, namespace)
        direct.close()


def test_from_url_takes_tls_urls() -> None:
    # rediss:// goes through redis-py's own URL parsing: TLS connections (none opened here).
    url = "rediss://:secret@redis.example:6380/2?ssl_cert_reqs=required"
    with Quasar.from_url(url, "ns") as q:
        pool = q.redis.connection_pool
        assert pool.connection_class is redis.SSLConnection
        assert pool.connection_kwargs["port"] == 6380 and pool.connection_kwargs["db"] == 2
    aq = AsyncQuasar.from_url(url, "ns")
    assert aq.redis.connection_pool.connection_class is redis.asyncio.SSLConnection
    asyncio.run(aq.aclose())
