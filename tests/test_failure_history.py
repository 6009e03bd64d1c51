"""Failure diagnostics: every failed attempt keeps its kind, message, traceback, attempt and time,
the last 5 per job (``JobInfo.errors``); the worker sends a bounded traceback and logs failures
with ``exc_info`` and the job in ``extra``.

The calls on both backends and both clients; the worker in-process on both backends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from quasar_redis import (
    App,
    CorruptKeyError,
    ErrorInfo,
    Fail,
    InvalidJob,
    JobFailedError,
    JobInfo,
    JobRefused,
    PermanentFail,
    Quasar,
    Worker,
)
from quasar_redis.worker._outcomes import CUT, TRACEBACK_MAX, traceback_of

from .helpers import T0, app_of, applied, claimed, snapshot


def leased(q: Quasar, now: int = T0, **options: Any) -> Any:
    """A new job of ``options``, claimed at ``now``: its token."""
    applied(q.enqueue("s", None, now=now, **options))
    return claimed(q.claim("default", "w", 1000, now=now)).token


def errors_of(q: Quasar, job_id: str) -> tuple[ErrorInfo, ...]:
    info = q.get_job(job_id)
    assert info is not None
    return info.errors


# --- the calls -----------------------------------------------------------------------------------


def test_a_failed_attempt_keeps_its_kind_message_traceback_attempt_and_time(q: Quasar) -> None:
    token = leased(q)
    trace = "Traceback (most recent call last):\n  File \"t.py\"\nKeyError: 'x'\n"
    applied(q.fail(token, "w", "a message: with spaces", kind="KeyError", traceback=trace, now=T0))
    assert errors_of(q, token.job_id) == (
        ErrorInfo("KeyError", "a message: with spaces", trace, 1, T0),
    )
    info = q.get_job(token.job_id)
    assert info is not None and info.job.error == ErrorInfo("KeyError", "a message: with spaces")


def test_the_last_five_attempts_are_kept_oldest_first(q: Quasar) -> None:
    job_id = applied(q.enqueue("s", None, max_attempts=8, now=T0)).id
    for attempt in range(1, 8):
        now = T0 + attempt
        token = claimed(q.claim_job(job_id, "w", 1000, now=now)).token
        applied(q.fail(token, "w", f"attempt {attempt} ✗", traceback=f"tb {attempt}", now=now))
    got = errors_of(q, job_id)
    assert [(e.attempt, e.message, e.traceback, e.at) for e in got] == [
        (a, f"attempt {a} ✗", f"tb {a}", T0 + a) for a in range(3, 8)
    ]
    assert q.redis.llen(q.keys.job(job_id).replace(":job:", ":errors:")) == 5


def test_permanent_fail_and_report_keep_their_attempt(q: Quasar) -> None:
    first, second, third = (leased(q, max_attempts=1) for _ in range(3))
    applied(q.permanent_fail(first, "w", "fatal", kind="Fatal", traceback="tb1", now=T0))
    q.report_many(
        "w",
        [Fail(second, "boom", 0, "Boom", "tb2"), PermanentFail(third, "bad", "Bad", "tb3")],
        now=T0 + 1,
    )
    assert errors_of(q, first.job_id) == (ErrorInfo("Fatal", "fatal", "tb1", 1, T0),)
    assert errors_of(q, second.job_id) == (ErrorInfo("Boom", "boom", "tb2", 1, T0 + 1),)
    assert errors_of(q, third.job_id) == (ErrorInfo("Bad", "bad", "tb3", 1, T0 + 1),)


def test_an_expired_lease_is_a_failed_attempt_too(q: Quasar) -> None:
    token = leased(q)
    applied(q.expire(token.job_id, token.fencing_version, now=T0 + 1000))
    assert errors_of(q, token.job_id) == (
        ErrorInfo("LeaseExpired", "worker lease expired", "", 1, T0 + 1000),
    )
    token = claimed(q.claim("default", "w", 1000, now=T0 + 2000)).token
    q.sweep_expired(now=T0 + 3000)
    assert [e.attempt for e in errors_of(q, token.job_id)] == [1, 2]


def test_an_operator_retry_keeps_the_history(q: Quasar) -> None:
    token = leased(q, max_attempts=1)
    applied(q.fail(token, "w", "boom", now=T0))
    applied(q.retry(token.job_id, now=T0 + 1))
    assert [e.message for e in errors_of(q, token.job_id)] == ["boom"]


def test_a_job_without_failures_has_no_history(q: Quasar) -> None:
    token = leased(q)
    applied(q.complete(token, "w", now=T0))
    assert errors_of(q, token.job_id) == ()


def test_prune_deletes_the_history_with_the_job(q: Quasar) -> None:
    token = leased(q, max_attempts=1)
    applied(q.fail(token, "w", "boom", traceback="tb", now=T0))
    history = q.keys.job(token.job_id).replace(":job:", ":errors:")
    assert q.redis.exists(history)
    assert q.prune(max_age_ms=0, now=T0 + 120_000) == 1
    assert not q.redis.exists(q.keys.job(token.job_id))
    assert not q.redis.exists(history)


def test_a_traceback_over_its_limit_is_refused_and_changes_nothing(q: Quasar) -> None:
    token = leased(q)
    before = snapshot(q)
    refused = q.fail(token, "w", "boom", traceback="x" * 8193, now=T0)
    assert refused == JobRefused(InvalidJob("traceback must be at most 8192 bytes"))
    refused = q.permanent_fail(token, "w", "boom", traceback="x" * 8193, now=T0)
    assert isinstance(refused, JobRefused) and isinstance(refused.error, InvalidJob)
    assert snapshot(q) == before


def test_a_history_key_of_another_type_refuses_the_failure_and_hides_nothing_else(
    q: Quasar,
) -> None:
    token = leased(q)
    key = q.keys.job(token.job_id).replace(":job:", ":errors:")
    q.redis.set(key, "x")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match="errors"):
        q.fail(token, "w", "boom", now=T0)
    assert snapshot(q) == before
    q.redis.hset(q.keys.job(token.job_id), mapping={"ek": "E", "em": "m"})
    assert errors_of(q, token.job_id) == ()  # get_job still answers


# --- the worker ----------------------------------------------------------------------------------


@pytest.fixture
def app(backend: str, namespace: str) -> Iterator[App]:
    with app_of(backend, namespace) as made:
        yield made


class Records(logging.Handler):
    """The records of the worker's logger, as a structured-logging handler gets them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("quasar_redis.worker")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def failed_run(task: Any) -> tuple[Any, JobInfo]:
    """``task`` run on "missing" by a worker of its app until the job fails for good: its
    handle and its job."""
    with Worker(task.app, maintenance_interval=0.1, idle_wait=1.0):
        handle = task.enqueue("missing")
        with pytest.raises(JobFailedError):
            handle.result(timeout=30)
    info = handle.info()
    assert info is not None
    return handle, info


def lookup(key: str) -> None:
    {"a": 1}[key]


def test_a_worker_keeps_the_traceback_and_logs_each_failure_with_the_job(
    app: App, records: Records
) -> None:
    def failing(key: str) -> None:
        lookup(key)

    handle, info = failed_run(app.task(failing, name="failing", max_attempts=2, retry=0.0))
    assert [(e.kind, e.message, e.attempt) for e in info.errors] == [
        ("KeyError", "'missing'", 1),
        ("KeyError", "'missing'", 2),
    ]
    for error in info.errors:
        assert error.traceback.startswith("Traceback (most recent call last):")
        # the task's own frames, not the worker's
        assert error.traceback.splitlines()[1].endswith(", in failing")
        assert "in lookup" in error.traceback and "quasar_redis" not in error.traceback
        assert error.traceback.rstrip().endswith("KeyError: 'missing'")
    failures = [r for r in records.records if getattr(r, "job_id", None) == handle.id]
    # the retried attempt: one line, its traceback at DEBUG; the final failure: with its own
    assert [r.levelno for r in failures] == [logging.WARNING, logging.DEBUG, logging.ERROR]
    for attempt, record in zip((1, 1, 2), failures, strict=True):
        assert (record.queue, record.task, record.attempt) == ("default", "failing", attempt)  # type: ignore[attr-defined]
    assert failures[0].exc_info is None
    for record in failures[1:]:
        assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert "error=KeyError: 'missing'" in failures[0].getMessage()
    assert "error=KeyError: 'missing'" in failures[2].getMessage()
    assert "retryable" in failures[0].getMessage()
    assert "discarded (out of attempts)" in failures[2].getMessage()


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_under_middleware_the_traceback_holds_no_frame_of_the_worker(app: App, kind: str) -> None:
    @app.middleware
    def timed(job: Any) -> Iterator[None]:
        yield

    @app.middleware
    async def around(job: Any, call_next: Any) -> Any:
        return await call_next()

    def failing(key: str) -> None:
        lookup(key)

    async def afailing(key: str) -> None:
        lookup(key)

    fn = failing if kind == "plain" else afailing
    _, info = failed_run(app.task(fn, name="failing", max_attempts=1))
    (error,) = info.errors
    frames = [line for line in error.traceback.splitlines() if line.startswith("  File ")]
    assert "quasar_redis" not in error.traceback, error.traceback
    assert frames[0].endswith(", in around") and frames[-1].endswith(", in lookup"), frames
    assert frames[-2].endswith(", in failing" if kind == "plain" else ", in afailing")
    assert error.traceback.rstrip().endswith("KeyError: 'missing'")


def down(n: int) -> None:
    if n:
        further(n - 1)
    raise ValueError("at the bottom")


def further(n: int) -> None:
    down(n)  # (two functions in turn: Python would fold a run of one frame into a line)


def test_a_deep_traceback_keeps_its_last_4_kb(app: App) -> None:
    def deep(n: int) -> None:
        down(n)

    task = app.task(deep, name="deep", max_attempts=1)
    with Worker(app, maintenance_interval=0.1, idle_wait=1.0):
        handle = task.enqueue(200)
        with pytest.raises(JobFailedError):
            handle.result(timeout=30)
    info = handle.info()
    assert info is not None
    (error,) = info.errors
    assert len(error.traceback.encode()) <= TRACEBACK_MAX
    assert error.traceback.startswith(CUT + "  File ")
    assert error.traceback.rstrip().endswith("ValueError: at the bottom")


def test_traceback_of_cuts_at_a_line_start_and_keeps_short_ones_whole() -> None:
    try:
        raise RuntimeError("short")
    except RuntimeError as exc:
        short = traceback_of(exc)
    assert short.startswith("Traceback") and short.endswith("RuntimeError: short\n")
    try:
        raise RuntimeError("é" * 5000)
    except RuntimeError as exc:
        long = traceback_of(exc)  # one line longer than the limit: cut inside it
    assert long.startswith(CUT) and len(long.encode()) <= TRACEBACK_MAX
