"""The worker's log lines speak of statuses: a job's outcome, a cancellation while it runs, and
what a stop asked for by a signal does."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from quasar_redis import (
    App,
    CancelApplied,
    Connector,
    JobFailedError,
    Quasar,
    StaleLease,
    Worker,
)
from quasar_redis.worker import OutcomeKind
from quasar_redis.worker._lease_keeper import log_loss
from quasar_redis.worker._lifecycle import stop_message
from quasar_redis.worker._outcomes import (
    COMPLETED,
    HANDED_BACK,
    describe,
    permanent,
    release,
)

from .helpers import T0, applied, claimed, wait_for


@pytest.fixture
def app(namespace: str, caplog: pytest.LogCaptureFixture) -> Iterator[App]:
    caplog.set_level(logging.INFO, logger="quasar_redis")
    made = App(connector=Connector("memory://"), namespace=namespace)
    yield made
    made.close()


def endless(app: App, **options: Any) -> tuple[Any, threading.Event]:
    """A task that runs until cancelled, and the event it sets once it runs."""
    started = threading.Event()

    async def endless() -> None:
        started.set()
        await asyncio.sleep(30)

    return app.task(endless, name="endless", max_attempts=1, **options), started


def messages(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def test_an_outcome_is_logged_as_the_status_it_leaves_the_job_in() -> None:
    retry = release(500, OutcomeKind.FAILED)
    assert describe(COMPLETED, OutcomeKind.COMPLETED) == "completed"
    assert describe(retry, OutcomeKind.RETRYING) == "retryable (retry in 0.5s)"
    assert describe(retry, OutcomeKind.FAILED) == "discarded (out of attempts)"
    assert describe(permanent("E", "x"), OutcomeKind.FAILED_PERMANENTLY) == (
        "discarded (failed permanently)"
    )
    assert describe(HANDED_BACK, OutcomeKind.HANDED_BACK) == "available (handed back)"
    snoozed = release(5000, OutcomeKind.SNOOZED)
    assert describe(snoozed, OutcomeKind.SNOOZED) == "scheduled (snoozed for 5s)"


def test_a_run_is_logged_with_the_status_its_job_enters(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    def double(x: int) -> int:
        return 2 * x

    task: Any = app.task(double, name="double")
    with Worker(app, maintenance_interval=0.1, idle_wait=1.0):
        handle = task.enqueue(2)
        assert handle.result(timeout=10) == 4
        line = f"job {handle.id} stage=double attempt=1 status=completed duration="
        wait_for(lambda: any(m.startswith(line) for m in messages(caplog)), 10, "the log line")


def test_a_job_cancelled_while_it_runs_is_logged_as_cancelled(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    task, started = endless(app, lease_ms=300)
    with Worker(app, lease_ms=300, maintenance_interval=0.1, idle_wait=1.0) as worker:
        handle = task.enqueue()
        assert started.wait(10)
        assert isinstance(handle.cancel(reason="not needed"), CancelApplied)
        wait_for(lambda: worker.stats.lost == 1, 10, "the heartbeat to find it cancelled")
    line = f"job {handle.id}: cancelled while running (not needed); its run is told to stop"
    assert line in messages(caplog)
    assert not [m for m in messages(caplog) if "lease lost" in m]


def test_a_lease_taken_over_is_logged_as_lost(
    redis_client: Any, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    q = Quasar(redis_client, namespace)
    applied(q.enqueue("s", id="j", now=T0))
    claimed(q.claim_job("j", "w2", 100, now=T0))
    log_loss(q, "j", StaleLease(), "its run is told to stop")
    lost = [r for r in caplog.records if r.getMessage().startswith("job j: lease lost")]
    assert [r.levelno for r in lost] == [logging.WARNING]
    assert lost[0].getMessage() == "job j: lease lost (StaleLease); its run is told to stop"


def test_a_stop_says_what_it_does() -> None:
    assert stop_message(2, 30.0, False) == (
        "stopping: finishing 2 running jobs, up to 30 s; Ctrl-C again to stop now"
    )
    assert stop_message(1, 2.5, False) == (
        "stopping: finishing 1 running job, up to 2.5 s; Ctrl-C again to stop now"
    )
    assert stop_message(0, 30.0, False) == "stopping: no job running"
    assert stop_message(2, 30.0, True) == "stopping now: handing back 2 running jobs"
    assert stop_message(1, 0.0, False) == "stopping now: handing back 1 running job"
    assert stop_message(0, 30.0, True) == "stopping now"


def test_signals_are_logged_as_what_the_stop_does(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    task, started = endless(app)
    worker = Worker(app, grace=30, maintenance_interval=0.1, idle_wait=1.0)
    with worker:
        task.enqueue()
        assert started.wait(10)
        loop = worker._loop
        assert loop is not None
        loop.call_soon_threadsafe(worker._on_signal)
        first = f"worker {worker.worker_id}: stopping: finishing 1 running job, up to 30 s"
        wait_for(lambda: any(m.startswith(first) for m in messages(caplog)), 10, "the first")
        loop.call_soon_threadsafe(worker._on_signal)
        second = f"worker {worker.worker_id}: stopping now: handing back 1 running job"
        wait_for(lambda: second in messages(caplog), 10, "the second signal's line")
    assert worker.stats.handed_back == 1


class Busy(Exception):
    """A transient failure."""


def failures_of(caplog: pytest.LogCaptureFixture, job_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "job_id", None) == job_id]


def test_a_retried_attempt_is_one_line_and_a_final_failure_keeps_its_traceback(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="quasar_redis")

    def flaky() -> None:
        raise Busy("server busy")

    task: Any = app.task(flaky, name="flaky", max_attempts=2, retry=0.05)
    with Worker(app, maintenance_interval=0.1, idle_wait=1.0):
        handle = task.enqueue()
        with pytest.raises(JobFailedError):
            handle.result(timeout=10)
        wait_for(lambda: len(failures_of(caplog, handle.id)) == 3, 10, "the final failure's line")
    retried, trace, final = failures_of(caplog, handle.id)
    assert (retried.levelno, retried.exc_info) == (logging.WARNING, None)
    assert retried.getMessage().startswith(f"job {handle.id} stage=flaky attempt=1 ")
    assert "status=retryable (retry in 0.05s)" in retried.getMessage()
    assert retried.getMessage().endswith("error=Busy: server busy")
    assert "Traceback" not in logging.Formatter().format(retried)
    assert trace.levelno == logging.DEBUG and trace.exc_info is not None
    assert trace.exc_info[0] is Busy and trace.attempt == 1  # type: ignore[attr-defined]
    assert final.levelno == logging.ERROR and final.exc_info is not None
    assert "attempt=2 status=discarded (out of attempts)" in final.getMessage()
    assert "Traceback" in logging.Formatter().format(final)
