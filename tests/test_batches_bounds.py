"""A batch of 100,000 members costs each call what a batch of one does (docs/workflows.md, "What
it costs"): no script call takes 10 ms of Redis's time, and the calls that touch the batch run
as many commands whatever its size. On a redis-server of the test session's own (its slow log
and command counts are this test's alone)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from quasar_redis import BatchApplied, BatchOpened, NewJob, Quasar

from .helpers import T0, applied, claimed, delete_namespace, real_redis
from .servers import RedisServer

MEMBERS = 100_000
CHUNK = 100  # jobs per enqueue, and expiries per sweep: calls of a usual size
SLOW_US = 10_000


@pytest.fixture
def own(private_server: RedisServer, namespace: str) -> Iterator[redis.Redis]:
    client = real_redis(private_server.url)
    names = ("slowlog-log-slower-than", "slowlog-max-len")
    before = {name: str(client.config_get(name)[name]) for name in names}
    client.config_set("slowlog-log-slower-than", SLOW_US)
    client.config_set("slowlog-max-len", 10_000)
    client.slowlog_reset()
    try:
        yield client
    finally:
        for name, value in before.items():
            client.config_set(name, value)
        delete_namespace(client, namespace)
        client.close()


def commands(client: redis.Redis, call: Any) -> tuple[Any, int]:
    """``call``'s result, and how many commands Redis ran for it (its scripts' included)."""
    client.config_resetstat()
    result = call()
    stats = client.info("commandstats")
    return result, sum(
        v["calls"]
        for k, v in stats.items()
        # (not CONFIG: the client's check of the eviction policy after a connection is made)
        if k != "cmdstat_info" and not k.startswith("cmdstat_config")
    )


def slow_calls(client: redis.Redis) -> list[Any]:
    """The script calls the slow log holds: each took 10 ms or more."""
    scripted = (b"fcall", b"evalsha", b"fcall_ro", b"evalsha_ro")
    return [e for e in client.slowlog_get(10_000) if e["command"].split()[0].lower() in scripted]


def test_a_batch_of_100000_members_keeps_every_call_bounded(
    own: redis.Redis, namespace: str
) -> None:
    q = Quasar(own, namespace)
    opened = q.open_batch("big", on_success=NewJob("done"), on_complete=NewJob("tidy"))
    assert opened == BatchOpened("big", True)
    small = "small"
    q.open_batch(small, on_success=NewJob("done"), on_complete=NewJob("tidy"))
    applied(q.enqueue("work", id="small-last", batch=small, now=T0))
    for start in range(0, MEMBERS - 1, CHUNK):
        jobs = [
            NewJob("work", id=f"m{i}", batch="big", expires_in_ms=1_000)
            for i in range(start, min(start + CHUNK, MEMBERS - 1))
        ]
        assert isinstance(q.enqueue_many(jobs, ids_only=True, now=T0), BatchApplied)
    applied(q.enqueue("work", id="last", batch="big", now=T0))
    _, one_member = commands(own, lambda: q.enqueue("work", id="another", batch=small, now=T0))
    _, one_more = commands(own, lambda: q.enqueue("work", id="m-extra", batch="big", now=T0))
    assert one_more == one_member  # joining a batch of 100,000 costs what joining one of 2 does
    while q.sweep_expired(limit=CHUNK, now=T0 + 2_000).past_deadline:
        pass
    info = q.batch("big")
    assert info is not None and (info.total, info.expired, info.pending) == (
        MEMBERS + 1,
        MEMBERS - 1,
        2,
    )
    assert q.close_batch("big") and q.close_batch(small)
    # (a first call of complete loads its script on Redis 6.2: NOSCRIPT, then SCRIPT LOAD)
    applied(q.enqueue("work", id="warm", now=T0))
    warm = claimed(q.claim_job("warm", "w", 60_000))
    q.complete(warm.token, "w", result=1)
    costs = []
    for job_id in ("m-extra", "another", "last", "small-last"):
        claim = claimed(q.claim_job(job_id, "w", 60_000))
        _, cost = commands(own, lambda c=claim: q.complete(c.token, "w", result=1))
        costs.append(cost)
    assert costs[0] == costs[1]  # a member ending costs the same in either batch
    assert costs[2] < costs[0] + 40  # the last: the batch read once, its callbacks written
    info = q.batch("big")
    assert info is not None
    assert {c.kind: c.job_id for c in info.callbacks} == {
        "on_complete": "big@on_complete",
        "on_success": None,  # (members expired)
    }
    _, read = commands(own, lambda: q.batch("big"))
    assert read <= 8  # (the call, the clock, two key types, one HGETALL: not the members)
    for _ in range(5):
        last = q.batch_results("big", start=MEMBERS - 999, count=1000)
        assert [m.id for m in last.members][-2:] == ["last", "m-extra"]
        assert last.next_start is None
    # The slow log times each call by the clock: on a loaded machine a call now and then waits
    # for a core, whatever it does. A call whose work grew with the batch would be slow every
    # time past some size (every later sweep, every page): so a slow call in ten passes, a
    # trend not. The commands counted above are the exact bound.
    slow = slow_calls(own)
    calls = 2 * MEMBERS // CHUNK
    assert len(slow) < calls // 10, [(e["duration"], e["command"][:60]) for e in slow]
