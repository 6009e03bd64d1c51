"""Re-sent calls (the same Call, so the same call id): the first outcome again, nothing more.

The dropped-connection tests prove this through a real cut link; these prove it for every
transition directly, including when another call moved the job in between.
"""

from __future__ import annotations

from quasar_redis import (
    BatchApplied,
    CancelApplied,
    ClaimApplied,
    ClaimsApplied,
    DuplicateJob,
    InvalidJob,
    JobApplied,
    JobRefused,
    NewJob,
    Quasar,
    RetryWaiting,
    StaleLease,
)

from .helpers import T0, applied, claimed, snapshot


def test_resent_enqueue_is_applied_even_after_the_job_moved(q: Quasar) -> None:
    call = q.calls.enqueue(NewJob("s", id="j"), T0)
    first = q.execute(call)
    assert isinstance(first, JobApplied)
    claimed(q.claim("default", "w", 100, now=T0))
    again = q.execute(call)
    assert isinstance(again, JobApplied)
    assert again.job.id == "j"
    assert again.job.attempt == 1  # the job as it is now, not a second job


def test_resent_batch_enqueue(q: Quasar) -> None:
    call = q.calls.enqueue_many([NewJob("s", id="a"), NewJob("s", id="b", dependencies=["a"])], T0)
    assert isinstance(q.execute(call), BatchApplied)
    before = snapshot(q)
    again = q.execute(call)
    assert isinstance(again, BatchApplied)
    assert [j.id for j in again.jobs] == ["a", "b"]
    assert snapshot(q) == before


def test_resent_claim_by_queue_leases_nothing_more_and_returns_the_same_tokens(q: Quasar) -> None:
    for i in range(4):
        applied(q.enqueue("s", id=f"j{i}", now=T0))
    call = q.calls.claim_many("default", "w", 1000, 2, T0)
    first = q.execute(call)
    assert isinstance(first, ClaimsApplied)
    before = snapshot(q)
    again = q.execute(call)
    assert isinstance(again, ClaimsApplied)
    assert [c.token for c in again.claims] == [c.token for c in first.claims]
    assert snapshot(q) == before


def test_resent_claim_job_and_heartbeat_return_the_same_token(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    call = q.calls.claim_job("j", "w", 1000, T0)
    first = q.execute(call)
    assert isinstance(first, ClaimApplied)
    assert q.execute(call) == first
    beat = q.calls.heartbeat(first.claim.token, "w", 5000, T0 + 10)
    renewed = q.execute(beat)
    assert isinstance(renewed, ClaimApplied)
    before = snapshot(q)
    again = q.execute(beat)
    assert isinstance(again, ClaimApplied)
    assert again.claim.token == renewed.claim.token
    assert snapshot(q) == before


def test_resent_complete_is_not_stale(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    token = claimed(q.claim_job("a", "w", 1000, now=T0)).token
    call = q.calls.complete(token, "w", "inline", {"r": 1}, T0 + 1)
    assert isinstance(q.execute(call), JobApplied)
    before = snapshot(q)
    again = q.execute(call)
    assert isinstance(again, JobApplied)
    assert again.job.result == {"r": 1}
    assert snapshot(q) == before
    fresh = q.complete(token, "w", now=T0 + 1)  # a new call with the old token
    assert fresh == JobRefused(StaleLease())


def test_resent_fail_after_another_worker_took_the_job(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w1", 1000, now=T0)).token
    call = q.calls.fail(token, "w1", "flaky", 0, "Error", T0 + 1)
    assert isinstance(q.execute(call), JobApplied)
    claimed(q.claim("default", "w2", 1000, now=T0 + 2))
    again = q.execute(call)
    assert isinstance(again, JobApplied)
    assert again.job.attempt == 2  # read now: the second worker holds it


def test_resent_permanent_fail_retry_expire_and_cancel(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    token = claimed(q.claim_job("j", "w", 100, now=T0)).token
    pf = q.calls.permanent_fail(token, "w", "bad", "Error", T0 + 1)
    assert isinstance(q.execute(pf), JobApplied)
    retry = q.calls.retry("j", 1, "again", T0 + 2)
    first_retry = q.execute(retry)
    assert isinstance(first_retry, JobApplied)
    assert isinstance(q.execute(pf), JobApplied)  # not NotFailed... nor anything else
    assert q.execute(retry) == first_retry
    claimed(q.claim_job("j", "w", 100, now=T0 + 2))
    expire = q.calls.expire("j", 2, T0 + 200)
    expired = q.execute(expire)
    assert isinstance(expired, JobApplied)
    assert isinstance(expired.job.state, RetryWaiting)
    assert q.execute(expire) == expired
    applied(q.enqueue("s", id="child", dependencies=["j"], now=T0))
    cancel = q.calls.cancel("j", None, "stop", T0 + 300)
    first_cancel = q.execute(cancel)
    assert isinstance(first_cancel, CancelApplied)
    assert first_cancel.cascaded == ("child",)
    assert q.execute(cancel) == first_cancel


def test_resent_enqueues_within_the_window_find_their_jobs(q: Quasar) -> None:
    single = q.calls.enqueue(NewJob("s", id="one"), T0)
    each = q.calls.enqueue_each([NewJob("s", id="two")], T0)
    assert isinstance(q.execute(single), JobApplied)
    assert isinstance(q.execute(each)[0], JobApplied)
    for job_id in ("one", "two"):
        token = claimed(q.claim_job(job_id, "w", 100, now=T0)).token
        applied(q.complete(token, "w", now=T0))
    assert q.prune(max_age_ms=0, now=T0 + 10) == 0  # finished inside the re-send window
    before = snapshot(q)
    assert isinstance(q.execute(single), JobApplied)
    assert isinstance(q.execute(each)[0], JobApplied)
    assert snapshot(q) == before  # found by the call id they keep, not enqueued again
    assert q.prune(max_age_ms=0, now=T0 + 60_001) == 2


def test_enqueue_each_refused_whole_answers_every_job(q: Quasar) -> None:
    results = q.enqueue_each([NewJob("s"), NewJob("s"), NewJob("s")], now=-1)
    assert results == [JobRefused(InvalidJob("now must be a nonnegative integer"))] * 3


def test_a_made_id_needs_no_call_field_and_a_chosen_one_keeps_it(q: Quasar) -> None:
    made = q.calls.enqueue(NewJob("s"), T0)  # the client makes the id at random
    first = q.execute(made)
    assert isinstance(first, JobApplied)
    assert q.redis.hget(q.keys.job(first.job.id), "ec") is None
    before = snapshot(q)
    again = q.execute(made)
    assert again == first  # found as this call's job, not refused as a duplicate
    assert snapshot(q) == before
    chosen = q.calls.enqueue(NewJob("s", id="mine"), T0)
    assert isinstance(q.execute(chosen), JobApplied)
    assert q.redis.hget(q.keys.job("mine"), "ec") == str(chosen.args[0]).encode()
    assert q.execute(chosen) == q.execute(chosen)
    other = q.execute(q.calls.enqueue(NewJob("s", id="mine"), T0))  # another call, same id
    assert other == JobRefused(DuplicateJob("mine"))
