"""The phase tables of the worker: a held job's ``JobPhase`` and its lease's ``LeaseState``.

Every pair is tried: each change the table allows is made, each other one is refused with
``PhaseError`` and leaves the phase as it was. Then what the tables say as a whole: every phase
is reached from a claim and leads to the job being let go. And the outcome kinds, and the worker
as a context manager.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from quasar_redis import App, AsyncQuasar, ClaimApplied, Connector, LeaseToken, Quasar
from quasar_redis import _types as t
from quasar_redis.worker import (
    LEASE_CHANGES,
    PHASE_CHANGES,
    CancelFlag,
    HeldJob,
    JobContext,
    JobPhase,
    Lease,
    LeaseEvent,
    LeaseState,
    OutcomeKind,
    PhaseError,
    Worker,
    WorkerStats,
)
from quasar_redis.worker._outcomes import HANDED_BACK, count, failure, kind_of, success

P, S, E = JobPhase, LeaseState, LeaseEvent


@pytest.fixture(scope="module")
def claim() -> t.Claim:
    q = Quasar(App(connector=Connector("memory://")).connector.sync(), "phases")
    q.enqueue("s", id="j")
    claimed = q.claim("default", "w", 30_000)
    assert isinstance(claimed, ClaimApplied)
    return claimed.claim


def held_in(claim: t.Claim, phase: JobPhase) -> HeldJob:
    job = HeldJob(claim, 30_000, lambda *_: None, JobContext(claim.job, "w", CancelFlag()), 0.0)
    job.phase = phase  # (set directly: the phase under test, however it is reached)
    return job


def lease_in(claim: t.Claim, state: LeaseState) -> Lease:
    lease = Lease(claim, 30_000, lambda *_: None)
    lease.state = state
    return lease


# --- every pair ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "after"), list(itertools.product(JobPhase, JobPhase)))
def test_a_job_phase_changes_only_as_the_table_allows(
    claim: t.Claim, before: JobPhase, after: JobPhase
) -> None:
    job = held_in(claim, before)
    if after in PHASE_CHANGES[before]:
        job.move_to(after)
        assert job.phase is after
    else:
        with pytest.raises(PhaseError, match=f"from {before} to {after}"):
            job.move_to(after)
        assert job.phase is before


@pytest.mark.parametrize(("state", "event"), list(itertools.product(LeaseState, LeaseEvent)))
def test_a_lease_state_changes_only_as_the_table_allows(
    claim: t.Claim, state: LeaseState, event: LeaseEvent
) -> None:
    lease = lease_in(claim, state)
    allowed = LEASE_CHANGES.get(state, {})
    if event in allowed:
        lease.apply(event)
        assert lease.state is allowed[event]
    else:
        with pytest.raises(PhaseError, match=f"no change for {event} in {state}"):
            lease.apply(event)
        assert lease.state is state


# --- the tables as a whole -----------------------------------------------------------------------


def reached(start: Any, steps: Any) -> set[Any]:
    seen, todo = {start}, [start]
    while todo:
        for after in steps(todo.pop()):
            if after not in seen:
                seen.add(after)
                todo.append(after)
    return seen


def test_every_job_phase_is_reached_from_the_claim_and_leads_to_done() -> None:
    assert set(PHASE_CHANGES) == set(JobPhase)
    assert reached(P.QUEUED, PHASE_CHANGES.__getitem__) == set(JobPhase)
    assert PHASE_CHANGES[P.DONE] == frozenset()
    for phase in JobPhase:
        assert P.DONE in reached(phase, PHASE_CHANGES.__getitem__), phase
    assert all(phase not in PHASE_CHANGES[phase] for phase in JobPhase)  # no change to itself


def test_every_lease_state_is_reached_and_a_lost_lease_stays_lost() -> None:
    def steps(state: LeaseState) -> Any:
        return LEASE_CHANGES.get(state, {}).values()

    assert reached(S.HELD, steps) == set(LeaseState)
    assert set(steps(S.LOST)) == {S.LOST}
    # no heartbeat of an outcome on its way in a claim; one the keeper holds, it renews itself
    assert reached(S.FINISHING, steps) == {S.FINISHING, S.REPORTING}
    assert reached(S.REPORTING, steps) == {S.REPORTING}
    assert all(S.REPORTING in reached(s, steps) or s is S.LOST for s in LeaseState)


def test_lease_flags_read_from_its_state(claim: t.Claim) -> None:
    finishing = {S.FINISHING, S.BEATING_FINISHING, S.REPORTING}
    for state in LeaseState:
        lease = lease_in(claim, state)
        assert lease.lost is (state is S.LOST)
        assert lease.finishing is (state in finishing)


# --- outcomes ------------------------------------------------------------------------------------


def test_a_failure_redis_makes_retry_waiting_is_counted_as_retrying() -> None:
    app = App(connector=Connector("memory://"))
    task: Any = app.task(lambda: None, name="t", retry=0.5)
    job: Any = type("J", (), {"attempt": 1})()
    failed = failure(task, job, ValueError("x"), "ValueError", "x")
    assert failed.kind is OutcomeKind.FAILED and failed.delay_ms == 500
    retry_waiting = t.OutcomeApplied("j", "RetryWaiting")
    assert kind_of(failed, retry_waiting) is OutcomeKind.RETRYING
    assert kind_of(failed, t.OutcomeApplied("j", "Failed")) is OutcomeKind.FAILED
    assert kind_of(success(None), retry_waiting) is OutcomeKind.COMPLETED
    stats = WorkerStats()
    for kind in OutcomeKind:
        count(stats, kind)
    # (a rate-limited run is counted as a snooze: both hand the job back without an attempt)
    assert stats == WorkerStats(completed=1, retried=1, failed=2, snoozed=2, handed_back=1)
    token = LeaseToken("j", 0, "w", 1, 0, "n")
    assert HANDED_BACK.build(token) == t.Release(token, 0)


# --- with / async with ---------------------------------------------------------------------------


def test_with_a_worker_serves_for_the_block_and_raises_what_ended_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = App(connector=Connector("memory://"))
    done: list[int] = []
    task = app.task(done.append, name="note")
    with Worker(app, idle_wait=0.2) as worker:
        assert task.enqueue(1).result(timeout=10) is None
    assert done == [1] and worker.stats.completed == 1

    async def broken(self: AsyncQuasar, call: Any) -> Any:
        raise ZeroDivisionError("a bug in a claim")

    monkeypatch.setattr(AsyncQuasar, "execute", broken)
    with pytest.raises(ZeroDivisionError, match="a bug in a claim"), Worker(app, idle_wait=0.2):
        pass
    app.close()


def test_async_with_a_worker_serves_on_the_running_loop() -> None:
    app = App(connector=Connector("memory://"))
    task = app.task(lambda x: x * 2, name="double")

    async def scenario() -> Any:
        worker = Worker(app, idle_wait=0.2)
        async with worker:
            result = await (await task.aenqueue(21)).aresult(timeout=10)
        await app.aclose()
        return result, worker.stats.completed

    assert asyncio.run(scenario()) == (42, 1)
    app.close()
