"""What one plain enqueue (no dependency, dedup key, batch or flow group) costs Redis: the
commands it runs, counted by Redis itself (INFO commandstats, after CONFIG RESETSTAT), which no
load on the machine changes. On a server of the test's own, so that no other client's commands
are counted. docs/redis-layout.md lists them and why each one is there."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from quasar_redis import NewJob, Quasar

from .helpers import T0, applied, real_redis, wait_for
from .servers import RedisServer

#: A job that is ready at once: its checks (the clock, whether the id exists), then its writes
#: (sequence, queue set, hash, ready index), its wake-up (unless the queue is paused) and its
#: event. No TYPE: a key of another type is found by the write that fails (test_corruption.py).
READY = Counter(
    call=1, time=1, exists=1, incrby=1, sadd=1, hset=1, zadd=1, sismember=1, rpush=1, xadd=1
)
#: The call itself, counted as one name: FCALL of the library (Redis 7, Valkey) or EVALSHA of
#: the script (Redis 6.2).
CALLS = ("fcall", "evalsha")
#: A job due later goes to the delayed indexes (by time, and by priority), and wakes no one.
DELAYED = READY - Counter(zadd=1, sismember=1, rpush=1) + Counter(zadd=2)


def ran(client: redis.Redis, call: Callable[[], Any]) -> Counter[str]:
    """The commands Redis ran for ``call``, by name (less those that ask it: CONFIG, INFO)."""
    client.config_resetstat()
    call()
    stats = client.info("commandstats")
    counted: Counter[str] = Counter()
    for name, v in stats.items():
        if not name.startswith(("cmdstat_config", "cmdstat_info")):
            command = name.removeprefix("cmdstat_")
            counted["call" if command in CALLS else command] += v["calls"]
    return counted


@pytest.fixture
def q(counted: redis.Redis, namespace: str) -> Quasar:
    made = Quasar(counted, namespace)
    applied(made.enqueue("warm", queue="warm"))  # (the library loaded, the server's policy read)
    return made


def test_a_plain_enqueue_runs_its_writes_and_two_reads(counted: redis.Redis, q: Quasar) -> None:
    assert ran(counted, lambda: applied(q.enqueue("s"))) == READY
    assert ran(counted, lambda: applied(q.enqueue("s", id="chosen", priority=3))) == READY
    expiring = NewJob("s", queue="other", expires_in_ms=3_600_000)
    deadlines = Counter(zadd=1)  # (the deadlines index)
    assert ran(counted, lambda: applied(q.enqueue_job(expiring))) == READY + deadlines
    assert ran(counted, lambda: applied(q.enqueue("s", delay_ms=60_000))) == DELAYED
    # (an id beyond ASCII, an available_at and a deadline of its own: the same way; the clock
    # given, no TIME)
    clocked = Counter(time=1)
    own_id = ran(counted, lambda: applied(q.enqueue("s", id="naïve-日本", now=T0)))
    assert own_id == READY - clocked
    later = NewJob("s", available_at=T0 + 60_000, deadline=T0 + 120_000)
    assert ran(counted, lambda: applied(q.enqueue_job(later, now=T0))) == (
        DELAYED - clocked + deadlines
    )


def test_a_single_job_of_the_asyncio_clients_coalesced_call_costs_the_same(
    counted: redis.Redis, q: Quasar
) -> None:
    # (mode "each": a plain job that does not exist needs no call record read)
    assert ran(counted, lambda: q.enqueue_each([NewJob("s")])) == READY


def test_a_waiting_worker_takes_the_wake_up_of_the_same_commands(
    counted: redis.Redis, q: Quasar, private_server: RedisServer
) -> None:
    waiter = real_redis(private_server.url)
    popped: list[Any] = []
    wait = threading.Thread(target=lambda: popped.append(waiter.blpop([q.keys.wake("w")], 30)))
    wait.start()
    try:
        wait_for(lambda: counted.info("clients")["blocked_clients"] == 1, 10, "a blocked worker")

        def enqueue() -> None:
            applied(q.enqueue("s", queue="w"))
            wait.join(10)

        assert ran(counted, enqueue) - Counter(blpop=1) == READY
        assert popped == [(q.keys.wake("w").encode(), b"1")]
    finally:
        wait.join(10)
        waiter.close()


def test_wake_ups_nobody_took_are_trimmed_to_sixteen_past_thirty_two(
    counted: redis.Redis, q: Quasar
) -> None:
    wake = q.keys.wake("default")
    for _ in range(31):
        applied(q.enqueue("s"))
    # (one LTRIM for every 17 pushes once the list is full, not one a push)
    assert ran(counted, lambda: applied(q.enqueue("s"))) == READY
    assert counted.llen(wake) == 32
    assert ran(counted, lambda: applied(q.enqueue("s"))) == READY + Counter(ltrim=1)
    assert counted.llen(wake) == 16
    for _ in range(16):
        applied(q.enqueue("s"))
    assert counted.llen(wake) == 32
    # (the general way, a batch's tokens: the same bound)
    jobs = [NewJob("s") for _ in range(5)]
    assert ran(counted, lambda: q.enqueue_many(jobs))["ltrim"] == 1
    assert counted.llen(wake) == 16
