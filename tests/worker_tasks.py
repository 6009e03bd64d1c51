"""Tasks for the worker processes of ``test_worker_processes``: ``tests.worker_tasks:app``.

The app reads its Redis URL from ``QUASAR_TEST_URL`` and its namespace from ``QUASAR_TEST_NS``.
Every task appends one line when an attempt starts and one when it ends to the file named by
``QUASAR_TEST_LOG``: ``start <job> <attempt> <worker>`` and ``end <job> <attempt> <worker> <how>``,
where ``how`` is ``ok``, the exception's class name, or ``cancelled``. Lines go out with one
``write`` on a descriptor opened with ``O_APPEND`` (no user-space buffer: a line written survives a
``kill -9`` of the process, and lines of concurrent processes never interleave);
``QUASAR_TEST_FSYNC=1`` also fsyncs each one. The worker's name is ``QUASAR_TEST_WORKER``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from quasar_redis import App, PermanentFailure, Task, current_job
from quasar_redis.retry import FromFunction, PolicyLike

from .helpers import REDIS_URL

URL = os.environ.get("QUASAR_TEST_URL", REDIS_URL)
NAMESPACE = os.environ.get("QUASAR_TEST_NS", "worker-tasks-unset")
#: Leases (ms) of the tasks whose worker a test kills or stops: short, so that the job comes back
#: quickly. The others hold a long lease: a test that does not kill their worker expects no expiry,
#: even when a loaded machine keeps a worker from renewing its leases for seconds on end.
#: Run each task on a worker whose ``--lease-ms`` equals the task's lease.
SHORT_LEASE_MS = 1000
LONG_LEASE_MS = 60_000
#: Leases (ms) of the tasks of the outage tests (``test_outage``): 3 s behind a proxy that refuses
#: connections, 4 s on a full Redis.
OUTAGE_LEASE_MS = 3000
FULL_LEASE_MS = 4000
POLL_S = 0.01

T = TypeVar("T")


class Boom(Exception):
    """The failure a ``mixed`` job raises on its failing attempts."""


class Interrupted(Exception):
    """Raised by ``gated_sync`` when told its job was cancelled or handed back."""


class _Log:
    """The append-only log of this process (opened on first use)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._lock = threading.Lock()

    def write(self, *fields: object) -> None:
        path = os.environ.get("QUASAR_TEST_LOG")
        if not path:
            return
        line = (" ".join(str(f) for f in fields) + "\n").encode()
        with self._lock:
            if self._fd is None:
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, line)
        if os.environ.get("QUASAR_TEST_FSYNC") == "1":
            os.fsync(self._fd)


LOG = _Log()


def worker_name() -> str:
    return os.environ.get("QUASAR_TEST_WORKER", f"pid{os.getpid()}")


def _attempt() -> tuple[str, int]:
    job = current_job().job
    return job.id, job.attempt


def logged(fn: Callable[..., T]) -> Callable[..., T]:
    """A plain task that logs the start and the end of each attempt."""

    def run(*args: Any, **kwargs: Any) -> T:
        job_id, attempt = _attempt()
        LOG.write("start", job_id, attempt, worker_name())
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:
            LOG.write("end", job_id, attempt, worker_name(), type(exc).__name__)
            raise
        LOG.write("end", job_id, attempt, worker_name(), "ok")
        return value

    run.__name__ = fn.__name__
    run.__qualname__ = fn.__qualname__
    return run


def alogged(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """An async task that logs the start and the end of each attempt."""

    async def run(*args: Any, **kwargs: Any) -> T:
        job_id, attempt = _attempt()
        LOG.write("start", job_id, attempt, worker_name())
        try:
            value = await fn(*args, **kwargs)
        except asyncio.CancelledError:
            LOG.write("end", job_id, attempt, worker_name(), "cancelled")
            raise
        except BaseException as exc:
            LOG.write("end", job_id, attempt, worker_name(), type(exc).__name__)
            raise
        LOG.write("end", job_id, attempt, worker_name(), "ok")
        return value

    run.__name__ = fn.__name__
    run.__qualname__ = fn.__qualname__
    return run


def result_of() -> dict[str, Any]:
    job_id, attempt = _attempt()
    return {"job": job_id, "attempt": attempt, "worker": worker_name()}


def _decide(fail_times: int, permanent: bool) -> None:
    attempt = current_job().attempt
    if permanent:
        raise PermanentFailure(f"permanent failure on attempt {attempt}")
    if attempt <= fail_times:
        raise Boom(f"planned failure on attempt {attempt}")


def _retry_delay(attempt: int, error: BaseException) -> float | None:
    return 0.01 * attempt


app = App(URL, namespace=NAMESPACE)


def task(
    name: str, *, lease_ms: int, max_attempts: int = 3, retry: PolicyLike = 0.0
) -> Callable[[Callable[..., Any]], Task[..., Any]]:
    """``app.task`` with a type."""

    def declare(fn: Callable[..., Any]) -> Task[..., Any]:
        made: Task[..., Any] = app.task(
            fn, name=name, lease_ms=lease_ms, max_attempts=max_attempts, retry=retry
        )
        return made

    return declare


@task("wt.mixed", max_attempts=3, lease_ms=LONG_LEASE_MS, retry=FromFunction(_retry_delay))
@alogged
async def mixed(fail_times: int, permanent: bool, sleep_ms: int) -> dict[str, Any]:
    """Fails its first ``fail_times`` attempts (or for good), after sleeping ``sleep_ms``."""
    if sleep_ms:
        await asyncio.sleep(sleep_ms / 1000)
    _decide(fail_times, permanent)
    return result_of()


@task("wt.mixed_sync", max_attempts=3, lease_ms=LONG_LEASE_MS, retry=FromFunction(_retry_delay))
@logged
def mixed_sync(fail_times: int, permanent: bool, sleep_ms: int) -> dict[str, Any]:
    """``mixed`` as a plain function (runs in the worker's thread pool)."""
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    _decide(fail_times, permanent)
    return result_of()


@task("wt.quick", max_attempts=5, lease_ms=LONG_LEASE_MS, retry=0.05)
@alogged
async def quick() -> dict[str, Any]:
    return result_of()


@task("wt.quick_short", max_attempts=5, lease_ms=SHORT_LEASE_MS, retry=0.05)
@alogged
async def quick_short() -> dict[str, Any]:
    """``quick`` for workers with short leases."""
    return result_of()


@task("wt.hang_first", max_attempts=3, lease_ms=SHORT_LEASE_MS, retry=0.0)
@alogged
async def hang_first() -> dict[str, Any]:
    """The first attempt waits until cancelled; later ones return at once."""
    if current_job().attempt == 1:
        await asyncio.sleep(3600)
    return result_of()


@task("wt.gate_first_sync", max_attempts=3, lease_ms=SHORT_LEASE_MS, retry=0.0)
@logged
def gate_first_sync(gate: str) -> dict[str, Any]:
    """The first attempt waits for the file ``gate`` (deaf to cancellation); later ones do not."""
    if current_job().attempt == 1:
        while not os.path.exists(gate):
            time.sleep(POLL_S)
    return result_of()


async def _gate(gate: str) -> dict[str, Any]:
    while not os.path.exists(gate):
        await asyncio.sleep(POLL_S)
    return result_of()


@task("wt.gated", max_attempts=3, lease_ms=LONG_LEASE_MS, retry=0.0)
@alogged
async def gated(gate: str) -> dict[str, Any]:
    """Waits for the file ``gate``."""
    return await _gate(gate)


@task("wt.gated_outage", max_attempts=5, lease_ms=OUTAGE_LEASE_MS, retry=0.0)
@alogged
async def gated_outage(gate: str) -> dict[str, Any]:
    """``gated`` for workers with the leases of an outage test."""
    return await _gate(gate)


@task("wt.gated_full", max_attempts=5, lease_ms=FULL_LEASE_MS, retry=0.0)
@alogged
async def gated_full(gate: str) -> dict[str, Any]:
    """``gated`` for workers with the leases of a full-Redis test."""
    return await _gate(gate)


@task("wt.gated_sync", max_attempts=3, lease_ms=LONG_LEASE_MS, retry=0.0)
@logged
def gated_sync(gate: str) -> dict[str, Any]:
    """Waits for the file ``gate``; gives up when told the job was cancelled or handed back."""
    while not os.path.exists(gate):
        if current_job().cancelled.is_set():
            raise Interrupted("the worker let go of this job")
        time.sleep(POLL_S)
    return result_of()


@task("wt.revised", max_attempts=3, lease_ms=LONG_LEASE_MS, retry=0.0)
@logged
def revised(gate: str) -> dict[str, Any]:
    """Waits for the file ``gate`` when given one (deaf to cancellation), then returns its input
    revision with the rest: an input whose first revision holds its worker while a newer one
    runs elsewhere."""
    while gate and not os.path.exists(gate):
        time.sleep(POLL_S)
    return {**result_of(), "revision": current_job().job.input_revision}


@task("wt.poison", max_attempts=3, lease_ms=SHORT_LEASE_MS, retry=0.0)
@logged
def poison() -> None:
    """Kills its own worker process, every time."""
    os.kill(os.getpid(), signal.SIGKILL)
