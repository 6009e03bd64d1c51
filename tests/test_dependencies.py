"""Dependencies that run anyway (``on_dependency_failure="run"``) and the read of a job's
dependencies and dependents (lua/dependencies.lua), on both backends and both clients."""

from __future__ import annotations

import pytest

from quasar_redis import (
    CancelApplied,
    ClaimApplied,
    Dependencies,
    Dependency,
    Dependent,
    ErrorInfo,
    IncompleteDependency,
    InvalidJob,
    JobRefused,
    MissingJob,
    NewJob,
    Quasar,
    Status,
)
from quasar_redis.errors import InvalidArgument

from .helpers import T0, applied, claimed, snapshot
from .test_cascades import IDLE_MS, WIDE, alone, fan_out

LEASE = 60_000


def status(q: Quasar, job_id: str, now: int) -> Status:
    info = q.get_job(job_id, now=now)
    assert info is not None
    return info.status


def run_and_fail(q: Quasar, job_id: str, now: int, reason: str = "boom") -> None:
    claim = claimed(q.claim_job(job_id, "w", LEASE, now=now))
    applied(q.permanent_fail(claim.token, "w", reason, kind="ValueError", now=now))


def run_and_complete(q: Quasar, job_id: str, now: int, result: object = None) -> None:
    claim = claimed(q.claim_job(job_id, "w", LEASE, now=now))
    applied(q.complete(claim.token, "w", result=result, now=now))


# --- the policy ----------------------------------------------------------------------------------


def test_a_failed_dependency_lets_a_run_dependent_run(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", now=T0))
    job = applied(
        q.enqueue("s", id="c", dependencies=["a", "b"], on_dependency_failure="run", now=T0)
    )
    assert (job.on_dependency_failure, job.pending_dependencies) == ("run", 2)
    run_and_fail(q, "a", T0 + 1)
    assert status(q, "c", T0 + 2) is Status.BLOCKED
    info = q.get_job("c", now=T0 + 2)
    assert info is not None and info.waiting_on == "b"
    run_and_complete(q, "b", T0 + 3)
    assert status(q, "c", T0 + 4) is Status.AVAILABLE
    assert isinstance(q.claim("default", "w", LEASE, now=T0 + 4), ClaimApplied)


def test_a_cancelled_dependency_releases_a_run_dependent_and_its_cascade_stops_there(
    q: Quasar,
) -> None:
    # a <- b (block) <- c (run) <- d (block); a <- e (run)
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    applied(q.enqueue("s", id="c", dependencies=["b"], on_dependency_failure="run", now=T0))
    applied(q.enqueue("s", id="d", dependencies=["c"], now=T0))
    applied(q.enqueue("s", id="e", dependencies=["a"], on_dependency_failure="run", now=T0))
    result = q.cancel("a", now=T0 + 1)
    assert isinstance(result, CancelApplied) and result.cascaded == ("b",)
    assert status(q, "b", T0 + 2) is Status.CANCELLED
    assert status(q, "c", T0 + 2) is Status.AVAILABLE
    assert status(q, "e", T0 + 2) is Status.AVAILABLE
    assert status(q, "d", T0 + 2) is Status.BLOCKED  # c has not run yet
    run_and_complete(q, "c", T0 + 3)
    assert status(q, "d", T0 + 4) is Status.AVAILABLE
    # a cancelled parent still lists its dependents that run anyway (the others can never run)
    read = q.dependencies("a", now=T0 + 5)
    assert isinstance(read, Dependencies)
    assert [(d.id, d.status) for d in read.dependents] == [("e", "available")]


def test_an_expired_dependency_releases_a_run_dependent(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", expires_in_ms=100, now=T0))
    applied(q.enqueue("s", id="c", dependencies=["a"], on_dependency_failure="run", now=T0))
    applied(q.enqueue("s", id="k", dependencies=["a"], on_dependency_failure="cancel", now=T0))
    assert q.sweep_expired(now=T0 + 200).past_deadline == ("a",)
    assert status(q, "a", T0 + 201) is Status.EXPIRED
    assert status(q, "c", T0 + 201) is Status.AVAILABLE
    assert status(q, "k", T0 + 201) is Status.CANCELLED


def test_an_enqueue_under_run_takes_dependencies_that_already_ended(q: Quasar) -> None:
    applied(q.enqueue("s", id="ok", now=T0))
    applied(q.enqueue("s", id="bad", now=T0))
    applied(q.enqueue("s", id="gone", now=T0))
    applied(q.enqueue("s", id="late", expires_in_ms=10, now=T0))
    run_and_complete(q, "ok", T0 + 1)
    run_and_fail(q, "bad", T0 + 1)
    assert isinstance(q.cancel("gone", now=T0 + 1), CancelApplied)
    assert q.sweep_expired(now=T0 + 20).past_deadline == ("late",)
    deps = ["ok", "bad", "gone", "late"]
    job = applied(
        q.enqueue("s", id="c", dependencies=deps, on_dependency_failure="run", now=T0 + 30)
    )
    assert job.pending_dependencies == 0
    assert status(q, "c", T0 + 30) is Status.AVAILABLE
    # the other policies still refuse a dependency that can never succeed
    for policy in ("block", "cancel"):
        refused = q.enqueue(
            "s", id="x", dependencies=["gone"], on_dependency_failure=policy, now=T0 + 30
        )
        assert refused == JobRefused(IncompleteDependency("gone"))
    assert isinstance(q.claim_job("c", "w", LEASE, now=T0 + 31), ClaimApplied)


def test_a_retried_dependency_does_not_release_a_run_dependent_twice(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", max_attempts=1, now=T0))
    applied(q.enqueue("s", id="b", now=T0))
    applied(q.enqueue("s", id="c", dependencies=["a", "b"], on_dependency_failure="run", now=T0))
    run_and_fail(q, "a", T0 + 1)
    applied(q.retry("a", now=T0 + 2))
    run_and_complete(q, "a", T0 + 3)  # counted once already: c still waits on b
    info = q.get_job("c", now=T0 + 4)
    assert info is not None and info.job.pending_dependencies == 1 and info.waiting_on == "b"
    run_and_complete(q, "b", T0 + 5)
    assert status(q, "c", T0 + 6) is Status.AVAILABLE


def test_a_released_run_dependent_is_not_blocked_again_by_a_retry(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", max_attempts=1, now=T0))
    applied(q.enqueue("s", id="c", dependencies=["a"], on_dependency_failure="run", now=T0))
    run_and_fail(q, "a", T0 + 1)
    assert status(q, "c", T0 + 2) is Status.AVAILABLE
    applied(q.retry("a", now=T0 + 2))
    assert status(q, "c", T0 + 3) is Status.AVAILABLE
    run_and_fail(q, "a", T0 + 3, "again")
    info = q.get_job("c", now=T0 + 4)
    assert info is not None and info.status is Status.AVAILABLE
    assert info.job.pending_dependencies == 0


def test_a_claim_by_id_takes_a_run_job_whose_dependency_ended_before_the_cascade_reached_it(
    q: Quasar,
) -> None:
    if not isinstance(q, Quasar):
        pytest.skip("sends a raw script call")
    ids = fan_out(q, WIDE, "run")
    result, left = alone(q, q.calls.cancel("root", None, "stop", T0 + 1))
    assert isinstance(result, CancelApplied) and left and result.cascaded == ()
    waiting = [i for i in ids if status(q, i, T0 + 2) is Status.BLOCKED]
    assert waiting  # not reached yet: blocked, and claimable by id all the same
    info = q.get_job(waiting[0], now=T0 + 2)
    assert info is not None and info.waiting_on == "root"
    claim = claimed(q.claim_job(waiting[0], "w", LEASE, now=T0 + 2))
    assert claim.job.pending_dependencies == 0
    later = T0 + 2 + IDLE_MS  # (the root is idle: as a worker's maintenance takes it up)
    while q.resume_cascades(now=later).more:
        pass
    assert all(status(q, i, later) is not Status.BLOCKED for i in ids)


def test_a_bad_policy_is_refused_and_writes_nothing(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    before = snapshot(q)
    refused = q.enqueue("s", id="c", dependencies=["a"], on_dependency_failure="later", now=T0)  # type: ignore[arg-type]
    assert refused == JobRefused(
        InvalidJob("on_dependency_failure must be 'block', 'cancel' or 'run'")
    )
    batch = q.enqueue_many([NewJob("s", id="d", on_dependency_failure="x")], now=T0)  # type: ignore[arg-type]
    assert not hasattr(batch, "jobs")
    assert snapshot(q) == before


def test_the_script_refuses_a_bad_policy_too(q: Quasar) -> None:
    if not isinstance(q, Quasar):
        pytest.skip("sends a raw script call")
    before = snapshot(q)
    call = q.calls.enqueue(NewJob("s", id="c"), T0)
    args = ["later" if a == "block" else a for a in call.args]
    keys = q._script_keys
    reply = q.redis.eval(call.script.source, len(keys), *keys, *args)
    assert call.parse(reply) == JobRefused(
        InvalidJob("on_dependency_failure must be 'block', 'cancel' or 'run'")
    )
    assert snapshot(q) == before


# --- the read ------------------------------------------------------------------------------------


def test_the_read_gives_each_dependency_in_order_with_its_result_and_error(q: Quasar) -> None:
    for job_id in ("ok", "bad", "gone", "pruned", "waiting"):
        applied(q.enqueue("s", id=job_id, now=T0))
    run_and_complete(q, "ok", T0 + 1, {"total": 3})
    run_and_fail(q, "bad", T0 + 1, "it broke")
    assert isinstance(q.cancel("gone", reason="not needed", now=T0 + 1), CancelApplied)
    deps = ["waiting", "pruned", "gone", "bad", "ok"]
    applied(q.enqueue("s", id="c", dependencies=deps, on_dependency_failure="run", now=T0 + 2))
    q.redis.delete(q.keys.job("pruned"))  # as a prune would leave it
    read = q.dependencies("c", now=T0 + 3)
    assert isinstance(read, Dependencies)
    assert (read.job_id, read.now, read.dependents, read.dependents_total) == ("c", T0 + 3, (), 0)
    assert [d.id for d in read.dependencies] == deps
    by_id = {d.id: d for d in read.dependencies}
    assert by_id["pruned"] == Dependency("pruned", None, None)
    assert by_id["waiting"].status is Status.AVAILABLE
    ok, bad, gone = by_id["ok"].job, by_id["bad"].job, by_id["gone"].job
    assert ok is not None and ok.result == {"total": 3} and by_id["ok"].status is Status.COMPLETED
    assert bad is not None and bad.error == ErrorInfo("ValueError", "it broke")
    assert by_id["bad"].status is Status.DISCARDED
    assert gone is not None and by_id["gone"].status is Status.CANCELLED
    assert gone.state.reason == "not needed"  # type: ignore[union-attr]


def test_the_read_pages_the_dependents_by_id(q: Quasar) -> None:
    applied(q.enqueue("s", id="p", now=T0))
    ids = [f"d{i:03d}" for i in range(150)]
    batch = [NewJob("s", id=i, dependencies=["p"]) for i in ids]
    assert q.enqueue_many(batch, ids_only=True, now=T0).ids  # type: ignore[union-attr]
    read = q.dependencies("p", now=T0 + 2)
    assert isinstance(read, Dependencies)
    assert read.dependents_total == 150 and read.dependencies == ()
    assert [d.id for d in read.dependents] == sorted(ids)[:100]
    assert {d.status for d in read.dependents} == {"blocked"}
    few = q.dependencies("p", dependents=3, now=T0 + 2)
    assert isinstance(few, Dependencies) and [d.id for d in few.dependents] == ids[:3]
    assert few.dependents[0] == Dependent("d000", "blocked")
    none = q.dependencies("p", dependents=0, now=T0 + 2)
    assert isinstance(none, Dependencies) and (none.dependents, none.dependents_total) == ((), 150)


def test_the_read_refuses_what_it_cannot_answer(q: Quasar) -> None:
    assert q.dependencies("nobody") == JobRefused(MissingJob("nobody"))
    assert q.dependencies("") == JobRefused(InvalidJob("job_id must not be empty"))
    spaced = q.dependencies("has space")
    assert isinstance(spaced, JobRefused) and isinstance(spaced.error, InvalidJob)
    with pytest.raises(InvalidArgument):
        q.dependencies("nobody", dependents=101)
    with pytest.raises(InvalidArgument):
        q.dependencies("nobody", dependents=-1)
