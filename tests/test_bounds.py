"""How long one call may hold Redis, measured by Redis itself (SLOWLOG) on a server of the test's
own: the SLOWLOG settings are server-wide state."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from quasar_redis import CancelApplied, JobApplied, Quasar, Status
from quasar_redis._calls import NewJob
from quasar_redis._types import DependencyPolicy

from .helpers import T0, delete_namespace, real_redis
from .servers import RedisServer

FAN_OUT = 20_000
BATCH = 1_000
# A cascade proceeds in steps of at most 50 dependents, a few ms each (in one call, FAN_OUT
# dependents held Redis 0.45 s); the bound allows for a loaded 2-core machine and for a SLOWLOG
# that logs every command. tests/test_scale.py holds 100,000 dependents to 10 ms of CPU a call.
CASCADE_BOUND_MS = 250


@pytest.fixture
def slowlog(private_server: RedisServer, namespace: str) -> Iterator[redis.Redis]:
    """A client of the private server whose SLOWLOG keeps every command and its duration."""
    client = real_redis(private_server.url)
    settings = client.config_get("slowlog-*")
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 1024)
    try:
        yield client
    finally:
        for name, value in settings.items():
            client.config_set(str(name), str(value))
        delete_namespace(client, namespace)
        client.close()


def fan_out(q: Quasar, policy: DependencyPolicy) -> str:
    """A root job and FAN_OUT dependents of it, enqueued in batches; the root's id."""
    q.enqueue("root", id="root", now=T0)
    for _ in range(FAN_OUT // BATCH):
        jobs = [NewJob("dep", dependencies=["root"], on_dependency_failure=policy)] * BATCH
        assert q.enqueue_many(jobs, ids_only=True, now=T0).ids  # type: ignore[union-attr]
    return "root"


def assert_within(client: redis.Redis, bound_ms: int, call: Callable[[], Any]) -> Any:
    """``call``'s result, once Redis's SLOWLOG shows no command of it over ``bound_ms``."""
    client.slowlog_reset()
    result = call()
    worst = max(entry["duration"] for entry in client.slowlog_get(1024)) / 1000
    assert worst < bound_ms, f"a call held Redis {worst:.1f} ms (bound {bound_ms} ms)"
    return result


@pytest.mark.heavy
def test_a_cancel_cascade_proceeds_in_short_steps(slowlog: redis.Redis, namespace: str) -> None:
    q = Quasar(slowlog, namespace)
    root = fan_out(q, "block")
    result = assert_within(slowlog, CASCADE_BOUND_MS, lambda: q.cancel(root, now=T0 + 1))
    assert isinstance(result, CancelApplied)
    assert len(result.cascaded) == FAN_OUT
    assert q.counts("default", now=T0 + 1).cancelled == FAN_OUT + 1


@pytest.mark.heavy
@pytest.mark.parametrize("outcome", ["fail", "complete"])
def test_an_outcome_over_many_dependents_proceeds_in_short_steps(
    slowlog: redis.Redis, namespace: str, outcome: str
) -> None:
    q = Quasar(slowlog, namespace)
    fan_out(q, "cancel")
    claim = q.claim("default", "w", 60_000, now=T0 + 1).claim  # type: ignore[union-attr]
    if outcome == "fail":
        result = assert_within(
            slowlog,
            CASCADE_BOUND_MS,
            lambda: q.permanent_fail(claim.token, "w", "boom", now=T0 + 2),
        )
        expected = {"cancelled": FAN_OUT, "available": 0}
    else:
        result = assert_within(
            slowlog, CASCADE_BOUND_MS, lambda: q.complete(claim.token, "w", now=T0 + 2)
        )
        expected = {"cancelled": 0, "available": FAN_OUT}
    assert isinstance(result, JobApplied)
    counts = q.counts("default", now=T0 + 2)
    assert {"cancelled": counts.cancelled, "available": counts.available} == expected


DEEP = 50_000
# A page of 1,000 jobs takes a few ms wherever it starts; by offset, the 49th page re-read the
# 49,000 jobs before it.
PAGE_BOUND_MS = 50


def test_a_page_by_cursor_costs_the_same_at_any_depth(slowlog: redis.Redis, namespace: str) -> None:
    q = Quasar(slowlog, namespace)
    for _ in range(DEEP // BATCH):
        assert q.enqueue_many([NewJob("s")] * BATCH, ids_only=True, now=T0).ids  # type: ignore[union-attr]

    def walk() -> int:
        seen, cursor = 0, None
        while True:
            page = q.page_jobs("default", Status.AVAILABLE, after=cursor, limit=1000, now=T0)
            seen, cursor = seen + len(page.jobs), page.next_cursor
            if cursor is None:
                return seen

    assert assert_within(slowlog, PAGE_BOUND_MS, walk) == DEEP


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
    slowlog: redis.Redis, namespace: str
) -> None:
    """A claim's work is bounded by its limit and the stated bounds (32 priority values read with
    nothing due, 100 promotions and expiries by time), not by how many jobs came due: over
    50,000 jobs due in one millisecond it runs as many commands as over 2,000."""
    q = Quasar(slowlog, namespace)

    def claim(limit: int) -> list[str]:
        result = q.claim_many("default", "w", 60_000, limit, now=T0 + 10)
        return [c.job.id for c in result.claims]  # type: ignore[union-attr]

    def backlog(n: int) -> None:
        delete_namespace(slowlog, namespace)
        for start in range(0, n, BATCH):
            jobs = [NewJob("s", available_at=T0 + 1)] * min(BATCH, n - start)
            assert q.enqueue_many(jobs, ids_only=True, now=T0).ids  # type: ignore[union-attr]
        idle = [NewJob("s", available_at=T0 + 10**6, priority=-100 + p) for p in range(31)]
        urgent = NewJob("s", id="urgent", available_at=T0 + 2, priority=-5)
        assert q.enqueue_many([*idle, urgent], ids_only=True, now=T0).ids  # type: ignore[union-attr]

    work: dict[int, list[int]] = {}
    for n in (2_000, BACKLOG):
        backlog(n)
        first, one = commands_of(slowlog, lambda: claim(1))
        assert first == ["urgent"]
        many, thousand = commands_of(slowlog, lambda: claim(1000))
        assert len(many) == 1000
        work[n] = [one, thousand]
    assert work[BACKLOG] == work[2_000], work
    assert work[BACKLOG][0] <= 200, work  # (160 on Redis 7.0)
