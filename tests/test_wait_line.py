"""The connection an asyncio worker's idle waits go out on (``quasar_redis._wait_line``), on a
real Redis (fakeredis has no connections): a wait's claim comes back on it and it is kept for the
next wait, as lent by the pool; a connection the server closed between waits is replaced; one
lost during a wait raises what redis-py raises, and the claim's re-sent call replays what it
leased; a cancelled wait closes its connection; closing the client closes them; a pool that is
not redis-py's plain one, or is capped low, lends a connection for each wait as before; a RESP3
push between replies is dropped, and bytes that are not Redis's end the line; a claim's answer is
handed on as its reply comes in, but for what the wait's coroutine must read itself, and a
hand-on that fails keeps the line. Each over RESP2 and RESP3 where both apply."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import hiredis
import pytest
import redis
import redis.asyncio
import redis.exceptions as rex

from quasar_redis import AsyncQuasar
from quasar_redis import _types as t
from quasar_redis._wait_line import EarlyAnswer
from quasar_redis.errors import CorruptKeyError

from .helpers import REDIS_URL, wait_for
from .proxy import HOST, Proxy, has

QUEUE = "q"


@pytest.fixture(params=[2, 3])
def resp(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def client_ids(admin: redis.Redis) -> set[int]:
    return {int(c["id"]) for c in admin.client_list()}


async def wait_once(
    q: AsyncQuasar,
    timeout: float = 0.2,
    ids: list[int] | None = None,
    answers: list[Any] | None = None,
) -> tuple[bool, Any]:
    call = q.calls.claim_many(QUEUE, "w1", 30_000, 10)
    said = (ids if ids is not None else []).append
    heard = (answers if answers is not None else []).append
    return await q.wait_and_claim([QUEUE], timeout, call, said, heard)


async def one_job(q: AsyncQuasar) -> t.JobApplied:
    """A job enqueued to the waits' queue."""
    job = await q.enqueue("s", b"\x90", queue=QUEUE)
    assert isinstance(job, t.JobApplied)
    return job


async def settle(q: AsyncQuasar) -> None:
    """A claim sent alone first: it finds how the server runs scripts (functions, or EVALSHA on
    Redis 6.2) and loads the claim's, which a wait does not (a wait sent first meets the
    refusal that finds it, whatever ran on the server before)."""
    await q.execute(q.calls.claim_many(QUEUE, "w1", 30_000, 1))


@contextlib.asynccontextmanager
async def client(namespace: str, resp: int, url: str = REDIS_URL) -> AsyncIterator[AsyncQuasar]:
    """A client over a redis-py client of its own (RESP ``resp``), closed afterwards, settled."""
    q = AsyncQuasar(redis.asyncio.Redis.from_url(url, protocol=resp), namespace)
    try:
        await settle(q)
        yield q
    finally:
        await q.aclose()
        await q.redis.aclose()


async def until(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Let the event loop run until ``check()`` holds (``what``), at most ``timeout`` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.01)


def in_use(q: AsyncQuasar) -> set[Any]:
    pool: Any = q.redis.connection_pool
    return set(pool._in_use_connections)


def test_a_wait_claims_on_a_connection_kept_for_the_next_wait(
    upstream: redis.Redis, namespace: str, resp: int
) -> None:
    async def scenario() -> None:
        async with client(namespace, resp) as q:
            job = await one_job(q)
            ids: list[int] = []
            answers: list[Any] = []  # (each answer read, handed on before the wait returns)
            popped, claimed = await wait_once(q, ids=ids, answers=answers)
            assert popped
            assert isinstance(claimed, t.ClaimsApplied)
            assert [c.job.id for c in claimed.claims] == [job.job.id]
            assert answers == [claimed]
            [line] = q._lines.idle
            assert line.conn in in_use(q)  # (lent by the pool while kept)
            popped, nothing = await wait_once(q, ids=ids, answers=answers)
            assert not popped
            assert isinstance(nothing, t.ClaimRefused)
            assert isinstance(nothing.error, t.NothingClaimable)
            assert answers == [claimed, nothing]
            assert q._lines.idle == [line]
            assert ids[0] == ids[1]  # the same connection both times
            assert ids[0] in client_ids(upstream)
        wait_for(lambda: ids[0] not in client_ids(upstream), 5, "the wait's connection closed")

    asyncio.run(scenario())


def test_a_connection_the_server_closed_between_waits_is_replaced(
    upstream: redis.Redis, namespace: str, resp: int
) -> None:
    async def scenario() -> None:
        async with client(namespace, resp) as q:
            ids: list[int] = []
            await q.enqueue("s", b"\x90", queue=QUEUE)  # (the client's own connection, lent)
            await wait_once(q, ids=ids)
            [line] = q._lines.idle
            lent = len(in_use(q))
            upstream.client_kill_filter(_id=str(ids[0]))
            await until(lambda: not line.alive, "the event loop noticed the close")
            await q.enqueue("s", b"\x90", queue=QUEUE)
            popped, claimed = await wait_once(q, ids=ids)
            assert popped and isinstance(claimed, t.ClaimsApplied)
            assert ids[1] != ids[0]
            assert q._lines.idle != [line]
            assert len(in_use(q)) == lent  # the closed one went back to the pool

    asyncio.run(scenario())


def test_a_connection_lost_during_a_wait_raises_and_the_resent_claim_replays(
    upstream: redis.Redis, namespace: str, proxy: Proxy, resp: int
) -> None:
    db = int(upstream.connection_pool.connection_kwargs.get("db", 0))
    url = f"redis://{HOST}:{proxy.port}/{db}"

    async def scenario() -> None:
        async with client(namespace, resp, url) as q:
            job = await one_job(q)
            call = q.calls.claim_many(QUEUE, "w1", 30_000, 10)
            proxy.cut_after_next(has(b"BLPOP"))  # the claim runs; its reply never comes
            answers: list[Any] = []
            with pytest.raises(rex.ConnectionError):
                await q.wait_and_claim([QUEUE], 0.2, call, lambda _: None, answers.append)
            assert not q._lines.idle
            assert answers == []  # (no answer was read: none handed on)
            again = await q.execute(call)  # the same call id: its record answers
            assert isinstance(again, t.ClaimsApplied)
            assert [c.job.id for c in again.claims] == [job.job.id]
            _, nothing = await wait_once(q)  # a new connection waits
            assert isinstance(nothing, t.ClaimRefused)
            assert len(q._lines.idle) == 1
            assert not proxy.errors, proxy.errors

    asyncio.run(scenario())


def test_a_cancelled_wait_closes_its_connection(
    upstream: redis.Redis, namespace: str, resp: int
) -> None:
    async def scenario() -> None:
        async with client(namespace, resp) as q:
            ids: list[int] = []
            waiting = asyncio.ensure_future(wait_once(q, timeout=10.0, ids=ids))
            await until(lambda: bool(ids), "the wait said its connection's id")
            assert ids[0] in client_ids(upstream)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert not q._lines.idle
            wait_for(lambda: ids[0] not in client_ids(upstream), 5, "the wait's connection closed")
            _, nothing = await wait_once(q, ids=ids)  # and the next wait has one again
            assert isinstance(nothing, t.ClaimRefused)
            assert ids[1] != ids[0]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "make",
    [
        lambda: redis.asyncio.BlockingConnectionPool.from_url(REDIS_URL, max_connections=200),
        lambda: redis.asyncio.ConnectionPool.from_url(REDIS_URL, max_connections=10),
    ],
    ids=["blocking-pool", "capped-pool"],
)
def test_a_pool_not_plain_or_capped_low_lends_a_connection_for_each_wait(
    upstream: redis.Redis, namespace: str, make: Any
) -> None:
    async def scenario() -> None:
        pool = make()
        q = AsyncQuasar(redis.asyncio.Redis(connection_pool=pool), namespace)
        try:
            await settle(q)
            await q.enqueue("s", b"\x90", queue=QUEUE)
            popped, claimed = await wait_once(q)
            assert popped and isinstance(claimed, t.ClaimsApplied)
            assert not q._lines.usable and not q._lines.idle
            assert not pool._in_use_connections  # the wait's connection went back
        finally:
            await q.aclose()
            await q.redis.aclose()
            await pool.aclose()

    asyncio.run(scenario())


def test_closing_the_redis_client_closes_a_kept_connection_at_once(
    upstream: redis.Redis, namespace: str, resp: int
) -> None:
    # The pool counts the kept connection as lent: its own disconnect closes it, and does not
    # wait on the reader redis-py no longer feeds.
    async def scenario() -> None:
        r = redis.asyncio.Redis.from_url(REDIS_URL, protocol=resp, socket_connect_timeout=30)
        q = AsyncQuasar(r, namespace)
        await settle(q)
        ids: list[int] = []
        await wait_once(q, ids=ids)
        assert len(q._lines.idle) == 1
        await asyncio.wait_for(r.aclose(), timeout=3)
        wait_for(lambda: ids[0] not in client_ids(upstream), 5, "the kept connection closed")

    asyncio.run(scenario())


def test_a_wait_whose_replies_do_not_come_in_time_raises_and_closes_its_connection(
    upstream: redis.Redis, namespace: str, proxy: Proxy, resp: int
) -> None:
    # The proxy holds the wait back past the client's socket timeout: the wait raises redis-py's
    # TimeoutError, as the pool's way does, and its connection is closed, not kept.
    db = int(upstream.connection_pool.connection_kwargs.get("db", 0))
    url = f"redis://{HOST}:{proxy.port}/{db}?socket_timeout=0.3"
    held = threading.Event()

    def hold() -> None:
        held.wait(5)

    async def scenario() -> None:
        async with client(namespace, resp, url) as q:
            proxy.before_next(has(b"BLPOP"), hold)
            try:
                with pytest.raises(rex.TimeoutError):
                    await wait_once(q, timeout=0.1)
            finally:
                held.set()
            assert not q._lines.idle
            _, nothing = await wait_once(q)  # a new connection waits
            assert isinstance(nothing, t.ClaimRefused)
            assert len(q._lines.idle) == 1

    asyncio.run(scenario())


def test_a_push_message_between_replies_is_dropped(upstream: redis.Redis, namespace: str) -> None:
    # RESP3: the kept connection tracks a key (``CLIENT TRACKING``), so Redis pushes an
    # invalidation onto it when the key changes, ahead of the next wait's replies. The wait reads
    # its own three replies past it.
    key = f"{namespace}:tracked"

    async def scenario() -> None:
        async with client(namespace, 3) as q:
            await wait_once(q)
            [line] = q._lines.idle
            commands: list[Any] = [("CLIENT", "TRACKING", "ON"), ("GET", key)]
            for command in commands:
                line.write(hiredis.pack_command(command))
                await line.reply(5.0)
            upstream.set(key, "changed")  # (its push is on the line before SET returns here)
            job = await one_job(q)
            popped, claimed = await wait_once(q)
            assert popped and isinstance(claimed, t.ClaimsApplied)
            assert [c.job.id for c in claimed.claims] == [job.job.id]
            assert q._lines.idle == [line]

    asyncio.run(scenario())


def test_bytes_that_are_not_redis_speaking_end_the_line(
    upstream: redis.Redis, namespace: str, resp: int
) -> None:
    # What the reader cannot parse (hiredis's protocol error) ends the line as a lost connection
    # does: redis-py's ConnectionError for the wait on it, and the next wait takes a new one.
    async def scenario() -> None:
        async with client(namespace, resp) as q:
            await wait_once(q)
            [line] = q._lines.idle
            line.protocol.data_received(b"@not redis\r\n")
            assert not line.alive
            with pytest.raises(rex.ConnectionError):
                await line.reply(1.0)
            popped, nothing = await wait_once(q)
            assert not popped and isinstance(nothing, t.ClaimRefused)
            assert len(q._lines.idle) == 1 and q._lines.idle[0] is not line

    asyncio.run(scenario())


def test_resp3_without_a_hiredis_that_tells_pushes_apart_takes_the_pools_way(
    upstream: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hiredis older than 3.2 reads a RESP3 push as a reply: the connection is not taken over
    # (left as redis-py set it up) and every wait goes the pool's way.
    monkeypatch.delattr(hiredis, "PushNotification", raising=False)

    async def scenario() -> None:
        async with client(namespace, 3) as q:
            await one_job(q)
            before = in_use(q)  # (the connection the client keeps for its calls)
            popped, claimed = await wait_once(q)
            assert popped and isinstance(claimed, t.ClaimsApplied)
            assert not q._lines.usable and not q._lines.idle
            assert in_use(q) == before  # the wait's connection went back
            popped, nothing = await wait_once(q)
            assert not popped and isinstance(nothing, t.ClaimRefused)

    asyncio.run(scenario())


def test_a_kept_connection_hands_the_answer_on_as_its_reply_comes_in(
    upstream: redis.Redis, namespace: str, resp: int
) -> None:
    # On a kept connection the claim's answer reaches on_answer from the connection's protocol
    # (no task runs then), before the wait's coroutine has resumed; the wait returns the same
    # answer, handed on once. A BLPOP that fails (the wake list of the wrong type) hands nothing
    # on and raises, as before; a claim's typed error is returned, and not handed on.
    async def scenario() -> None:
        async with client(namespace, resp) as q:
            await one_job(q)
            heard: list[tuple[Any, bool]] = []

            def hand_on(result: Any) -> None:
                heard.append((result, asyncio.current_task() is None))

            on_answer: Any = hand_on

            call: Any = q.calls.claim_many(QUEUE, "w1", 30_000, 10)
            popped, claimed = await q.wait_and_claim([QUEUE], 0.2, call, lambda _: None, on_answer)
            assert popped and isinstance(claimed, t.ClaimsApplied)
            assert heard == [(claimed, True)]
            wake = q.keys.wake(QUEUE)
            upstream.set(wake, "not a list")
            try:
                again = q.calls.claim_many(QUEUE, "w1", 30_000, 10)
                with pytest.raises(rex.ResponseError, match="WRONGTYPE"):
                    await q.wait_and_claim([QUEUE], 0.2, again, lambda _: None, on_answer)
            finally:
                upstream.delete(wake)
            # a claim refused with a typed error (its queue's ready set damaged): returned, and
            # nothing handed on
            ready = q.keys.queue(QUEUE, "ready")
            upstream.set(ready, "not a zset")
            try:
                third: Any = q.calls.claim_many(QUEUE, "w1", 30_000, 10)
                _, refused = await q.wait_and_claim([QUEUE], 0.2, third, lambda _: None, on_answer)
            finally:
                upstream.delete(ready)
            assert isinstance(refused, CorruptKeyError)
            assert len(heard) == 1

    asyncio.run(scenario())


def test_an_early_answer_leaves_work_left_a_bad_reply_and_a_failed_wait_to_the_coroutine() -> None:
    # What EarlyAnswer does not hand on, reply by reply (CLIENT ID, the BLPOP's, the call's): a
    # claim with cascade work left to carry on, a reply the call's parse raises on, any reply
    # after a BLPOP that failed. The coroutine reads each of them again. A plain answer after
    # them is handed on once.
    class Parsed:
        def __init__(self, fails: bool) -> None:
            self.fails = fails

        def parse(self, reply: Any) -> Any:
            if self.fails:
                raise ValueError("not a claim's reply")
            return ("parsed", reply)

    def heard_all(call: Any, replies: list[Any]) -> tuple[EarlyAnswer, list[Any]]:
        answers: list[Any] = []
        early = EarlyAnswer(call, answers.append)
        for reply in replies:
            early.heard(reply)
        return early, answers

    plain = [7, [b"wake", b"1"], [b"ClaimsApplied"]]
    left = [7, [b"wake", b"1"], [b"More", [b"ClaimsApplied"]]]
    failed_pop = [7, rex.ResponseError("WRONGTYPE"), [b"ClaimsApplied"]]
    for call, replies in (
        (Parsed(False), left),
        (Parsed(True), plain),
        (Parsed(False), failed_pop),
    ):
        early, answers = heard_all(call, replies)
        assert answers == [] and not early.answered and early.result is None
    early, answers = heard_all(Parsed(False), plain)
    assert answers == [("parsed", [b"ClaimsApplied"])] and early.answered
    assert early.result == answers[0]


def test_an_answer_whose_hand_on_fails_still_returns_and_keeps_the_connection(
    upstream: redis.Redis, namespace: str, resp: int
) -> None:
    # on_answer raising inside the connection's protocol must not end the connection: the error
    # goes to the event loop's exception handler, the wait returns its claim, and the line is
    # kept for the next wait.
    async def scenario() -> None:
        async with client(namespace, resp) as q:
            job = await one_job(q)
            loop_errors: list[dict[str, Any]] = []
            asyncio.get_running_loop().set_exception_handler(lambda _, c: loop_errors.append(c))

            def hand_on(result: Any) -> None:
                raise RuntimeError("the worker's hand-on failed")

            call: Any = q.calls.claim_many(QUEUE, "w1", 30_000, 10)
            popped, claimed = await q.wait_and_claim([QUEUE], 0.2, call, lambda _: None, hand_on)
            assert popped and isinstance(claimed, t.ClaimsApplied)
            assert [c.job.id for c in claimed.claims] == [job.job.id]
            [failure] = loop_errors
            assert failure["message"] == "a wait's on_answer failed"
            assert isinstance(failure["exception"], RuntimeError)
            [line] = q._lines.idle
            assert line.alive
            popped, nothing = await wait_once(q)
            assert not popped and isinstance(nothing, t.ClaimRefused)
            assert q._lines.idle == [line]

    asyncio.run(scenario())
