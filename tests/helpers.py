"""Helpers for looking at what the scripts left in Redis."""

from __future__ import annotations

from typing import Any

from quasar_redis import (
    Claim,
    ClaimApplied,
    ClaimResult,
    Job,
    JobApplied,
    JobResult,
    NewJob,
    Quasar,
)
from quasar_redis._keys import QUEUE_SETS

T0 = 1_000_000  # a fixed "now" for tests that control time

# A job with every option away from its default (it depends on a job "dep", which must exist).
FULL_JOB = NewJob(
    "stage.x",
    {"k": [1, 2]},
    id="full",
    queue="mail",
    input_ref="s3://b/k",
    input_revision=7,
    dependencies=["dep"],
    priority=-5,
    max_attempts=9,
    on_dependency_failure="cancel",
)


def applied(result: JobResult) -> Job:
    assert isinstance(result, JobApplied), result
    return result.job


def claimed(result: ClaimResult) -> Claim:
    assert isinstance(result, ClaimApplied), result
    return result.claim


def where(q: Quasar, job_id: str, queue: str = "default") -> set[str]:
    """The queue structures that hold ``job_id``."""
    found = set()
    for what in QUEUE_SETS:
        key = q.keys.queue(queue, what)
        raw = q.redis.zrange(key, 0, -1)
        if what == "ready":
            raw = [m[11:] for m in raw]  # after available_at and sequence (6 and 5 bytes)
        members = [m.decode() for m in raw]
        if job_id in members:
            found.add(what)
    return found


def snapshot(q: Quasar) -> dict[str, Any]:
    """Every key of the namespace with its type and whole value."""
    out: dict[str, Any] = {}
    for key in q.redis.scan_iter(match=f"quasar:{{{q.namespace}}}:*", count=1000):
        kind = q.redis.type(key).decode()
        if kind == "hash":
            value: Any = q.redis.hgetall(key)
        elif kind == "zset":
            value = q.redis.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(q.redis.smembers(key))
        elif kind == "string":
            value = q.redis.get(key)
        else:
            value = kind
        out[key.decode()] = (kind, value)
    return out


def raw_job(q: Quasar, job_id: str) -> dict[str, bytes]:
    return {k.decode(): v for k, v in q.redis.hgetall(q.keys.job(job_id)).items()}
