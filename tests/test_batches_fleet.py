"""A batch's callback under a fleet of worker processes (real Redis, real ``quasar worker``
processes), one of them killed with SIGKILL while the members run: the callback is enqueued once
and runs once, twenty times over. The fleet stays up between rounds; each round kills one worker
and starts another in its place."""

from __future__ import annotations

import pytest

from quasar_redis import BatchApplied, BatchOpened, NewJob, Quasar, Succeeded
from quasar_redis._call_codec import payload_of

from . import batch_tasks as bt
from .helpers import wait_for
from .test_flow_fleet import Fleet, fleet, q

__all__ = ["fleet", "q"]

pytestmark = pytest.mark.heavy

WORKERS = 8
ROUNDS = 20
MEMBERS = 200


def test_a_callback_fires_once_when_a_worker_dies_mid_batch(fleet: Fleet, q: Quasar) -> None:
    fleet.app_path = "tests.batch_tasks:app"
    names = [f"w{i}" for i in range(WORKERS)]
    for name in names:
        fleet.start(name, concurrency=4, lease_ms=bt.LEASE_MS)
    for round_ in range(ROUNDS):
        run_round(fleet, q, round_, names)


def run_round(fleet: Fleet, q: Quasar, round_: int, names: list[str]) -> None:
    batch_id = f"round-{round_}"
    callback = NewJob("bt.done", payload_of((), {}), max_attempts=20)
    assert q.open_batch(batch_id, on_complete=callback) == BatchOpened(batch_id, True)
    jobs = [
        NewJob("bt.work", payload_of((5,), {}), batch=batch_id, max_attempts=20)
        for _ in range(MEMBERS)
    ]
    assert isinstance(q.enqueue_many(jobs, ids_only=True), BatchApplied)
    assert q.close_batch(batch_id)

    def quarter_ended() -> bool:
        fleet.check()
        info = q.batch(batch_id)
        return info is not None and info.finished >= MEMBERS // 4

    wait_for(quarter_ended, 60, f"round {round_}: a quarter of the members ended")
    victim = names[round_ % len(names)]
    fleet.kill(victim)  # mid-run: the members it held are lost with it, until their lease ends
    names[round_ % len(names)] = replacement = f"{victim}-{round_}"
    fleet.start(replacement, concurrency=4, lease_ms=bt.LEASE_MS)
    job_id = f"{batch_id}@on_complete"

    def callback_done() -> bool:
        fleet.check()
        got = q.get_job(job_id)
        return got is not None and isinstance(got.job.state, Succeeded)

    wait_for(callback_done, 120, f"round {round_}: the callback ran")
    info = q.batch(batch_id)
    assert info is not None and (info.succeeded, info.pending) == (MEMBERS, 0)
    runs = [r.decode() for r in q.redis.lrange(bt.runs_key(q.keys.root, batch_id), 0, -1)]
    assert runs == [job_id], runs  # enqueued once, run once (its worker lived)
    got = q.get_job(job_id)
    assert got is not None and got.job.callback_of == batch_id
