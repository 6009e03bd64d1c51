"""The plain claim (``lua/include/plain_claim.lua``): a claim by queue whose jobs are plain and
that has no due work before them, made without the general way's tables. Whatever the state, it
answers and writes what the general way does: the same reply, keys, fields, index entries, call
record and events, shape by shape, and for every key or job field it meets damaged. The general
way is reached here by a claim with one argument more than the plain one takes (which it declines,
and the general way ignores); docs/redis-layout.md says when the plain one applies.

Also: the commands a plain claim runs, counted by Redis (INFO commandstats) on a server of the
test's own."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from quasar_redis import ClaimRefused, ClaimsApplied, NewJob, NothingClaimable, Quasar

from .helpers import T0, applied, claimed, comparable, delete_namespace, wait_for
from .test_enqueue_cost import ran

LEASE_MS = 30_000
NOW = T0 + 10


def _comparable(q: Quasar) -> str:
    """The namespace as ``comparable`` gives it, without the ids of the calls that made the state
    (all but "c1", the claim compared) and with each hash's fields in order of name (the lease's
    fields are written in another order by each way)."""
    calls = [k.decode() for k in q.redis.scan_iter(match=f"{q.keys.root}call:*")]
    made = [k.removeprefix(f"{q.keys.root}call:") for k in calls]
    return comparable(q, [c for c in made if c != "c1"], field_order=False)


def _answer(q: Quasar, call: Callable[[], Any]) -> Any:
    """What a call of ``q`` answered: its result, or the type and message of what it raised
    (without the namespace's name)."""
    try:
        return call()
    except Exception as exc:  # (the answer compared, whatever it is)
        return (type(exc).__name__, str(exc).replace(q.keys.root, "<root>"))


def _general(q: Quasar, queue: str, limit: int, call_id: str) -> Any:
    """The claim the general way: ``call_id``'s claim with one argument more."""
    call = q.calls.claim_many(queue, "w", LEASE_MS, limit, NOW, call_id=call_id)
    return _answer(q, lambda: q.execute(dataclasses.replace(call, args=(*call.args, ""))))


def _plain(q: Quasar, queue: str, limit: int, call_id: str) -> Any:
    call = q.calls.claim_many(queue, "w", LEASE_MS, limit, NOW, call_id=call_id)
    return _answer(q, lambda: q.execute(call))


@pytest.fixture
def pair(redis_client: Any, backend: str, namespace: str) -> Any:
    """Two namespaces on one server: the plain claim's and the general way's."""
    made = [
        Quasar(redis_client, name, functions=backend == "redis")
        for name in (namespace, f"{namespace}-general")
    ]
    try:
        yield made
    finally:
        delete_namespace(redis_client, f"{namespace}-general")


def _released(q: Quasar) -> None:
    applied(q.enqueue("s", id="again", now=T0))
    token = claimed(q.claim_job("again", "w0", 1_000, now=T0)).token
    applied(q.release(token, "w0", now=T0 + 1))


#: States a plain claim meets, each made at T0, and the claim's queue and limit at NOW.
_SHAPES: dict[str, tuple[Callable[[Quasar], Any], str, int]] = {
    "one job, a claim of ten": (lambda q: applied(q.enqueue("s", id="j", now=T0)), "default", 10),
    "three jobs, a claim of two": (
        lambda q: q.enqueue_many([NewJob("s", id=f"j{i}") for i in range(3)], now=T0),
        "default",
        2,
    ),
    "every option": (
        lambda q: q.enqueue_many(
            [
                NewJob("s", {"big": "x" * 300}, id="naïve-日本", queue="other", priority=-3),
                NewJob("s", id="b", queue="other", max_attempts=7, input_revision=2),
                NewJob("s", id="c", queue="other", input_ref="s3://bucket/x"),
            ],
            now=T0,
        ),
        "other",
        10,
    ),
    "released before": (_released, "default", 1),
    "a job due later and a lease running": (
        lambda q: (
            applied(q.enqueue("s", id="later", delay_ms=60_000, now=T0)),
            applied(q.enqueue("s", id="held", now=T0)),
            claimed(q.claim_job("held", "w0", 600_000, now=T0)),
            applied(q.enqueue("s", id="j", now=T0)),
        ),
        "default",
        10,
    ),
}


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_a_plain_claim_writes_what_the_general_way_writes(pair: list[Quasar], shape: str) -> None:
    prepare, queue, limit = _SHAPES[shape]
    plain, general = pair
    for q in pair:
        prepare(q)
    one = _plain(plain, queue, limit, "c1")
    assert isinstance(one, ClaimsApplied) and one.claims, one
    assert one == _general(general, queue, limit, "c1")
    assert _comparable(plain) == _comparable(general)
    # sent again: both answer from the record, and change nothing
    assert _plain(plain, queue, limit, "c1") == _general(general, queue, limit, "c1")
    assert _comparable(plain) == _comparable(general)


def _spoil(key: Callable[[Quasar], str], value: Callable[[redis.Redis, str], Any]) -> Any:
    def damage(q: Quasar) -> None:
        k = key(q)
        q.redis.delete(k)
        value(q.redis, k)

    return damage


def _string(r: redis.Redis, k: str) -> Any:
    return r.set(k, "oops")


def _field(name: str, value: str | None) -> Any:
    """Job j's field ``name`` set to ``value`` (None: removed)."""

    def damage(q: Quasar) -> None:
        k = q.keys.job("j")
        if value is None:
            q.redis.hdel(k, name)
        else:
            q.redis.hset(k, name, value)

    return damage


#: Damage of each key a plain claim reads or writes, and of the fields of the job it would lease.
_DAMAGE: dict[str, Callable[[Quasar], Any]] = {
    "call record": _spoil(lambda q: f"{q.keys.root}call:c1", lambda r, k: r.hset(k, "f", "v")),
    "paused": _spoil(lambda q: q.keys.paused, _string),
    "flow": _spoil(lambda q: f"{q.keys.root}q:default:flow", _string),
    "delayed": _spoil(lambda q: q.keys.queue("default", "delayed"), _string),
    "delayed_pr": _spoil(lambda q: q.keys.queue("default", "delayed_pr"), _string),
    "leased": _spoil(lambda q: q.keys.queue("default", "leased"), _string),
    "ready": _spoil(lambda q: q.keys.queue("default", "ready"), _string),
    "events": _spoil(lambda q: q.keys.events, _string),
    "job hash": _spoil(lambda q: q.keys.job("j"), _string),
    "job gone": lambda q: q.redis.delete(q.keys.job("j")),
    "two entries of one job": lambda q: q.redis.zadd(
        q.keys.queue("default", "ready"), {b"\x00" * 11 + b"j": 0}
    ),
    "attempts not a number": _field("a", "x"),
    "sequence missing": _field("sq", None),
    "state unknown": _field("st", "Z"),
    "state leased": _field("st", "L"),
    "queue another": _field("q", "other"),
    "blocked": _field("pd", "1"),
    "due later": _field("at", str(T0 + 60_000)),
    "out of attempts": _field("a", "3"),
    "a deadline passed": _field("dl", str(T0 + 5)),
    "a group": _field("g", "g1"),
}


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_a_plain_claim_meeting_damage_answers_as_the_general_way(
    pair: list[Quasar], damage: str
) -> None:
    plain, general = pair
    for q in pair:
        q.enqueue_many([NewJob("s", id="j"), NewJob("s", id="k", priority=1)], now=T0)
        _DAMAGE[damage](q)
    before = _comparable(plain)
    assert before == _comparable(general)
    one = _plain(plain, "default", 10, "c1")
    assert one == _general(general, "default", 10, "c1")
    assert _comparable(plain) == _comparable(general)


def _finished(q: Quasar) -> None:
    applied(q.enqueue("s", id="done", now=T0))
    token = claimed(q.claim_job("done", "w0", 1_000, now=T0)).token
    applied(q.complete(token, "w0", now=T0 + 1))


#: States of a queue with no ready job, each made at T0, and whether a claim at NOW finds nothing
#: (else the general way promotes or expires what came due, and may lease it).
_EMPTY: dict[str, tuple[Callable[[Quasar], Any], bool]] = {
    "never used": (lambda q: None, True),
    "every job finished": (_finished, True),
    "a job due later": (
        lambda q: applied(q.enqueue("s", id="later", delay_ms=60_000, now=T0)),
        True,
    ),
    "a lease running": (
        lambda q: (
            applied(q.enqueue("s", id="held", now=T0)),
            claimed(q.claim_job("held", "w0", 600_000, now=T0)),
        ),
        True,
    ),
    "a job due later and a lease running sooner": (
        lambda q: (
            applied(q.enqueue("s", id="later", delay_ms=90_000, now=T0)),
            applied(q.enqueue("s", id="held", now=T0)),
            claimed(q.claim_job("held", "w0", 60_000, now=T0)),
        ),
        True,
    ),
    "a job come due": (lambda q: applied(q.enqueue("s", id="due", delay_ms=5, now=T0)), False),
    "a lease run out": (
        lambda q: (
            applied(q.enqueue("s", id="held", now=T0)),
            claimed(q.claim_job("held", "w0", 5, now=T0)),
        ),
        False,
    ),
    "paused": (lambda q: q.pause("default"), False),
    **{
        f"{name} damaged": (_DAMAGE[name], False)
        for name in (
            "call record",
            "paused",
            "flow",
            "delayed",
            "delayed_pr",
            "leased",
            "ready",
            "events",
        )
    },
}


@pytest.mark.parametrize("shape", sorted(_EMPTY))
def test_a_claim_of_an_empty_queue_answers_as_the_general_way(
    pair: list[Quasar], shape: str
) -> None:
    prepare, nothing = _EMPTY[shape]
    plain, general = pair
    for q in pair:
        prepare(q)
    assert _comparable(plain) == _comparable(general)
    one = _plain(plain, "default", 10, "c1")
    if nothing:
        assert isinstance(one, ClaimRefused) and isinstance(one.error, NothingClaimable), one
    assert one == _general(general, "default", 10, "c1")
    assert _comparable(plain) == _comparable(general)
    assert _plain(plain, "default", 10, "c1") == _general(general, "default", 10, "c1")
    assert _comparable(plain) == _comparable(general)


#: The commands of a plain claim (docs/redis-layout.md): its reads (the head of ready, the call
#: record, paused, the queue's flow, delayed_pr's type, the heads of delayed and leased, each job
#: it leases), then its writes (the event, ready, each job, leased, the call record). Counted
#: with the call itself (FCALL).
PLAIN = Counter(
    call=1, time=1, get=1, sismember=1, exists=1, zrange=4, hgetall=1, xadd=1, zrem=1, hset=1,
    zadd=1, set=1,
)  # fmt: skip
#: ... and of one that finds no ready job: its reads and the event stream's type.
EMPTY = Counter(call=1, time=1, get=1, sismember=1, exists=1, zrange=4, type=1)


def test_a_plain_claim_runs_its_reads_and_its_writes(counted: redis.Redis, namespace: str) -> None:
    q = Quasar(counted, namespace)
    applied(q.enqueue("warm", queue="warm"))  # (the library loaded, the server's policy read)
    claimed(q.claim("warm", "w", LEASE_MS))  # (Redis 6.2: the claim's script loaded too)
    applied(q.enqueue("s", id="j"))
    assert ran(counted, lambda: claimed(q.claim("default", "w", LEASE_MS))) == PLAIN
    assert ran(counted, lambda: q.claim("default", "w", LEASE_MS)) == EMPTY
    q.enqueue_many([NewJob("s", id=f"m{i}") for i in range(3)])
    three = Counter(hgetall=2, hset=2)
    assert ran(counted, lambda: q.claim_many("default", "w", LEASE_MS, 10)) == PLAIN + three
    # Work due before the jobs (a lease run out here) sends it the general way: its maintenance
    # reads (ZRANGEBYSCORE) come back.
    applied(q.enqueue("s", id="k"))
    token = claimed(q.claim("default", "w", 1)).token

    def server_ms() -> int:
        seconds, micros = counted.time()
        return int(seconds * 1000 + micros // 1000)

    wait_for(lambda: server_ms() > token.expires_at, 10, "the lease to run out")
    applied(q.enqueue("s", id="n"))
    assert ran(counted, lambda: q.claim("default", "w", LEASE_MS))["zrangebyscore"] >= 1
    # ... as does the claim with one argument more that this file compares the plain one with
    applied(q.enqueue("s", id="o"))
    general = ran(counted, lambda: _general(q, "default", 1, "c9"))
    assert general["zrangebyscore"] >= 1 and general["type"] >= 1
