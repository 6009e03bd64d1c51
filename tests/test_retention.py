"""Per-task retention (``result_ttl``): a job that succeeded with a retention is indexed in its
queue's ``expiring`` set at the time it may go (at least the 60 s re-send window after it
finished), and prune (lua/prune.lua) deletes it from then on, keeping every index consistent and
keeping it while a blocked job still depends on it."""

from __future__ import annotations

from typing import Any

import pytest

from quasar_redis import (
    App,
    Complete,
    InvalidJob,
    JobApplied,
    JobRefused,
    LeaseToken,
    MissingDependency,
    OutcomeApplied,
    Quasar,
    Status,
    Succeeded,
    Worker,
)

from .helpers import T0, app_url, claimed, wait_for, where

WINDOW = 60_000  # the re-send window (CALL_TTL_MS): no job goes sooner after it finished


def lease(q: Quasar, job_id: str, at: int = T0) -> LeaseToken:
    return claimed(q.claim_job(job_id, "w", 10_000, now=at)).token


def succeed(q: Quasar, token: LeaseToken, ttl_ms: int | None, at: int) -> Any:
    return q.report_many("w", [Complete(token, {"r": 1}, result_ttl_ms=ttl_ms)], now=at)[0]


def expiring_at(q: Quasar, job_id: str, queue: str = "default") -> float | None:
    score: float | None = q.redis.zscore(q.keys.queue(queue, "expiring"), job_id)
    return score


def gone(q: Quasar, job_id: str) -> bool:
    """Nothing of ``job_id`` left: no hash, no dependents set, no index entry."""
    return (
        q.get_job(job_id) is None
        and not q.redis.exists(q.keys.job(job_id), q.keys.dependents(job_id))
        and where(q, job_id) == set()
    )


@pytest.mark.parametrize(("ttl_ms", "kept_for"), [(0, WINDOW), (5_000, WINDOW), (90_000, 90_000)])
def test_a_retained_job_goes_at_the_first_prune_after_its_time(
    q: Quasar, ttl_ms: int, kept_for: int
) -> None:
    q.enqueue("s", id="a", now=T0)
    assert succeed(q, lease(q, "a"), ttl_ms, T0 + 1) == OutcomeApplied("a", "Succeeded")
    assert where(q, "a") == {"succeeded", "expiring"}
    assert expiring_at(q, "a") == T0 + 1 + kept_for
    assert q.prune(now=T0 + kept_for) == 0  # (no limits given: only the retained ones)
    info = q.get_job("a")
    assert info is not None and info.job.result == {"r": 1}
    assert q.prune(now=T0 + 1 + kept_for) == 1
    assert gone(q, "a")
    assert q.counts("default").completed == 0
    assert q.list_jobs("default", Status.COMPLETED, offset=0, limit=10) == []


def test_a_job_without_retention_is_left_to_the_namespace_prune(q: Quasar) -> None:
    q.enqueue("s", id="a", now=T0)
    succeed(q, lease(q, "a"), None, T0 + 1)
    assert where(q, "a") == {"succeeded"}
    assert q.prune(now=T0 + 10 * WINDOW) == 0
    assert q.prune(max_age_ms=0, now=T0 + 10 * WINDOW) == 1


def test_the_age_prune_takes_a_retained_job_out_of_expiring_too(q: Quasar) -> None:
    q.enqueue("s", id="a", now=T0)
    succeed(q, lease(q, "a"), 10 * WINDOW, T0 + 1)
    assert q.prune(max_age_ms=0, now=T0 + 2 * WINDOW) == 1
    assert gone(q, "a") and expiring_at(q, "a") is None


def test_a_bad_retention_is_refused_and_changes_nothing(q: Quasar) -> None:
    q.enqueue("s", id="a", now=T0)
    token = lease(q, "a")
    for bad in (-1, 2**50):
        refusal = succeed(q, token, bad, T0 + 1)
        assert isinstance(refusal, JobRefused) and isinstance(refusal.error, InvalidJob)
        assert "result_ttl" in refusal.error.reason
    assert where(q, "a") == {"leased"}


def test_a_retained_dependency_stays_while_a_blocked_job_needs_it(q: Quasar) -> None:
    q.enqueue("s", id="a", now=T0)
    q.enqueue("s", id="b", now=T0)
    q.enqueue("s", id="d", dependencies=["a", "b"], now=T0)
    succeed(q, lease(q, "a"), 0, T0 + 1)
    later = T0 + 1 + WINDOW
    assert q.prune(now=later) == 0  # d is blocked on b and names a: a stays
    assert expiring_at(q, "a") == later + WINDOW  # looked at again a window later
    assert where(q, "d") == {"blocked"}
    succeed(q, lease(q, "b", later), None, later + 1)  # d is released: both its dependencies
    assert where(q, "d") == {"ready"}  # succeeded, a's hash still there or not
    assert q.prune(now=later + WINDOW) == 1
    assert gone(q, "a") and q.get_job("b") is not None
    token = lease(q, "d", later + WINDOW)  # d runs, with a gone
    assert succeed(q, token, None, later + WINDOW + 1) == OutcomeApplied("d", "Succeeded")
    refused = q.enqueue("s", id="e", dependencies=["a"], now=later + WINDOW)
    assert refused == JobRefused(MissingDependency("a"))  # as for a pruned job


def test_a_resent_completion_still_finds_a_job_dropped_at_once(q: Quasar) -> None:
    q.enqueue("s", id="a", now=T0)
    call = q.calls.report_many("w", [Complete(lease(q, "a"), None, result_ttl_ms=0)], T0 + 1)
    first = q.execute_many([call])[0]
    assert q.prune(now=T0 + 1 + WINDOW - 1) == 0
    assert q.execute_many([call])[0] == first == [OutcomeApplied("a", "Succeeded")]


# --- through the task API and a worker -----------------------------------------------------------


@pytest.fixture
def app(backend: str, namespace: str) -> Any:
    with app_url(backend, namespace) as url, App(url, namespace=namespace) as made:
        yield made


def test_a_task_with_a_retention_keeps_its_result_that_long(app: App) -> None:
    @app.task(name="kept", result_ttl=300)
    def kept() -> str:
        return "done"

    @app.task(name="dropped", result_ttl=0)
    def dropped() -> None: ...

    with Worker(app, idle_wait=1.0, maintenance_interval=0.1):
        handle = kept.enqueue()
        assert handle.result(timeout=20) == "done"
        quick = dropped.enqueue()
        assert quick.result(timeout=20) is None  # still there within the re-send window
    client = app.client
    finished = {}
    for job_id, kept_for in ((handle.id, 300_000), (quick.id, WINDOW)):
        info = client.get_job(job_id)
        assert info is not None and isinstance(info.job.state, Succeeded)
        finished[job_id] = info.job.state.completed_at
        assert expiring_at(client, job_id) == finished[job_id] + kept_for
    assert client.prune(now=finished[quick.id] + WINDOW) == 1
    assert client.get_job(quick.id) is None and client.get_job(handle.id) is not None


def test_every_worker_drops_the_jobs_whose_retention_ran_out(app: App) -> None:
    client = app.client
    assert isinstance(client.enqueue("s", id="old", now=T0), JobApplied)
    succeed(client, lease(client, "old"), 0, T0 + 1)  # finished in 1970: long due
    with Worker(app, idle_wait=1.0, maintenance_interval=0.05):
        wait_for(lambda: client.get_job("old") is None, 10, "the worker's prune")
    assert gone(client, "old")


def test_a_negative_retention_is_refused_when_declared(app: App) -> None:
    with pytest.raises(ValueError, match="result_ttl"):
        app.task(lambda: None, name="x", result_ttl=-1)
    assert app.tasks == {}
