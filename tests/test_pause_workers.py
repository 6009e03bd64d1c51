"""Pause and resume under load: several real ``Worker`` instances serving one queue, on both
backends.

Once ``pause`` returns, no lease of the queue is granted (every job's last claim time, on the
server's clock, is at most the time read right after the pause returned), the workers go idle,
and jobs enqueued meanwhile wait; after ``resume`` the workers go on, woken at once (an idle wait
far longer than the test's deadline shows that no timeout woke them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from quasar_redis import App, BatchApplied, Connector, NewJob, Quasar, Succeeded, Worker
from quasar_redis._call_codec import payload_of

from .helpers import app_url, wait_for

pytestmark = pytest.mark.slow

TOTAL = 600
NO_ARGS = payload_of((), {})


@pytest.fixture
def connector(backend: str, namespace: str) -> Iterator[Connector]:
    """One server for the test's apps: each worker gets an app of its own (an app keeps one
    asyncio client, of one event loop), as workers on several machines would."""
    with app_url(backend, namespace) as url:
        yield Connector(url)


def app_of(connector: Connector, namespace: str) -> App:
    """An app with the task ``work`` (a few milliseconds of a thread's time)."""
    app = App(connector=connector, namespace=namespace)

    def work() -> None:
        time.sleep(0.005)

    app.task(work, name="work")
    return app


def enqueue(q: Quasar, count: int) -> list[str]:
    batch = q.enqueue_many([NewJob("work", NO_ARGS) for _ in range(count)], ids_only=True)
    assert isinstance(batch, BatchApplied), batch
    return list(batch.ids)


def server_ms(q: Quasar) -> int:
    seconds, micros = q.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def last_claims(q: Quasar, ids: list[str]) -> dict[str, int | None]:
    infos = q.execute_many([q.calls.get_job(i) for i in ids])
    return {i: info.job.attempted_at for i, info in zip(ids, infos, strict=True)}


def workers_of(
    connector: Connector, namespace: str, stack: ExitStack, count: int, **options: Any
) -> list[Worker]:
    settings = {"concurrency": 4, "maintenance_interval": 0.2, "idle_wait": 1.0, **options}
    workers = []
    for _ in range(count):
        app = app_of(connector, namespace)
        stack.callback(app.close)
        workers.append(stack.enter_context(Worker(app, **settings)))
    return workers


def test_no_lease_is_granted_after_pause_returns_and_workers_go_on_after_resume(
    connector: Connector, namespace: str
) -> None:
    app = app_of(connector, namespace)
    q = app.client
    ids = enqueue(q, TOTAL)
    with ExitStack() as stack:
        stack.callback(app.close)
        workers = workers_of(connector, namespace, stack, 3)
        wait_for(lambda: q.counts("default").completed >= 60, 60, "some jobs to complete")
        assert q.pause("default") is True
        paused_at = server_ms(q)
        # The jobs leased before the pause end (held ones run, prefetched ones too).
        wait_for(lambda: q.counts("default").executing == 0, 60, "the leased jobs to end")
        claimed = sum(w.stats.claimed for w in workers)
        left = q.counts("default").available
        assert left > 0, "the pause came too late to test anything"
        time.sleep(0.5)  # the workers keep asking, and are refused
        assert q.counts("default").available == left
        assert sum(w.stats.claimed for w in workers) == claimed
        ids += enqueue(q, 10)  # enqueue goes on
        times = last_claims(q, ids)
        assert all(at is None or at <= paused_at for at in times.values())
        assert q.resume("default") is True
        wait_for(lambda: q.counts("default").completed == len(ids), 120, "every job to complete")
    assert all(
        at is not None and at >= paused_at
        for i, at in last_claims(q, ids).items()
        if times[i] is None
    )


def test_resume_wakes_idle_workers_at_once(connector: Connector, namespace: str) -> None:
    app = app_of(connector, namespace)
    task, q = app.tasks["work"], app.client
    first = task.enqueue()
    with ExitStack() as stack:
        stack.callback(app.close)
        workers_of(connector, namespace, stack, 2, idle_wait=300.0)
        first.result(timeout=30)
        q.pause("default")
        handles = [task.enqueue() for _ in range(3)]
        time.sleep(0.3)
        assert q.counts("default").available == 3
        q.resume("default")
        for handle in handles:
            handle.result(timeout=30)  # far sooner than the 300 s idle wait
        info = handles[0].info()
        assert info is not None and isinstance(info.job.state, Succeeded)


def test_a_queue_paused_before_its_first_job_waits_for_resume(
    connector: Connector, namespace: str
) -> None:
    app = app_of(connector, namespace)
    task, q = app.tasks["work"], app.client
    assert q.pause("default") is True  # ahead of any job: nothing was enqueued to it yet
    with ExitStack() as stack:
        stack.callback(app.close)
        [worker] = workers_of(connector, namespace, stack, 1, idle_wait=300.0)
        handles = [task.enqueue() for _ in range(3)]
        time.sleep(0.5)  # the worker keeps asking, and is refused
        assert q.counts("default").available == 3 and worker.stats.claimed == 0
        assert q.resume("default") is True
        for handle in handles:
            handle.result(timeout=30)  # woken by the resume, far sooner than the idle wait
