"""Every call of the clients, each transition in turn, through both clients on both backends.

The transition tests go through ``Quasar`` (the ``q`` fixture); this walk makes every public
call once more through ``AsyncQuasar`` too, with the same answers expected of both.
"""

from __future__ import annotations

from typing import Any

from quasar_redis import (
    BatchApplied,
    CancelApplied,
    Cancelled,
    ClaimsApplied,
    Complete,
    Failed,
    JobApplied,
    NewJob,
    OutcomeApplied,
    Quasar,
    Release,
    RetryWaiting,
    Succeeded,
    Waiting,
)

from .clients import clients, kind
from .helpers import T0, applied, claimed

__all__ = ["kind"]  # (the fixture: each test runs through both clients)


def test_every_call_through_both_clients(
    redis_client: Any, backend: str, namespace: str, kind: str
) -> None:
    with clients(kind, redis_client) as make:
        q = make(namespace, functions=backend == "redis")
        enqueues(q)
        lease_holders_calls(q)
        operators_calls(q)


def enqueues(q: Quasar) -> None:
    applied(q.enqueue("s", {"n": 1}, id="a", queue="q", priority=-1, now=T0))
    applied(q.enqueue_job(NewJob("s", id="b", queue="q"), now=T0))
    batch = q.enqueue_many([NewJob("s", id="c", queue="q"), NewJob("s", id="d", queue="q")], now=T0)
    assert isinstance(batch, BatchApplied) and [j.id for j in batch.jobs] == ["c", "d"]
    each = q.enqueue_each([NewJob("s", id="e", queue="q"), NewJob("s", id="a", queue="q")], now=T0)
    assert isinstance(each[0], JobApplied) and not isinstance(each[1], JobApplied)
    applied(q.enqueue("s", id="later", queue="q", delay_ms=1000, now=T0))
    assert q.counts("q", now=T0).available == 5
    revised = applied(q.enqueue("s", {"n": 2}, id="c", queue="q", input_revision=1, now=T0))
    assert (revised.payload, revised.input_revision) == ({"n": 2}, 1)
    changed = applied(q.change("c", payload={"n": 3}, priority=0, now=T0))
    assert (changed.payload, changed.input_revision, changed.priority) == ({"n": 3}, 2, 0)


def lease_holders_calls(q: Quasar) -> None:
    first = claimed(q.claim("q", "w", 1000, now=T0))
    assert first.job.id == "a" and first.job.payload == {"n": 1}
    many = q.claim_many("q", "w", 1000, 2, now=T0)
    assert isinstance(many, ClaimsApplied) and len(many.claims) == 2
    by_id = claimed(q.claim_job("e", "w", 1000, now=T0))
    beat = claimed(q.heartbeat(first.token, "w", 5000, now=T0 + 1))
    done = applied(q.complete(beat.token, "w", result=7, now=T0 + 2))
    assert done.state == Succeeded("inline", T0 + 2) and done.result == 7
    second, third = many.claims
    assert isinstance(applied(q.fail(second.token, "w", "boom", now=T0 + 2)).state, RetryWaiting)
    assert isinstance(applied(q.permanent_fail(third.token, "w", "bad", now=T0 + 2)).state, Failed)
    assert isinstance(applied(q.release(by_id.token, "w", now=T0 + 2)).state, Waiting)
    again = claimed(q.claim_job("e", "w", 1000, now=T0 + 3))
    reported = q.report_many("w", [Release(again.token)], now=T0 + 3)
    assert isinstance(reported[0], OutcomeApplied)
    again = claimed(q.claim_job("e", "w", 1000, now=T0 + 3))
    both = q.report_and_claim("w", [Complete(again.token)], "q", 1000, 5, now=T0 + 3)
    assert isinstance(both.outcomes[0], OutcomeApplied)
    assert isinstance(both.claim, ClaimsApplied)
    assert sorted(c.job.id for c in both.claim.claims) == ["b", "d"]  # (b: retried at once)


def operators_calls(q: Quasar) -> None:
    held = q.list_jobs("q", "executing", now=T0 + 3)
    assert sorted(j.id for j in held) == ["b", "d"]
    expired = applied(q.expire(held[0].id, held[0].fencing_version, now=T0 + 10_000))
    assert expired.id == held[0].id
    assert q.sweep_expired(now=T0 + 10_000).expired == (held[1].id,)
    assert q.promote_due(now=T0 + 10_000) == 1
    failed = q.list_jobs("q", "discarded", now=T0 + 10_000)
    assert isinstance(applied(q.retry(failed[0].id, now=T0 + 10_000)).state, RetryWaiting)
    cancelled = q.cancel("later", now=T0 + 10_000)
    assert isinstance(cancelled, CancelApplied) and isinstance(cancelled.job.state, Cancelled)
    # (never a job finished in the last 60 s, the re-send window)
    assert q.prune(max_age_ms=0, now=T0 + 80_000) == 3  # a and e succeeded, "later" cancelled
    assert q.get_job("a", now=T0 + 80_000) is None
