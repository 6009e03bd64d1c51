"""Deadlines: a job not started by its deadline ends ``Expired`` and never runs, on both backends
and both clients.

A claim by queue expires such a job instead of leasing it and reads on; a claim by id refuses it
``DeadlinePassed`` (writing nothing); ``sweep_expired`` expires it even when no worker claims.
Its dependents go by their policy, as for a failed dependency. A job without a deadline stores
nothing more.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from quasar_redis import (
    App,
    CancelApplied,
    ClaimRefused,
    ClaimsApplied,
    Complete,
    DeadlinePassed,
    Expired,
    IncompleteDependency,
    InvalidJob,
    InvalidTaskCall,
    JobExpiredError,
    JobRefused,
    JobRefusedError,
    NewJob,
    NotFailed,
    NothingClaimable,
    Quasar,
    Status,
    TerminalJob,
    Waiting,
    Worker,
)
from quasar_redis._tasks import Task
from quasar_redis.prometheus import depth_families

from .helpers import T0, applied, claimed, raw_job, snapshot, wait_for, where


def enqueue(q: Quasar, **options: Any) -> str:
    return applied(q.enqueue("s", None, now=T0, **options)).id


def test_a_job_without_a_deadline_stores_nothing_more(q: Quasar) -> None:
    job_id = enqueue(q)
    assert "dl" not in raw_job(q, job_id)
    assert where(q, job_id) == {"ready"}
    assert q.get_job(job_id).job.deadline is None  # type: ignore[union-attr]


def test_a_deadline_is_stored_and_indexed_until_the_job_starts(q: Quasar) -> None:
    job_id = enqueue(q, deadline=T0 + 500)
    assert raw_job(q, job_id)["dl"] == b"%d" % (T0 + 500)
    assert where(q, job_id) == {"ready", "deadlines"}
    relative = applied(q.enqueue("s", None, now=T0, expires_in_ms=300))
    assert relative.deadline == T0 + 300
    assert q.get_job(relative.id).job.deadline == T0 + 300  # type: ignore[union-attr]
    token = claimed(q.claim_job(job_id, "w", 1000, now=T0 + 499)).token
    assert where(q, job_id) == {"leased"}
    # started in time: no longer subject to the deadline, even when handed back
    q.release(token, "w", now=T0 + 600)
    assert where(q, job_id) == {"ready"}
    assert claimed(q.claim_job(job_id, "w", 1000, now=T0 + 700)).job.id == job_id


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"deadline": T0}, "deadline must be in the future"),
        ({"deadline": T0 - 1}, "deadline must be in the future"),
        ({"deadline": T0 + 10, "delay_ms": 10}, "deadline must be after available_at"),
        ({"deadline": T0 + 10, "available_at": T0 + 20}, "deadline must be after available_at"),
        ({"expires_in_ms": 0}, "expires_in must be positive"),
        ({"expires_in_ms": -5}, "expires_in must be positive"),
        ({"expires_in_ms": 5, "delay_ms": 5}, "deadline must be after available_at"),
        ({"deadline": T0 + 10, "expires_in_ms": 10}, "give deadline or expires_in, not both"),
        ({"deadline": "soon"}, "deadline"),
        ({"expires_in_ms": 1.5}, "expires_in"),
        ({"deadline": 2**60}, "deadline"),
    ],
)
def test_a_bad_deadline_is_refused_and_writes_nothing(
    q: Quasar, options: dict[str, Any], reason: str
) -> None:
    enqueue(q)
    before = snapshot(q)
    result = q.enqueue("s", None, now=T0, **options)
    assert isinstance(result, JobRefused), result
    assert isinstance(result.error, InvalidJob)
    assert reason in result.error.reason
    assert snapshot(q) == before


def test_a_claim_by_queue_expires_a_job_past_its_deadline_and_takes_the_next(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100, priority=-1)
    ok = enqueue(q)
    claims = q.claim_many("default", "w", 1000, 5, now=T0 + 100)
    assert isinstance(claims, ClaimsApplied)
    assert [c.job.id for c in claims.claims] == [ok]
    info = q.get_job(late)
    assert info is not None
    assert info.job.state == Expired(T0 + 100, T0 + 100)
    assert info.status == Status.EXPIRED
    assert info.job.attempt == 0 and info.job.attempted_at is None
    assert where(q, late) == {"expired"}
    counts = q.counts("default", now=T0 + 100)
    assert (counts.expired, counts.executing, counts.available) == (1, 1, 0)
    assert [j.id for j in q.list_jobs("default", Status.EXPIRED)] == [late]


def test_a_claim_that_only_meets_expired_jobs_claims_nothing(q: Quasar) -> None:
    late = enqueue(q, expires_in_ms=50)
    result = q.claim("default", "w", 1000, now=T0 + 50)
    assert result == ClaimRefused(NothingClaimable(None))
    assert isinstance(applied_state(q, late), Expired)


def applied_state(q: Quasar, job_id: str) -> Any:
    info = q.get_job(job_id)
    assert info is not None
    return info.job.state


def test_a_claim_by_id_refuses_a_job_past_its_deadline_and_writes_nothing(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100)
    before = snapshot(q)
    assert q.claim_job(late, "w", 1000, now=T0 + 100) == ClaimRefused(DeadlinePassed(T0 + 100))
    assert snapshot(q) == before
    # a moment earlier it could be claimed
    assert claimed(q.claim_job(late, "w", 1000, now=T0 + 99)).job.id == late


def test_the_sweep_expires_jobs_past_their_deadline_without_a_claim(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100, delay_ms=50)
    blocked_dep = enqueue(q)
    blocked = enqueue(q, deadline=T0 + 100, dependencies=[blocked_dep])
    later = enqueue(q, deadline=T0 + 200)
    early = q.sweep_expired(now=T0 + 99)
    assert early.past_deadline == ()
    report = q.sweep_expired(now=T0 + 100)
    assert sorted(report.past_deadline) == sorted([late, blocked])
    assert report.expired == () and report.damaged == ()
    for job_id in (late, blocked):
        assert applied_state(q, job_id) == Expired(T0 + 100, T0 + 100)
        assert where(q, job_id) == {"expired"}
    assert isinstance(applied_state(q, later), Waiting)
    assert q.sweep_expired(now=T0 + 100).past_deadline == ()  # nothing twice


def test_the_sweep_is_bounded_by_its_limit(q: Quasar) -> None:
    ids = [enqueue(q, deadline=T0 + 10) for _ in range(5)]
    first = q.sweep_expired(limit=3, now=T0 + 10)
    assert len(first.past_deadline) == 3
    second = q.sweep_expired(limit=3, now=T0 + 10)
    assert sorted(first.past_deadline + second.past_deadline) == sorted(ids)


def test_dependents_of_an_expired_job_go_by_their_policy(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100)
    blocking = enqueue(q, dependencies=[late])
    cancelling = enqueue(q, dependencies=[late], on_dependency_failure="cancel")
    q.sweep_expired(now=T0 + 100)
    info = q.get_job(blocking)
    assert info is not None and info.status == Status.BLOCKED and info.waiting_on == late
    gone = q.get_job(cancelling)
    assert gone is not None and gone.status == Status.CANCELLED
    assert gone.job.state.reason == f"dependency {late} expired"  # type: ignore[union-attr]
    # an expired job can never succeed: a new dependent of it is refused
    refused = q.enqueue("s", None, now=T0 + 200, dependencies=[late])
    assert refused == JobRefused(IncompleteDependency(late))
    # the blocked one can still be cancelled by an operator
    assert isinstance(q.cancel(blocking, now=T0 + 300), CancelApplied)


def test_an_expired_job_is_final(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100)
    q.sweep_expired(now=T0 + 100)
    before = snapshot(q)
    assert q.cancel(late, now=T0 + 200) == JobRefused(TerminalJob())
    assert q.retry(late, now=T0 + 200) == JobRefused(NotFailed())
    assert snapshot(q) == before


def test_an_expired_job_is_an_event_named_expired(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100)
    q.sweep_expired(now=T0 + 100)
    last = q.redis.xrange(q.keys.events)[-1][1]
    assert (last[b"job"], last[b"ev"]) == (late.encode(), b"expired")


def test_prune_and_purge_delete_expired_jobs(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100)
    purged = enqueue(q, deadline=T0 + 100)
    q.sweep_expired(now=T0 + 100)
    assert q.purge("default", Status.EXPIRED, [purged], now=T0 + 100_000) == 1
    assert q.get_job(purged) is None
    assert q.prune(max_age_ms=1, now=T0 + 100_000) == 1
    assert q.get_job(late) is None
    assert where(q, late) == set()


def test_enqueue_many_carries_each_jobs_deadline(q: Quasar) -> None:
    result = q.enqueue_many([NewJob("s", id="a", deadline=T0 + 5), NewJob("s", id="b")], now=T0)
    jobs = {job.id: job for job in result.jobs}  # type: ignore[union-attr]
    assert (jobs["a"].deadline, jobs["b"].deadline) == (T0 + 5, None)


def server_ms(q: Quasar) -> int:
    seconds, micros = q.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def recording_app(app: App) -> tuple[Task[[str], str], list[str]]:
    """The task ``record``, which keeps every run's argument in the list returned."""
    runs: list[str] = []

    def record(tag: str) -> str:
        runs.append(tag)
        return tag

    return app.task(record, name="record"), runs


def test_a_job_past_its_deadline_never_runs_through_a_worker(app: App) -> None:
    task, runs = recording_app(app)
    q = app.client
    late = task.options(expires_in=0.05).enqueue("late")
    assert late.info().job.deadline is not None  # type: ignore[union-attr]
    q.pause("default")  # no worker may claim it before its deadline
    with Worker(app, maintenance_interval=0.05, idle_wait=1.0):
        wait_for(lambda: late.info().status == Status.EXPIRED, 30, "the late job to expire")  # type: ignore[union-attr]
        q.resume("default")
        assert task.enqueue("on time").result(timeout=30) == "on time"
    assert runs == ["on time"]
    with pytest.raises(JobExpiredError):
        late.result(timeout=5)
    assert q.counts("default").expired == 1


def test_a_worker_that_claims_after_the_deadline_expires_the_job_instead(app: App) -> None:
    task, runs = recording_app(app)
    q = app.client
    late = task.options(expires_in=0.05).enqueue("late")
    deadline = late.info().job.deadline  # type: ignore[union-attr]
    assert deadline is not None
    wait_for(lambda: server_ms(q) >= deadline or None, 30, "the deadline to pass")
    with Worker(app, maintenance_interval=0.05, idle_wait=1.0):
        assert task.enqueue("next").result(timeout=30) == "next"
        wait_for(lambda: late.info().status == Status.EXPIRED, 30, "the late job to expire")  # type: ignore[union-attr]
    assert runs == ["next"]
    info = late.info()
    assert info is not None and info.job.attempt == 0 and info.job.attempted_at is None


def test_the_example_of_the_docs_runs_as_written(q: Quasar) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "lifecycle.md").read_text()
    section = page.split("### Deadlines")[1].split("\n### ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/lifecycle.md", "exec"), {"q": q})


def test_report_and_claim_expires_a_late_job_and_claims_the_next(q: Quasar) -> None:
    first = enqueue(q)
    token = claimed(q.claim_job(first, "w", 1000, now=T0)).token
    late = enqueue(q, deadline=T0 + 100, priority=-1)
    ok = enqueue(q)
    result = q.report_and_claim("w", [Complete(token)], "default", 1000, 2, now=T0 + 100)
    assert isinstance(result.claim, ClaimsApplied)
    assert [c.job.id for c in result.claim.claims] == [ok]
    assert applied_state(q, late) == Expired(T0 + 100, T0 + 100)


def test_a_job_started_before_its_deadline_may_retry_after_it(q: Quasar) -> None:
    job_id = enqueue(q, deadline=T0 + 100)
    token = claimed(q.claim_job(job_id, "w", 1000, now=T0 + 10)).token
    q.fail(token, "w", "boom", now=T0 + 20)
    assert where(q, job_id) == {"ready", "retrying"}
    again = q.claim("default", "w", 1000, now=T0 + 500)
    assert claimed(again).job.id == job_id


def test_a_resent_claim_that_expired_a_job_changes_nothing_more(q: Quasar) -> None:
    late = enqueue(q, deadline=T0 + 100, priority=-1)
    ok = enqueue(q)
    call = q.calls.claim_many("default", "w", 1000, 2, T0 + 100)
    first = q.execute(call)
    before, events = snapshot(q), q.redis.xlen(q.keys.events)
    again = q.execute(call)
    assert q.redis.xlen(q.keys.events) == events
    assert isinstance(first, ClaimsApplied) and isinstance(again, ClaimsApplied)
    assert [c.token for c in again.claims] == [c.token for c in first.claims]
    assert [c.job.id for c in first.claims] == [ok]
    assert {k: v for k, v in snapshot(q).items() if ":call:" not in k} == {
        k: v for k, v in before.items() if ":call:" not in k
    }
    assert applied_state(q, late) == Expired(T0 + 100, T0 + 100)


def test_the_task_api_takes_a_deadline_or_expires_in(app: App) -> None:
    task, _ = recording_app(app)
    when = datetime(2500, 1, 1, tzinfo=timezone.utc)
    handle = task.options(deadline=when).enqueue("x")
    info = handle.info()
    assert info is not None and info.job.deadline == round(when.timestamp() * 1000)
    assert task.options(deadline=when.timestamp()).job("x").deadline == info.job.deadline
    assert task.options(expires_in=1.5).job("x").expires_in_ms == 1500
    with pytest.raises(InvalidTaskCall, match="expires_in must be a finite number"):
        task.options(expires_in=float("inf")).job("x")
    with pytest.raises(JobRefusedError) as refused:
        task.options(expires_in=0).enqueue("x")
    assert refused.value.error == InvalidJob("expires_in must be positive")


def test_the_metrics_count_expired_jobs(q: Quasar) -> None:
    enqueue(q, deadline=T0 + 100)
    q.sweep_expired(now=T0 + 100)
    (jobs, _) = depth_families(q.queues(now=T0 + 100))
    found = {s.labels["status"]: s.value for s in jobs.samples if s.labels["queue"] == "default"}
    assert found["expired"] == 1 and found["available"] == 0
