"""A chord of 1,000 members over four ``quasar worker`` processes (real Redis): its callback runs
exactly once, given the 1,000 results in order, also when 10 members fail for good and an
operator retries them."""

from __future__ import annotations

import pytest

from quasar_redis import App, chord, group

from . import workflow_tasks as wt
from .helpers import REDIS_URL, wait_for
from .test_flow_fleet import Fleet, fleet

__all__ = ["fleet"]

pytestmark = pytest.mark.heavy

MEMBERS = 1000
WORKERS = 4
FAILING = frozenset(range(0, MEMBERS, MEMBERS // 10))  # 10 members


def test_a_chord_of_1000_calls_back_once_with_every_result_in_order(fleet: Fleet) -> None:
    fleet.app_path = "tests.workflow_tasks:app"
    app = App(REDIS_URL, namespace=fleet.namespace)
    tasks = wt.declare(app)
    members = group(tasks["square"].s(i, i in FAILING) for i in range(MEMBERS))
    handle = chord(members, tasks["collect"].s()).enqueue(id="squares")
    for n in range(WORKERS):
        fleet.start(f"w{n}", concurrency=8, lease_ms=30_000)
    q = app.client

    def members_ended() -> bool:
        fleet.check()
        info = q.batch("squares")
        return info is not None and info.finished == MEMBERS

    wait_for(members_ended, 120, "every member of the chord to end")
    info = q.batch("squares")
    assert info is not None and (info.succeeded, info.failed) == (MEMBERS - 10, 10)
    assert q.get_job(handle.last.id) is None  # 10 members failed: no callback yet
    for i in sorted(FAILING):
        assert q.retry(f"squares.{i + 1}") is not None  # the operator's retry

    assert handle.result(timeout=120) == [i * i for i in range(MEMBERS)]
    info = q.batch("squares")
    assert info is not None and info.succeeded == MEMBERS
    fired = info.callback("on_success")
    assert fired is not None and fired.job_id == handle.last.id
    assert q.redis.lrange(wt.runs_key(q.keys.root), 0, -1) == [handle.last.id.encode()]
    app.close()
