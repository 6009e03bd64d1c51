"""release (lua/release.lua), the event stream and the wake lists idle workers block on."""

from __future__ import annotations

from typing import Any

from quasar_redis import (
    BatchApplied,
    InvalidJob,
    JobRefused,
    LeaseExpired,
    NewJob,
    Quasar,
    StaleLease,
    Status,
    Waiting,
)
from quasar_redis.cli._events import format_event

from .helpers import T0, applied, claimed, snapshot, where


def events(q: Quasar) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for _, fields in q.redis.xrange(q.keys.events):
        # An entry lists a run of jobs with the same event, space-separated.
        out.extend((job, fields[b"ev"].decode()) for job in fields[b"job"].decode().split(" "))
    return out


def test_release_hands_the_job_back_without_using_an_attempt(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", max_attempts=1, now=T0))
    token = claimed(q.claim_job("j", "w", 100, now=T0)).token
    before = snapshot(q)
    bad_delay = q.release(token, "w", delay_ms=-1, now=T0 + 1)
    assert bad_delay == JobRefused(InvalidJob("delay must be nonnegative"))
    assert q.release(token, "other", now=T0 + 1) == JobRefused(StaleLease())
    assert q.release(token, "w", now=T0 + 100) == JobRefused(LeaseExpired(T0 + 100))
    assert snapshot(q) == before
    job = applied(q.release(token, "w", delay_ms=50, now=T0 + 1))
    assert job.state == Waiting(T0 + 51)
    assert (job.attempt, job.fencing_version) == (0, 1)
    assert where(q, "j") == {"delayed"}
    again = claimed(q.claim("default", "w", 100, now=T0 + 51))
    assert (again.job.attempt, again.job.fencing_version) == (1, 2)
    assert q.complete(token, "w", now=T0 + 52) == JobRefused(StaleLease())


def test_every_state_change_is_an_event(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    token = claimed(q.claim_job("a", "w", 100, now=T0)).token
    token = claimed(q.heartbeat(token, "w", 100, now=T0 + 1)).token
    applied(q.fail(token, "w", "x", now=T0 + 2))
    token = claimed(q.claim_job("a", "w", 100, now=T0 + 2)).token
    applied(q.release(token, "w", now=T0 + 3))
    token = claimed(q.claim_job("a", "w", 100, now=T0 + 3)).token
    applied(q.permanent_fail(token, "w", "bad", now=T0 + 4))
    applied(q.retry("a", now=T0 + 5))
    q.cancel("a", now=T0 + 6)
    assert events(q) == [
        ("a", "available"),
        ("b", "blocked"),
        ("a", "executing"),
        ("a", "retryable"),
        ("a", "executing"),
        ("a", "available"),
        ("a", "executing"),
        ("a", "discarded"),
        ("a", "retryable"),
        ("a", "cancelled"),
        ("b", "cancelled"),
    ]
    _, fields = q.redis.xrange(q.keys.events)[-1]
    assert fields[b"q"] == b"default"


def test_an_event_names_the_status_the_job_enters(q: Quasar) -> None:
    """Every event name is a status (``Status``): a job's status changes with an event, but for
    a scheduled job coming due, which the clock does."""
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="later", delay_ms=50, now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a", "later"], now=T0))
    token = claimed(q.claim_job("a", "w", 100, now=T0)).token
    applied(q.release(token, "w", delay_ms=10, now=T0 + 1))
    token = claimed(q.claim_job("a", "w", 100, now=T0 + 11)).token
    applied(q.complete(token, "w", now=T0 + 12))  # b waits on `later` still: no event
    token = claimed(q.claim_job("later", "w", 100, now=T0 + 50)).token
    applied(q.complete(token, "w", now=T0 + 51))  # b's last dependency: b is available
    assert events(q) == [
        ("a", "available"),
        ("later", "scheduled"),
        ("b", "blocked"),
        ("a", "executing"),
        ("a", "scheduled"),
        ("a", "executing"),
        ("a", "completed"),
        ("later", "executing"),
        ("later", "completed"),
        ("b", "available"),
    ]
    assert {name for _, name in events(q)} <= {status.value for status in Status}


def test_a_run_of_the_same_event_in_one_call_is_one_entry(q: Quasar) -> None:
    batch = [NewJob("s", id=i, queue="mail") for i in ("a", "b", "c")]
    assert q.enqueue_many(batch, now=T0, ids_only=True).ids == ("a", "b", "c")  # type: ignore[union-attr]
    claims = q.claim_many("mail", "w", 100, 2, now=T0)
    assert [c.job.id for c in claims.claims] == ["a", "b"]  # type: ignore[union-attr]
    entries = [fields for _, fields in q.redis.xrange(q.keys.events)]
    assert entries == [
        {b"job": b"a b c", b"ev": b"available", b"q": b"mail", b"a": b"0 0 0"},
        {b"job": b"a b", b"ev": b"executing", b"q": b"mail", b"a": b"1 1"},
    ]
    lines = [line for entry in q.redis.xrange(q.keys.events) for line in format_event(*entry)]
    assert [line.split(" ", 1)[1] for line in lines] == [
        "job=a event=available queue=mail attempt=0",
        "job=b event=available queue=mail attempt=0",
        "job=c event=available queue=mail attempt=0",
        "job=a event=executing queue=mail attempt=1",
        "job=b event=executing queue=mail attempt=1",
    ]


def test_the_stream_keeps_about_ten_thousand_job_changes_not_entries(q: Quasar) -> None:
    # An entry lists a whole batch's changes, so a cap of 10,000 entries would hold ten million
    # of them (some 200 MB): each append trims to 10,000 / (the changes in its entry) entries.
    for batch in range(15):
        jobs = [NewJob("s", id=f"b{batch}-{i}") for i in range(1000)]
        assert type(q.enqueue_many(jobs, now=T0)) is BatchApplied
    entries = q.redis.xrange(q.keys.events)
    held = [job for _, fields in entries for job in fields[b"job"].decode().split(" ")]
    assert len(held) <= 11_000 and len(entries) <= 11, (len(held), len(entries))
    assert held[-1] == "b14-999"  # the newest are kept
    for i in range(3):  # single changes: one entry each, many of them kept
        applied(q.enqueue("s", id=f"one{i}", now=T0))
    assert len(q.redis.xrange(q.keys.events)) >= 3


def test_events_can_be_turned_off(redis_client: Any, namespace: str) -> None:
    q = Quasar(redis_client, namespace, events=False)
    applied(q.enqueue("s", id="a", now=T0))
    assert q.redis.exists(q.keys.events) == 0


def test_enqueue_and_promotion_wake_idle_workers_at_most_16_tokens_a_call(q: Quasar) -> None:
    wake = q.keys.wake("default")
    applied(q.enqueue("s", id="later", delay_ms=100, now=T0))
    assert q.redis.llen(wake) == 0
    applied(q.enqueue("s", id="now", now=T0))
    assert q.redis.llen(wake) == 1
    assert q.promote_due(now=T0 + 100) == 1
    assert q.redis.llen(wake) == 2
    q.enqueue_many([NewJob("s") for _ in range(40)], now=T0)
    assert q.redis.llen(wake) == 18  # (16 for the 40 jobs)
    q.enqueue_many([NewJob("s") for _ in range(40)], now=T0)
    assert q.redis.llen(wake) == 16  # (34 nobody took: past 32, trimmed to the last 16)
    assert q.redis.llen(q.keys.wake("other")) == 0
