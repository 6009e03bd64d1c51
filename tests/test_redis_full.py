"""A full Redis (``maxmemory`` reached, ``noeviction``), for each of its users. Producers: writes
refused with ``RedisFull`` and nothing written. Operators: reads, ``prune`` and ``cancel`` still
run, so that the queue can be inspected and drained; a write that adds (an operator retry) is
refused whole. Workers: claims refused, the worker waits and runs the jobs once Redis has room
(outcomes refused meanwhile are sent again: ``test_worker_faults.py``). On a server of the
test's own: ``maxmemory`` is the whole server's."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from quasar_redis import (
    App,
    CancelApplied,
    JobInfo,
    JobPage,
    NewJob,
    Quasar,
    RedisFull,
    Status,
)

from . import test_worker as tw
from .clients import clients, kind
from .helpers import T0, applied, claimed, has_functions, snapshot, wait_for
from .servers import server_in

__all__ = ["kind"]  # (the fixture)


@pytest.fixture
def full(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> Iterator[Quasar]:
    """A client (functions or scripts, as the test's parameter says) of a server made full
    after two jobs were enqueued: "done" (succeeded long ago) and "live" (waiting)."""
    with server_in(tmp_path / "redis", durable=False) as server:
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            with clients(kind, client) as make:
                q = make("full", functions=request.param)
                applied(q.enqueue("s", id="done", now=T0))
                token = claimed(q.claim_job("done", "w", 1000, now=T0)).token
                q.complete(token, "w", now=T0)
                applied(q.enqueue("s", id="live", now=T0))
                applied(q.enqueue("s", id="broken", now=T0))
                token = claimed(q.claim_job("broken", "w", 1000, now=T0)).token
                q.permanent_fail(token, "w", "bad input", now=T0)
                fill(client)
                yield q
        finally:
            client.close()


def fill(client: Any) -> None:
    """Makes the server full: ``maxmemory`` below what it uses, by a margin that no freed buffer
    makes up for (1 MB of filler is over)."""
    for n in range(40):
        client.set(f"filler:{n}", b"x" * 50_000)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", used - 1_000_000)


def room(client: Any) -> None:
    """Gives the server room again."""
    client.config_set("maxmemory", 0)


@pytest.mark.parametrize("full", [True, False], ids=["functions", "scripts"], indirect=True)
def test_a_full_redis_refuses_writes_and_still_answers_reads_and_prune(full: Quasar) -> None:
    q = full
    before = snapshot(q)
    with pytest.raises(RedisFull, match=r"Redis is out of memory.*maxmemory"):
        q.enqueue("s", id="new", now=T0)
    with pytest.raises(RedisFull):
        q.enqueue_many([NewJob("s", id="a"), NewJob("s", id="b")], now=T0)
    assert snapshot(q) == before
    info = q.get_job("live", now=T0)
    assert isinstance(info, JobInfo) and info.status is Status.AVAILABLE
    assert q.counts("default", now=T0).available == 1
    assert [j.id for j in q.list_jobs("default", "completed", now=T0)] == ["done"]
    page = q.page_jobs("default", "discarded", limit=1, now=T0)
    assert isinstance(page, JobPage) and [j.id for j in page.jobs] == ["broken"], page
    assert snapshot(q) == before
    assert q.prune(max_age_ms=0, now=T0 + 3_600_000) == 2
    assert q.get_job("done") is None and q.get_job("broken") is None


@pytest.mark.parametrize("full", [True, False], ids=["functions", "scripts"], indirect=True)
def test_a_full_redis_refuses_an_operator_retry_whole(full: Quasar) -> None:
    q = full
    before = snapshot(q)
    with pytest.raises(RedisFull):
        q.retry("broken", reason="fixed", now=T0)
    assert snapshot(q) == before


@pytest.mark.parametrize("full", [True], ids=["functions"], indirect=True)
def test_a_full_redis_still_cancels(full: Quasar) -> None:
    q = full
    if not has_functions(q.redis):  # Redis 6.2: the client sends scripts, as below
        cancel_refused_whole(q)
        return
    assert isinstance(q.cancel("live", reason="drained", now=T0), CancelApplied)
    info = q.get_job("live", now=T0)
    assert info is not None and info.status is Status.CANCELLED


@pytest.mark.parametrize("full", [False], ids=["scripts"], indirect=True)
def test_scripts_on_a_full_redis_refuse_cancel_whole(full: Quasar) -> None:
    cancel_refused_whole(full)


def cancel_refused_whole(q: Quasar) -> None:
    """A script carries no flags (Redis 6.2 has none): Redis refuses its first write."""
    before = snapshot(q)
    with pytest.raises(RedisFull):
        q.cancel("live", reason="drained", now=T0)
    assert snapshot(q) == before


def test_a_worker_on_a_full_redis_waits_and_runs_the_jobs_once_it_has_room(
    tmp_path: Path, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Jobs enqueued, then Redis full: a producer's enqueue is refused ``RedisFull`` with nothing
    written, the worker's claims are refused and it waits (logging why); once Redis has room it
    claims and runs each job once."""
    caplog.set_level(logging.WARNING, logger="quasar_redis")
    runs: Counter[int] = Counter()

    def work(n: int) -> int:
        runs[n] += 1
        return n

    with server_in(tmp_path / "redis", durable=False) as server:
        server.start()
        admin = redis.Redis.from_url(server.url)
        with App(server.url, namespace=namespace) as app:
            task = tw.declare(app, work, max_attempts=1)
            handles = [task.enqueue(n) for n in range(5)]
            fill(admin)
            before = snapshot(app.client)
            with pytest.raises(RedisFull, match="out of memory"):
                task.enqueue(99)
            assert snapshot(app.client) == before
            try:
                with tw.worker_of(app, concurrency=2) as worker:
                    wait_for(
                        lambda: any("out of memory" in r.getMessage() for r in caplog.records),
                        20,
                        "the worker to be refused a claim",
                    )
                    assert app.client.counts("default").available == 5
                    room(admin)
                    assert [h.result(timeout=30) for h in handles] == list(range(5))
                    assert worker.stats.lost == 0
            finally:
                room(admin)
                admin.close()
    assert runs == Counter(range(5))
