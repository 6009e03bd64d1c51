"""expire, sweep, promote, cancel, operator retry, prune and inspection."""

from __future__ import annotations

import pytest

from quasar_redis import (
    CancelApplied,
    Cancelled,
    ErrorInfo,
    Failed,
    FenceChanged,
    InvalidArgument,
    JobRefused,
    LeaseHeld,
    MissingJob,
    NewJob,
    NotFailed,
    Quasar,
    RetryWaiting,
    StaleLease,
    Status,
    TerminalJob,
)
from quasar_redis._views import decode_event
from quasar_redis.cli._events import format_event

from .helpers import T0, applied, claimed, snapshot, where


def test_expire_recovers_a_run_out_lease(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    claim = claimed(q.claim_job("j", "w", 100, now=T0))
    fence = claim.job.fencing_version
    before = snapshot(q)
    assert q.expire("j", fence, now=T0 + 99) == JobRefused(LeaseHeld(T0 + 100))
    assert q.expire("j", fence + 1, now=T0 + 100) == JobRefused(FenceChanged())
    assert snapshot(q) == before
    job = applied(q.expire("j", fence, now=T0 + 100))
    assert job.state == RetryWaiting("worker lease expired", T0 + 100)
    assert job.error == ErrorInfo("LeaseExpired", "worker lease expired")
    assert where(q, "j") == {"retrying", "ready"}
    assert q.expire("j", fence, now=T0 + 100) == JobRefused(StaleLease())
    assert q.complete(claim.token, "w", now=T0 + 50) == JobRefused(StaleLease())


def test_expire_on_the_last_attempt_fails_and_refuses_terminal(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", max_attempts=1, now=T0))
    claimed(q.claim_job("j", "w", 100, now=T0))
    job = applied(q.expire("j", 1, now=T0 + 100))
    assert job.state == Failed("worker lease expired", T0 + 100)
    assert q.expire("j", 1, now=T0 + 100) == JobRefused(TerminalJob())
    assert q.expire("ghost", 1, now=T0) == JobRefused(MissingJob("ghost"))


def test_sweep_expires_every_run_out_lease_in_bounded_batches(q: Quasar) -> None:
    jobs = [NewJob("s", id=f"j{i}", queue=f"q{i % 3}") for i in range(7)]
    applied_batch = q.enqueue_many(jobs, now=T0)
    assert len(getattr(applied_batch, "jobs", ())) == 7
    for i in range(7):
        claimed(q.claim_job(f"j{i}", "w", 100 if i < 5 else 1000, now=T0))
    first = q.sweep_expired(limit=3, now=T0 + 100)
    second = q.sweep_expired(limit=3, now=T0 + 100)
    third = q.sweep_expired(limit=3, now=T0 + 100)
    assert (len(first.expired), len(second.expired), third.expired) == (3, 2, ())
    assert sorted(first.expired + second.expired) == [f"j{i}" for i in range(5)]
    for i in range(5, 7):
        assert where(q, f"j{i}", f"q{i % 3}") == {"leased"}


def test_promote_moves_due_jobs_to_ready(q: Quasar) -> None:
    for i in range(4):
        applied(q.enqueue("s", id=f"j{i}", delay_ms=10 * (i + 1), now=T0))
    assert q.promote_due(now=T0 + 25) == 2
    assert where(q, "j0") == {"ready"}
    assert where(q, "j2") == {"delayed"}
    assert q.promote_due(limit=1, now=T0 + 100) == 1


def test_cancel_checks_fence_and_terminal_and_cascades(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    applied(q.enqueue("s", id="c", dependencies=["b"], now=T0))
    applied(q.enqueue("s", id="other", now=T0))
    before = snapshot(q)
    assert q.cancel("a", expected_fence=3, now=T0) == JobRefused(FenceChanged())
    assert q.cancel("ghost", now=T0) == JobRefused(MissingJob("ghost"))
    assert snapshot(q) == before
    result = q.cancel("a", expected_fence=0, reason="not needed", now=T0 + 1)
    assert isinstance(result, CancelApplied)
    assert result.job.state == Cancelled("not needed", T0 + 1)
    assert sorted(result.cascaded) == ["b", "c"]
    b, c = q.get_job("b"), q.get_job("c")
    assert b is not None and c is not None
    assert b.job.state == Cancelled("dependency a was cancelled", T0 + 1)
    assert c.job.state == Cancelled("dependency b was cancelled", T0 + 1)
    assert where(q, "b") == {"cancelled"}
    assert q.cancel("a", now=T0 + 2) == JobRefused(TerminalJob())
    assert where(q, "other") == {"ready"}


def test_operator_retry(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", max_attempts=1, now=T0))
    assert q.retry("j", now=T0) == JobRefused(NotFailed())
    first = claimed(q.claim_job("j", "w", 100, now=T0))
    applied(q.fail(first.token, "w", "boom", now=T0 + 1))
    assert q.retry("j", expected_fence=0, now=T0 + 2) == JobRefused(FenceChanged())
    job = applied(q.retry("j", expected_fence=1, reason="fixed", now=T0 + 2))
    assert job.state == RetryWaiting("boom", T0 + 2)
    assert job.max_attempts == 2
    assert where(q, "j") == {"retrying", "ready"}
    second = claimed(q.claim("default", "w", 100, now=T0 + 2))
    assert second.token.nonce != first.token.nonce
    assert second.job.attempt == 2
    assert q.retry("ghost", now=T0) == JobRefused(MissingJob("ghost"))


def test_an_operator_retry_keeps_the_last_error_and_tells_its_reason(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", max_attempts=1, now=T0))
    token = claimed(q.claim_job("j", "w", 100, now=T0)).token
    applied(q.fail(token, "w", "boom", now=T0 + 1, kind="ValueError"))
    job = applied(q.retry("j", reason="fixed upstream", now=T0 + 2))
    assert job.error == ErrorInfo("ValueError", "boom")
    info = q.get_job("j", now=T0 + 2)
    assert info is not None and info.job.error == ErrorInfo("ValueError", "boom")
    assert [e.message for e in info.errors] == ["boom"]
    events = [e for entry in q.redis.xrange(q.keys.events) for e in decode_event(*entry)]
    assert [(e.event, e.message) for e in events][-1] == ("retryable", "fixed upstream")
    lines = [line for entry in q.redis.xrange(q.keys.events) for line in format_event(*entry)]
    assert lines[-1].endswith(' event=retryable queue=default attempt=1 message="fixed upstream"')


def finish(q: Quasar, job_id: str, now: int, *, fail: bool = False) -> None:
    token = claimed(q.claim_job(job_id, "w", 1000, now=now)).token
    if fail:
        applied(q.permanent_fail(token, "w", "x", now=now))
    else:
        applied(q.complete(token, "w", now=now))


def test_prune_by_age_and_count(q: Quasar) -> None:
    for i in range(6):
        applied(q.enqueue("s", id=f"j{i}", now=T0))
        finish(q, f"j{i}", T0 + i * 100)
    # never a job finished in the last 60 s (the re-send window): hence the 60 s added here
    assert q.prune(max_age_ms=0, now=T0 + 500) == 0
    assert q.prune(max_age_ms=60_250, now=T0 + 60_500) == 3  # finished at 0, 100, 200
    assert q.get_job("j2") is None
    assert q.get_job("j3") is not None
    assert q.prune(max_count=1, now=T0 + 60_500) == 2
    assert [j.id for j in q.list_jobs("default", Status.COMPLETED)] == ["j5"]
    assert q.redis.exists(q.keys.job("j3")) == 0


def test_prune_keeps_a_failed_job_a_blocked_job_waits_on(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", max_attempts=1, now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    applied(q.enqueue("s", id="x", max_attempts=1, now=T0))
    finish(q, "a", T0, fail=True)
    finish(q, "x", T0, fail=True)
    assert q.prune(max_age_ms=0, now=T0 + 60_010) == 1
    assert q.get_job("x") is None
    assert q.get_job("a") is not None
    q.cancel("b", now=T0 + 20)
    assert q.prune(max_age_ms=0, now=T0 + 60_030) == 2


def test_counts_and_pages_by_status(q: Quasar) -> None:
    applied(q.enqueue("s", id="avail", now=T0))
    applied(q.enqueue("s", id="sched", delay_ms=100, now=T0))
    applied(q.enqueue("s", id="blocked", dependencies=["sched"], now=T0))
    applied(q.enqueue("s", id="exec", priority=-1, now=T0))
    applied(q.enqueue("s", id="done", priority=-2, now=T0))
    applied(q.enqueue("s", id="retry", priority=-3, now=T0))
    applied(q.enqueue("s", id="dead", priority=-4, max_attempts=1, now=T0))
    applied(q.enqueue("s", id="gone", now=T0))
    applied(q.enqueue("s", id="late", deadline=T0 + 1, now=T0 - 1))
    finish(q, "dead", T0, fail=True)
    token = claimed(q.claim_job("retry", "w", 100, now=T0)).token
    applied(q.fail(token, "w", "x", retry_delay_ms=10, now=T0))
    finish(q, "done", T0)
    claimed(q.claim_job("exec", "w", 100, now=T0))
    q.cancel("gone", now=T0)
    assert q.sweep_expired(now=T0 + 1).past_deadline == ("late",)
    counts = q.counts("default", now=T0)
    assert counts.by_status() == {
        Status.AVAILABLE: 1,
        Status.SCHEDULED: 1,
        Status.RETRYABLE: 1,
        Status.EXECUTING: 1,
        Status.COMPLETED: 1,
        Status.DISCARDED: 1,
        Status.CANCELLED: 1,
        Status.BLOCKED: 1,
        Status.EXPIRED: 1,
    }
    pages = {s: [j.id for j in q.list_jobs("default", s, now=T0)] for s in Status}
    assert pages[Status.AVAILABLE] == ["avail"]
    assert pages[Status.SCHEDULED] == ["sched"]
    assert pages[Status.RETRYABLE] == ["retry"]
    assert pages[Status.EXECUTING] == ["exec"]
    assert pages[Status.DISCARDED] == ["dead"]
    assert pages[Status.BLOCKED] == ["blocked"]
    assert pages[Status.EXPIRED] == ["late"]
    assert [j.id for j in q.list_jobs("default", "blocked", now=T0)] == ["blocked"]
    assert q.list_jobs("default", Status.AVAILABLE, offset=1, now=T0) == []
    for status in Status:
        assert all(j.status(T0) is status for j in q.list_jobs("default", status, now=T0)), status


def test_a_job_blocked_by_a_failed_dependency_shows_as_blocked(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", max_attempts=1, now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    finish(q, "a", T0, fail=True)
    info = q.get_job("b", now=T0 + 10)
    assert info is not None and info.status is Status.BLOCKED and info.waiting_on == "a"
    counts = q.counts("default", now=T0 + 10)
    assert (counts.available, counts.blocked, counts.discarded) == (0, 1, 1)


def test_inspection_refuses_bad_arguments(q: Quasar) -> None:
    with pytest.raises(InvalidArgument, match="unknown status"):
        q.list_jobs("default", "sleeping")
    with pytest.raises(InvalidArgument, match="limit"):
        q.list_jobs("default", Status.AVAILABLE, limit=0)
    with pytest.raises(InvalidArgument, match="queue"):
        q.counts("bad queue")
    with pytest.raises(InvalidArgument, match="limit"):
        q.sweep_expired(limit=0)
    with pytest.raises(InvalidArgument, match="max_age"):
        q.prune(max_age_ms=-1)
    assert q.get_job("nope") is None


def test_waiting_on_is_empty_once_dependencies_succeeded_even_if_pruned(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], delay_ms=1000, now=T0))
    finish(q, "a", T0)
    assert q.prune(max_age_ms=0, now=T0 + 60_001) == 1
    info = q.get_job("b", now=T0 + 1)
    assert info is not None
    assert (info.waiting_on, info.status) == (None, Status.SCHEDULED)


def test_pages_longer_than_one_read_chunk(q: Quasar) -> None:
    q.enqueue_many([NewJob("s", id=f"j{i:03d}") for i in range(250)], now=T0)
    for i in range(250):
        finish(q, f"j{i:03d}", T0 + i)
    page = q.list_jobs("default", Status.COMPLETED, offset=20, limit=200, now=T0 + 300)
    assert [j.id for j in page] == [f"j{i:03d}" for i in range(20, 220)]
    waiting = q.list_jobs("default", Status.COMPLETED, offset=240, limit=100, now=T0 + 300)
    assert len(waiting) == 10
    q.enqueue_many([NewJob("s", id=f"w{i:03d}") for i in range(150)], now=T0)
    available = q.list_jobs("default", Status.AVAILABLE, offset=120, limit=50, now=T0 + 300)
    assert [j.id for j in available] == [f"w{i:03d}" for i in range(120, 150)]


def test_a_retry_whose_time_has_come_is_available_as_a_claim_sees_it(q: Quasar) -> None:
    applied(q.enqueue("s", id="later", max_attempts=2, now=T0))
    applied(q.enqueue("s", id="now", max_attempts=2, now=T0))
    for job_id, delay in (("later", 1000), ("now", 0)):
        token = claimed(q.claim_job(job_id, "w", 100, now=T0)).token
        applied(q.fail(token, "w", "boom", retry_delay_ms=delay, now=T0 + 1))

    def shown(now: int) -> tuple[dict[str, list[str]], dict[str, int]]:
        listed = {
            s: [j.id for j in q.list_jobs("default", s, now=now)]
            for s in (Status.AVAILABLE, Status.RETRYABLE)
        }
        counts = q.counts("default", now=now)
        return (
            {s.value: ids for s, ids in listed.items()},
            {"available": counts.available, "retryable": counts.retryable},
        )

    assert shown(T0 + 500) == (
        {"available": ["now"], "retryable": ["later"]},
        {"available": 1, "retryable": 1},
    )
    assert q.get_job("later", now=T0 + 500).status is Status.RETRYABLE  # type: ignore[union-attr]
    assert shown(T0 + 1001) == (
        {"available": ["now", "later"], "retryable": []},
        {"available": 2, "retryable": 0},
    )
    assert q.get_job("later", now=T0 + 1001).status is Status.AVAILABLE  # type: ignore[union-attr]
    assert isinstance(q.get_job("later", now=T0 + 1001).job.state, RetryWaiting)  # type: ignore[union-attr]
    first = claimed(q.claim("default", "w", 100, now=T0 + 1001))
    second = claimed(q.claim("default", "w", 100, now=T0 + 1001))
    assert {first.job.id, second.job.id} == {"now", "later"}
