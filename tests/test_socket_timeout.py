"""A client socket timeout shorter than Redis takes to answer: Redis busy (``DEBUG SLEEP`` from
another connection, on a server of the test's own) while a call is on its way, so that redis-py
gives up reading, reconnects and sends the same call again (the same call id). Redis runs both
deliveries; the second is answered as the first was and changes nothing more. A worker whose
client times out the same way, again and again, keeps going and runs every job once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from quasar_redis import (
    App,
    AsyncQuasar,
    BatchApplied,
    ClaimsApplied,
    JobApplied,
    NewJob,
    Quasar,
    Succeeded,
)

from . import test_worker as tw
from .clients import Driven, kind
from .consistency import check
from .helpers import claimed, wait_for
from .servers import DEBUG_ON, RedisServer, server_in

__all__ = ["kind"]  # (the fixture)

TIMEOUT_S = 0.2
STALL_S = 1.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own that takes DEBUG."""
    with server_in(tmp_path / "redis", durable=False, config=DEBUG_ON) as made:
        made.start()
        yield made


def impatient(url: str) -> redis.Redis:
    """A client that gives up reading after 0.2 s and sends the command again, as recent
    redis-py's default retry does (set here so that redis-py 5, which retries no timeout by
    default, does the same)."""
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), 20)
    return redis.Redis.from_url(
        url, socket_timeout=TIMEOUT_S, retry=retry, retry_on_error=[redis.TimeoutError]
    )


def impatient_async(url: str) -> redis.asyncio.Redis:
    """``impatient`` for asyncio."""
    retry = AsyncRetry(ExponentialBackoff(cap=0.5, base=0.05), 20)
    return redis.asyncio.Redis.from_url(
        url, socket_timeout=TIMEOUT_S, retry=retry, retry_on_error=[redis.TimeoutError]
    )


class Stall:
    """Redis busy for ``seconds`` (DEBUG SLEEP from a connection of its own), from a thread;
    ``begun()`` returns once Redis is seen not answering."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url, self.seconds = url, seconds
        self.admin: Any = redis.Redis.from_url(url, socket_timeout=seconds + 30)
        self.thread = threading.Thread(target=self._sleep, daemon=True)

    def _sleep(self) -> None:
        self.admin.execute_command("DEBUG", "SLEEP", self.seconds)

    def begun(self) -> None:
        self.admin.ping()
        self.thread.start()
        probe = redis.Redis.from_url(self.url, socket_timeout=0.05)
        try:
            wait_for(lambda: not _answers(probe), 10, "Redis to stall")
        finally:
            probe.close()

    def join(self) -> None:
        self.thread.join(self.seconds + 30)
        self.admin.close()


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.TimeoutError:
        return False


def deliveries(client: redis.Redis) -> int:
    """How many calls (FCALL, or EVALSHA on Redis 6.2) Redis has run since its statistics were
    reset."""
    found = client.info("commandstats")
    return sum(int(found.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha"))


def during_a_stall(server: RedisServer, admin: redis.Redis, send: Callable[[], Any]) -> Any:
    """``send()``'s result, sent while Redis stalls; at least two deliveries of it ran."""
    admin.config_resetstat()
    stall = Stall(server.url, STALL_S)
    stall.begun()
    result = send()
    stall.join()
    assert deliveries(admin) >= 2, "the call was not sent again: no timeout happened"
    return result


@pytest.fixture
def clients(server: RedisServer, namespace: str, kind: str) -> Iterator[tuple[Quasar, redis.Redis]]:
    """The client under test (impatient: ``Quasar``, or ``AsyncQuasar`` driven to each call's
    end) and a patient one to look with."""
    admin = redis.Redis.from_url(server.url, socket_timeout=30)
    loop = asyncio.new_event_loop()
    if kind == "sync":
        q = Quasar(impatient(server.url), namespace)
    else:
        made = AsyncQuasar(impatient_async(server.url), namespace)
        q = cast(Quasar, Driven(made, loop, admin))
    try:
        q.counts("default")  # (the library loaded, the policy asked: before any stall)
        yield q, admin
    finally:
        if kind == "sync":
            q.close()
        else:
            loop.run_until_complete(made.redis.aclose())
        loop.close()
        admin.close()


def test_a_large_enqueue_sent_again_after_a_timeout_is_applied_once(
    server: RedisServer, clients: tuple[Quasar, redis.Redis], namespace: str
) -> None:
    q, admin = clients
    jobs = [NewJob("s", {"n": n}, id=f"j{n}") for n in range(1000)]
    result = during_a_stall(server, admin, lambda: q.enqueue_many(jobs))
    assert isinstance(result, BatchApplied), result  # not refused DuplicateJob
    assert [job.id for job in result.jobs] == [job.id for job in jobs]
    assert int(admin.get(q.keys.seq) or 0) == 1000, "applied twice"
    report = check(admin, namespace)
    assert report.ok and report.states == {"W": 1000}, report


def test_a_claim_and_a_completion_sent_again_after_a_timeout_are_applied_once(
    server: RedisServer, clients: tuple[Quasar, redis.Redis], namespace: str
) -> None:
    q, admin = clients
    assert isinstance(q.enqueue_many([NewJob("s", id=f"j{n}") for n in range(20)]), BatchApplied)
    got = during_a_stall(server, admin, lambda: q.claim_many("default", "w", 60_000, limit=5))
    assert isinstance(got, ClaimsApplied), got
    assert q.counts("default").executing == 5, "a re-sent claim leased more jobs"
    token = got.claims[0].token
    done = during_a_stall(server, admin, lambda: q.complete(token, "w", result="ok"))
    assert isinstance(done, JobApplied) and isinstance(done.job.state, Succeeded), done
    again = claimed(q.claim_job("j19", "w", 60_000))
    beat = during_a_stall(server, admin, lambda: q.heartbeat(again.token, "w", 60_000))
    renewed = claimed(beat).token  # the token the first delivery handed out: it holds
    assert isinstance(q.complete(renewed, "w"), JobApplied)
    report = check(admin, namespace)
    assert report.ok and report.states == {"L": 4, "S": 2, "W": 14}, report


def test_a_worker_whose_calls_time_out_again_and_again_runs_every_job_once(
    server: RedisServer, namespace: str
) -> None:
    """Redis stalls 0.4 s after every 0.3 s while 150 jobs of 50 ms run 4 at a time; the
    worker's client gives up after 0.2 s each time."""
    worker_app = App(f"{server.url}?socket_timeout={TIMEOUT_S}", namespace=namespace)
    producer = App(server.url, namespace=namespace)
    runs: Counter[int] = Counter()

    def work(n: int) -> int:
        runs[n] += 1
        time.sleep(0.05)
        return n

    tw.declare(worker_app, work, lease_ms=30_000, max_attempts=1)
    produced = tw.declare(producer, work, lease_ms=30_000, max_attempts=1)
    stop = threading.Event()
    stalls = 0

    def stalling() -> None:
        nonlocal stalls
        admin: Any = redis.Redis.from_url(server.url, socket_timeout=30)
        try:
            while not stop.wait(0.3):
                admin.execute_command("DEBUG", "SLEEP", 0.4)
                stalls += 1
        finally:
            admin.close()

    staller = threading.Thread(target=stalling, daemon=True)
    try:
        with tw.worker_of(worker_app, concurrency=4) as worker:
            staller.start()
            handles = [produced.enqueue(n) for n in range(150)]
            assert [h.result(timeout=120) for h in handles] == list(range(150))
            # (the worker counts an outcome once it has its answer: a re-sent one's comes later)
            wait_for(lambda: worker.stats.completed == 150, 30, "every outcome's answer")
            assert worker.stats.lost == 0
    finally:
        stop.set()
        staller.join(30)
        worker_app.client.redis.close()
        producer.client.redis.close()
    assert stalls >= 3, "Redis seldom stalled while the jobs ran"
    assert runs == Counter(range(150)), "a job ran twice or never"
