"""Data no script of ours wrote: a typed exception, never a Lua traceback, nothing half-written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from quasar_redis import (
    ClaimsApplied,
    Complete,
    CorruptJobError,
    CorruptKeyError,
    NewJob,
    Quasar,
    Succeeded,
)

from .helpers import T0, applied, claimed, snapshot


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda q: q.redis.hdel(q.keys.job("j"), "s"), "field 's' is missing"),
        (lambda q: q.redis.hdel(q.keys.job("j"), "sq"), "field 'sq' is missing"),
        (lambda q: q.redis.hset(q.keys.job("j"), "a", "one"), "field 'a' is not an integer"),
        (lambda q: q.redis.hset(q.keys.job("j"), "f", "1.5"), "field 'f' is not an integer"),
        (lambda q: q.redis.hset(q.keys.job("j"), "st", "Z"), "unknown state"),
        (lambda q: q.redis.hdel(q.keys.job("j"), "at"), "field 'at' is not an integer"),
        (lambda q: q.redis.hset(q.keys.job("j"), "q", "{bad}"), "not a valid queue name"),
        (
            lambda q: (q.redis.delete(q.keys.job("j")), q.redis.set(q.keys.job("j"), "x")),
            "holds a string, not a hash",
        ),
    ],
)
def test_damaged_job_hash_raises_typed_error_and_changes_nothing(
    q: Quasar, damage: object, says: str
) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    damage(q)  # type: ignore[operator]
    before = snapshot(q)
    for call in (
        lambda: q.claim_job("j", "w", 100, now=T0),
        lambda: q.cancel("j", now=T0),
        lambda: q.expire("j", 0, now=T0),
        lambda: q.get_job("j"),
        lambda: q.enqueue("s", id="k", dependencies=["j"], now=T0),
    ):
        with pytest.raises(CorruptJobError, match=says) as info:
            call()
        assert info.value.job_id == "j"
    assert snapshot(q) == before


def test_damaged_dependent_stops_completion_before_any_write(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    token = claimed(q.claim_job("a", "w", 100, now=T0)).token
    q.redis.hset(q.keys.job("b"), "pd", "many")
    before = snapshot(q)
    with pytest.raises(CorruptJobError, match="field 'pd'"):
        q.complete(token, "w", now=T0 + 1)
    assert snapshot(q) == before


def test_queue_key_of_the_wrong_type_raises_and_changes_nothing(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    q.redis.delete(q.keys.queue("default", "leased"))
    q.redis.set(q.keys.queue("default", "leased"), "oops")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match="holds a string, expected a zset"):
        q.claim("default", "w", 100, now=T0)
    with pytest.raises(CorruptKeyError):
        q.claim_job("j", "w", 100, now=T0)
    assert snapshot(q) == before
    # An enqueue checks the keys it writes, and only those: the leased index is none of them.
    applied(q.enqueue("s", id="new", now=T0))
    q.redis.delete(q.keys.queue("default", "ready"))
    q.redis.set(q.keys.queue("default", "ready"), "oops")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match=r"ready.*holds a string, expected a zset"):
        q.enqueue_many([NewJob("s", id="newer")], now=T0)
    assert snapshot(q) == before
    wake, delayed = q.keys.wake("other"), q.keys.queue("other", "delayed")
    for key, kind, later in ((wake, "list", None), (delayed, "zset", T0 + 1000)):
        q.redis.set(key, "oops")
        before = snapshot(q)
        with pytest.raises(CorruptKeyError, match=f"holds a string, expected a {kind}"):
            q.enqueue("s", id="x", queue="other", available_at=later, now=T0)
        assert snapshot(q) == before
        q.redis.delete(key)


def test_a_leased_job_missing_a_field_every_job_has_refuses_its_holder(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w", 1000, now=T0)).token
    q.redis.hdel(q.keys.job("j"), "sq")  # read when the job goes back to the ready index
    before = snapshot(q)
    for call in (
        lambda: q.fail(token, "w", "boom", now=T0 + 1),
        lambda: q.fail(token, "w", "boom", retry_delay_ms=50, now=T0 + 1),
        lambda: q.complete(token, "w", now=T0 + 1),
        lambda: q.release(token, "w", now=T0 + 1),
        lambda: q.heartbeat(token, "w", 1000, now=T0 + 1),
    ):
        with pytest.raises(CorruptJobError, match="field 'sq' is missing"):
            call()
    assert snapshot(q) == before


def test_sweep_reports_a_damaged_leased_job_and_leaves_it(q: Quasar) -> None:
    applied(q.enqueue("s", id="ok", now=T0))
    applied(q.enqueue("s", id="bad", now=T0))
    claimed(q.claim_job("ok", "w", 10, now=T0))
    claimed(q.claim_job("bad", "w", 10, now=T0))
    q.redis.hdel(q.keys.job("bad"), "n")
    report = q.sweep_expired(now=T0 + 10)
    assert report.expired == ("ok",)
    assert report.damaged == ("bad",)
    assert q.redis.hget(q.keys.job("bad"), "st") == b"L"


def test_a_damaged_job_does_not_stop_a_claim_of_the_others(q: Quasar) -> None:
    applied(q.enqueue("s", id="good", priority=1, now=T0))
    applied(q.enqueue("s", id="bad", priority=0, now=T0))
    applied(q.enqueue("s", id="also", priority=2, now=T0))
    q.redis.hset(q.keys.job("bad"), "a", "x")
    result = q.claim_many("default", "w", 100, 2, now=T0)
    assert [c.job.id for c in getattr(result, "claims", ())] == ["good", "also"]
    assert q.redis.hget(q.keys.job("bad"), "st") == b"W"
    with pytest.raises(CorruptJobError, match="field 'a'"):
        q.claim("default", "w", 100, now=T0)  # only the damaged one is left


def test_a_completion_checks_the_keys_it_writes_and_only_those(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w", 1000, now=T0)).token
    q.redis.set(q.keys.queue("default", "succeeded"), "oops")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match=r"succeeded.*holds a string, expected a zset"):
        q.complete(token, "w", now=T0 + 1)
    assert snapshot(q) == before
    report = q.report_many("w", [Complete(token)], now=T0 + 1)
    assert isinstance(report[0], CorruptKeyError)

    def without_records(keys: dict[str, object]) -> dict[str, object]:
        return {k: v for k, v in keys.items() if ":call:" not in k}  # a report keeps its record

    assert without_records(snapshot(q)) == without_records(before)
    q.redis.delete(q.keys.queue("default", "succeeded"))
    q.redis.set(q.keys.queue("default", "delayed"), "oops")  # not a key a completion writes
    assert applied(q.complete(token, "w", now=T0 + 1)).state == Succeeded("inline", T0 + 1)


def test_a_claim_checks_the_keys_it_reads_and_writes_before_writing(q: Quasar) -> None:
    def spoil(what: str) -> None:
        q.redis.delete(q.keys.queue("default", what))
        q.redis.set(q.keys.queue("default", what), "oops")

    def heal(what: str) -> None:
        q.redis.delete(q.keys.queue("default", what))

    def claimed_ids(now: int) -> list[str]:
        result = q.claim_many("default", "w", 100, 10, now=now)
        assert isinstance(result, ClaimsApplied), result
        return [c.job.id for c in result.claims]

    def refused(what: str, now: int) -> None:
        before = snapshot(q)
        with pytest.raises(CorruptKeyError, match=rf"{what}.*holds a string, expected a zset"):
            q.claim_many("default", "w", 100, 10, now=now)
        assert snapshot(q) == before

    applied(q.enqueue("s", id="j", now=T0))
    # Read by every claim: the ready, delayed and leased indexes.
    for what in ("ready", "delayed", "leased"):
        spoil(what)
        refused(what, T0)
        heal(what)
    q.redis.delete(q.keys.queue("default", "ready"))  # (healing ready dropped j's entry)
    q.redis.delete(q.keys.job("j"))
    # Keys a claim does not write do not stop it: a finished job's index, the blocked one.
    applied(q.enqueue("s", id="a", now=T0))
    for what in ("succeeded", "failed", "cancelled", "blocked", "retrying"):
        spoil(what)
    assert claimed_ids(T0) == ["a"]
    # ... until the claim is about to write one: a run-out lease may go anywhere, so every key
    # of the queue is checked (the first bad one is named).
    refused("retrying", T0 + 100)
    for what in ("succeeded", "failed", "cancelled", "blocked", "retrying"):
        heal(what)
    # A retrying job leaves the retrying index: it is skipped (a waiting one is still claimed),
    # and the claim refuses when nothing else was claimable.
    expired = q.sweep_expired(now=T0 + 100)
    assert expired.expired == ("a",)
    spoil("retrying")
    applied(q.enqueue("s", id="b", priority=5, now=T0))
    assert claimed_ids(T0 + 200) == ["b"]
    assert q.redis.hget(q.keys.job("a"), "st") == b"R"
    refused("retrying", T0 + 200)
    heal("retrying")
    q.redis.zadd(q.keys.queue("default", "retrying"), {"a": T0 + 100})
    assert claimed_ids(T0 + 200) == ["a"]
    # A due delayed job is promoted first, which pushes a wake-up token: the wake list is checked
    # before the promotion writes anything.
    applied(q.enqueue("s", id="later", delay_ms=50, now=T0 + 200))
    wake = q.keys.wake("default")
    q.redis.delete(wake)
    q.redis.hset(wake, "x", "1")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match=r"wake.*holds a hash, expected a list"):
        q.claim_many("default", "w", 100, 10, now=T0 + 300)
    assert snapshot(q) == before
    q.redis.delete(wake)
    assert "later" in claimed_ids(T0 + 300)  # (with the leases run out since)


def test_a_heartbeat_checks_the_lease_index_only(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w", 1000, now=T0)).token
    q.redis.set(q.keys.queue("default", "succeeded"), "oops")  # not a key a heartbeat writes
    token = claimed(q.heartbeat(token, "w", 5000, now=T0 + 1)).token
    assert token.expires_at == T0 + 5001
    q.redis.delete(q.keys.queue("default", "leased"))
    q.redis.set(q.keys.queue("default", "leased"), "oops")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match=r"leased.*holds a string, expected a zset"):
        q.heartbeat(token, "w", 5000, now=T0 + 2)
    assert snapshot(q) == before


def _everything(q: Quasar) -> dict[str, Any]:
    """snapshot(q), lists and streams whole, and which keys expire."""
    out = snapshot(q)
    for key, (kind, _) in out.items():
        if kind == "list":
            out[key] = (kind, q.redis.lrange(key, 0, -1))
        elif kind == "stream":
            out[key] = (kind, q.redis.xrange(key))
        out[key] += (q.redis.pttl(key) == -1,)
    return out


#: Each key a plain enqueue writes (docs/redis-layout.md): how to damage it (a value of another
#: type), the type it must hold, and what job writes it.
_PLAIN_WRITES: dict[str, tuple[Callable[[Quasar], str], str, dict[str, Any]]] = {
    "seq": (lambda q: q.keys.seq, "string", {}),
    "queues": (lambda q: q.keys.queues, "set", {}),
    "ready": (lambda q: q.keys.queue("default", "ready"), "zset", {}),
    "wake": (lambda q: q.keys.wake("default"), "list", {}),
    "events": (lambda q: q.keys.events, "stream", {}),
    "delayed": (lambda q: q.keys.queue("default", "delayed"), "zset", {"delay_ms": 60_000}),
    "delayed_pr": (lambda q: q.keys.queue("default", "delayed_pr"), "zset", {"delay_ms": 60_000}),
    "deadlines": (
        lambda q: q.keys.queue("default", "deadlines"),
        "zset",
        {"expires_in_ms": 3_600_000},
    ),
}


@pytest.mark.parametrize("history", ["new", "used"])
@pytest.mark.parametrize("damaged", sorted(_PLAIN_WRITES))
def test_a_plain_enqueue_finds_each_damaged_key_it_writes_and_takes_its_writes_back(
    q: Quasar, damaged: str, history: str
) -> None:
    # No TYPE is asked on this path: the write that meets the key fails, and the writes before
    # it are taken back (a new namespace: the keys they made are gone again).
    if history == "used":
        applied(q.enqueue("s", id="before"))
        applied(q.enqueue("s", id="later", delay_ms=60_000, expires_in_ms=3_600_000))
    key_of, kind, job = _PLAIN_WRITES[damaged]
    key = key_of(q)
    q.redis.delete(key)
    if kind == "string":
        q.redis.hset(key, "f", "v")
    else:
        q.redis.set(key, "oops")
    says = f"holds a {'hash' if kind == 'string' else 'string'}, expected a {kind}"
    before = _everything(q)
    with pytest.raises(CorruptKeyError, match=says):
        q.enqueue("s", id="j", **job)  # (the asyncio client's: coalesced, mode "each")
    assert _everything(q) == before
    with pytest.raises(CorruptKeyError, match=says):
        q.enqueue("s", **job, now=T0 + 10**9)  # (a random id; mode "all" on both clients)
    assert _everything(q) == before
    with pytest.raises(CorruptKeyError, match=says):
        q.enqueue_each([NewJob("s", id="j", **job)])
    assert _everything(q) == before
    q.redis.delete(key)  # repaired: the same call applies
    applied(q.enqueue("s", id="j", **job))
