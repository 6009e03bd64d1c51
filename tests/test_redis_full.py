"""A full Redis (``maxmemory`` reached, ``noeviction``): writes refused with ``RedisFull`` and
nothing written, while reads, ``prune`` and ``cancel`` still run so that an operator can inspect
and drain the queue. On a server of the test's own: ``maxmemory`` is the whole server's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from quasar_redis import CancelApplied, JobInfo, NewJob, Quasar, RedisFull, Status

from .clients import clients, kind
from .helpers import T0, applied, claimed, snapshot
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
                for n in range(40):
                    client.set(f"filler:{n}", b"x" * 50_000)
                used = int(client.info("memory")["used_memory"])
                # Full by a margin that no freed buffer makes up for (1 MB of filler is over).
                client.config_set("maxmemory-policy", "noeviction")
                client.config_set("maxmemory", used - 1_000_000)
                yield q
        finally:
            client.close()


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
    assert q.prune(max_age_ms=0, now=T0 + 3_600_000) == 1
    assert q.get_job("done") is None


@pytest.mark.parametrize("full", [True], ids=["functions"], indirect=True)
def test_a_full_redis_still_cancels(full: Quasar) -> None:
    q = full
    assert isinstance(q.cancel("live", reason="drained", now=T0), CancelApplied)
    info = q.get_job("live", now=T0)
    assert info is not None and info.status is Status.CANCELLED


@pytest.mark.parametrize("full", [False], ids=["scripts"], indirect=True)
def test_scripts_on_a_full_redis_refuse_cancel_whole(full: Quasar) -> None:
    """A script carries no flags (Redis 6.2 has none): Redis refuses its first write."""
    q = full
    before = snapshot(q)
    with pytest.raises(RedisFull):
        q.cancel("live", reason="drained", now=T0)
    assert snapshot(q) == before
