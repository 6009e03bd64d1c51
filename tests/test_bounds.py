"""How long one call may hold Redis, measured by Redis itself (SLOWLOG) on a server of the test's
own: ``slowlog-log-slower-than`` is server-wide state."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from quasar_redis import CancelApplied, JobApplied, Quasar
from quasar_redis._calls import NewJob
from quasar_redis._types import DependencyPolicy

from .helpers import T0, delete_namespace, real_redis
from .servers import RedisServer

FAN_OUT = 20_000
BATCH = 1_000
# A cascade over FAN_OUT dependents takes about 0.45 s on a 2-core machine; the work list that
# was emptied from its front took 3.1 s.
CASCADE_BOUND_MS = 1_500


@pytest.fixture
def slowlog(private_server: RedisServer, namespace: str) -> Iterator[redis.Redis]:
    """A client of the private server whose SLOWLOG keeps every call slower than the bound."""
    client = real_redis(private_server.url)
    before = str(client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"])
    client.config_set("slowlog-log-slower-than", CASCADE_BOUND_MS * 1000)
    try:
        yield client
    finally:
        client.config_set("slowlog-log-slower-than", before)
        delete_namespace(client, namespace)
        client.close()


def fan_out(q: Quasar, policy: DependencyPolicy) -> str:
    """A root job and FAN_OUT dependents of it, enqueued in batches; the root's id."""
    q.enqueue("root", id="root", now=T0)
    for _ in range(FAN_OUT // BATCH):
        jobs = [NewJob("dep", dependencies=["root"], on_dependency_failure=policy)] * BATCH
        assert q.enqueue_many(jobs, ids_only=True, now=T0).ids  # type: ignore[union-attr]
    return "root"


def assert_within_bound(client: redis.Redis, call: Callable[[], Any]) -> Any:
    client.slowlog_reset()
    result = call()
    slow = [entry["duration"] // 1000 for entry in client.slowlog_get(128)]
    assert slow == [], f"calls over {CASCADE_BOUND_MS} ms: {slow} ms"
    return result


def test_a_cancel_cascade_is_linear(slowlog: redis.Redis, namespace: str) -> None:
    q = Quasar(slowlog, namespace)
    root = fan_out(q, "block")
    result = assert_within_bound(slowlog, lambda: q.cancel(root, now=T0 + 1))
    assert isinstance(result, CancelApplied)
    assert len(result.cascaded) == FAN_OUT
    assert q.counts("default", now=T0 + 1).cancelled == FAN_OUT + 1


@pytest.mark.parametrize("outcome", ["fail", "complete"])
def test_an_outcome_over_many_dependents_is_linear(
    slowlog: redis.Redis, namespace: str, outcome: str
) -> None:
    q = Quasar(slowlog, namespace)
    fan_out(q, "cancel")
    claim = q.claim("default", "w", 60_000, now=T0 + 1).claim  # type: ignore[union-attr]
    if outcome == "fail":
        result = assert_within_bound(
            slowlog, lambda: q.permanent_fail(claim.token, "w", "boom", now=T0 + 2)
        )
        expected = {"cancelled": FAN_OUT, "available": 0}
    else:
        result = assert_within_bound(slowlog, lambda: q.complete(claim.token, "w", now=T0 + 2))
        expected = {"cancelled": 0, "available": FAN_OUT}
    assert isinstance(result, JobApplied)
    counts = q.counts("default", now=T0 + 2)
    assert {"cancelled": counts.cancelled, "available": counts.available} == expected
