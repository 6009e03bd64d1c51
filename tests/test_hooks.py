"""Worker startup and shutdown hooks and job middleware, on both backends: order, what tasks see
(``current_worker()``), and what a hook or a middleware that raises does."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quasar_redis import (
    App,
    Fixed,
    HookError,
    JobContext,
    JobFailedError,
    PermanentFailure,
    Status,
    Worker,
    WorkerContext,
    current_job,
    current_worker,
)

from . import process_tasks as pt
from .helpers import REDIS_URL, delete_namespace, real_redis

QUASAR = Path(sys.executable).parent / "quasar"


def declare(app: App, fn: Callable[..., Any], **options: Any) -> Any:
    return app.task(fn, **{"name": fn.__name__, **options})


def failed_job(handle: Any) -> Any:
    with pytest.raises(JobFailedError) as failed:
        handle.result(timeout=10)
    return failed.value.job


# --- startup and shutdown ------------------------------------------------------------------------


def test_hooks_run_in_order_and_tasks_reach_their_state(app: App) -> None:
    seen: list[str] = []

    @app.on_startup
    def open_pool(worker: WorkerContext) -> None:
        assert current_worker() is worker  # (a plain hook runs in a thread of its own)
        worker.state.pool = ["connection"]
        seen.append(f"sync startup {worker.worker_id == current_worker().worker_id}")

    @app.on_startup
    async def warm(worker: WorkerContext) -> None:
        worker.state.pool.append("warm")
        seen.append("async startup")

    @app.on_shutdown
    async def close_pool(worker: WorkerContext) -> None:
        seen.append(f"async shutdown {worker.state.pool}")

    @app.on_shutdown
    def last(worker: WorkerContext) -> None:
        seen.append("sync shutdown")

    def plain() -> list[str]:
        seen.append("plain task")
        return list(current_worker().state.pool)

    async def coroutine() -> str:
        seen.append("async task")
        worker = current_worker()
        assert current_job().worker is worker
        return f"{worker.state.pool[-1]} on {','.join(worker.queues)}"

    handles = [declare(app, plain).enqueue(), declare(app, coroutine).enqueue()]
    assert app.drain(concurrency=1) == 2
    assert handles[0].result(timeout=5) == ["connection", "warm"]
    assert handles[1].result(timeout=5) == "warm on default"
    assert seen[:2] == ["sync startup True", "async startup"]
    assert sorted(seen[2:4]) == ["async task", "plain task"]
    assert seen[4:] == ["async shutdown ['connection', 'warm']", "sync shutdown"]


def test_each_serve_gets_a_state_of_its_own(app: App) -> None:
    states: list[WorkerContext] = []
    app.on_startup(states.append)
    app.drain()
    app.drain()
    assert len(states) == 2 and states[0] is not states[1]
    assert states[0].state is not states[1].state
    assert states[0].concurrency == 10 and states[0].app is app


def test_current_worker_outside_a_worker_is_a_lookup_error() -> None:
    with pytest.raises(LookupError):
        current_worker()


def test_a_failing_startup_hook_keeps_the_worker_from_starting(app: App) -> None:
    seen: list[str] = []

    @app.on_startup
    def first(worker: WorkerContext) -> None:
        seen.append("first")

    @app.on_startup
    async def broken(worker: WorkerContext) -> None:
        raise ConnectionRefusedError("database at db:5432 refused")

    @app.on_startup
    def never(worker: WorkerContext) -> None:
        seen.append("never")

    @app.on_shutdown
    def cleanup(worker: WorkerContext) -> None:
        seen.append("shutdown")

    def job() -> None:
        seen.append("job")

    handle = declare(app, job).enqueue()
    with pytest.raises(HookError) as raised:
        app.drain()
    error = raised.value
    assert error.phase == "startup"
    assert error.hook.endswith("broken")
    assert isinstance(error.__cause__, ConnectionRefusedError)
    text = str(error)
    assert "\n" not in text
    assert text.startswith(f"startup hook {error.hook} failed (")
    assert "test_hooks.py:" in text
    assert text.endswith("ConnectionRefusedError: database at db:5432 refused")
    assert seen == ["first", "shutdown"]  # nothing ran, the shutdown hooks did
    info = handle.info()
    assert info is not None and info.status is Status.AVAILABLE and info.job.attempt == 0

    with pytest.raises(HookError), Worker(app, burst=True):
        pass  # the error is raised as the block begins


def test_a_failing_shutdown_hook_is_logged_and_the_others_run(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    @app.on_shutdown
    async def broken(worker: WorkerContext) -> None:
        raise RuntimeError("pool already closed")

    @app.on_shutdown
    def after(worker: WorkerContext) -> None:
        seen.append("after")

    def job() -> int:
        return 1

    handle = declare(app, job).enqueue()
    with caplog.at_level(logging.ERROR, logger="quasar_redis.worker"):
        assert app.drain() == 1
    assert handle.result(timeout=5) == 1
    assert seen == ["after"]
    [record] = [r for r in caplog.records if "shutdown hook" in r.getMessage()]
    assert record.levelno == logging.ERROR
    assert "test_hooks" in record.getMessage() and "broken failed" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


def test_a_plain_startup_hook_does_not_block_the_loop(app: App) -> None:
    """A slow plain-function hook runs in a thread: the worker's loop keeps turning meanwhile."""
    released = threading.Event()
    turned: list[bool] = []

    @app.on_startup
    def slow(worker: WorkerContext) -> None:
        assert released.wait(10)

    async def scenario() -> None:
        async def release() -> None:
            await asyncio.sleep(0.05)  # runs only if the loop is free while the hook waits
            turned.append(True)
            released.set()

        try:
            releasing = asyncio.create_task(release())
            await app.adrain()
            await releasing
        finally:
            await app.aclose()

    asyncio.run(scenario())
    assert turned == [True]


# --- middleware ----------------------------------------------------------------------------------

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


def middleware_trio(app: App, seen: list[str]) -> None:
    """Three middleware of the three forms: a sync generator, an async generator, and an async
    function of (job, call_next) that changes the result."""

    @app.middleware
    def outer(job: JobContext) -> Iterator[None]:
        seen.append(f"outer in {job.job.stage}")
        token = request_id.set(f"req-{job.job.id}")
        try:
            yield
        finally:
            request_id.reset(token)
            seen.append("outer out")

    @app.middleware
    async def middle(job: JobContext) -> AsyncIterator[None]:
        seen.append("middle in")
        yield
        seen.append("middle out")

    @app.middleware
    async def inner(job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        seen.append("inner in")
        value = await call_next()
        seen.append("inner out")
        return {"wrapped": value}


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_middleware_wraps_each_run_in_the_order_declared(app: App, kind: str) -> None:
    seen: list[str] = []
    middleware_trio(app, seen)

    def plain() -> str:
        seen.append("task")
        return request_id.get()

    async def coroutine() -> str:
        seen.append("task")
        return request_id.get()

    handle = declare(app, plain if kind == "plain" else coroutine).enqueue()
    assert app.drain() == 1
    assert handle.result(timeout=5) == {"wrapped": f"req-{handle.id}"}
    name = "plain" if kind == "plain" else "coroutine"
    assert seen == [
        f"outer in {name}",
        "middle in",
        "inner in",
        "task",
        "inner out",
        "middle out",
        "outer out",
    ]


def test_a_sentry_style_reporter_sees_each_failure_and_timeout(app: App) -> None:
    reported: list[tuple[str, int, str]] = []

    @app.middleware
    def report_errors(job: JobContext) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            reported.append((job.job.stage, job.attempt, type(exc).__name__))
            raise

    def flaky() -> str:
        if current_job().attempt == 1:
            raise KeyError("missing")
        return "ok"

    async def slow() -> None:
        await asyncio.sleep(30)

    ok = declare(app, flaky, retry=Fixed(0)).enqueue()
    late = declare(app, slow, timeout=0.05, max_attempts=1).enqueue()
    app.drain()
    assert ok.result(timeout=5) == "ok"
    assert failed_job(late).error.kind == "Timeout"
    assert sorted(reported) == [("flaky", 1, "KeyError"), ("slow", 1, "TimeoutError")]


def test_a_middleware_exception_fails_the_job_like_the_tasks_own(app: App) -> None:
    runs: list[int] = []

    @app.middleware
    async def refuse(job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        if job.job.stage == "permanent":
            raise PermanentFailure("no tenant for this job")
        if job.attempt < 3:
            raise ConnectionError(f"tenant database down (attempt {job.attempt})")
        return await call_next()

    def retried() -> int:
        runs.append(current_job().attempt)
        return current_job().attempt

    def permanent() -> None:
        runs.append(-1)

    retrying = declare(app, retried, max_attempts=3, retry=Fixed(0)).enqueue()
    given_up = declare(app, permanent, max_attempts=5).enqueue()
    app.drain()
    assert retrying.result(timeout=5) == 3
    assert runs == [3]  # the task ran only when the middleware let it
    job = failed_job(given_up)
    assert job.attempt == 1
    assert job.error.kind == "PermanentFailure"
    assert job.error.message == "no tenant for this job"

    failing = declare(app, lambda: None, name="out_of_attempts", max_attempts=2, retry=Fixed(0))
    handle = failing.enqueue()
    app.drain()
    job = failed_job(handle)
    assert (job.attempt, job.error.kind) == (2, "ConnectionError")
    assert job.error.message == "tenant database down (attempt 2)"


def test_a_middleware_that_swallows_the_error_makes_the_run_return_none(app: App) -> None:
    swallowed: list[str] = []

    @app.middleware
    def swallow(job: JobContext) -> Iterator[None]:
        try:
            yield
        except ValueError as exc:
            swallowed.append(str(exc))

    def broken() -> int:
        raise ValueError("ignored")

    handle = declare(app, broken).enqueue()
    app.drain()
    assert handle.result(timeout=5) is None
    info = handle.info()
    assert info is not None and info.status is Status.COMPLETED
    assert swallowed == ["ignored"]


def test_hooks_and_middleware_serve_tasks_run_in_processes(app: App) -> None:
    """With ``processes=N`` the hooks and the middleware run in the worker's process, around the
    run in a child; the job's context crosses to the child without the worker's."""
    seen: list[str] = []
    app.on_startup(lambda worker: seen.append(f"startup {worker.concurrency}"))

    @app.middleware
    def around(job: JobContext) -> Iterator[None]:
        seen.append(f"in {job.job.stage}")
        yield
        seen.append("out")

    ask = app.task(pt.who_am_i, name="who_am_i")
    with Worker(app, concurrency=1, processes=1, idle_wait=1.0) as worker:
        handle = ask.enqueue()
        job_id, attempt, worker_id, child = handle.result(timeout=60)
    assert (job_id, attempt, worker_id) == (handle.id, 1, worker.worker_id)
    assert child != os.getpid()
    assert seen == ["startup 1", "in who_am_i", "out"]


# --- declaring them wrongly ----------------------------------------------------------------------


def test_a_hook_or_middleware_of_the_wrong_shape_is_refused_at_once() -> None:
    app = App("memory://", namespace="shapes")

    def two(worker: WorkerContext, other: int) -> None: ...

    def generator(worker: WorkerContext) -> Iterator[None]:
        yield

    def plain_around(job: JobContext, call_next: Any) -> Any:
        return call_next()

    async def async_one(job: JobContext) -> None: ...

    def gen_two(job: JobContext, call_next: Any) -> Iterator[None]:
        yield

    refusals: list[tuple[Callable[[Any], Any], Any, str]] = [
        (app.on_startup, two, "must be a function (plain or async def) of one argument"),
        (app.on_shutdown, "close", "must be a function (plain or async def) of one argument"),
        (app.on_startup, generator, "must not be a generator function"),
        (app.middleware, plain_around, "must be a generator function of the job"),
        (app.middleware, async_one, "an async function of (job, call_next)"),
        (app.middleware, gen_two, "must be a generator function of the job"),
        (app.middleware, 42, "must be a generator function of the job"),
    ]
    for register, fn, said in refusals:
        with pytest.raises(TypeError, match=said.replace("(", r"\(").replace(")", r"\)")):
            register(fn)
    assert app.hooks.startup == [] and app.hooks.shutdown == []
    assert app.hooks.middleware == [] and app.hooks.arounds == ()


# --- through the installed quasar ----------------------------------------------------------------

BROKEN_STARTUP = """
import os
from quasar_redis import App

app = App(namespace=os.environ["QUASAR_TEST_NS"])
closed = []


@app.on_startup
def open_pool(worker):
    raise ConnectionRefusedError("database at db:5432 refused")


@app.on_shutdown
def close_pool(worker):
    print("shutdown hook ran", flush=True)


@app.task(queue="emails")
def send(to):
    return to
"""


def test_quasar_worker_with_a_failing_startup_hook_exits_with_one_line(tmp_path: Path) -> None:
    client = real_redis()
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    (tmp_path / "hooked.py").write_text(textwrap.dedent(BROKEN_STARTUP))
    try:
        done = subprocess.run(
            [str(QUASAR), "worker", "hooked:app", "-q", "emails", "--burst"],
            check=False,
            cwd=tmp_path,
            env={**os.environ, "QUASAR_REDIS_URL": REDIS_URL, "QUASAR_TEST_NS": namespace},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        delete_namespace(client, namespace)
        client.close()
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [
        "Error: HookError: startup hook hooked.open_pool failed (hooked.py:11): "
        "ConnectionRefusedError: database at db:5432 refused"
    ], done.stderr
    assert done.stdout == "shutdown hook ran\n"
    assert " started: " not in done.stderr  # it never claimed
