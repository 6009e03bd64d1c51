"""How calls reach Redis: the function library (FCALL) where the server has functions, scripts
(EVALSHA) where it refuses them, and what either lacks is loaded on the first call that needs it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from quasar_redis import AsyncQuasar, ClaimRefused, NewJob, Quasar
from quasar_redis._base import needs_command_name
from quasar_redis._scripts import library, scripts

from .clients import clients, kind
from .helpers import REDIS_URL, applied, claimed, delete_namespace, has_functions, real_redis

__all__ = ["kind"]  # (the fixture: each test below runs through both clients)


def library_loaded(client: Any) -> bool:
    return bool(client.function_list(library=library().name))


def pairs(flat: list[Any]) -> dict[bytes, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


@pytest.mark.own_server
def test_a_missing_library_is_loaded_by_the_next_call(
    redis_client: Any, namespace: str, kind: str
) -> None:
    with clients(kind, redis_client) as make:
        if has_functions(redis_client):
            missing_library_loaded(make(namespace), redis_client)
        else:  # Redis 6.2: the client's first call finds no FCALL and sends scripts from then on
            scripts_loaded(make(namespace), redis_client)


def missing_library_loaded(q: Quasar, redis_client: Any) -> None:
    applied(q.enqueue("s", id="a"))
    assert q.functions and library_loaded(redis_client)
    redis_client.function_delete(library().name)  # a restart without persistence, a flush
    applied(q.enqueue("s", id="b"))
    assert library_loaded(redis_client)
    redis_client.function_delete(library().name)
    results = q.execute_many([q.calls.enqueue(NewJob("s", id=i)) for i in ("c", "d")])
    assert [applied(r).id for r in results] == ["c", "d"]
    assert q.counts("default").available == 4
    assert q.functions


def test_every_script_is_one_function_of_the_library(redis_client: Any) -> None:
    q = Quasar(redis_client, "t")
    q.counts("default")
    if not has_functions(redis_client):  # Redis 6.2: no library, the scripts instead
        assert not q.functions
        q.load_scripts()
        assert all(redis_client.script_exists(*(s.sha for s in scripts().values())))
        return
    listed = pairs(redis_client.function_list(library=library().name)[0])
    names = {pairs(f)[b"name"].decode() for f in listed[b"functions"]}
    assert names == {s.function for s in scripts().values()}


@pytest.mark.own_server
def test_scripts_when_asked(redis_client: Any, namespace: str, kind: str) -> None:
    with clients(kind, redis_client) as make:
        scripts_loaded(make(namespace, functions=False), redis_client)


def scripts_loaded(q: Quasar, redis_client: Any) -> None:
    redis_client.script_flush()
    applied(q.enqueue("s", id="a"))  # NOSCRIPT: loaded, sent again
    results = q.execute_many([q.calls.enqueue(NewJob("s", id="b")), q.calls.counts("default")])
    assert applied(results[0]).id == "b"
    assert results[1].available == 2
    assert not q.functions


@pytest.fixture
def refusing_user() -> Iterator[tuple[str, str]]:
    """A user of the real server that may not use functions (as on some managed services)."""
    admin = real_redis()
    name, password = f"quasar-test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin.acl_setuser(
        name,
        enabled=True,
        passwords=[f"+{password}"],
        keys=["*"],
        channels=["*"],
        # (Redis 6.2 has no functions to refuse: there every user gets scripts)
        commands=["+@all", "-fcall", "-function"] if has_functions(admin) else ["+@all"],
    )
    try:
        yield name, password
    finally:
        admin.acl_deluser(name)
        admin.close()


def test_a_server_refusing_functions_gets_scripts(
    refusing_user: tuple[str, str], namespace: str, kind: str
) -> None:
    user, password = refusing_user
    client = redis.Redis.from_url(REDIS_URL, username=user, password=password)
    try:
        with clients(kind, client) as make:
            q = make(namespace)
            assert q.functions
            applied(q.enqueue("s", id="a"))
            assert not q.functions  # FCALL refused (NOPERM): scripts from now on
            again = make(namespace)
            results = again.execute_many([again.calls.enqueue(NewJob("s", id="b"))])
            assert applied(results[0]).id == "b" and not again.functions
            q = make(namespace, coalesce=False) if kind == "async" else make(namespace)
            applied(q.enqueue("s", id="c"))
            assert not q.functions
        assert Quasar(client, namespace).counts("default").available == 3
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_what_counts_as_a_server_without_functions() -> None:
    from redis.exceptions import NoPermissionError, ResponseError

    from quasar_redis._sending import functions_unusable, library_load_error

    # Redis 6.2 (as redis-py words it), and ACLs denying the commands.
    assert functions_unusable(ResponseError("unknown command `FCALL`, with args beginning with: "))
    assert functions_unusable(NoPermissionError("this user has no permissions to run 'fcall'"))
    assert not functions_unusable(ResponseError("Function not found"))
    assert library_load_error(ResponseError("Library 'quasar_x' already exists")) is False
    assert library_load_error(ResponseError("unknown command `FUNCTION`")) is True
    assert library_load_error(ResponseError("Error compiling function")) is None


def test_no_state_of_one_call_reaches_the_next(
    redis_client: Any, namespace: str, kind: str
) -> None:
    # A function library keeps its variables between calls: every call must start clean (the
    # namespace, cached key names, buffered writes, events, wake-ups).
    other = f"{namespace}-b"
    try:
        with clients(kind, redis_client) as make:
            a, b = make(namespace), make(other)
            no_state_carried(a, b, redis_client)
    finally:
        delete_namespace(redis_client, other)


def no_state_carried(a: Quasar, b: Quasar, redis_client: Any) -> None:
    applied(a.enqueue("s", id="x", queue="mail"))
    assert isinstance(b.claim("mail", "w", 1000), ClaimRefused)
    applied(b.enqueue("s", id="y", queue="mail"))
    assert claimed(a.claim("mail", "w", 1000)).job.id == "x"
    assert claimed(b.claim("mail", "w", 1000)).job.id == "y"
    for q, job_id in ((a, "x"), (b, "y")):
        keys = {k.decode() for k in redis_client.scan_iter(match=f"quasar:{{{q.namespace}}}:*")}
        assert f"quasar:{{{q.namespace}}}:job:{job_id}" in keys
        entries = redis_client.xrange(q.keys.events)
        assert {f[b"job"] for _, f in entries} == {job_id.encode()}


def test_asyncio_calls_go_packed_by_hiredis_on_a_plain_client_only() -> None:
    # A plain asyncio client: calls are packed by hiredis and sent on the pool's connections
    # (redis-py's asyncio packer joins a growing buffer per argument). Others keep
    # execute_command: a single-connection client, fakeredis (and a cluster client).
    import fakeredis

    direct = real_redis()
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    assert AsyncQuasar(fakeredis.FakeAsyncRedis(), "t")._packed is None

    async def both_ways() -> None:
        plain = redis.asyncio.Redis.from_url(REDIS_URL)
        single = redis.asyncio.Redis.from_url(REDIS_URL, single_connection_client=True)
        try:
            for client, packed in ((plain, True), (single, False)):
                q = AsyncQuasar(client, namespace)
                assert (q._packed is not None) is packed
                job = applied(await q.enqueue("s", {"k": 1}))
                got = claimed(await q.claim("default", "w", 1000))
                assert got.job.id == job.id and got.job.payload == {"k": 1}
        finally:
            await plain.aclose()
            await single.aclose()

    try:
        asyncio.run(both_ways())
    finally:
        delete_namespace(direct, namespace)
        direct.close()


def test_an_asyncio_write_that_cannot_wait_goes_without_a_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # redis-py times a write with the socket timeout through asyncio.wait_for, which before
    # Python 3.12 makes a task of it. A small command on a connected connection cannot wait: it
    # goes without, the timeout back for the read. A large one, or one that connects first,
    # keeps redis-py's timed write.
    import hiredis

    from quasar_redis.aio import WAIT_FOR_TASK, _write

    timed: list[float] = []
    wait_for = asyncio.wait_for

    async def counting(aw: Any, timeout: float | None) -> Any:
        timed.append(timeout or 0)
        return await wait_for(aw, timeout)

    monkeypatch.setattr(asyncio, "wait_for", counting)

    async def write(conn: Any, command: Any) -> int:
        """How many times ``command``'s write was timed."""
        before = len(timed)
        await _write(conn, hiredis.pack_command(command))
        assert conn.socket_timeout == 5  # (the read's, as before)
        assert await conn.read_response() == command[-1].encode().replace(b"PING", b"PONG")
        return len(timed) - before

    async def writes() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL, socket_timeout=5)
        pool: Any = client.connection_pool
        # (redis-py before 5.3 asks the command's name; later ones have no use for it)
        conn = await (
            pool.get_connection("PING") if needs_command_name(pool) else pool.get_connection()
        )
        try:
            assert await write(conn, ("PING",)) == (0 if WAIT_FOR_TASK else 1)
            assert await write(conn, ("ECHO", "x" * 20_000)) == 1
            await conn.disconnect()
            assert await write(conn, ("PING",)) >= 1  # (connects first: redis-py's way)
        finally:
            await pool.release(conn)
            await client.aclose()

    asyncio.run(writes())


@pytest.mark.own_server
def test_sync_calls_go_packed_by_hiredis_on_a_plain_client_only(redis_url: str) -> None:
    # The same for the blocking client: a plain redis.Redis sends calls packed by hiredis on its
    # pool's connections; a single-connection client and fakeredis keep execute_command.
    import fakeredis

    assert Quasar(fakeredis.FakeRedis(), "t")._packed is None
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    plain = redis.Redis.from_url(redis_url)
    single = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        for client, packed in ((plain, True), (single, False)):
            q = Quasar(client, namespace)
            assert (q._packed is not None) is packed
            job = applied(q.enqueue("s", {"k": 1}))
            got = claimed(q.claim("default", "w", 1000))
            assert got.job.id == job.id and got.job.payload == {"k": 1}
        # A missing library (an error reply on the packed path) is loaded, and the call sent again.
        q = Quasar(plain, namespace)
        if has_functions(plain):  # (Redis 6.2: scripts, flushed the same way)
            plain.function_delete(library().name)  # the next call loads it again, on that path
        else:
            plain.script_flush()
        applied(q.enqueue("s", id="after-flush"))
        assert not has_functions(plain) or library_loaded(plain)
    finally:
        delete_namespace(plain, namespace)
        plain.close()
        single.close()
