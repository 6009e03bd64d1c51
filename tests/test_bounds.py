"""How much work one call may do, measured by Redis itself: the commands it runs, its scripts'
own included (INFO commandstats), which no load on the machine changes. On a server of the
test's own, so that no other client's commands are counted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from quasar_redis import CancelApplied, JobApplied, Quasar, Status
from quasar_redis._calls import NewJob
from quasar_redis._types import DependencyPolicy

from .helpers import T0, delete_namespace

FAN_OUT, FAN_OUT_SMALL = 20_000, 1_000
BATCH = 1_000
#: Commands one cascade step may run: it visits at most 50 dependents (a handful of commands
#: each). In one call, FAN_OUT dependents held Redis 0.45 s.
STEP_COMMANDS_MAX = 1_000


def ran(client: redis.Redis) -> int:
    """How many commands Redis has run, less those that ask it (INFO, CONFIG)."""
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))


def per_call(client: redis.Redis, q: Quasar, call: Callable[[], Any]) -> tuple[Any, list[int]]:
    """``call``'s result, and how many commands each call ``q`` sent for it ran."""
    send, counts = q._send, []

    def metered(command: Any) -> Any:
        before = ran(client)
        try:
            return send(command)
        finally:
            counts.append(ran(client) - before)

    q._send = metered
    try:
        return call(), counts
    finally:
        q._send = send


def fan_out(q: Quasar, policy: DependencyPolicy, n: int) -> str:
    """A root job and ``n`` dependents of it, enqueued in batches; the root's id."""
    q.enqueue("root", id="root", now=T0)
    for start in range(0, n, BATCH):
        jobs = [NewJob("dep", dependencies=["root"], on_dependency_failure=policy)]
        assert q.enqueue_many(jobs * min(BATCH, n - start), ids_only=True, now=T0).ids  # type: ignore[union-attr]
    return "root"


def cut_in_steps(
    client: redis.Redis, namespace: str, prepared: Callable[[Quasar, int], Callable[[], None]]
) -> None:
    """The call ``prepared(q, n)`` returns (it checks its own result), over FAN_OUT dependents,
    runs its work in calls of no more commands than over FAN_OUT_SMALL (the same steps, more of
    them), each under STEP_COMMANDS_MAX."""
    most = {}
    for n in (FAN_OUT_SMALL, FAN_OUT):
        q = Quasar(client, f"{namespace}-{n}")
        _, counts = per_call(client, q, prepared(q, n))
        assert len(counts) > n // 50, counts[:10]  # a step visits at most 50 dependents
        most[n] = max(counts)
    assert most[FAN_OUT] <= most[FAN_OUT_SMALL] <= STEP_COMMANDS_MAX, most


@pytest.mark.heavy
def test_a_cancel_cascade_proceeds_in_short_steps(counted: redis.Redis, namespace: str) -> None:
    def prepared(q: Quasar, n: int) -> Callable[[], None]:
        root = fan_out(q, "block", n)

        def cancel() -> None:
            result = q.cancel(root, now=T0 + 1)
            assert isinstance(result, CancelApplied)
            assert len(result.cascaded) == n
            assert q.counts("default", now=T0 + 1).cancelled == n + 1

        return cancel

    cut_in_steps(counted, namespace, prepared)


@pytest.mark.heavy
@pytest.mark.parametrize("outcome", ["fail", "complete"])
def test_an_outcome_over_many_dependents_proceeds_in_short_steps(
    counted: redis.Redis, namespace: str, outcome: str
) -> None:
    def prepared(q: Quasar, n: int) -> Callable[[], None]:
        fan_out(q, "cancel", n)
        claim = q.claim("default", "w", 60_000, now=T0 + 1).claim  # type: ignore[union-attr]

        def finish() -> None:
            if outcome == "fail":
                result = q.permanent_fail(claim.token, "w", "boom", now=T0 + 2)
                expected = {"cancelled": n, "available": 0}
            else:
                result = q.complete(claim.token, "w", now=T0 + 2)
                expected = {"cancelled": 0, "available": n}
            assert isinstance(result, JobApplied)
            counts = q.counts("default", now=T0 + 2)
            assert {"cancelled": counts.cancelled, "available": counts.available} == expected

        return finish

    cut_in_steps(counted, namespace, prepared)


DEEP = 50_000


def test_a_page_by_cursor_costs_the_same_at_any_depth(counted: redis.Redis, namespace: str) -> None:
    """Every whole page of 1,000 runs as many commands, the 2nd as the 50th, the first no more
    (by offset, the 49th page re-read the 49,000 jobs before it)."""
    q = Quasar(counted, namespace)
    q.load_scripts()  # (so that no NOSCRIPT and SCRIPT LOAD on Redis 6.2 count as a page's work)
    for _ in range(DEEP // BATCH):
        assert q.enqueue_many([NewJob("s")] * BATCH, ids_only=True, now=T0).ids  # type: ignore[union-attr]

    def walk() -> int:
        seen, cursor = 0, None
        while True:
            page = q.page_jobs("default", Status.AVAILABLE, after=cursor, limit=1000, now=T0)
            seen, cursor = seen + len(page.jobs), page.next_cursor
            if cursor is None:
                return seen

    seen, counts = per_call(counted, q, walk)
    assert seen == DEEP
    whole = counts[: DEEP // 1000]  # (then one empty page ends the walk)
    assert len(set(whole[1:])) == 1 and whole[0] <= whole[1], counts


BACKLOG = 50_000


def commands_of(client: redis.Redis, call: Callable[[], Any]) -> tuple[Any, int]:
    """``call``'s result, and how many commands Redis ran for it, those its scripts ran included
    (INFO commandstats): the work of a call, whatever the machine's load."""
    client.config_resetstat()
    result = call()
    stats = client.info("commandstats")
    ran = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))
    return result, ran


def test_a_claim_is_bounded_whatever_the_backlog_of_due_jobs(
    counted: redis.Redis, namespace: str
) -> None:
    """A claim's work is bounded by its limit and the stated bounds (32 priority values read with
    nothing due, 100 promotions and expiries by time), not by how many jobs came due: over
    50,000 jobs due in one millisecond it runs as many commands as over 2,000."""
    q = Quasar(counted, namespace)
    q.load_scripts()  # (so that no NOSCRIPT and SCRIPT LOAD on Redis 6.2 count as a claim's work)

    def claim(limit: int) -> list[str]:
        result = q.claim_many("default", "w", 60_000, limit, now=T0 + 10)
        return [c.job.id for c in result.claims]  # type: ignore[union-attr]

    def backlog(n: int) -> None:
        delete_namespace(counted, namespace)
        for start in range(0, n, BATCH):
            jobs = [NewJob("s", available_at=T0 + 1)] * min(BATCH, n - start)
            assert q.enqueue_many(jobs, ids_only=True, now=T0).ids  # type: ignore[union-attr]
        idle = [NewJob("s", available_at=T0 + 10**6, priority=-100 + p) for p in range(31)]
        urgent = NewJob("s", id="urgent", available_at=T0 + 2, priority=-5)
        assert q.enqueue_many([*idle, urgent], ids_only=True, now=T0).ids  # type: ignore[union-attr]

    work: dict[int, list[int]] = {}
    for n in (2_000, BACKLOG):
        backlog(n)
        first, one = commands_of(counted, lambda: claim(1))
        assert first == ["urgent"]
        many, thousand = commands_of(counted, lambda: claim(1000))
        assert len(many) == 1000
        work[n] = [one, thousand]
    assert work[BACKLOG] == work[2_000], work
    assert work[BACKLOG][0] <= 200, work  # (160 on Redis 7.0)
