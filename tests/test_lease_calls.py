"""complete, fail, permanent_fail, heartbeat: the lease check and each edge."""

from __future__ import annotations

import dataclasses

import pytest

from quasar_redis import (
    Cancelled,
    ClaimRefused,
    ErrorInfo,
    Failed,
    InvalidJob,
    JobRefused,
    Leased,
    LeaseExpired,
    LeaseToken,
    MissingJob,
    Quasar,
    RetryWaiting,
    StaleLease,
    Status,
    Succeeded,
    Waiting,
)

from .helpers import T0, applied, claimed, snapshot, where


def lease(q: Quasar, job_id: str = "j", lease_ms: int = 1000, **opts: object) -> LeaseToken:
    applied(q.enqueue("s", id=job_id, now=T0, **opts))  # type: ignore[arg-type]
    return claimed(q.claim_job(job_id, "w", lease_ms, now=T0)).token


def test_complete_succeeds_and_stores_the_result(q: Quasar) -> None:
    token = lease(q)
    job = applied(q.complete(token, "w", result={"ok": [1, 2]}, output_ref="s3://x", now=T0 + 5))
    assert job.state == Succeeded("s3://x", T0 + 5)
    assert job.completed_at == T0 + 5
    assert job.result == {"ok": [1, 2]}
    assert job.status(T0) is Status.COMPLETED
    assert where(q, "j") == {"succeeded"}


def test_complete_releases_dependents_whose_dependencies_all_succeeded(q: Quasar) -> None:
    ta = lease(q, "a")
    applied(q.enqueue("s", id="b", now=T0))
    tb = claimed(q.claim_job("b", "w", 1000, now=T0)).token
    applied(q.enqueue("s", id="c", dependencies=["a", "b"], now=T0))
    applied(q.complete(ta, "w", now=T0 + 1))
    info = q.get_job("c", now=T0 + 1)
    assert info is not None
    assert (info.job.pending_dependencies, info.waiting_on) == (1, "b")
    assert where(q, "c") == {"blocked"}
    applied(q.complete(tb, "w", now=T0 + 2))
    assert where(q, "c") == {"ready"}
    info = q.get_job("c", now=T0 + 2)
    assert info is not None
    assert (info.job.pending_dependencies, info.waiting_on) == (0, None)
    assert claimed(q.claim("default", "w", 1000, now=T0 + 3)).job.id == "c"


def stale_variants(token: LeaseToken) -> list[tuple[LeaseToken, str]]:
    r = dataclasses.replace
    return [
        (token, "someone-else"),  # caller is not the token's worker
        (r(token, worker_id="other"), "other"),  # token of another worker
        (r(token, input_revision=token.input_revision + 1), "w"),
        (r(token, fencing_version=token.fencing_version + 1), "w"),
        (r(token, nonce="forged"), "w"),
        (r(token, expires_at=token.expires_at + 1), "w"),
    ]


@pytest.mark.parametrize("call", ["complete", "fail", "permanent_fail", "heartbeat"])
def test_every_lease_mismatch_is_stale_and_changes_nothing(q: Quasar, call: str) -> None:
    token = lease(q)
    before = snapshot(q)
    for bad, worker in stale_variants(token):
        result = lease_call(q, call, bad, worker, T0 + 1)
        assert getattr(result, "error", None) == StaleLease(), (bad, worker)
    assert snapshot(q) == before


def lease_call(q: Quasar, call: str, token: LeaseToken, worker: str, now: int) -> object:
    if call == "complete":
        return q.complete(token, worker, now=now)
    if call == "fail":
        return q.fail(token, worker, "x", now=now)
    if call == "permanent_fail":
        return q.permanent_fail(token, worker, "x", now=now)
    return q.heartbeat(token, worker, 1000, now=now)


@pytest.mark.parametrize("call", ["complete", "fail", "permanent_fail", "heartbeat"])
def test_expired_lease_is_refused_with_its_expiry(q: Quasar, call: str) -> None:
    token = lease(q, lease_ms=100)
    before = snapshot(q)
    result = lease_call(q, call, token, "w", T0 + 100)
    assert getattr(result, "error", None) == LeaseExpired(T0 + 100)
    assert snapshot(q) == before


@pytest.mark.parametrize("call", ["complete", "fail", "permanent_fail", "heartbeat"])
def test_lease_calls_on_a_missing_job(q: Quasar, call: str) -> None:
    token = LeaseToken("ghost", 0, "w", 1, T0 + 10, "n")
    assert getattr(lease_call(q, call, token, "w", T0), "error", None) == MissingJob("ghost")


def test_token_of_a_finished_or_reclaimed_job_is_stale(q: Quasar) -> None:
    token = lease(q, lease_ms=100)
    newer = claimed(q.claim_job("j", "w", 100, now=T0 + 100)).token
    assert q.complete(token, "w", now=T0 + 101) == JobRefused(StaleLease())
    applied(q.complete(newer, "w", now=T0 + 101))
    assert q.complete(newer, "w", now=T0 + 102) == JobRefused(StaleLease())


def test_complete_refuses_an_empty_output_ref_after_the_lease_check(q: Quasar) -> None:
    token = lease(q, lease_ms=100)
    before = snapshot(q)
    assert q.complete(token, "w", output_ref="", now=T0 + 1) == JobRefused(
        InvalidJob("output_ref must not be empty")
    )
    assert q.complete(token, "w", output_ref="", now=T0 + 100) == JobRefused(LeaseExpired(T0 + 100))
    assert snapshot(q) == before


def test_fail_retries_while_attempts_remain_then_fails(q: Quasar) -> None:
    token = lease(q, max_attempts=2)
    job = applied(q.fail(token, "w", "flaky", retry_delay_ms=30, kind="Timeout", now=T0 + 1))
    assert job.state == RetryWaiting("flaky", T0 + 31)
    assert job.error == ErrorInfo("Timeout", "flaky")
    assert job.status(T0) is Status.RETRYABLE
    assert where(q, "j") == {"retrying", "delayed"}
    token = claimed(q.claim("default", "w", 1000, now=T0 + 31)).token
    job = applied(q.fail(token, "w", "again", now=T0 + 40))
    assert job.state == Failed("again", T0 + 40)
    assert job.status(T0) is Status.DISCARDED
    assert where(q, "j") == {"failed"}


def test_fail_with_no_delay_is_claimable_at_once(q: Quasar) -> None:
    token = lease(q)
    applied(q.fail(token, "w", "x", now=T0 + 1))
    assert where(q, "j") == {"retrying", "ready"}


def test_fail_refuses_a_negative_delay(q: Quasar) -> None:
    token = lease(q)
    before = snapshot(q)
    result = q.fail(token, "w", "x", retry_delay_ms=-1, now=T0 + 1)
    assert result == JobRefused(InvalidJob("retry_delay must be nonnegative"))
    assert snapshot(q) == before


def test_permanent_fail_ends_the_job_whatever_attempts_remain(q: Quasar) -> None:
    token = lease(q, max_attempts=5)
    before = snapshot(q)
    empty = q.permanent_fail(token, "w", "", now=T0 + 1)
    assert empty == JobRefused(InvalidJob("reason must not be empty"))
    assert snapshot(q) == before
    job = applied(q.permanent_fail(token, "w", "bad input", kind="ValueError", now=T0 + 1))
    assert job.state == Failed("bad input", T0 + 1)
    assert job.error == ErrorInfo("ValueError", "bad input")
    assert job.attempt == 1


def test_heartbeat_extends_the_lease_and_stales_the_old_token(q: Quasar) -> None:
    token = lease(q, lease_ms=100)
    claim = claimed(q.heartbeat(token, "w", 500, now=T0 + 90))
    assert claim.token.expires_at == T0 + 590
    assert claim.token.nonce == token.nonce
    assert claim.job.state == Leased("w", 1, T0 + 590)
    assert q.redis.zscore(q.keys.queue("default", "leased"), "j") == T0 + 590
    assert q.complete(token, "w", now=T0 + 95) == JobRefused(StaleLease())
    refused = q.heartbeat(claim.token, "w", 0, now=T0 + 95)
    assert refused == ClaimRefused(InvalidJob("lease_duration must be positive"))
    applied(q.complete(claim.token, "w", now=T0 + 200))


def test_cancel_while_leased_stales_the_workers_calls(q: Quasar) -> None:
    token = lease(q)
    cancelled = q.cancel("j", reason="stop", now=T0 + 1)
    assert getattr(cancelled, "job", None) is not None
    assert q.heartbeat(token, "w", 100, now=T0 + 2) == ClaimRefused(StaleLease())
    assert q.complete(token, "w", now=T0 + 2) == JobRefused(StaleLease())
    info = q.get_job("j")
    assert info is not None
    assert info.job.state == Cancelled("stop", T0 + 1)


def test_failed_dependency_cancels_dependents_that_asked_and_blocks_the_rest(q: Quasar) -> None:
    token = lease(q, "a", max_attempts=1)
    applied(q.enqueue("s", id="keep", dependencies=["a"], now=T0))
    applied(q.enqueue("s", id="drop", dependencies=["a"], on_dependency_failure="cancel", now=T0))
    applied(q.enqueue("s", id="drop-child", dependencies=["drop"], now=T0))
    applied(q.fail(token, "w", "boom", now=T0 + 1))
    drop, child, keep = (q.get_job(i) for i in ("drop", "drop-child", "keep"))
    assert drop is not None and child is not None and keep is not None
    assert drop.job.state == Cancelled("dependency a failed", T0 + 1)
    assert child.job.state == Cancelled("dependency drop was cancelled", T0 + 1)
    assert keep.job.state == Waiting(T0)
    assert keep.waiting_on == "a"
    retried = applied(q.retry("a", now=T0 + 2))
    assert retried.max_attempts == 2
    token = claimed(q.claim_job("a", "w", 100, now=T0 + 2)).token
    applied(q.complete(token, "w", now=T0 + 3))
    assert claimed(q.claim("default", "w", 100, now=T0 + 3)).job.id == "keep"


def test_inserted_at_survives_a_retry_delay(q: Quasar) -> None:
    token = lease(q)
    job = applied(q.fail(token, "w", "x", retry_delay_ms=500, now=T0 + 1))
    assert (job.inserted_at, job.state) == (T0, RetryWaiting("x", T0 + 501))
    info = q.get_job("j")
    assert info is not None
    assert info.job.inserted_at == T0
