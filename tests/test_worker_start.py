"""A worker's start and end: refused credentials and permissions, an unreachable Redis, settings
out of bounds, the start line, burst mode, max_jobs, and ``App.drain`` for users' tests.

Credentials are tried on a ``redis-server`` of the test module's own (``tests/locked_redis.py``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Iterator
from typing import Any, Literal

import pytest

from quasar_redis import (
    App,
    AuthenticationError,
    Connector,
    InvalidArgument,
    PermissionDenied,
    RedisUnavailable,
    Worker,
)
from quasar_redis._urls import redact, redact_text

from .helpers import REDIS_URL, delete_namespace, real_redis
from .locked_redis import PASSWORD, WRONG, LockedRedis, closed_port, locked

__all__ = ["locked"]  # (the fixture)


def serve_until_it_ends(app: App, **options: Any) -> BaseException | None:
    """Run a worker of ``app``; the exception that ended it (None: it stopped by itself)."""
    worker = Worker(app, **{"idle_wait": 0.5, **options})
    try:
        worker.run(install_signals=False)
    except Exception as exc:
        return exc
    return None


# --- refused credentials and permissions -------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "password"), [("", WRONG), ("confined", WRONG), ("nobody", PASSWORD)]
)
def test_a_wrong_password_ends_the_worker_at_once(
    locked: LockedRedis, user: str, password: str
) -> None:
    app = App(locked.url(user, password), namespace="locked")
    began = time.monotonic()
    error = serve_until_it_ends(app, connect_timeout=30.0)
    assert isinstance(error, AuthenticationError), error
    assert time.monotonic() - began < 10  # not the connect timeout: no retry helps
    assert password not in str(error)
    assert redact(locked.url(user, password)) in str(error)


def test_no_password_given_is_an_authentication_error(locked: LockedRedis) -> None:
    app = App(f"redis://127.0.0.1:{locked.port}/0", namespace="locked")
    assert isinstance(serve_until_it_ends(app), AuthenticationError)


def test_a_user_without_permission_for_its_keys_ends_the_worker(locked: LockedRedis) -> None:
    app = App(locked.url("confined"), namespace="locked")
    error = serve_until_it_ends(app, connect_timeout=30.0)
    assert isinstance(error, PermissionDenied), error
    assert PASSWORD not in str(error)


def test_a_user_that_may_run_nothing_is_refused_at_start(locked: LockedRedis) -> None:
    app = App(locked.url("mute"), namespace="locked")
    error = serve_until_it_ends(app)
    assert isinstance(error, PermissionDenied), error
    assert "ping" in str(error).lower()


def test_with_raises_the_refusal_when_the_block_would_begin(locked: LockedRedis) -> None:
    app = App(locked.url("", WRONG), namespace="locked")
    with pytest.raises(AuthenticationError), Worker(app):
        pytest.fail("the block began on a worker that does not serve")


def test_the_right_password_serves_and_its_start_line_hides_it(
    locked: LockedRedis, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(locked.url(), namespace="locked")
    ran: list[int] = []
    task = app.task(ran.append, name="append")
    task.enqueue(7)
    caplog.set_level(logging.INFO, logger="quasar_redis")
    assert serve_until_it_ends(app, burst=True) is None
    assert ran == [7]
    assert PASSWORD not in caplog.text
    assert f"Redis redis://:***@127.0.0.1:{locked.port}/0" in caplog.text
    delete_namespace(app.client.redis, "locked")
    app.close()


# --- an unreachable Redis ------------------------------------------------------------------------


def test_an_unreachable_redis_at_start_is_refused_after_connect_timeout() -> None:
    port = closed_port()
    app = App(f"redis://:{PASSWORD}@127.0.0.1:{port}/0", namespace="nowhere")
    began = time.monotonic()
    error = serve_until_it_ends(app, connect_timeout=1.0)
    took = time.monotonic() - began
    assert isinstance(error, RedisUnavailable), error
    assert 0.9 <= took < 8, took
    text = str(error)
    assert f"redis://:***@127.0.0.1:{port}/0" in text and "connect_timeout" in text
    assert PASSWORD not in text


def test_a_stop_ends_the_wait_for_an_unreachable_redis() -> None:
    app = App(f"redis://127.0.0.1:{closed_port()}/0", namespace="nowhere")
    worker = Worker(app, connect_timeout=60.0)

    async def main() -> None:
        serving = asyncio.ensure_future(worker.serve())
        await asyncio.sleep(0.3)
        worker.stop()
        await asyncio.wait_for(serving, 5)
        await app.aclose()

    asyncio.run(main())


def test_a_url_that_is_not_a_redis_url_is_a_configuration_error() -> None:
    error = serve_until_it_ends(App("localhost:6379", namespace="x"))
    assert error is not None and "must start with redis://" in str(error)


# --- settings out of bounds ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 2.5}, "concurrency"),
        ({"lease_ms": 10}, "lease_ms"),
        ({"grace": -5}, "grace"),
        ({"grace": float("nan")}, "grace"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"max_jobs": 0}, "max_jobs"),
        ({"prefetch": -1}, "prefetch"),
        ({"queues": []}, "queues"),
        ({"queues": "default"}, "queues"),
    ],
)
def test_settings_out_of_bounds_are_refused(options: dict[str, Any], named: str) -> None:
    app = App("memory://", namespace="bounds")
    with pytest.raises(InvalidArgument, match=named):
        Worker(app, **options)


# --- the start line ------------------------------------------------------------------------------


def test_the_start_line_says_what_it_serves_and_warns_of_mismatches(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App("memory://", namespace="shop")
    app.task(lambda: None, name="send_receipt", queue="emails")
    app.task(lambda: None, name="resize", queue="images")
    caplog.set_level(logging.INFO, logger="quasar_redis")
    assert serve_until_it_ends(app, queues=["default", "images"], burst=True) is None
    started = [r.getMessage() for r in caplog.records if " started: " in r.getMessage()]
    assert len(started) == 1
    line = started[0]
    assert "queues default, images; tasks resize (images);" in line
    assert "Redis an embedded fakeredis server, namespace 'shop'" in line
    assert "concurrency 10, prefetch auto, burst" in line
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no task of this app is declared on queue 'default'" in w for w in warnings)
    assert any(
        "task send_receipt is on queue 'emails', which this worker does not serve" in w
        for w in warnings
    )
    assert not any("'images'" in w for w in warnings)


# --- burst, max_jobs, drain ----------------------------------------------------------------------


@pytest.fixture
def app(backend: str, namespace: str) -> Iterator[App]:
    if backend == "fake":
        made = App(connector=Connector("memory://"), namespace=namespace)
        yield made
        made.close()
        return
    real_redis().close()
    made = App(REDIS_URL, namespace=namespace)
    try:
        yield made
    finally:
        delete_namespace(made.client.redis, namespace)
        made.close()


def test_burst_runs_what_is_there_and_the_jobs_it_enqueues_then_stops(app: App) -> None:
    ran: list[int] = []

    def chain(n: int) -> None:
        ran.append(n)
        if n < 3:
            task.enqueue(n + 1)

    task = app.task(chain, name="chain")
    handles = [task.enqueue(0), task.enqueue(10)]
    later = task.options(delay=60).enqueue(99)
    worker = Worker(app, burst=True, idle_wait=30.0)  # an idle wait would outlast the test
    began = time.monotonic()
    worker.run(install_signals=False)
    assert time.monotonic() - began < 10
    assert sorted(ran) == [0, 1, 2, 3, 10]
    assert all(h.result(timeout=1) is None for h in handles)
    info = later.info()
    assert info is not None and info.status.value == "scheduled"  # left for later


def test_burst_on_empty_queues_stops_at_once(app: App) -> None:
    began = time.monotonic()
    assert serve_until_it_ends(app, burst=True, idle_wait=30.0) is None
    assert time.monotonic() - began < 5


def test_burst_runs_a_retry_due_at_once(app: App) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("not yet")
        return "ok"

    handle = app.task(flaky, name="flaky", retry=0.0).enqueue()
    assert serve_until_it_ends(app, burst=True, idle_wait=30.0) is None
    assert handle.result(timeout=1) == "ok" and len(attempts) == 3


# --- the garbage collector while a worker owns its process --------------------------------------


def test_run_freezes_what_start_up_made_and_gives_it_back_as_it_returns(app: App) -> None:
    assert gc.get_freeze_count() == 0  # (the test process froze nothing)
    made: list[list[int]] = []
    seen: list[tuple[int, bool, bool]] = []

    @app.on_startup
    def make(_: Any) -> None:
        made.append([1])  # an object of the start-up, alive while the worker serves

    def look() -> None:
        # out of the collections' reach (the permanent generation): the start-up's object, not
        # one the job makes
        mine = [2]
        walked = gc.get_objects()
        seen.append(
            (
                gc.get_freeze_count(),
                any(o is made[0] for o in walked),
                any(o is mine for o in walked),
            )
        )

    app.task(look, name="look").enqueue()
    assert serve_until_it_ends(app, burst=True, idle_wait=30.0) is None
    assert len(seen) == 1
    frozen, startup_walked, job_walked = seen[0]
    assert frozen > 1000 and not startup_walked and job_walked
    assert gc.get_freeze_count() == 0  # given back: the process as the worker found it
    assert any(o is made[0] for o in gc.get_objects())


def test_a_worker_that_does_not_own_its_process_freezes_nothing(app: App) -> None:
    seen: list[int] = []
    app.task(lambda: seen.append(gc.get_freeze_count()), name="look").enqueue()
    with Worker(app, idle_wait=0.5):  # (served in a thread of the caller's process)
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    assert seen == [0] and gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_keeps_its_own_policy(app: App) -> None:
    seen: list[int] = []
    app.task(lambda: seen.append(gc.get_freeze_count()), name="look").enqueue()
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        assert before > 0
        assert serve_until_it_ends(app, burst=True, idle_wait=30.0) is None
        # nothing frozen by the worker (its event loop, its clients...), nor given back; the
        # count falls as frozen objects are freed
        assert len(seen) == 1 and 0 < seen[0] <= before
        assert 0 < gc.get_freeze_count() <= before
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("prefetch", [0, "auto"])
def test_max_jobs_stops_after_that_many(app: App, prefetch: int | Literal["auto"]) -> None:
    ran: list[int] = []
    task = app.task(ran.append, name="append")
    for i in range(7):
        task.enqueue(i)
    worker = Worker(app, concurrency=2, prefetch=prefetch, max_jobs=3, idle_wait=0.5)
    worker.run(install_signals=False)
    assert len(ran) == 3 and worker.stats.claimed == 3 and worker.stats.completed == 3
    counts = app.client.counts("default")
    assert counts.available == 4 and counts.completed == 3


def test_drain_runs_every_job_of_the_apps_queues_and_counts_the_runs(app: App) -> None:
    ran: list[str] = []

    async def mail(to: str) -> None:
        ran.append(to)
        resize.enqueue(to)

    def resize_fn(path: str) -> str:
        ran.append(f"resized {path}")
        return path.upper()

    send = app.task(mail, name="mail", queue="emails")
    resize = app.task(resize_fn, name="resize", queue="images")
    send.enqueue("ada")
    send.enqueue("bob")
    assert app.drain(timeout=20) == 4
    assert sorted(ran) == ["ada", "bob", "resized ada", "resized bob"]
    assert app.drain(timeout=20) == 0


def test_drain_of_one_queue_leaves_the_others(app: App) -> None:
    ran: list[str] = []
    app.task(ran.append, name="a", queue="a").enqueue("a")
    app.task(ran.append, name="b", queue="b").enqueue("b")
    assert app.drain("a") == 1 and ran == ["a"]


def test_adrain_runs_on_the_running_loop(app: App) -> None:
    ran: list[int] = []
    task = app.task(ran.append, name="append")

    async def main() -> int:
        await task.aenqueue(1)
        await task.aenqueue(2)
        runs = await app.adrain(timeout=20)
        await app.aclose()
        return runs

    assert asyncio.run(main()) == 2 and sorted(ran) == [1, 2]


def test_drain_gives_up_after_its_timeout(app: App) -> None:
    async def slow() -> None:
        await asyncio.sleep(30)

    app.task(slow, name="slow").enqueue()
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="not drained"):
        app.drain(timeout=0.5)
    assert time.monotonic() - began < 10


# --- redaction -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:pw@h/1", "redis://user:***@h/1"),
        ("rediss://pw@h", "rediss://***@h"),
        ("redis://h:6379/0?password=pw&x=1", "redis://h:6379/0?password=***&x=1"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("memory://", "memory://"),
    ],
)
def test_redact_hides_passwords(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_redact_text_hides_every_url_in_a_message() -> None:
    text = "Redis at redis://:pw@a:1/0 (then rediss://u:pw@b/2) failed"
    assert redact_text(text) == "Redis at redis://:***@a:1/0 (then rediss://u:***@b/2) failed"
