"""claim by queue (lua/claim.lua) and claim by id (lua/claim_job.lua)."""

from __future__ import annotations

from quasar_redis import (
    AttemptLimitReached,
    ClaimRefused,
    ClaimsApplied,
    Failed,
    IncompleteDependency,
    InvalidJob,
    JobApplied,
    Leased,
    LeaseHeld,
    MissingDependency,
    MissingJob,
    NotAvailable,
    NothingClaimable,
    Quasar,
    RetryWaiting,
    Status,
    TerminalJob,
)

from .helpers import FULL_JOB, T0, applied, claimed, raw_job, snapshot, where


def test_claim_leases_the_job_with_attempt_fence_and_token(q: Quasar) -> None:
    applied(q.enqueue("s", {"n": 1}, id="j", now=T0))
    claim = claimed(q.claim("default", "w1", 5_000, now=T0 + 1))
    job, token = claim.job, claim.token
    assert job.id == "j"
    assert job.state == Leased("w1", 1, T0 + 5_001)
    assert (job.attempt, job.fencing_version, job.attempted_at) == (1, 1, T0 + 1)
    assert job.payload == {"n": 1}
    assert job.status(T0) is Status.EXECUTING
    assert (token.job_id, token.worker_id, token.fencing_version) == ("j", "w1", 1)
    assert (token.input_revision, token.expires_at) == (0, T0 + 5_001)
    assert token.nonce
    assert where(q, "j") == {"leased"}
    assert raw_job(q, "j")["n"] == token.nonce.encode()


def test_claim_order_is_priority_then_availability_then_enqueue_order(q: Quasar) -> None:
    applied(q.enqueue("s", id="late-low", priority=5, now=T0))
    applied(q.enqueue("s", id="p1-second", priority=1, now=T0 + 2))
    applied(q.enqueue("s", id="p1-first", priority=1, now=T0 + 1))
    applied(q.enqueue("s", id="zz", priority=1, available_at=T0 + 2, now=T0 + 3))
    applied(q.enqueue("s", id="aa", priority=1, available_at=T0 + 2, now=T0 + 3))
    applied(q.enqueue("s", id="urgent", priority=-3, now=T0 + 4))
    order = [claimed(q.claim("default", "w", 1000, now=T0 + 10)).job.id for _ in range(6)]
    assert order == ["urgent", "p1-first", "p1-second", "zz", "aa", "late-low"]


def test_claim_many_takes_up_to_limit_best_first(q: Quasar) -> None:
    for i in range(5):
        applied(q.enqueue("s", id=f"j{i}", now=T0 + i))
    result = q.claim_many("default", "w", 1000, 3, now=T0 + 10)
    assert isinstance(result, ClaimsApplied)
    assert [c.job.id for c in result.claims] == ["j0", "j1", "j2"]
    nonces = {c.token.nonce for c in result.claims}
    assert len(nonces) == 3
    rest = q.claim_many("default", "w", 1000, 10, now=T0 + 10)
    assert isinstance(rest, ClaimsApplied)
    assert [c.job.id for c in rest.claims] == ["j3", "j4"]


def test_claim_on_empty_queue_says_nothing_claimable(q: Quasar) -> None:
    assert q.claim("default", "w", 1000, now=T0) == ClaimRefused(NothingClaimable(None))
    applied(q.enqueue("s", id="later", delay_ms=700, now=T0))
    assert q.claim("default", "w", 1000, now=T0) == ClaimRefused(NothingClaimable(T0 + 700))


def test_claim_promotes_due_jobs(q: Quasar) -> None:
    applied(q.enqueue("s", id="later", delay_ms=700, now=T0))
    assert where(q, "later") == {"delayed"}
    assert claimed(q.claim("default", "w", 1000, now=T0 + 700)).job.id == "later"


def test_claim_by_queue_never_offers_a_blocked_job(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", delay_ms=100, now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    assert q.claim("default", "w", 1000, now=T0) == ClaimRefused(NothingClaimable(T0 + 100))


def test_claim_by_queue_recovers_run_out_leases_of_the_queue(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    first = claimed(q.claim("default", "w1", 100, now=T0))
    assert q.claim("default", "w2", 100, now=T0 + 50) == ClaimRefused(NothingClaimable(T0 + 100))
    second = claimed(q.claim("default", "w2", 100, now=T0 + 100))
    assert second.job.id == "j"
    assert second.job.attempt == 2
    assert second.job.fencing_version == first.job.fencing_version + 1
    assert second.job.error is not None
    assert second.job.error.kind == "LeaseExpired"


def test_claim_by_queue_refuses_bad_input(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    before = snapshot(q)
    assert q.claim("default", "", 1000, now=T0) == ClaimRefused(
        InvalidJob("worker_id must not be empty")
    )
    assert q.claim("default", "w", 0, now=T0) == ClaimRefused(
        InvalidJob("lease_duration must be positive")
    )
    refused = q.claim_many("default", "w", 10, 0, now=T0)
    assert refused == ClaimRefused(InvalidJob("limit must be between 1 and 1000"))
    assert snapshot(q) == before


def test_claim_job_by_id(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", now=T0))
    claim = claimed(q.claim_job("b", "w", 1000, now=T0 + 5))
    assert claim.job.state == Leased("w", 1, T0 + 1005)
    assert where(q, "b") == {"leased"}
    assert where(q, "a") == {"ready"}


def test_claim_job_refusals_in_lifecycle_order(q: Quasar) -> None:
    assert q.claim_job("nope", "w", 1000, now=T0) == ClaimRefused(MissingJob("nope"))
    applied(q.enqueue("s", id="sched", delay_ms=100, now=T0))
    applied(q.enqueue("s", id="dep", dependencies=["sched"], now=T0))
    before = snapshot(q)
    empty_worker = InvalidJob("worker_id must not be empty")
    assert q.claim_job("sched", "", 0, now=T0) == ClaimRefused(empty_worker)
    zero_lease = InvalidJob("lease_duration must be positive")
    assert q.claim_job("sched", "w", 0, now=T0) == ClaimRefused(zero_lease)
    assert q.claim_job("sched", "w", 10, now=T0) == ClaimRefused(NotAvailable(T0 + 100))
    assert q.claim_job("dep", "w", 10, now=T0) == ClaimRefused(IncompleteDependency("sched"))
    assert snapshot(q) == before


def test_claim_job_refuses_a_held_lease_and_takes_an_expired_one(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    first = claimed(q.claim_job("j", "w1", 100, now=T0))
    assert q.claim_job("j", "w2", 100, now=T0 + 99) == ClaimRefused(LeaseHeld(T0 + 100))
    again = claimed(q.claim_job("j", "w2", 100, now=T0 + 100))
    assert again.job.state == Leased("w2", 2, T0 + 200)
    assert again.job.attempt == 2
    assert again.token.nonce != first.token.nonce


def test_claim_job_refuses_attempt_limit_on_an_expired_last_lease(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", max_attempts=1, now=T0))
    claimed(q.claim_job("j", "w1", 100, now=T0))
    before = snapshot(q)
    assert q.claim_job("j", "w2", 100, now=T0 + 200) == ClaimRefused(AttemptLimitReached())
    assert snapshot(q) == before
    report = q.sweep_expired(now=T0 + 200)
    assert report.expired == ("j",)
    info = q.get_job("j")
    assert info is not None
    assert info.job.state == Failed("worker lease expired", T0 + 200)


def test_claim_job_refuses_terminal_jobs(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    q.cancel("j", now=T0)
    assert q.claim_job("j", "w", 100, now=T0) == ClaimRefused(TerminalJob())


def test_claim_job_refuses_a_dependency_deleted_by_hand(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    q.redis.delete(q.keys.job("a"))
    assert q.claim_job("b", "w", 100, now=T0) == ClaimRefused(MissingDependency("a"))


def test_claim_job_of_a_retry_waiting_job_waits_for_its_time(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    claim = claimed(q.claim_job("j", "w", 100, now=T0))
    job = applied(q.fail(claim.token, "w", "flaky", retry_delay_ms=50, now=T0 + 1))
    assert job.state == RetryWaiting("flaky", T0 + 51)
    assert q.claim_job("j", "w", 100, now=T0 + 50) == ClaimRefused(NotAvailable(T0 + 51))
    assert claimed(q.claim_job("j", "w", 100, now=T0 + 51)).job.attempt == 2


def test_claim_when_the_clock_went_back_keeps_the_job_indexed(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0 + 1000))
    assert q.claim("default", "w", 100, now=T0) == ClaimRefused(NothingClaimable(T0 + 1000))
    assert where(q, "j") == {"delayed"}
    assert claimed(q.claim("default", "w", 100, now=T0 + 1000)).job.id == "j"


def test_claim_drops_index_entries_left_behind_and_reads_on(q: Quasar) -> None:
    for i in range(3):
        applied(q.enqueue("s", id=f"j{i}", now=T0))
    ready = q.keys.queue("default", "ready")
    q.redis.zadd(ready, {"0" * 21 + "ghost": -5})
    q.redis.zadd(ready, {"0" * 21 + "j9": -5})
    result = q.claim_many("default", "w", 100, 2, now=T0)
    assert isinstance(result, ClaimsApplied)
    assert [c.job.id for c in result.claims] == ["j0", "j1"]
    assert q.redis.zcard(ready) == 1


def test_the_jobs_and_tokens_a_claim_returns_are_the_ones_stored(q: Quasar) -> None:
    # A claim's first delivery replies each job's fields as they were before the lease; the client
    # applies the lease itself: the job and the token must equal what Redis now holds.
    applied(q.enqueue("s", id="dep", now=T0))
    dep = claimed(q.claim("default", "wd", 1_000, now=T0))
    assert isinstance(q.complete(dep.token, "wd", now=T0), JobApplied)
    applied(q.enqueue("s", {"k": [1, 2]}, id="plain", now=T0))
    applied(q.enqueue("s", b"x" * 300, id="chunked", priority=1, now=T0))  # payload in chunks
    applied(q.enqueue_job(FULL_JOB, now=T0))  # another queue, every option set
    applied(q.enqueue("s", id="again", priority=2, now=T0))
    first = claimed(q.claim("default", "w0", 1_000, now=T0))
    assert first.job.id == "plain"  # priority 0, enqueued first
    # Failed with a retry: attempt 2, fence 2 on its next claim, at moved (ins kept).
    assert isinstance(q.fail(first.token, "w0", "boom", retry_delay_ms=5, now=T0 + 1), JobApplied)
    applied(q.enqueue("s", id="expired", priority=3, now=T0))
    # Leased by id, its lease runs out before the claim below, which expires and re-leases it.
    claimed(q.claim_job("expired", "w9", 10, now=T0))
    got = []
    for queue, worker in (("default", "wörker-1"), ("mail", "w2")):
        many = q.claim_many(queue, worker, 30_000, 10, now=T0 + 100)
        assert isinstance(many, ClaimsApplied)
        got += list(many.claims)
    assert {c.job.id for c in got} == {"plain", "chunked", "full", "again", "expired"}
    for claim in got:
        info = q.get_job(claim.job.id)
        assert info is not None and info.job == claim.job, claim.job.id
        h = raw_job(q, claim.job.id)
        token = claim.token
        assert (token.job_id, token.input_revision) == (claim.job.id, claim.job.input_revision)
        assert token.worker_id.encode() == h["w"]
        assert (str(token.fencing_version).encode(), str(token.expires_at).encode()) == (
            h["f"],
            h["x"],
        )
        assert token.nonce.encode() == h["n"]
        assert claim.job.attempt == (2 if claim.job.id in ("plain", "expired") else 1)
    # Each token is the one Redis holds: it completes its job.
    for claim in got:
        done = q.complete(claim.token, claim.token.worker_id, now=T0 + 200)
        assert isinstance(done, JobApplied), (claim.job.id, done)
    # Server clock: one more job, claimed with now=None, then read back the same way.
    applied(q.enqueue("s", {"x": 1}, id="live"))
    one = claimed(q.claim("default", "w3", 30_000))
    info = q.get_job("live")
    assert one.job.id == "live" and info is not None and info.job == one.job
    assert one.token.nonce.encode() == raw_job(q, "live")["n"]
