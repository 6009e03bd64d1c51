"""The namespace consistency check the fault tests use (``tests/consistency.py``): it passes a
namespace holding every state, and finds each kind of damage a lost write can leave."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from quasar_redis import Quasar

from .consistency import Report, check
from .helpers import T0, applied, claimed


def every_state(q: Quasar) -> None:
    """One job in each state (and index): waiting, scheduled, blocked, retrying, leased,
    succeeded (with a retention), failed, cancelled."""
    for job_id in ("ready", "leased", "done", "failed", "retrying", "dep", "gone"):
        applied(q.enqueue("s", id=job_id, max_attempts=2 if job_id == "retrying" else 1, now=T0))
    applied(q.enqueue("s", id="later", delay_ms=60_000, now=T0))
    applied(q.enqueue("s", id="blocked", dependencies=["dep"], now=T0))
    tokens = {j: claimed(q.claim_job(j, "w", 10_000, now=T0)).token for j in ("leased", "done")}
    q.complete(tokens["done"], "w", now=T0 + 1)
    for job_id in ("failed", "retrying"):
        token = claimed(q.claim_job(job_id, "w", 10_000, now=T0)).token
        q.fail(token, "w", "boom", retry_delay_ms=5000, now=T0)
    q.cancel("gone", now=T0)


def test_a_namespace_in_every_state_is_consistent(q: Quasar) -> None:
    every_state(q)
    report = check(q.redis, q.namespace)
    assert report.ok, report
    assert report.jobs == 9
    assert report.states == {"C": 1, "F": 1, "L": 1, "R": 1, "S": 1, "W": 4}


def _unindex(q: Quasar) -> None:
    q.redis.zrem(q.keys.queue("default", "leased"), "leased")


def _twice(q: Quasar) -> None:
    q.redis.zadd(q.keys.queue("default", "delayed"), {"blocked": T0})


def _also_finished(q: Quasar) -> None:
    q.redis.zadd(q.keys.queue("default", "failed"), {"done": T0})


def _wrong_set(q: Quasar) -> None:
    key = q.keys.queue("default", "succeeded")
    q.redis.zrem(key, "done")
    q.redis.zadd(q.keys.queue("default", "cancelled"), {"done": T0})


def _hash_lost(q: Quasar) -> None:
    q.redis.delete(q.keys.job("failed"))


def _no_state(q: Quasar) -> None:
    q.redis.hdel(q.keys.job("later"), "st")


def _seq_lost(q: Quasar) -> None:
    q.redis.delete(q.keys.seq)


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        (_unindex, lambda r: r.orphans == ["leased"]),
        (_twice, lambda r: r.duplicates == ["blocked"]),
        (_also_finished, lambda r: r.duplicates == ["done"]),
        (_wrong_set, lambda r: r.misplaced == ["done"]),
        (_hash_lost, lambda r: r.dangling == ["failed"]),
        (_no_state, lambda r: r.damaged == ["later"]),
        (_seq_lost, lambda r: r.seq_behind),
    ],
    ids=["orphan", "two-of-one-of", "two-states", "misplaced", "dangling", "damaged", "seq"],
)
def test_the_check_finds_each_kind_of_damage(
    q: Quasar, damage: Callable[[Quasar], None], found: Callable[[Report], bool]
) -> None:
    every_state(q)
    damage(q)
    report = check(q.redis, q.namespace)
    assert not report.ok
    assert found(report), report
