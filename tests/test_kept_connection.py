"""The connection a redis-py pool keeps out of its lending for quasar's calls, one at a time, and
what holds where none is kept (real Redis: fakeredis has no connections to keep).

From redis-py 5.1 on (its pools check the connections they lend: ``ensure_connection``) a lone
command goes on that connection without the pool's lending and taking back; a command sent while
another holds it takes one the pool lends. Before 5.1 nothing is kept: every command goes on a
connection the pool lends, and each test asserts that where it would assert what is kept. What
could go wrong with a connection that outlives its command is shown not to, on either redis-py: a
reply left unread by a call that was stopped mid-way never answers the next call, threads and
tasks get their own replies, a forked process never writes on its parent's socket, and a
connection the server closed is connected again before the next call. Clients made one after
another over one redis-py client keep one connection between them (none before 5.1), and a pool
with a cap of its own keeps all its connections to share.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from quasar_redis import AsyncQuasar, Quasar
from quasar_redis._base import KEPT_POOL_MIN

from .helpers import REDIS_URL, real_redis, wait_for

#: redis-py 5.1 on: its pools check the connection they lend (``ensure_connection``), as the kept
#: one is checked, and a pool keeps one. Before it nothing is kept: every connection is lent.
KEEPS = hasattr(redis.ConnectionPool, "ensure_connection")


@pytest.fixture
def admin() -> Iterator[redis.Redis]:
    client = real_redis()
    yield client
    client.close()


@pytest.fixture
def sync_client(admin: redis.Redis) -> Iterator[Quasar]:
    q = Quasar(redis.Redis.from_url(REDIS_URL), f"kept-{uuid.uuid4().hex[:8]}")
    yield q
    q.redis.close()


def sender(q: Quasar | AsyncQuasar) -> Any:
    """The client's sender of packed commands (a plain redis-py client has one)."""
    assert q._packed is not None
    return q._packed


def kept_conn(q: Quasar | AsyncQuasar) -> Any:
    """The connection ``q``'s pool keeps for its calls, once a call has taken it: the pool counts
    it as lent, the only one lent between calls (redis-py 5.1 on). Before 5.1, None: nothing is
    kept, and every connection a call was lent is back in the pool."""
    pool: Any = q.redis.connection_pool
    kept = sender(q).kept
    if not KEEPS:
        assert kept is None
        assert not pool._in_use_connections
        return None
    assert kept is not None and kept.conn is not None
    assert set(pool._in_use_connections) == {kept.conn}
    return kept.conn


def last_used(q: Quasar | AsyncQuasar) -> Any:
    """The connection ``q``'s last lone call went on: the one its pool keeps, or (nothing kept)
    the one its pool lent and took back, which the pool lends next."""
    conn = kept_conn(q)
    if conn is None:
        pool: Any = q.redis.connection_pool
        conn = pool._available_connections[-1]
    return conn


def client_id(reply: Any) -> int:
    return int(reply)


def blocked_in(admin: redis.Redis, conn_id: int, command: str) -> bool:
    """Whether the connection ``conn_id`` is blocked in ``command`` on the server."""
    return any(
        c.get("cmd") == command and "b" in c.get("flags", "")
        for c in admin.client_list(client_id=[str(conn_id)])
    )


def test_lone_calls_go_on_one_connection_the_pool_keeps_or_lends_each_time(
    sync_client: Quasar,
) -> None:
    q = sync_client
    pool: Any = q.redis.connection_pool
    first = client_id(q._send(("CLIENT", "ID")))
    assert {client_id(q._send(("CLIENT", "ID"))) for _ in range(5)} == {first}
    # an error reply is read whole: the connection stays
    with pytest.raises(redis.ResponseError):
        q._send(("NO-SUCH-COMMAND",))
    assert client_id(q._send(("CLIENT", "ID"))) == first
    conn = kept_conn(q)  # (the pool counts the kept one as lent)
    if KEEPS:  # every call went on the kept one: the pool never lent another
        assert not pool._available_connections
    else:  # the pool's one connection, lent to each call and taken back
        (conn,) = pool._available_connections
    # the client's close closes it
    q.redis.close()
    assert conn._sock is None
    assert client_id(q._send(("CLIENT", "ID"))) != first  # (connected again when next used)
    assert last_used(q) is conn


def test_an_asyncio_call_cancelled_mid_way_leaves_no_reply_for_the_next(
    admin: redis.Redis,
) -> None:
    key = f"kept-{uuid.uuid4().hex[:8]}:list"

    async def run() -> None:
        q = AsyncQuasar(redis.asyncio.Redis.from_url(REDIS_URL), "kept")
        pool: Any = q.redis.connection_pool
        try:
            before = client_id(await q._send(("CLIENT", "ID")))
            conn = last_used(q)
            waiting = asyncio.ensure_future(q._send(("BLPOP", key, "30")))
            while not blocked_in(admin, before, "blpop"):  # (its own precondition: blocked)
                assert not waiting.done()
                await asyncio.sleep(0.01)
            assert set(pool._in_use_connections) == {conn}  # (kept, or lent to the call)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            admin.rpush(key, "late")  # the reply the cancelled call would have read
            assert await q._send(("ECHO", "next")) == b"next"
            assert client_id(await q._send(("CLIENT", "ID"))) != before
            assert last_used(q) is conn  # (the same connection, connected again)
        finally:
            await q.redis.aclose()
            admin.delete(key)

    asyncio.run(run())


def closed_by_the_server(admin: redis.Redis, conn_id: int) -> None:
    """The server closes the connection ``conn_id`` (as a restart would), and has let it go."""
    admin.client_kill_filter(_id=str(conn_id))
    wait_for(lambda: not admin.client_list(client_id=[str(conn_id)]), 10, "the connection to close")


def test_a_connection_the_server_closed_is_connected_again_before_the_next_call(
    admin: redis.Redis,
) -> None:
    # No retries: a call sent on the closed socket would fail; like a connection the pool lends,
    # the kept one is checked (and connected again) first.
    q = Quasar(redis.Redis.from_url(REDIS_URL, retry=Retry(NoBackoff(), 0)), "kept")
    try:
        before = client_id(q._send(("CLIENT", "ID")))
        conn = last_used(q)
        closed_by_the_server(admin, before)
        assert q._send(("ECHO", "next")) == b"next"
        assert client_id(q._send(("CLIENT", "ID"))) != before
        assert last_used(q) is conn  # (the same connection, connected again)
    finally:
        q.redis.close()

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL, retry=AsyncRetry(NoBackoff(), 0))
        q = AsyncQuasar(client, "kept")
        try:
            before = client_id(await q._send(("CLIENT", "ID")))
            conn = last_used(q)
            closed_by_the_server(admin, before)
            reader = conn._reader
            deadline = asyncio.get_running_loop().time() + 10
            while not reader.at_eof():  # (the client's event loop reads the close, as it idles)
                assert asyncio.get_running_loop().time() < deadline, "the close never read"
                await asyncio.sleep(0.01)
            assert await q._send(("ECHO", "next")) == b"next"
            assert client_id(await q._send(("CLIENT", "ID"))) != before
            assert last_used(q) is conn
        finally:
            await client.aclose()

    asyncio.run(run())


class Interrupted(BaseException):
    pass


def test_a_blocking_call_interrupted_mid_way_leaves_no_reply_for_the_next(
    sync_client: Quasar, admin: redis.Redis
) -> None:
    q = sync_client
    pool: Any = q.redis.connection_pool
    key = f"{q.namespace}:list"
    before = client_id(q._send(("CLIENT", "ID")))
    conn = last_used(q)
    main = threading.get_ident()
    in_use: list[set[Any]] = []

    def interrupt() -> None:
        wait_for(lambda: blocked_in(admin, before, "blpop"), 10, "the call to block")
        in_use.append(set(pool._in_use_connections))
        signal.pthread_kill(main, signal.SIGUSR1)

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        helper = threading.Thread(target=interrupt)
        helper.start()
        with pytest.raises(Interrupted):
            q._send(("BLPOP", key, "30"))
        helper.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert in_use == [{conn}]  # (the call blocked on it: kept, or lent to the call)
    admin.rpush(key, "late")
    try:
        assert q._send(("ECHO", "next")) == b"next"
        assert client_id(q._send(("CLIENT", "ID"))) != before
        assert last_used(q) is conn  # (the same connection, connected again)
    finally:
        admin.delete(key)


def test_threads_sharing_a_client_each_get_their_own_replies(sync_client: Quasar) -> None:
    q = sync_client
    wrong: list[tuple[bytes, Any]] = []

    def echo(n: int) -> None:
        for i in range(200):
            sent = f"{n}-{i}".encode()
            got = q._send(("ECHO", sent))
            if got != sent:
                wrong.append((sent, got))

    threads = [threading.Thread(target=echo, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    kept_conn(q)  # the kept one still lent (before 5.1: none); the rest went back to the pool
    pool: Any = q.redis.connection_pool
    assert len(pool._available_connections) <= 8


def test_concurrent_asyncio_calls_each_get_their_own_replies() -> None:
    async def run() -> list[tuple[bytes, Any]]:
        q = AsyncQuasar(redis.asyncio.Redis.from_url(REDIS_URL), "kept")
        try:
            sent = [f"m{i}".encode() for i in range(50)]
            for _ in range(5):
                got = await asyncio.gather(*[q._send(("ECHO", m)) for m in sent])
                if list(got) != sent:
                    return list(zip(sent, got, strict=True))
            kept_conn(q)  # (the kept one still lent; before 5.1 none: all went back)
            return []
        finally:
            await q.redis.aclose()

    real_redis().close()  # (skip, or fail under QUASAR_REQUIRE_REDIS=1, without a server)
    assert asyncio.run(run()) == []


def test_clients_made_over_one_redis_client_keep_at_most_one_connection_between_them(
    admin: redis.Redis,
) -> None:
    # More clients than a pool capped at redis-py 8's default (100: the smallest cap with which a
    # pool keeps one) has connections: were each to keep one, the pool would run out. (Before
    # redis-py 8 the default cap is 2**31.)
    shared = redis.Redis.from_url(REDIS_URL)
    pool: Any = shared.connection_pool
    assert pool.max_connections >= KEPT_POOL_MIN
    try:
        ids, kepts = set(), set()
        for i in range(2 * KEPT_POOL_MIN):  # a client made per request, say
            q = Quasar(shared, f"kept-{i}")
            ids.add(client_id(q._send(("CLIENT", "ID"))))
            kepts.add(id(sender(q).kept))
            kept_conn(q)  # (one kept between them; before 5.1 none)
            shared.ping()  # (redis-py's own commands beside them)
        assert len(ids) == 1
        assert len(kepts) == 1
    finally:
        shared.close()

    async def run() -> None:
        shared = redis.asyncio.Redis.from_url(REDIS_URL)
        pool: Any = shared.connection_pool
        assert pool.max_connections >= KEPT_POOL_MIN
        try:
            ids, kepts = set(), set()
            for i in range(2 * KEPT_POOL_MIN):
                q = AsyncQuasar(shared, f"kept-{i}")
                ids.add(client_id(await q._send(("CLIENT", "ID"))))
                kepts.add(id(sender(q).kept))
                kept_conn(q)
                await shared.ping()
            assert len(ids) == 1
            assert len(kepts) == 1
        finally:
            await shared.aclose()

    asyncio.run(run())


def test_a_forked_process_takes_a_connection_of_its_own(sync_client: Quasar) -> None:
    q = sync_client
    parent = client_id(q._send(("CLIENT", "ID")))
    conn = last_used(q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (fork with threads: not here)
        pid = os.fork()
    if pid == 0:  # the child: its own connection, never the parent's socket
        code = 1
        try:
            child = client_id(q._send(("CLIENT", "ID")))
            # (kept again in the child, or lent by the pool the child made anew)
            code = 0 if child != parent and last_used(q) is not conn else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client_id(q._send(("CLIENT", "ID"))) == parent
    assert last_used(q) is conn


@pytest.mark.parametrize(
    "pool",
    [
        lambda: redis.ConnectionPool.from_url(REDIS_URL, max_connections=10),
        lambda: redis.BlockingConnectionPool.from_url(REDIS_URL),
    ],
    ids=["capped", "blocking"],
)
def test_a_pool_with_a_cap_of_its_own_keeps_every_connection_to_share(pool: Any) -> None:
    real_redis().close()
    made = pool()
    q = Quasar(redis.Redis(connection_pool=made), "kept")
    try:
        assert sender(q).kept is None
        assert q._send(("PING",)) in (True, b"PONG")
        if isinstance(made, redis.BlockingConnectionPool):  # (every connection back in its queue)
            assert made.pool.qsize() == made.max_connections
        else:
            assert len(made._in_use_connections) == 0
    finally:
        made.disconnect()
    plain = Quasar(redis.Redis.from_url(REDIS_URL), "kept")  # (uncapped: one kept from 5.1 on)
    try:
        assert plain._send(("PING",)) in (True, b"PONG")
        assert (kept_conn(plain) is not None) is KEEPS
    finally:
        plain.redis.close()


def test_an_asyncio_pool_with_a_cap_of_its_own_keeps_every_connection_to_share() -> None:
    real_redis().close()

    async def run() -> None:
        made = redis.asyncio.ConnectionPool.from_url(REDIS_URL, max_connections=10)
        q = AsyncQuasar(redis.asyncio.Redis(connection_pool=made), "kept")
        try:
            assert sender(q).kept is None
            assert await q._send(("PING",))
            assert len(made._in_use_connections) == 0
        finally:
            await made.disconnect()
        plain = AsyncQuasar(redis.asyncio.Redis.from_url(REDIS_URL), "kept")
        try:
            assert await plain._send(("PING",))
            assert (kept_conn(plain) is not None) is KEEPS
        finally:
            await plain.redis.aclose()

    asyncio.run(run())
