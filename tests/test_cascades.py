"""Cascades in bounded steps: a cancel, failure or completion visits at most CASCADE.step
dependents in its own call and leaves the rest as cascade work in Redis, which the client carries
on before it returns (and a worker's maintenance, for a client that went away). Between steps the
state is consistent and says what is true; re-sent calls get their first reply."""

from __future__ import annotations

import re
from typing import Any

from quasar_redis import (
    App,
    CancelApplied,
    Cancelled,
    CascadeReport,
    ClaimRefused,
    IncompleteDependency,
    JobApplied,
    NewJob,
    Quasar,
    Status,
    SweepReport,
    Worker,
)
from quasar_redis._calls import Call
from quasar_redis._replies import work_left
from quasar_redis._scripts import lua_dir

from .helpers import T0, applied, claimed, snapshot, wait_for, where

_LIB = (lua_dir() / "include" / "cascades.lua").read_text()
STEP = int(re.search(r"local CASCADE = \{step = (\d+),", _LIB).group(1))  # type: ignore[union-attr]
IDLE_MS = int(re.search(r"idle_ms = (\d+),", _LIB).group(1))  # type: ignore[union-attr]
WIDE = STEP * 2 + STEP // 2  # dependents: more than two steps' worth


def alone(q: Quasar, call: Call[Any]) -> tuple[Any, bool]:
    """``call``'s result as its own reply gives it, and whether it left cascade work: sent as a
    client that dies right after would send it (nothing carried on)."""
    keys = q._script_keys
    reply = q.redis.eval(call.script.source, len(keys), *keys, *call.args)
    reply, left = work_left(reply)
    return call.parse(reply), left


def cascade_keys(q: Quasar) -> list[str]:
    root = q.keys.root
    return sorted(k for k in snapshot(q) if k.startswith((root + "cascade", root + "cascades")))


def fan_out(q: Quasar, n: int, policy: str = "block", parent: str = "root") -> list[str]:
    """``n`` dependents of ``parent`` (enqueued here), in batches; their ids."""
    applied(q.enqueue("s", id=parent, now=T0))
    ids = [f"d{i}" for i in range(n)]
    for start in range(0, n, 1000):
        batch = [
            NewJob("s", id=i, dependencies=[parent], on_dependency_failure=policy)  # type: ignore[arg-type]
            for i in ids[start : start + 1000]
        ]
        assert q.enqueue_many(batch, ids_only=True, now=T0).ids  # type: ignore[union-attr]
    return ids


def test_a_wide_cancel_is_carried_on_to_its_end(q: Quasar) -> None:
    ids = fan_out(q, WIDE)
    # a grandchild under each of a few dependents, and a chain below one of them
    for i in range(5):
        applied(q.enqueue("s", id=f"g{i}", dependencies=[ids[i]], now=T0))
    applied(q.enqueue("s", id="gg", dependencies=["g0"], now=T0))
    result = q.cancel("root", now=T0 + 1)
    assert isinstance(result, CancelApplied)
    expected = {*ids, *(f"g{i}" for i in range(5)), "gg"}
    assert sorted(result.cascaded) == sorted(expected)
    counts = q.counts("default", now=T0 + 1)
    assert (counts.cancelled, counts.blocked) == (len(expected) + 1, 0)
    assert cascade_keys(q) == []
    assert "cw" not in q.redis.hgetall(q.keys.job("root"))
    info = q.get_job("gg", now=T0 + 1)
    assert info is not None and info.job.state == Cancelled("dependency g0 was cancelled", T0 + 1)


def test_between_steps_the_unreached_dependents_stay_blocked_and_say_why(q: Quasar) -> None:
    ids = fan_out(q, WIDE)
    result, left = alone(q, q.calls.cancel("root", None, "stop", T0 + 1))
    assert left and isinstance(result, CancelApplied)
    assert len(result.cascaded) == STEP
    reached = set(result.cascaded)
    waiting = [i for i in ids if i not in reached]
    counts = q.counts("default", now=T0 + 1)
    assert (counts.cancelled, counts.blocked) == (len(reached) + 1, len(waiting))
    assert isinstance(q.claim("default", "w", 1000, now=T0 + 1), ClaimRefused)
    assert q.claim_job(waiting[0], "w", 1000, now=T0 + 1) == ClaimRefused(
        IncompleteDependency("root")
    )
    info = q.get_job(waiting[0], now=T0 + 1)
    assert info is not None and info.status == Status.BLOCKED and info.waiting_on == "root"
    assert cascade_keys(q)
    # its client went away: nothing carries it on until it has been idle for a while
    assert q.resume_cascades(now=T0 + 2) == CascadeReport((), (), False)
    later, cancelled = T0 + 1 + IDLE_MS, list(result.cascaded)
    while True:
        step = q.resume_cascades(now=later)
        assert len(step.cancelled) <= STEP
        cancelled += step.cancelled
        if not step.more:
            break
    assert sorted(cancelled) == sorted(ids)
    assert cascade_keys(q) == []
    assert q.counts("default", now=later).cancelled == WIDE + 1


def test_a_wide_completion_releases_every_dependent_once(q: Quasar) -> None:
    ids = fan_out(q, WIDE)
    applied(q.enqueue("s", id="other", now=T0))
    applied(q.enqueue("s", id="both", dependencies=["root", "other"], now=T0))
    token = claimed(q.claim_job("root", "w", 1000, now=T0)).token
    result, left = alone(q, q.calls.complete(token, "w", "inline", None, T0 + 1))
    assert left and isinstance(result, JobApplied)
    blocked = q.list_jobs("default", "blocked", limit=1000, now=T0 + 1)
    unreached = [j.id for j in blocked if j.id != "both"]
    assert unreached  # not yet reached: blocked on a dependency that succeeded
    info = q.get_job(unreached[0], now=T0 + 1)
    assert info is not None and info.status == Status.BLOCKED and info.waiting_on == "root"
    # a claim by id of one of them goes through (its dependencies all succeeded) ...
    early = claimed(q.claim_job(unreached[0], "w", 1000, now=T0 + 1))
    assert early.job.pending_dependencies == 0
    # ... and the cascade, when it reaches it, does not count the dependency off twice
    while q.resume_cascades(now=T0 + 1 + IDLE_MS).more:
        pass
    counts = q.counts("default", now=T0 + 2)
    # every dependent but the one claimed, and "other"; "both" still waits on "other"
    assert (counts.available, counts.executing, counts.blocked) == (WIDE - 1 + 1, 1, 1)
    both = q.get_job("both", now=T0 + 2)
    assert both is not None and both.job.pending_dependencies == 1
    assert both.waiting_on == "other"
    # it has no dependency pending any more: a failed attempt goes back to be claimed
    applied(q.fail(early.token, "w", "again", now=T0 + 2))
    assert where(q, unreached[0]) == {"retrying", "ready"}
    assert set(q.redis.smembers(q.keys.dependents("root"))) == {i.encode() for i in [*ids, "both"]}
    assert cascade_keys(q) == []


def test_a_wide_failure_cancels_those_that_asked_and_keeps_the_rest_blocked(q: Quasar) -> None:
    ids = fan_out(q, WIDE, policy="cancel")
    blockers = [f"b{i}" for i in range(STEP)]
    assert q.enqueue_many(
        [NewJob("s", id=b, dependencies=["root"]) for b in blockers], ids_only=True, now=T0
    ).ids  # type: ignore[union-attr]
    token = claimed(q.claim_job("root", "w", 1000, now=T0)).token
    result = q.permanent_fail(token, "w", "boom", now=T0 + 1)
    assert isinstance(result, JobApplied)
    counts = q.counts("default", now=T0 + 1)
    assert (counts.cancelled, counts.blocked, counts.discarded) == (WIDE, STEP, 1)
    assert cascade_keys(q) == []
    info = q.get_job(ids[-1], now=T0 + 1)
    assert info is not None and info.job.state == Cancelled("dependency root failed", T0 + 1)
    # the failed job keeps its dependents: an operator retry can still let the blocked ones run
    assert q.redis.scard(q.keys.dependents("root")) == WIDE + STEP
    applied(q.retry("root", now=T0 + 2))
    token = claimed(q.claim_job("root", "w", 1000, now=T0 + 2)).token
    applied(q.complete(token, "w", now=T0 + 3))
    counts = q.counts("default", now=T0 + 3)
    assert (counts.available, counts.blocked) == (STEP, 0)


def test_a_failed_job_retried_and_completed_mid_cascade_releases_each_dependent_once(
    q: Quasar,
) -> None:
    ids = fan_out(q, WIDE)  # "block": they stay blocked when it fails
    token = claimed(q.claim_job("root", "w", 1000, now=T0)).token
    q.redis.hset(q.keys.job("d0"), "odf", "cancel")  # one asked to be cancelled
    _, left = alone(q, q.calls.permanent_fail(token, "w", "boom", "Error", T0 + 1))
    assert left
    applied(q.retry("root", now=T0 + 2))
    token = claimed(q.claim_job("root", "w", 1000, now=T0 + 2)).token
    applied(q.complete(token, "w", now=T0 + 3))
    while q.resume_cascades(now=T0 + 3 + IDLE_MS).more:
        pass
    for job_id in ids[1:]:
        info = q.get_job(job_id, now=T0 + 4)
        assert info is not None and info.job.pending_dependencies == 0, job_id
    counts = q.counts("default", now=T0 + 4)
    assert (counts.available, counts.cancelled, counts.blocked) == (WIDE - 1, 1, 0)
    assert cascade_keys(q) == []


def test_a_resent_cancel_gets_its_first_reply_and_its_work_is_still_carried_on(
    q: Quasar,
) -> None:
    ids = fan_out(q, WIDE)
    call = q.calls.cancel("root", None, "stop", T0 + 1)
    first, left = alone(q, call)
    again, still = alone(q, call)
    assert left and still and isinstance(first, CancelApplied)
    assert isinstance(again, CancelApplied) and again.cascaded == first.cascaded
    # the client carries on what a re-sent call left
    result = q.execute(call)
    assert isinstance(result, CancelApplied)
    assert sorted(result.cascaded) == sorted(ids)
    step = q.calls.carry_on(call)
    assert q.execute(step) == CascadeReport((), (), False)


def test_a_resent_step_gets_its_first_reply(q: Quasar) -> None:
    fan_out(q, WIDE)
    call = q.calls.cancel("root", None, "stop", T0 + 1)
    alone(q, call)
    step = q.calls.carry_on(call)
    first, _ = alone(q, step)
    again, _ = alone(q, step)
    assert isinstance(first, CascadeReport) and first.more and len(first.cancelled) == STEP
    assert again == first
    q.execute(q.calls.carry_on(call))
    assert q.counts("default", now=T0 + 1).cancelled == WIDE + 1


def test_a_damaged_dependent_met_in_a_step_is_skipped_and_reported(q: Quasar) -> None:
    ids = fan_out(q, WIDE)
    call = q.calls.cancel("root", None, "stop", T0 + 1)
    result, _ = alone(q, call)
    waiting = [i for i in ids if i not in result.cascaded]
    q.redis.hset(q.keys.job(waiting[0]), "sq", "x")
    damaged: tuple[str, ...] = ()
    while True:
        step = q.execute(q.calls.carry_on(call))
        damaged += step.damaged
        if not step.more:
            break
    assert damaged == (waiting[0],)
    assert q.redis.hget(q.keys.job(waiting[0]), "st") == b"W"
    assert q.counts("default", now=T0 + 1).cancelled == WIDE
    assert cascade_keys(q) == []


def test_expiries_of_a_sweep_carry_their_cascades_on(q: Quasar) -> None:
    ids = fan_out(q, WIDE, policy="cancel")
    q.redis.hset(q.keys.job("root"), "m", "1")
    claimed(q.claim_job("root", "w", 10, now=T0))
    report = q.sweep_expired(now=T0 + 10)
    assert report == SweepReport(("root",), ())
    info = q.get_job(ids[-1], now=T0 + 10)
    assert info is not None and isinstance(info.job.state, Cancelled)
    assert q.counts("default", now=T0 + 10).cancelled == WIDE
    assert cascade_keys(q) == []


def test_a_job_with_cascade_work_left_is_not_pruned_and_a_large_set_shrinks(q: Quasar) -> None:
    ids = fan_out(q, WIDE)
    token = claimed(q.claim_job("root", "w", 1000, now=T0)).token
    _, left = alone(q, q.calls.complete(token, "w", "inline", None, T0 + 1))
    assert left
    late = T0 + 10**6
    assert q.prune(max_age_ms=0, now=late) == 0  # its cascade is not done
    while q.resume_cascades(now=late).more:
        pass
    for claim in q.claim_many("default", "w", 1000, 1000, now=late).claims:  # type: ignore[union-attr]
        applied(q.complete(claim.token, "w", now=late))
    assert q.counts("default", now=late).completed == WIDE + 1
    # the root's dependents set (WIDE members, none needing it) shrinks over a few prunes
    rounds = 0
    while q.redis.exists(q.keys.job("root")):
        q.prune(max_age_ms=0, limit=1, now=late + 10**6)
        rounds += 1
        assert rounds < 10
    assert rounds > 1 and not q.redis.exists(q.keys.dependents("root"))
    assert len(ids) == WIDE


def test_a_pipelined_call_that_leaves_work_is_carried_on_too(q: Quasar) -> None:
    ids = fan_out(q, WIDE)
    cancel, counts = q.execute_many(
        [q.calls.cancel("root", None, "stop", T0 + 1), q.calls.counts("default", T0)]
    )
    assert isinstance(cancel, CancelApplied) and sorted(cancel.cascaded) == sorted(ids)
    # (the pipeline's calls ran before the cancel's cascade was carried on)
    assert (counts.cancelled, counts.blocked) == (STEP + 1, WIDE - STEP)
    assert cascade_keys(q) == []


def test_a_worker_carries_on_the_cascade_of_a_client_that_went_away(app: App) -> None:
    q = app.client
    ids = fan_out(q, WIDE)
    _, left = alone(q, q.calls.cancel("root", None, "stop", T0 + 1))  # then its client died
    assert left

    @app.task(name="s")
    def s() -> None: ...

    with Worker(app, idle_wait=1.0, maintenance_interval=0.05):
        wait_for(
            lambda: q.counts("default", now=T0 + 1).blocked == 0, 30, "the worker's maintenance"
        )
    for job_id in ids:  # (cancelled in 1970: the worker's prune may have deleted them since)
        info = q.get_job(job_id)
        assert info is None or isinstance(info.job.state, Cancelled), info
    assert cascade_keys(q) == []
