"""The worker registry: what a worker announces, how its entry lapses, and ``workers()``.

The calls on both backends and both clients; a worker in-process on both backends (it announces
itself, lists the job it runs, and retires its entry as it stops); and real ``quasar worker``
processes on the real server, one killed with SIGKILL, gone from ``workers()`` once its last
announcement is ``lapse_ms`` old (5 s with the default maintenance interval of 1 s).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quasar_redis import (
    App,
    CorruptKeyError,
    InvalidArgument,
    Quasar,
    Worker,
    WorkerInfo,
    __version__,
)
from quasar_redis._calls import WorkerEntry
from quasar_redis.worker._registry import LAPSE_INTERVALS, lapse_ms

from .helpers import REDIS_URL, T0, app_of, delete_namespace, real_redis, snapshot, wait_for

ROOT = Path(__file__).resolve().parent.parent
ENTRY = WorkerEntry("w-1", "host-a", 4242, ("default", "mail"), 8, ("j1", "j2"), "1.2.3")


def announce(q: Quasar, entry: WorkerEntry = ENTRY, ttl_ms: int = 5000, now: int = T0) -> int:
    return q.execute(q.calls.announce(entry, ttl_ms, now))


def retire(q: Quasar, worker_id: str, now: int = T0) -> bool:
    return q.execute(q.calls.retire(worker_id, now))


# --- the calls -----------------------------------------------------------------------------------


def test_a_worker_announced_is_listed_with_what_it_said(q: Quasar) -> None:
    assert q.workers(now=T0) == []
    assert announce(q) == T0
    assert q.workers(now=T0 + 1) == [
        WorkerInfo("w-1", "host-a", 4242, ("default", "mail"), 8, ("j1", "j2"), "1.2.3", T0, T0)
    ]


def test_announcing_again_keeps_the_start_and_updates_the_rest(q: Quasar) -> None:
    announce(q)
    later = WorkerEntry("w-1", "host-a", 4242, ("default",), 8, (), "1.2.3")
    announce(q, later, now=T0 + 1000)
    (info,) = q.workers(now=T0 + 1000)
    assert (info.started_at, info.last_seen) == (T0, T0 + 1000)
    assert info.running == () and info.queues == ("default",)


def test_a_worker_announces_the_runs_it_ended_and_failed(q: Quasar) -> None:
    announce(q, WorkerEntry("w-1", "h", 1, ("default",), 1, (), "v", 12, 3))
    (info,) = q.workers(now=T0)
    assert (info.processed, info.failed) == (12, 3)
    announce(q, WorkerEntry("w-1", "h", 1, ("default",), 1, (), "v", 20, 4), now=T0 + 1000)
    (info,) = q.workers(now=T0 + 1000)
    assert (info.processed, info.failed) == (20, 4)  # (its own counts: replaced, not added)
    announce(q, WorkerEntry("w-2", "h", 1, ("default",), 1, (), "v"))
    assert [(w.processed, w.failed) for w in q.workers(now=T0 + 1000)] == [(20, 4), (0, 0)]


def test_workers_are_sorted_by_id(q: Quasar) -> None:
    for worker_id in ("c", "a", "b"):
        announce(q, WorkerEntry(worker_id, "h", 1, ("default",), 1, (), "v"))
    assert [w.id for w in q.workers(now=T0)] == ["a", "b", "c"]


def test_an_entry_lapses_its_ttl_after_the_last_announcement(q: Quasar) -> None:
    announce(q, ttl_ms=5000)
    announce(q, WorkerEntry("w-2", "h", 1, ("default",), 1, (), "v"), ttl_ms=60_000)
    assert [w.id for w in q.workers(now=T0 + 4999)] == ["w-1", "w-2"]
    assert [w.id for w in q.workers(now=T0 + 5000)] == ["w-2"]
    assert q.redis.zrange(q.keys.workers, 0, -1) == [b"w-2"]  # dropped on read
    assert 0 < q.redis.pttl(q.keys.worker("w-1")) <= 5000  # its hash lapses by itself


def test_an_announcement_drops_the_lapsed_entries_of_others(q: Quasar) -> None:
    announce(q, ttl_ms=1000)
    announce(q, WorkerEntry("w-2", "h", 1, ("default",), 1, (), "v"), now=T0 + 1000)
    assert q.redis.zrange(q.keys.workers, 0, -1) == [b"w-2"]


def test_retire_takes_the_entry_out_at_once(q: Quasar) -> None:
    announce(q)
    assert retire(q, "w-1") is True
    assert retire(q, "w-1") is False
    assert q.workers(now=T0) == []
    assert not q.redis.exists(q.keys.worker("w-1"))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"id": ""}, "worker_id"),
        ({"id": "a b"}, "worker_id"),
        ({"id": "x" * 257}, "worker_id"),
        ({"pid": -1}, "pid"),
        ({"concurrency": -1}, "concurrency"),
        ({"queues": ("ok", "no{pe}")}, "queue"),
        ({"host": "h" * 8193}, "host"),
        ({"processed": -1}, "processed"),
        ({"failed": -2}, "failed"),
    ],
)
def test_a_malformed_announcement_is_refused_and_changes_nothing(
    q: Quasar, change: dict[str, Any], match: str
) -> None:
    announce(q)
    before = snapshot(q)
    fields = {**{f: getattr(ENTRY, f) for f in ENTRY.__slots__}, **change}
    with pytest.raises(InvalidArgument, match=match):
        announce(q, WorkerEntry(**fields))
    assert snapshot(q) == before


@pytest.mark.parametrize("ttl_ms", [0, 999, 3_600_001])
def test_a_ttl_out_of_bounds_is_refused(q: Quasar, ttl_ms: int) -> None:
    with pytest.raises(InvalidArgument, match="ttl"):
        announce(q, ttl_ms=ttl_ms)
    assert snapshot(q) == {}


def test_registry_keys_of_another_type_are_reported(q: Quasar) -> None:
    q.redis.set(q.keys.workers, "x")
    with pytest.raises(CorruptKeyError, match="workers"):
        q.workers()
    with pytest.raises(CorruptKeyError, match="workers"):
        announce(q)
    q.redis.delete(q.keys.workers)
    q.redis.set(q.keys.worker("w-1"), "x")
    with pytest.raises(CorruptKeyError, match="worker:w-1"):
        announce(q)
    with pytest.raises(InvalidArgument, match="worker_id"):
        retire(q, "a b")


def test_a_worker_hash_written_by_hand_is_left_out(q: Quasar) -> None:
    announce(q)
    q.redis.zadd(q.keys.workers, {"ghost": 2 * T0})
    q.redis.hset(q.keys.worker("ghost"), "x", "1")
    assert [w.id for w in q.workers(now=T0)] == ["w-1"]


def test_the_lapse_is_a_few_intervals_and_at_least_a_second() -> None:
    assert lapse_ms(1.0) == 1000 * LAPSE_INTERVALS
    assert lapse_ms(0.01) == 1000


# --- a worker in-process -------------------------------------------------------------------------


@pytest.fixture
def app(backend: str, namespace: str) -> Iterator[App]:
    with app_of(backend, namespace) as made:
        yield made


def test_a_serving_worker_announces_itself_and_what_it_runs(app: App) -> None:
    gate = threading.Event()

    def held() -> None:
        gate.wait(30)

    task = app.task(held, name="held")
    settings: dict[str, Any] = {"maintenance_interval": 0.1, "idle_wait": 1.0}
    with Worker(app, ["default", "other"], concurrency=3, worker_id="w-x", **settings):
        handle = task.enqueue()

        def running() -> WorkerInfo | None:
            found = [w for w in app.client.workers() if w.id == "w-x"]
            return found[0] if found and found[0].running else None

        info = wait_for(running, 30, "the worker to announce its running job")
        gate.set()
        handle.result(timeout=30)
    assert info.running == (handle.id,)
    assert (info.host, info.pid) == (socket.gethostname(), os.getpid())
    assert (info.queues, info.concurrency, info.version) == (("default", "other"), 3, __version__)
    assert info.started_at <= info.last_seen
    assert app.client.workers() == []  # retired as it stopped


def test_a_serving_worker_announces_how_many_runs_it_ended_and_failed(app: App) -> None:
    def works(ok: bool) -> None:
        if not ok:
            raise ValueError("no")

    task = app.task(works, name="works", max_attempts=1)
    settings: dict[str, Any] = {"maintenance_interval": 0.1, "idle_wait": 1.0}
    with Worker(app, ["default"], concurrency=2, worker_id="w-c", **settings):
        for ok in (True, True, False):
            task.enqueue(ok)

        def counted() -> WorkerInfo | None:
            found = [w for w in app.client.workers() if w.id == "w-c"]
            return found[0] if found and found[0].processed == 3 else None

        info = wait_for(counted, 30, "the worker to announce its 3 runs")
    assert info.failed == 1


# --- worker processes ----------------------------------------------------------------------------


def start_worker(tmp_path: Path, namespace: str, name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "QUASAR_TEST_URL": REDIS_URL, "QUASAR_TEST_NS": namespace}
    args = [sys.executable, "-m", "quasar_redis", "worker", "tests.worker_tasks:app"]
    args += ["--worker-id", name, "--concurrency", "2"]
    with (tmp_path / f"{name}.stderr").open("wb") as err:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stderr=err)


@pytest.mark.slow
def test_a_worker_killed_with_sigkill_leaves_the_registry_within_its_lapse(
    tmp_path: Path, namespace: str
) -> None:
    client = real_redis()
    q = Quasar(client, namespace)
    procs = [start_worker(tmp_path, namespace, name) for name in ("p-1", "p-2")]
    try:
        wait_for(lambda: len(q.workers()) == 2, 60, "both workers to announce themselves", 0.05)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(30)
        last = {w.id: w for w in q.workers()}.get("p-1")
        assert last is not None, "the entry lapsed before its time"
        assert last.pid == procs[0].pid
        deadline = last.last_seen + lapse_ms(1.0)  # the default maintenance interval
        gone = wait_for(
            lambda: (now := q.counts("default").now) >= deadline and now, 30, "the lapse", 0.05
        )
        assert [w.id for w in q.workers()] == ["p-2"], gone
        # The hash's expiry counts from its PEXPIRE, a moment after the TIME its score was taken
        # from (more than a millisecond when Redis is descheduled under load): gone just after.
        wait_for(lambda: not client.exists(q.keys.worker("p-1")), 1, "the entry's hash to lapse")
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(30) == 0
        assert q.workers() == []  # a worker that stops retires its entry
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        delete_namespace(client, namespace)
        client.close()


def test_a_worker_id_the_registry_cannot_name_is_left_out_with_a_warning(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    def noop() -> int:
        return 1

    task = app.task(noop, name="noop")
    with Worker(app, worker_id="has a space", maintenance_interval=0.1, idle_wait=1.0):
        assert task.enqueue().result(timeout=30) == 1  # it serves all the same
        wait_for(lambda: "not in the worker registry" in caplog.text, 30, "the warning", every=0.05)
        assert app.client.workers() == []
