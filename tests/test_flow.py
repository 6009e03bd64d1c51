"""Flow control (docs/flow-control.md): groups that take turns, rate limits and concurrency caps
of a queue and of its groups, holds, what ``flow`` reads, the task API and the workers' limits,
and bad input (a typed error, nothing written). Every claim here is given its ``now``: the
rates are checked at chosen times, never against the machine's speed."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from typing import Any

import pytest

from quasar_redis import (
    App,
    Claim,
    ClaimRefused,
    ClaimsApplied,
    Complete,
    ConfigurationError,
    CorruptKeyError,
    Expired,
    InvalidArgument,
    InvalidJob,
    InvalidTaskCall,
    JobRefused,
    NothingClaimable,
    Quasar,
    Rate,
    Release,
    Waiting,
    Worker,
)
from quasar_redis._calls import Call
from quasar_redis._flow import UNLIMITED
from quasar_redis.retry import RateLimited

from .helpers import T0, applied, claimed, snapshot, wait_for

Q = "mail"
LEASE = 60_000


# --- plumbing ------------------------------------------------------------------------------------


def enqueue(q: Quasar, job_id: str, group: str | None = None, **job: Any) -> None:
    job.setdefault("now", T0)
    applied(q.enqueue("s", id=job_id, queue=Q, group=group, **job))


def claim_ids(q: Quasar, now: int, limit: int = 1000, queue: str = Q) -> list[str]:
    """The ids one claim of up to ``limit`` jobs leases at ``now`` ([] when none)."""
    result = q.claim_many(queue, "w", LEASE, limit, now=now)
    if isinstance(result, ClaimRefused):
        assert isinstance(result.error, NothingClaimable), result
        return []
    return [c.job.id for c in result.claims]


def claims(q: Quasar, now: int, limit: int = 1000) -> list[Claim]:
    result = q.claim_many(Q, "w", LEASE, limit, now=now)
    if isinstance(result, ClaimRefused):
        assert isinstance(result.error, NothingClaimable), result
        return []
    return list(result.claims)


def nothing_until(q: Quasar, now: int) -> int | None:
    """The ``next_at`` of a claim at ``now`` that must lease nothing."""
    result = q.claim_many(Q, "w", LEASE, 1000, now=now)
    assert isinstance(result, ClaimRefused) and isinstance(result.error, NothingClaimable), result
    return result.error.next_at


def flow_key(q: Quasar, what: str) -> str:
    """The key of ``what`` of the queue's flow (lua/include/flow_control.lua)."""
    return f"{q.keys.root}q:{Q}:{what}"


def without_records(keys: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in keys.items() if ":call:" not in k}


def group_of(job_id: str) -> str:
    return job_id.split("-", maxsplit=1)[0]


def state_of(q: Quasar, group: str, now: int) -> str:
    info = q.flow(Q, group=group, now=now)
    assert [g.name for g in info.groups] == [group]
    return info.groups[0].state


# --- 1. groups take turns ------------------------------------------------------------------------


def test_groups_take_turns_one_job_each_round(q: Quasar) -> None:
    # big: 30 jobs, priorities 2,1,0 cycling (the 0s first, each priority in enqueue order)
    for i in range(30):
        enqueue(q, f"big-{i:02d}", "big", priority=2 - i % 3)
    for g in ("a", "b"):
        for i in range(3):
            enqueue(q, f"{g}-{i}", g, priority=-i if g == "a" else 0)
    for i in range(3):
        enqueue(q, f"own-{i}", None)
    first = claim_ids(q, T0, limit=4)
    assert Counter(group_of(j) for j in first) == {"own": 1, "a": 1, "big": 1, "b": 1}
    # a group that joins now takes its turn after every group already taking turns
    enqueue(q, "c-0", "c", now=T0 + 1)
    rounds = [first]
    for r in range(2):
        rounds.append(claim_ids(q, T0 + 2 + r, limit=4 if r else 5))
    got = [j for r in rounds for j in r]
    assert Counter(group_of(j) for j in rounds[1]) == {"own": 1, "a": 1, "big": 1, "b": 1, "c": 1}
    assert Counter(group_of(j) for j in rounds[2]) == {"own": 1, "a": 1, "big": 1, "b": 1}
    assert rounds[1][-1] == "c-0"  # (at the back of the round)
    # within a group: priority (lowest first), then enqueue order
    assert [j for j in got if j.startswith("a-")] == ["a-2", "a-1", "a-0"]
    assert [j for j in got if j.startswith("b-")] == ["b-0", "b-1", "b-2"]
    assert [j for j in got if j.startswith("own-")] == ["own-0", "own-1", "own-2"]
    assert [j for j in got if j.startswith("big-")] == ["big-02", "big-05", "big-08"]
    # the groups emptied left the turns: only big remains, best first
    info = q.flow(Q, now=T0 + 10)
    assert [(g.name, g.state, g.ready) for g in info.groups] == [("big", "turn", 27)]
    assert info.ready_ungrouped == 0
    rest = claim_ids(q, T0 + 10)
    expected = sorted((f"big-{i:02d}" for i in range(30)), key=lambda j: (2 - int(j[4:]) % 3, j))
    assert rest == [j for j in expected if j not in got]
    assert nothing_until(q, T0 + 11) is not None  # (the leases' end)


def test_groups_interleave_in_a_many_claim_and_one_by_one_alike(q: Quasar) -> None:
    for g in ("x", "y"):
        for i in range(3):
            enqueue(q, f"{g}-{i}", g)
    one_by_one = []
    for i in range(6):
        one_by_one += claim_ids(q, T0 + i, limit=1)
    assert [group_of(j) for j in one_by_one] == ["x", "y"] * 3


@pytest.mark.parametrize("limit", [1, 3])
def test_a_job_freed_by_a_grouped_job_the_claim_expires_is_leased_in_its_place(
    q: Quasar, limit: int
) -> None:
    # "gone", of group "g", never started by its deadline: the claim expires it at its turn, and
    # "freed", which depends on it and runs whatever happens to it, is ready at once: it sorts
    # before "later", which the claim read before it freed "freed".
    enqueue(q, "gone", "g", available_at=T0 + 300, deadline=T0 + 301)
    enqueue(q, "first", priority=-1)
    enqueue(q, "freed", dependencies=["gone"], on_dependency_failure="run", now=T0 + 200)
    enqueue(q, "later", now=T0 + 400)
    leased = []
    while got := claim_ids(q, T0 + 500, limit):
        leased += got
    assert leased == ["first", "freed", "later"]
    info = q.get_job("gone")
    assert info is not None and isinstance(info.job.state, Expired)


# --- 2. a queue with neither groups nor limits ---------------------------------------------------


def test_a_queue_without_groups_or_limits_claims_best_first_and_has_no_flow(q: Quasar) -> None:
    enqueue(q, "late", priority=0, now=T0)
    enqueue(q, "urgent", priority=-5, now=T0 + 1)
    enqueue(q, "early", priority=0, available_at=T0 - 10, now=T0 + 2)
    enqueue(q, "low", priority=5, now=T0)
    assert claim_ids(q, T0 + 3) == ["urgent", "early", "late", "low"]
    kept = snapshot(q)
    assert not [w for w in ("flow", "groups", "gactive") if flow_key(q, w) in kept]
    info = q.flow(Q, now=T0 + 3)
    assert (info.rate, info.concurrency, info.groups, info.leased) == (None, None, (), 4)
    assert info.waiting_on == ""


# --- 3. the queue's rate -------------------------------------------------------------------------


def starts_over(q: Quasar, times: range, limit: int = 1000) -> list[int]:
    """Claims at each of ``times``; the time of each start."""
    started: list[int] = []
    for now in times:
        started += [now] * len(claim_ids(q, now, limit))
    return started


def max_in_window(started: list[int], window: int) -> int:
    return max(sum(1 for t in started if s <= t < s + window) for s in started)


@pytest.mark.parametrize("grouped", [False, True], ids=["ungrouped", "grouped"])
@pytest.mark.parametrize("burst", [0, 3])
def test_the_queue_rate_lets_at_most_n_plus_burst_start_in_any_window(
    q: Quasar, burst: int, grouped: bool
) -> None:
    for i in range(60):
        enqueue(q, f"j{i:02d}", f"g{i % 3}" if grouped else None)
    applied_at = q.set_limits(Q, rate=Rate(5, per=1.0, burst=burst), now=T0)
    assert applied_at == T0
    # at once: 1 + burst, then one every 200 ms
    assert len(claim_ids(q, T0)) == 1 + burst
    assert nothing_until(q, T0 + 1) == T0 + 200
    info = q.flow(Q, now=T0 + 1)
    assert info.next_at == T0 + 200 and "its rate" in info.waiting_on
    started = [T0] * (1 + burst) + starts_over(q, range(T0 + 50, T0 + 4000, 50))
    assert max_in_window(started, 1000) == 5 + burst
    assert len(started) == 1 + burst + 19  # every 200 ms from T0 + 200 to T0 + 3800
    assert sorted(set(started[1 + burst :])) == list(range(T0 + 200, T0 + 4000, 200))
    # after a long idle, the burst again, never more
    assert len(claim_ids(q, T0 + 60_000)) == 1 + burst


def test_the_rate_of_one_claim_is_cut_to_what_it_allows(q: Quasar) -> None:
    for i in range(10):
        enqueue(q, f"j{i}")
    q.set_limits(Q, rate=Rate(10, per=1.0, burst=4), now=T0)
    assert claim_ids(q, T0, limit=3) == ["j0", "j1", "j2"]
    assert claim_ids(q, T0) == ["j3", "j4"]  # 5 at once, the first 3 included
    assert claim_ids(q, T0 + 99) == []
    assert claim_ids(q, T0 + 100) == ["j5"]


# --- 4. the groups' rates ------------------------------------------------------------------------


def test_a_group_rate_holds_its_group_and_no_other(q: Quasar) -> None:
    for g in ("slow", "fast", "free"):
        for i in range(4):
            enqueue(q, f"{g}-{i}", g)
    for i in range(4):
        enqueue(q, f"own-{i}")
    q.set_limits(Q, group_rate=Rate(1, per=1.0), now=T0)
    q.set_group_limits(Q, "fast", rate=Rate(2, per=1.0, burst=1), now=T0)
    q.set_group_limits(Q, "free", rate=UNLIMITED, now=T0)
    got = claim_ids(q, T0)
    by_group = Counter(group_of(j) for j in got)
    assert by_group == {"slow": 1, "fast": 2, "free": 4, "own": 4}
    assert state_of(q, "slow", T0) == "wait" and state_of(q, "fast", T0) == "wait"
    info = q.flow(Q, group="slow", now=T0)
    assert info.groups[0].until == T0 + 1000 and info.groups[0].rate is None
    assert q.flow(Q, group="free", now=T0).groups[0].rate is UNLIMITED
    assert q.flow(Q, group="fast", now=T0).groups[0].rate == Rate(2, 1.0, 1)
    assert nothing_until(q, T0 + 1) == T0 + 500  # fast's next
    assert claim_ids(q, T0 + 500) == ["fast-2"]
    assert claim_ids(q, T0 + 999) == []
    assert sorted(claim_ids(q, T0 + 1000)) == ["fast-3", "slow-1"]
    assert claim_ids(q, T0 + 1999) == []
    assert claim_ids(q, T0 + 2000) == ["slow-2"]


def test_a_group_override_back_to_the_default_and_a_changed_default(q: Quasar) -> None:
    for i in range(5):
        enqueue(q, f"g-{i}", "g")
    q.set_limits(Q, group_rate=Rate(1, per=10.0), now=T0)
    q.set_group_limits(Q, "g", rate=UNLIMITED, now=T0)
    assert len(claim_ids(q, T0, limit=2)) == 2
    q.set_group_limits(Q, "g", rate=None, now=T0)  # back to the queue's default for groups
    assert len(claim_ids(q, T0 + 1)) == 1
    assert state_of(q, "g", T0 + 1) == "wait"
    q.set_limits(Q, group_rate=None, now=T0 + 2)  # no default: the waiting group goes on
    assert state_of(q, "g", T0 + 2) == "turn"
    assert len(claim_ids(q, T0 + 2)) == 2


# --- 5. concurrency caps -------------------------------------------------------------------------


def test_the_queue_cap_and_every_way_a_lease_ends_frees_its_place(q: Quasar) -> None:
    for i in range(12):
        enqueue(q, f"j{i:02d}", f"g{i % 2}" if i >= 8 else None)
    q.set_limits(Q, concurrency=3, now=T0)
    held = {c.job.id: c for c in claims(q, T0)}
    assert len(held) == 3
    assert claim_ids(q, T0 + 1) == []
    assert "its concurrency cap (3/3 leased)" in q.flow(Q, now=T0 + 1).waiting_on
    now = T0 + 2

    def one_more() -> None:
        nonlocal now
        now += 1
        new = claims(q, now)
        assert len(new) == 1, new
        held[new[0].job.id] = new[0]
        assert claim_ids(q, now) == []
        assert q.flow(Q, now=now).leased == 3

    first, second, third = list(held)
    applied(q.complete(held.pop(first).token, "w", now=now))
    one_more()
    applied(q.fail(held.pop(second).token, "w", "boom", retry_delay_ms=10**6, now=now))
    one_more()
    applied(q.release(held.pop(third).token, "w", delay_ms=10**6, now=now))
    one_more()
    victim = next(iter(held))
    q.cancel(victim, now=now)
    held.pop(victim)
    one_more()
    # a lease that ran out: swept, or expired by the claim itself
    expires = max(c.token.expires_at for c in held.values())
    report = q.sweep_expired(now=expires + 1)
    assert len(report.expired) == 3
    now = expires + 1
    new = claims(q, now)
    assert len(new) == 3
    later = max(c.token.expires_at for c in new) + 1
    assert len(claims(q, later)) == 3  # (the claim expired the 3 run-out leases first)


def test_a_group_cap_holds_its_group_until_a_lease_of_it_ends(q: Quasar) -> None:
    for g in ("a", "b"):
        for i in range(3):
            enqueue(q, f"{g}-{i}", g)
    enqueue(q, "own-0")
    q.set_limits(Q, group_concurrency=1, now=T0)
    q.set_group_limits(Q, "b", concurrency=2, now=T0)
    got = {c.job.id: c for c in claims(q, T0)}
    assert sorted(got) == ["a-0", "b-0", "b-1", "own-0"]
    assert state_of(q, "a", T0) == "full" and state_of(q, "b", T0) == "full"
    info = q.flow(Q, now=T0)
    assert info.groups_full == 2 and info.groups_in_turn == 0
    assert {(g.name, g.ready, g.leased) for g in info.groups} == {("a", 2, 1), ("b", 1, 2)}
    assert claim_ids(q, T0 + 1) == []
    # each way a lease ends brings its group back
    applied(q.complete(got["a-0"].token, "w", now=T0 + 2))
    assert state_of(q, "a", T0 + 2) == "turn"
    a1 = claims(q, T0 + 2)
    assert [c.job.id for c in a1] == ["a-1"]
    applied(q.release(got["b-0"].token, "w", delay_ms=10**6, now=T0 + 3))
    assert claim_ids(q, T0 + 3) == ["b-2"]
    assert claim_ids(q, T0 + 4) == []
    ends = a1[0].token.expires_at
    expired = q.sweep_expired(now=ends + 1)
    assert "a-1" in expired.expired
    assert state_of(q, "a", ends + 1) == "turn"


def test_a_group_cap_frees_by_fail_and_cancel_too(q: Quasar) -> None:
    for i in range(3):
        enqueue(q, f"a-{i}", "a", max_attempts=5)
    q.set_limits(Q, group_concurrency=1, now=T0)
    first = claims(q, T0)
    assert [c.job.id for c in first] == ["a-0"]
    applied(q.fail(first[0].token, "w", "boom", retry_delay_ms=10**6, now=T0 + 1))
    second = claims(q, T0 + 1)
    assert [c.job.id for c in second] == ["a-1"]
    q.cancel("a-1", now=T0 + 2)
    assert claim_ids(q, T0 + 2) == ["a-2"]
    info = q.flow(Q, group="a", now=T0 + 2)
    assert (info.groups[0].state, info.groups[0].leased) == ("idle", 1)


# --- 6. holds ------------------------------------------------------------------------------------


def test_a_release_with_a_hold_holds_the_group_and_no_other(q: Quasar) -> None:
    for g in ("a", "b"):
        for i in range(3):
            enqueue(q, f"{g}-{i}", g)
    enqueue(q, "own-0")
    first = claims(q, T0, limit=1)
    assert first[0].job.id == "own-0"
    a0 = claims(q, T0, limit=1)[0]
    assert a0.job.id == "a-0"
    applied(q.release(a0.token, "w", delay_ms=0, hold_ms=500, now=T0 + 1))
    assert claim_ids(q, T0 + 2) == ["b-0", "b-1", "b-2"]
    assert state_of(q, "a", T0 + 2) == "wait"
    assert q.flow(Q, group="a", now=T0 + 2).groups[0].until == T0 + 501
    assert nothing_until(q, T0 + 3) == T0 + 501
    assert claim_ids(q, T0 + 500) == []
    # (a-0 is available again since T0 + 1: after the others)
    assert claim_ids(q, T0 + 501) == ["a-1", "a-2", "a-0"]


def test_a_hold_of_an_ungrouped_job_holds_the_queue(q: Quasar) -> None:
    for i in range(3):
        enqueue(q, f"own-{i}")
    c = claims(q, T0, limit=1)[0]
    applied(q.release(c.token, "w", delay_ms=0, hold_ms=300, now=T0 + 1))
    assert nothing_until(q, T0 + 2) == T0 + 301
    assert q.flow(Q, now=T0 + 2).next_at == T0 + 301
    assert claim_ids(q, T0 + 300) == []
    assert claim_ids(q, T0 + 301) == ["own-1", "own-2", "own-0"]


def test_a_hold_of_an_ungrouped_job_holds_the_grouped_ones_too(q: Quasar) -> None:
    enqueue(q, "own-0")
    enqueue(q, "g-0", "g")
    c = claims(q, T0, limit=1)[0]
    assert c.job.id == "own-0"
    applied(q.release(c.token, "w", delay_ms=0, hold_ms=300, now=T0 + 1))
    assert claim_ids(q, T0 + 2) == []
    assert sorted(claim_ids(q, T0 + 301)) == ["g-0", "own-0"]


def test_a_hold_through_report_many(q: Quasar) -> None:
    for g in ("a", "b"):
        for i in range(2):
            enqueue(q, f"{g}-{i}", g)
    got = {c.job.id: c for c in claims(q, T0, limit=2)}
    assert sorted(got) == ["a-0", "b-0"]
    results = q.report_many(
        "w",
        [Release(got["a-0"].token, 0, 400), Complete(got["b-0"].token)],
        now=T0 + 1,
    )
    assert all(not isinstance(r, Exception | JobRefused) for r in results), results
    assert claim_ids(q, T0 + 2) == ["b-1"]
    assert state_of(q, "a", T0 + 2) == "wait"
    assert claim_ids(q, T0 + 401) == ["a-1", "a-0"]


def test_a_hold_does_not_shorten_a_longer_one(q: Quasar) -> None:
    for i in range(3):
        enqueue(q, f"a-{i}", "a")
    first, second = claims(q, T0, limit=2)
    applied(q.release(first.token, "w", hold_ms=1000, now=T0 + 1))
    applied(q.release(second.token, "w", hold_ms=10, now=T0 + 2))
    assert claim_ids(q, T0 + 500) == []
    assert len(claim_ids(q, T0 + 1001)) == 3


# --- 7. a worker: RateLimited holds the group ----------------------------------------------------


def test_a_task_raising_rate_limited_runs_again_later_and_holds_its_group(app: App) -> None:
    runs: list[tuple[str, int, float]] = []  # (key, attempt, time.time() at its start)
    raised: dict[str, float] = {}
    lock = threading.Lock()

    @app.task(name="call_api", queue=Q, group_by="account")
    def call_api(account: str, key: str) -> str:
        from quasar_redis import current_job

        with lock:
            runs.append((key, current_job().attempt, time.time()))
        if key == "first" and "first" not in raised:
            # the group's next job is enqueued while this one holds the group's only place
            call_api.enqueue(account, "second")
            raised["first"] = time.time()
            raise RateLimited(0.2)
        return key

    app.limit(Q, group_concurrency=1)
    with Worker(app, queues=[Q], maintenance_interval=0.1, idle_wait=0.2):
        handle = call_api.enqueue("acct", "first")
        assert handle.result(timeout=30) == "first"
        wait_for(lambda: len(runs) == 3, 30, "the second job's run")
        other = call_api.enqueue("other", "third")
        assert other.result(timeout=30) == "third"
    info = handle.info()
    assert info is not None and info.job.attempt == 1 and info.job.group == "acct"
    by_key = {key: (attempt, at) for key, attempt, at in runs}
    # (the server's clock stamps the hold: allow it a few ms behind this process's)
    assert by_key["second"][1] >= raised["first"] + 0.2 - 0.01
    assert [k for k, _, _ in runs].count("first") == 2
    first_again = [at for key, _, at in runs if key == "first"][1]
    assert first_again >= raised["first"] + 0.2 - 0.01
    stats = app.client.flow(Q, group="acct")
    assert stats.groups[0].leased == 0


def test_a_rate_limited_group_waits_while_the_others_run(app: App) -> None:
    raised: list[float] = []

    @app.task(name="limited", queue=Q, group_by="account")
    def limited(account: str, key: str) -> str:
        if key == "slow-down":
            raised.append(time.time())
            raise RateLimited(60)  # (long: the hold is seen however slow the machine)
        return key

    def waiting() -> Any:
        info = app.client.flow(Q, group="acct")
        return info if info.groups[0].state == "wait" else None

    def released() -> bool:
        info = first.info()
        return info is not None and isinstance(info.job.state, Waiting) and bool(raised)

    with Worker(app, queues=[Q], maintenance_interval=0.1, idle_wait=0.2):
        first = limited.enqueue("acct", "slow-down")
        wait_for(
            released,
            30,
            "the rate limited job to be handed back",
            describe=lambda: (first.info(), raised),
        )
        # (it waits its 60 s delay: the group has a ready job again once another comes)
        after = limited.enqueue("acct", "after")
        info = wait_for(
            waiting,
            30,
            "the rate limited group to wait",
            describe=lambda: (app.client.flow(Q, group="acct"), after.info(), raised),
        )
        other = limited.enqueue("other", "free")
        assert other.result(timeout=30) == "free"
        assert waiting() is not None
    until = info.groups[0].until
    assert until is not None and until >= raised[0] * 1000 + 60_000 - 10
    assert (info.groups[0].ready, info.groups[0].leased) == (1, None)  # (no group cap: uncounted)
    for handle in (first, after):
        job = handle.info()
        assert job is not None and job.job.attempt == 0, job  # (not run again: held)
    assert len(raised) == 1


# --- 8. flow reads -------------------------------------------------------------------------------


def test_flow_reports_limits_leases_and_groups_by_state(q: Quasar) -> None:
    for g in ("t1", "t2", "w1", "f1"):
        for i in range(2):
            enqueue(q, f"{g}-{i}", g)
    enqueue(q, "own-0")
    enqueue(q, "own-1")
    q.set_limits(
        Q,
        rate=Rate(100, per=1.0, burst=50),
        concurrency=50,
        group_concurrency=10,
        now=T0,
    )
    q.set_group_limits(Q, "w1", rate=Rate(1, per=60.0), now=T0)
    q.set_group_limits(Q, "f1", concurrency=1, now=T0)
    assert sorted(claim_ids(q, T0, limit=4)) == ["f1-0", "own-0", "t1-0", "t2-0"]
    assert sorted(claim_ids(q, T0, limit=2)) == ["own-1", "w1-0"]
    assert claim_ids(q, T0 + 1, limit=2) == ["t1-1", "t2-1"]
    info = q.flow(Q, now=T0 + 1)
    assert (info.rate, info.concurrency) == (Rate(100, 1.0, 50), 50)
    assert (info.group_rate, info.group_concurrency) == (None, 10)
    assert (info.leased, info.ready_ungrouped, info.next_at) == (8, 0, None)
    # t1 and t2 have nothing ready left: they left the turns (and the listing)
    assert claim_ids(q, T0 + 2) == []
    info = q.flow(Q, now=T0 + 2)
    rows = {g.name: (g.state, g.ready, g.leased) for g in info.groups}
    assert rows == {"w1": ("wait", 1, 1), "f1": ("full", 1, 1)}
    assert (info.groups_in_turn, info.groups_waiting, info.groups_full) == (0, 1, 1)
    waiting = q.flow(Q, group="w1", now=T0 + 2).groups[0]
    assert waiting.until == T0 + 60_000 and waiting.rate == Rate(1, 60.0)
    full = q.flow(Q, group="f1", now=T0 + 2).groups[0]
    assert (full.state, full.concurrency, full.until) == ("full", 1, None)
    assert q.flow(Q, group="nobody", now=T0 + 2).groups[0].state == "idle"
    assert q.flow(Q, groups=0, now=T0 + 2).groups == ()
    assert info.waiting_on == ""


def test_flow_waiting_on_names_the_cap_and_the_rate(q: Quasar) -> None:
    for i in range(3):
        enqueue(q, f"j{i}")
    q.set_limits(Q, rate=Rate(1, per=1.0), concurrency=1, now=T0)
    assert claim_ids(q, T0) == ["j0"]
    info = q.flow(Q, now=T0 + 1)
    assert info.waiting_on == "its concurrency cap (1/1 leased) and its rate, until 1001000 ms"


# --- 9. the task API and the app's limits --------------------------------------------------------


def test_group_by_puts_the_argument_as_the_jobs_group(app: App) -> None:
    @app.task(name="charge", queue=Q, group_by="account")
    def charge(account: Any, amount: int = 0) -> None:
        return None

    @app.task(name="pick", queue=Q, group_by="nope")
    def pick(account: str) -> None:
        return None

    def group(handle: Any) -> str | None:
        info = handle.info()
        assert info is not None
        return info.job.group  # type: ignore[no-any-return]

    assert group(charge.enqueue("acme", 5)) == "acme"
    assert group(charge.enqueue(account="globex")) == "globex"
    assert group(charge.enqueue(42)) == "42"
    assert group(charge.options(group="x").enqueue("acme")) == "x"
    before = app.client.counts(Q).available
    for bad in (None, 1.5, ["a"], {"a": 1}, True, "has space", "x" * 300):
        with pytest.raises(InvalidTaskCall):
            charge.enqueue(bad)
    with pytest.raises(InvalidTaskCall, match="nope"):
        pick.enqueue("acme")
    assert app.client.counts(Q).available == before == 4


def test_the_apps_limits_are_set_when_a_worker_of_the_queue_starts(app: App) -> None:
    @app.task(name="noop", queue=Q)
    def noop() -> None:
        return None

    app.limit(Q, rate="20/s+5", concurrency=4, group_concurrency=2)
    app.limit(Q, group_rate=Rate(1, per=2.0))
    app.limit("elsewhere", concurrency=1)
    with pytest.raises(InvalidArgument):
        app.limit(Q)
    with pytest.raises(InvalidArgument):
        app.limit(Q, concurrency=0)
    with pytest.raises(ConfigurationError, match="queue must be"):
        app.limit("bad queue", concurrency=1)
    with pytest.raises(InvalidArgument, match="unknown queue"):
        app.client.set_limits(Q, concurrency=1)  # (nothing was enqueued to it yet)

    def declared() -> Any:
        info = app.client.flow(Q)
        return info if info.concurrency == 4 else None

    with Worker(app, queues=[Q], maintenance_interval=0.1, idle_wait=0.2):
        info = wait_for(declared, 30, "the worker's start to set the app's limits")
        assert noop.enqueue().result(timeout=30) is None
    assert info.rate == Rate(20, 1.0, 5)
    assert (info.group_concurrency, info.group_rate) == (2, Rate(1, 2.0))
    assert app.client.flow("elsewhere").concurrency is None  # (no worker served it)


# --- 10. bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Rate(0),
        lambda: Rate(-1),
        lambda: Rate(5, per=0),
        lambda: Rate(5, per=-1),
        lambda: Rate(5, per=0.0001),
        lambda: Rate(5, per=7 * 86400 + 1),
        lambda: Rate(5, per=math.nan),
        lambda: Rate(5, burst=-1),
        lambda: Rate(5, burst=1_000_001),
        lambda: Rate(2_000, per=0.001),
        lambda: Rate(1.5),  # type: ignore[arg-type]
        lambda: Rate.parse("0/s"),
        lambda: Rate.parse("-1/s"),
        lambda: Rate.parse("5/0s"),
        lambda: Rate.parse("5/fortnight"),
        lambda: RateLimited(0),
        lambda: RateLimited(-1),
        lambda: RateLimited(math.nan),
        lambda: RateLimited(math.inf),
        lambda: RateLimited(0.0001),
    ],
)
def test_a_bad_rate_or_retry_after_is_refused_where_it_is_made(make: Any) -> None:
    with pytest.raises(InvalidArgument):
        make()


@pytest.mark.parametrize(
    "limits",
    [
        {},
        {"rate": "0/s"},
        {"rate": 5},
        {"rate": UNLIMITED},
        {"group_rate": UNLIMITED},
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": 1_000_001},
        {"concurrency": True},
        {"concurrency": UNLIMITED},
        {"group_concurrency": 0},
        {"group_concurrency": 2.0},
    ],
)
def test_bad_queue_limits_are_refused_and_write_nothing(q: Quasar, limits: dict[str, Any]) -> None:
    enqueue(q, "j")
    q.set_limits(Q, concurrency=3, now=T0)
    before = snapshot(q)
    with pytest.raises(InvalidArgument):
        q.set_limits(Q, now=T0 + 1, **limits)
    assert snapshot(q) == before


@pytest.mark.parametrize(
    ("group", "limits"),
    [
        ("g", {}),
        ("g", {"concurrency": 0}),
        ("g", {"rate": "0/s"}),
        ("g", {"rate": 5}),
        ("x" * 257, {"concurrency": 1}),
        ("has space", {"concurrency": 1}),
        ("tab\there", {"concurrency": 1}),
        ("", {"concurrency": 1}),
    ],
)
def test_bad_group_limits_are_refused_and_write_nothing(
    q: Quasar, group: str, limits: dict[str, Any]
) -> None:
    enqueue(q, "j", "g")
    before = snapshot(q)
    with pytest.raises(InvalidArgument):
        q.set_group_limits(Q, group, now=T0 + 1, **limits)
    assert snapshot(q) == before


@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        (["rate", "0 1000 0"], "limit must be at least 1"),
        (["rate", "-1 1000 0"], "rate must be"),
        (["rate", "5 0 0"], "window must be 1 ms to 7 days"),
        (["rate", "5 604800001 0"], "window must be 1 ms to 7 days"),
        (["rate", "5 1000 -1"], "rate must be"),
        (["rate", "5 1000 1000001"], "burst must be at most"),
        (["rate", "2000 1 0"], "at most 1000 a ms"),
        (["rate", "none"], "rate must be"),
        (["rate", "5/s"], "rate must be"),
        (["cap", "0"], "cap must be a whole number"),
        (["cap", "1000001"], "cap must be a whole number"),
        (["cap", "1.5"], "cap must be a whole number"),
        (["cap", "none"], "cap must be a whole number"),
        (["gcap", "-3"], "gcap must be a whole number"),
        (["speed", "1"], "unknown limit"),
        (["cap"], "give at least one limit"),
        ([], "give at least one limit"),
    ],
)
def test_the_script_refuses_bad_limits_and_writes_nothing(
    q: Quasar, pairs: list[str], says: str
) -> None:
    enqueue(q, "j")
    good = q.calls.set_limits(Q, concurrency=1, now=T0)
    args = list(good.args[:5]) + pairs
    before = snapshot(q)
    with pytest.raises(InvalidArgument, match=says):
        q.execute(Call(good.script, tuple(args), good.parse))
    assert snapshot(q) == before


def test_limits_of_an_unknown_queue_are_refused_unless_declared(q: Quasar) -> None:
    before = snapshot(q)
    with pytest.raises(InvalidArgument, match="unknown queue"):
        q.set_limits("never", concurrency=2, now=T0)
    with pytest.raises(InvalidArgument, match="unknown queue"):
        q.set_group_limits("never", "g", concurrency=2, now=T0)
    with pytest.raises(InvalidArgument):
        q.set_limits("bad queue", concurrency=2, declare=True, now=T0)
    assert snapshot(q) == before
    q.set_limits("never", concurrency=2, declare=True, now=T0)
    assert q.flow("never", now=T0).concurrency == 2
    assert "never" in [info.name for info in q.queues(now=T0)]


@pytest.mark.parametrize(
    "group",
    ["x" * 257, "has space", "new\nline", "\u00a0nbsp"],
)
def test_a_bad_group_on_enqueue_is_refused_and_writes_nothing(q: Quasar, group: str) -> None:
    enqueue(q, "j0", "g")
    before = snapshot(q)
    try:
        result = q.enqueue("s", id="j1", queue=Q, group=group, now=T0)
    except InvalidArgument:
        pass
    else:
        assert isinstance(result, JobRefused) and isinstance(result.error, InvalidJob), result
        assert "group" in result.error.reason
    assert snapshot(q) == before


def test_a_group_of_256_bytes_is_accepted(q: Quasar) -> None:
    enqueue(q, "j0", "g" * 256)
    assert claim_ids(q, T0) == ["j0"]


@pytest.mark.parametrize("hold", [0, -1, 1.5, "5"])
def test_a_bad_hold_is_refused_and_changes_nothing(q: Quasar, hold: Any) -> None:
    enqueue(q, "j", "g")
    c = claims(q, T0)[0]
    before = snapshot(q)
    try:
        result = q.release(c.token, "w", delay_ms=0, hold_ms=hold, now=T0 + 1)
    except InvalidArgument:
        pass
    else:
        assert isinstance(result, JobRefused) and isinstance(result.error, InvalidJob), result
        assert "hold" in result.error.reason
    assert snapshot(q) == before
    try:
        results = q.report_many("w", [Release(c.token, 0, hold)], now=T0 + 1)
    except InvalidArgument:
        pass
    else:
        assert isinstance(results[0], JobRefused), results
        assert isinstance(results[0].error, InvalidJob), results
    # (a report keeps its refusals in its call's record, for a re-sent report: nothing else)
    assert without_records(snapshot(q)) == without_records(before)


@pytest.mark.parametrize(
    ("key", "write"),
    [
        ("groups", lambda r, k: r.set(k, "x")),
        ("flow", lambda r, k: r.set(k, "x")),
        ("gwait", lambda r, k: r.sadd(k, "x")),
        ("gfull", lambda r, k: r.set(k, "x")),
        ("gactive", lambda r, k: r.rpush(k, "x")),
        ("glimits", lambda r, k: r.set(k, "x")),
    ],
)
def test_a_flow_key_of_the_wrong_type_is_refused_by_a_claim_and_by_set_limits(
    q: Quasar, key: str, write: Any
) -> None:
    enqueue(q, "j0", "g")
    enqueue(q, "j1")
    k = flow_key(q, key)
    q.redis.delete(k)
    write(q.redis, k)
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match=rf":{key}\b.*holds a"):
        q.claim_many(Q, "w", LEASE, 10, now=T0)
    with pytest.raises(CorruptKeyError, match=rf":{key}\b.*holds a"):
        q.set_limits(Q, concurrency=2, now=T0)
    with pytest.raises(CorruptKeyError, match=rf":{key}\b.*holds a"):
        q.set_group_limits(Q, "g", concurrency=2, now=T0)
    with pytest.raises(CorruptKeyError, match=rf":{key}\b.*holds a"):
        q.flow(Q, now=T0)
    assert snapshot(q) == before


def test_a_group_key_of_the_wrong_type_is_refused(q: Quasar) -> None:
    enqueue(q, "j0", "g")
    k = flow_key(q, "gready:h")
    q.redis.set(k, "x")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match="gready:h"):
        q.set_group_limits(Q, "h", concurrency=2, now=T0)
    with pytest.raises(CorruptKeyError, match="gready:h"):
        q.flow(Q, group="h", now=T0)
    assert snapshot(q) == before


# --- 11. re-sent calls ---------------------------------------------------------------------------


def test_a_resent_flowed_claim_gives_the_same_claims_and_charges_nothing_more(q: Quasar) -> None:
    for g in ("a", "b"):
        for i in range(3):
            enqueue(q, f"{g}-{i}", g)
    enqueue(q, "own-0")
    q.set_limits(Q, rate=Rate(10, per=1.0, burst=2), group_concurrency=2, now=T0)
    call = q.calls.claim_many(Q, "w", LEASE, 10, T0)
    first = q.execute(call)
    assert isinstance(first, ClaimsApplied) and len(first.claims) == 3
    before = snapshot(q)
    again = q.execute(call)
    assert isinstance(again, ClaimsApplied)
    assert [c.token for c in again.claims] == [c.token for c in first.claims]
    assert snapshot(q) == before
    # the rate was charged once: the next start at T0 + 100
    assert claim_ids(q, T0 + 99) == []
    assert len(claim_ids(q, T0 + 100)) == 1


def test_a_resent_set_limits_and_hold_change_nothing_more(q: Quasar) -> None:
    for i in range(2):
        enqueue(q, f"a-{i}", "a")
    call = q.calls.set_limits(Q, group_concurrency=1, now=T0)
    q.execute(call)
    c = claimed(q.claim(Q, "w", LEASE, now=T0))
    release = q.calls.release(c.token, "w", 0, T0 + 1, hold_ms=100)
    applied(q.execute(release))
    before = snapshot(q)
    q.execute(call)
    q.execute(release)
    assert snapshot(q) == before
    assert claim_ids(q, T0 + 100) == []
    assert len(claim_ids(q, T0 + 101)) == 1


def test_a_removed_default_rate_frees_its_groups_after_a_hold_too(q: Quasar) -> None:
    for i in range(3):
        enqueue(q, f"g-{i}", "g")
    enqueue(q, "h-0", "h")
    q.set_limits(Q, group_rate=Rate(1, per=10.0), now=T0)
    got = {c.job.id: c for c in claims(q, T0)}
    assert sorted(got) == ["g-0", "h-0"]
    applied(q.release(got["h-0"].token, "w", hold_ms=5, now=T0 + 1))  # (a hold in the queue)
    q.set_limits(Q, group_rate=None, now=T0 + 2)
    assert claim_ids(q, T0 + 2) == ["g-1", "g-2"]


def test_an_empty_group_is_no_group(q: Quasar) -> None:
    job = applied(q.enqueue("s", id="j", queue=Q, group="", now=T0))
    assert job.group is None
    assert claim_ids(q, T0) == ["j"]
