"""The worker in-process, on both backends: outcomes, retry policies, dependencies, cancellation,
stopping, idling and waking.

A worker serves in a thread of its own (``with worker:``), on the test's own loop (``async with
worker:``) or in the test's thread (``worker.run()``, for a worker that stops itself); either way
the loop's asyncio client is closed before the loop ends. Every wait is on a condition with a
deadline; the only time bounds asserted are generous sanity bounds.
The tests under "bugs" show bugs of the worker: each fails, with a message that starts with
"BUG", until its bug is fixed.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import redis.asyncio

from quasar_redis import (
    App,
    AsyncQuasar,
    CancelApplied,
    ClaimApplied,
    Complete,
    Exponential,
    Failed,
    Fixed,
    InvalidJob,
    Job,
    JobApplied,
    JobCancelledError,
    JobFailedError,
    JobHandle,
    JobRefusedError,
    Leased,
    Never,
    PermanentFailure,
    Quasar,
    Snooze,
    Status,
    Succeeded,
    Task,
    Waiting,
    Worker,
    current_job,
)
from quasar_redis import _types as t
from quasar_redis._call_codec import payload_of
from quasar_redis.errors import RedisUnavailable
from quasar_redis.worker import Lease, LeaseKeeper, _prefetch, _running
from quasar_redis.worker._claiming import Claimer, Woken
from quasar_redis.worker._resend import Resends
from quasar_redis.worker._running import Runner

from .helpers import REDIS_URL, delete_namespace, real_redis, wait_for

ROOT = Path(__file__).resolve().parent.parent


# --- plumbing ------------------------------------------------------------------------------------


def eventually(check: Callable[[], bool], timeout: float) -> bool:
    """Whether ``check()`` came true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def declare(app: App, fn: Callable[..., Any], **options: Any) -> Task[..., Any]:
    """``app.task(fn, ...)`` named after the function, with a type."""
    task: Task[..., Any] = app.task(fn, name=fn.__name__, **options)
    return task


def worker_of(app: App, **options: Any) -> Worker:
    """A worker that does its maintenance (promotions of due retries) often, and idles 1 s at
    most: a stop can take that long, as redis-py does not always let a BLPOP be cancelled."""
    return Worker(app, **{"maintenance_interval": 0.1, "idle_wait": 1.0, **options})


def runner_of(worker: Worker) -> Runner:
    """The jobs a serving worker holds (its ``Runner``)."""
    serving = worker._serving
    assert serving is not None, "the worker has not served"
    return serving.runner


def job_of(handle: JobHandle) -> Job:
    info = handle.info()
    assert info is not None, handle
    return info.job


def failure_of(handle: JobHandle, timeout: float = 10) -> Any:
    """The job of ``handle``, which must end Failed; its error is checked by the caller."""
    with pytest.raises(JobFailedError) as failed:
        handle.result(timeout=timeout)
    assert isinstance(failed.value.job.state, Failed)
    return failed.value.job


# --- results -------------------------------------------------------------------------------------


def test_result_waits_for_a_plain_function_job(app: App) -> None:
    def add(a: int, b: int) -> int:
        return a + b

    task = declare(app, add)
    with worker_of(app) as worker:
        handle = task.enqueue(2, 3)
        assert handle.result(timeout=10) == 5
    info = handle.info()
    assert info is not None and info.status is Status.COMPLETED
    assert info.job.attempt == 1
    assert worker.stats.completed == 1


def test_aresult_waits_for_an_async_job(app: App) -> None:
    async def double(x: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"double": 2 * x, "attempt": current_job().attempt}

    task = declare(app, double)

    async def scenario() -> Any:
        try:
            async with worker_of(app):
                handle = await task.aenqueue(21)
                return await handle.aresult(timeout=10)
        finally:
            await app.aclose()

    assert asyncio.run(scenario()) == {"double": 42, "attempt": 1}


def test_result_times_out_then_reports_a_cancellation(app: App) -> None:
    def later() -> None:
        return None

    handle = declare(app, later).options(delay=3600).enqueue()
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.2)
    assert isinstance(handle.cancel(), CancelApplied)
    with pytest.raises(JobCancelledError):
        handle.result(timeout=5)


# --- retries -------------------------------------------------------------------------------------


def test_fixed_retries_until_the_job_succeeds(app: App) -> None:
    def flaky() -> int:
        attempt = current_job().attempt
        if attempt < 3:
            raise ValueError(f"attempt {attempt}")
        return attempt

    task = declare(app, flaky, max_attempts=3, retry=Fixed(0.02))
    with worker_of(app) as worker:
        handle = task.enqueue()
        assert handle.result(timeout=20) == 3
    assert job_of(handle).attempt == 3
    assert worker.stats.retried == 2


def test_exponential_retries_wait_longer_each_time_and_then_give_up(app: App) -> None:
    starts: list[float] = []

    def broken() -> None:
        starts.append(time.monotonic())
        raise ValueError("still broken")

    policy = Exponential(base=0.05, factor=2, jitter=0)
    assert [policy.delay(a, ValueError()) for a in (1, 2, 3)] == [0.05, 0.1, 0.2]
    task = declare(app, broken, max_attempts=3, retry=policy)
    with worker_of(app):
        job = failure_of(task.enqueue(), timeout=20)
    assert job.attempt == 3 and job.error.kind == "ValueError"
    assert job.error.message == "still broken"
    gaps = [starts[1] - starts[0], starts[2] - starts[1]]
    assert gaps[0] >= 0.05 - 0.005 and gaps[1] >= 0.1 - 0.005, gaps


def test_never_fails_at_the_first_error(app: App) -> None:
    def once() -> None:
        raise KeyError("missing")

    task = declare(app, once, max_attempts=5, retry=Never())
    with worker_of(app):
        job = failure_of(task.enqueue())
    assert job.attempt == 1 and job.error.kind == "KeyError"


def test_a_function_policy_decides_each_retry(app: App) -> None:
    asked: list[tuple[int, str]] = []

    def policy(attempt: int, error: BaseException) -> float | None:
        asked.append((attempt, type(error).__name__))
        return 0.0 if attempt < 2 else None

    def failing() -> None:
        raise LookupError("nope")

    task = declare(app, failing, max_attempts=5, retry=policy)
    with worker_of(app):
        job = failure_of(task.enqueue())
    assert job.attempt == 2
    assert asked == [(1, "LookupError"), (2, "LookupError")]


def test_permanent_failure_ends_the_job_whatever_attempts_remain(app: App) -> None:
    def declined() -> None:
        raise PermanentFailure("card declined")

    task = declare(app, declined, max_attempts=5, retry=Fixed(0))
    with worker_of(app):
        job = failure_of(task.enqueue())
    assert job.attempt == 1
    assert (job.error.kind, job.error.message) == ("PermanentFailure", "card declined")


def test_snooze_runs_the_job_later_without_using_an_attempt(app: App) -> None:
    runs: list[int] = []

    def sleepy() -> str:
        runs.append(current_job().attempt)
        if len(runs) == 1:
            raise Snooze(0.05)
        return "awake"

    task = declare(app, sleepy, max_attempts=1)
    with worker_of(app) as worker:
        handle = task.enqueue()
        assert handle.result(timeout=20) == "awake"
    assert runs == [1, 1]
    assert job_of(handle).attempt == 1
    assert worker.stats.snoozed == 1


# --- what the worker refuses to run or report ----------------------------------------------------


def test_a_task_past_its_timeout_fails_with_kind_timeout(app: App) -> None:
    saw_cancel: list[bool] = []

    async def stuck() -> None:
        await asyncio.sleep(30)

    def stuck_sync() -> None:
        saw_cancel.append(current_job().cancelled.wait(30))

    tasks = [declare(app, f, max_attempts=1, timeout=0.2) for f in (stuck, stuck_sync)]
    with worker_of(app):
        handles = [task.enqueue() for task in tasks]
        jobs = [failure_of(handle) for handle in handles]
        wait_for(lambda: saw_cancel, 10, "the plain function to see its cancel flag")
    for job in jobs:
        assert job.error.kind == "Timeout" and "timed out after 0.2s" in job.error.message
    assert saw_cancel == [True]


def test_unknown_task_bad_payload_and_bad_result_fail_permanently(app: App) -> None:
    def fine(x: int) -> int:
        return x

    def odd() -> object:
        return object()

    declare(app, fine, max_attempts=3)
    bad_result = declare(app, odd, max_attempts=3)
    unknown = app.client.enqueue("nobody.home", payload_of([], {}), max_attempts=3)
    bad_payload = app.client.enqueue("fine", [1, 2], max_attempts=3)
    assert isinstance(unknown, JobApplied) and isinstance(bad_payload, JobApplied)
    handles = [app.handle(unknown.job.id), app.handle(bad_payload.job.id), bad_result.enqueue()]
    with worker_of(app):
        jobs = [failure_of(handle) for handle in handles]
    assert [job.error.kind for job in jobs] == ["UnknownTask", "BadPayload", "BadResult"]
    assert [job.attempt for job in jobs] == [1, 1, 1]
    assert "nobody.home" in jobs[0].error.message


def test_an_unencodable_argument_is_refused_at_enqueue(app: App) -> None:
    def takes(x: Any) -> None:
        return None

    task = declare(app, takes)
    with pytest.raises(JobRefusedError) as refused:
        task.enqueue(object())
    assert isinstance(refused.value.error, InvalidJob)
    assert "msgpack" in refused.value.error.reason
    assert sum(app.client.counts("default").by_status().values()) == 0


# --- dependencies and idempotent enqueue ---------------------------------------------------------


def test_a_dependent_job_runs_after_its_dependency(app: App) -> None:
    order: list[str] = []

    def step(name: str) -> str:
        order.append(name)
        return name

    task = declare(app, step)
    first = task.enqueue("first")
    second = task.options(depends_on=[first]).enqueue("second")
    info = second.info()
    assert info is not None and info.waiting_on == first.id
    with worker_of(app):
        assert second.result(timeout=10) == "second"
    assert order == ["first", "second"]


def test_dependents_of_a_failed_job_stay_blocked_or_are_cancelled(app: App) -> None:
    ran: list[str] = []

    def doomed() -> None:
        raise PermanentFailure("no")

    def after(name: str) -> None:
        ran.append(name)

    failing = declare(app, doomed).enqueue()
    follow = declare(app, after)
    blocked = follow.options(depends_on=[failing]).enqueue("blocked")
    cancelled = follow.options(depends_on=[failing], on_dependency_failure="cancel").enqueue("c")
    with worker_of(app):
        failure_of(failing)
        with pytest.raises(JobCancelledError):
            cancelled.result(timeout=10)
    info = blocked.info()
    assert info is not None and info.waiting_on == failing.id
    assert isinstance(info.job.state, Waiting) and info.job.attempt == 0
    assert ran == []


def test_enqueue_with_an_id_is_idempotent(app: App) -> None:
    calls: list[int] = []

    def charge(cents: int) -> int:
        calls.append(cents)
        return cents

    task = declare(app, charge)
    one = task.options(id="order-42").enqueue(995)
    two = task.options(id="order-42").enqueue(1)
    assert one.id == two.id == "order-42"
    assert app.client.counts("default").available == 1
    with worker_of(app):
        assert two.result(timeout=10) == 995
    assert calls == [995]


# --- cancellation of running jobs ----------------------------------------------------------------


def test_cancel_stops_a_running_async_job(app: App) -> None:
    started = threading.Event()
    seen: list[str] = []

    async def endless() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "finished"

    task = declare(app, endless, lease_ms=300, max_attempts=1)
    with worker_of(app, lease_ms=300) as worker:
        handle = task.enqueue()
        assert started.wait(10)
        assert isinstance(handle.cancel(), CancelApplied)
        wait_for(lambda: seen, 10, "the task to be cancelled (its heartbeat refused)")
        wait_for(lambda: worker.stats.lost == 1, 10, "the worker to count a lost lease")
    assert seen == ["cancelled"]
    with pytest.raises(JobCancelledError):
        handle.result(timeout=5)


def test_cancel_sets_the_flag_of_a_running_plain_function(app: App) -> None:
    started = threading.Event()
    seen: list[bool] = []

    def endless_sync() -> str:
        started.set()
        seen.append(current_job().cancelled.wait(30))
        return "finished anyway"

    task = declare(app, endless_sync, lease_ms=300, max_attempts=1)
    with worker_of(app, lease_ms=300):
        handle = task.enqueue()
        assert started.wait(10)
        assert isinstance(handle.cancel(), CancelApplied)
        wait_for(lambda: seen, 10, "the plain function to see current_job().cancelled")
    assert seen == [True]
    with pytest.raises(JobCancelledError):
        handle.result(timeout=5)
    assert job_of(handle).result is None


# --- stopping ------------------------------------------------------------------------------------


def test_stop_with_grace_lets_the_running_job_finish(app: App) -> None:
    worker = worker_of(app, concurrency=1, grace=30)

    async def last() -> str:
        worker.stop()  # from the loop itself: the stop is in force before this job goes on
        await asyncio.sleep(0.2)
        return "finished"

    def next_one() -> None:
        return None

    running = declare(app, last).enqueue()
    waiting = declare(app, next_one).options(priority=5).enqueue()
    worker.run(install_signals=False)  # until the job stops it (an error that ended it: raised)
    assert running.result(timeout=1) == "finished"
    assert job_of(running).attempt == 1
    state = job_of(waiting)
    assert isinstance(state.state, Waiting) and state.attempt == 0
    assert worker.stats.completed == 1 and worker.stats.claimed == 1


def test_stop_without_grace_hands_running_jobs_back(app: App) -> None:
    started = threading.Barrier(3)
    seen: list[bool] = []

    async def endless() -> None:
        await asyncio.to_thread(started.wait, 10)
        await asyncio.sleep(30)

    def endless_sync() -> None:
        started.wait(10)
        seen.append(current_job().cancelled.wait(30))

    handles = [declare(app, f, max_attempts=1).enqueue() for f in (endless, endless_sync)]
    worker = worker_of(app, concurrency=2, grace=0)
    with worker:
        started.wait(10)
        worker.stop()
        wait_for(lambda: worker.stats.handed_back == 2, 10, "both jobs to be handed back")
    wait_for(lambda: seen, 10, "the plain function to see its cancel flag")
    assert seen == [True]
    for handle in handles:
        job = job_of(handle)
        assert isinstance(job.state, Waiting) and job.attempt == 0, job
        info = handle.info()
        assert info is not None and info.status is Status.AVAILABLE


def stop_as_the_first_claim_starts(
    app: App, monkeypatch: pytest.MonkeyPatch, *, stop_first: bool, grace: float
) -> None:
    """Two jobs of a task that must never run; the worker stops as it starts its first claim's
    jobs: just before (``stop_first``, the stop in force when they come) or just after, at once
    (before any task has begun). Both go back to the queue, no attempt used, neither ran."""
    ran: list[str] = []

    async def never() -> None:
        ran.append("ran")

    task = declare(app, never, max_attempts=1)
    handles = [task.enqueue() for _ in range(2)]
    worker = worker_of(app, concurrency=2, grace=grace)
    start_all = Runner.start_all

    def start_and_stop(self: Runner, claims: Any) -> None:
        if stop_first:
            worker.stop()  # on the loop: in force before the claim's jobs are started
        start_all(self, claims)
        if not stop_first:
            worker.stop(immediate=True)  # on the loop: hands back before any task has started

    monkeypatch.setattr(Runner, "start_all", start_and_stop)
    worker.run(install_signals=False)  # until start_and_stop stops it
    assert ran == []
    assert worker.stats.claimed == 2 and worker.stats.handed_back == 2
    for handle in handles:
        job = job_of(handle)
        assert isinstance(job.state, Waiting) and job.attempt == 0, job


def test_a_job_handed_back_before_its_task_starts_is_released(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_as_the_first_claim_starts(app, monkeypatch, stop_first=False, grace=0)


# --- prefetch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", "AUTO", None])
def test_prefetch_must_be_a_nonnegative_integer_or_auto(app: App, bad: Any) -> None:
    with pytest.raises(ValueError, match="prefetch must be a nonnegative integer or 'auto'"):
        Worker(app, prefetch=bad)


def test_auto_prefetch_holds_as_many_jobs_as_start_within_its_wait(app: App) -> None:
    # prefetch="auto" (the default): beyond its running jobs, the worker holds as many as
    # concurrency / average run time start within PREFETCH_WAIT_S (10 ms), at most concurrency.
    worker = Worker(app, concurrency=10)
    assert worker.prefetch == "auto" and worker._prefetch.lanes == 2
    assert worker._prefetch.extra == 0  # nothing has run yet: no prefetch
    worker._prefetch.learn(0.0001)
    assert worker._prefetch.extra == 10  # short jobs: up to concurrency
    for seconds, extra in ((0.025, 4), (0.06, 1), (0.15, 0), (5.0, 0)):
        worker._prefetch.run_avg = None
        worker._prefetch.learn(seconds)
        assert worker._prefetch.extra == extra, (seconds, worker._prefetch.extra)
    worker._prefetch.run_avg = 0.0001
    worker._prefetch.learn(1.0)  # one long job among short ones: a moving average, weight 0.1
    assert worker._prefetch.run_avg == pytest.approx(0.10009) and worker._prefetch.extra == 0
    for _ in range(30):
        worker._prefetch.learn(0.0001)
    assert worker._prefetch.extra == 10
    assert Worker(app, concurrency=10, prefetch=3)._prefetch.extra == 3  # fixed: never changes
    assert Worker(app, concurrency=10, prefetch=0)._prefetch.lanes == 1


class RunClock:
    """The worker's clock for its run times, moved only by the jobs (``advance``): a run lasts
    what its job says, however long a loaded machine takes to run it."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(("run_s", "prefetched"), [(0.0, True), (0.05, False)])
def test_auto_prefetch_claims_ahead_for_short_jobs_only(
    app: App, run_s: float, prefetched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    concurrency = 3
    waiting: list[int] = []
    now_running: list[int] = [0]
    most: list[int] = [0]
    clock = RunClock()  # (the run times it learns from, and how long a job has waited)
    for module in (_running, _prefetch):
        monkeypatch.setattr(module, "time", clock)
    worker = worker_of(app, concurrency=concurrency)  # prefetch="auto"

    async def job(i: int) -> int:
        now_running[0] += 1
        most[0] = max(most[0], now_running[0])
        waiting.append(len(runner_of(worker).queued))
        clock.advance(run_s)
        await asyncio.sleep(run_s)
        now_running[0] -= 1
        return i

    task = declare(app, job)
    n = 60 if prefetched else 8
    handles = app.enqueue_many([task.job(i) for i in range(n)])
    with worker:
        assert [h.result(timeout=30) for h in handles] == list(range(n))
    assert most[0] <= concurrency
    if prefetched:  # no-op jobs: up to concurrency more held, waiting for a slot
        assert 0 < max(waiting) <= concurrency and worker._prefetch.extra == concurrency
    else:  # 50 ms jobs: 3 / 0.05 s start within 10 ms is 0.6, so none is held ahead
        assert max(waiting) == 0 and worker._prefetch.extra == 0
    assert worker.stats.completed == n


def test_auto_prefetch_hands_back_jobs_that_wait_behind_long_ones(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short jobs first (prefetch "auto" holds one ahead at concurrency 1), then two long ones: the
    # one claimed ahead would wait out the other's whole run. Once it has waited 0.3 s
    # (PREFETCH_STALE_S, shortened here) it goes back to the queue for another worker, unattempted,
    # and prefetch stops.
    monkeypatch.setattr(_prefetch, "PREFETCH_STALE_S", 0.3)
    gate = threading.Event()
    started: list[int] = []

    async def quick() -> None:
        return None

    async def long(i: int) -> int:
        started.append(i)
        await asyncio.to_thread(gate.wait, 20)
        return i

    quick_task, long_task = declare(app, quick), declare(app, long)
    worker = worker_of(app, concurrency=1)
    with worker:
        for handle in [quick_task.enqueue() for _ in range(5)]:
            handle.result(timeout=10)
        wait_for(lambda: worker._prefetch.extra == 1, 10, "one job held ahead")
        handles = app.enqueue_many([long_task.job(i) for i in range(2)])
        wait_for(lambda: worker.stats.handed_back == 1, 10, "the waiting job handed back")
        assert len(started) == 1 and worker._prefetch.extra == 0
        waiting = [job_of(h) for h in handles if isinstance(job_of(h).state, Waiting)]
        assert len(waiting) == 1 and waiting[0].attempt == 0, waiting  # no attempt used
        gate.set()
        assert sorted(h.result(timeout=10) for h in handles) == [0, 1]
    assert sorted(started) == [0, 1]  # each ran once


def test_jobs_a_claim_brings_back_during_a_stop_are_handed_back_without_starting(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A claim whose reply comes once the stop is in force (the idle wait's, ended by the stop):
    # its jobs go back to the queue; the grace period is for jobs already running.
    stop_as_the_first_claim_starts(app, monkeypatch, stop_first=True, grace=30)


@pytest.mark.parametrize("prefetch", [0, 4])
def test_at_most_concurrency_jobs_run_at_once_and_prefetched_ones_wait(
    app: App, prefetch: int
) -> None:
    concurrency = 3
    now_running: list[int] = [0]
    most: list[int] = [0]
    held: list[int] = []  # every job the worker holds (running, waiting, or reporting)
    unreported: list[int] = []  # of those, the ones running or waiting for a slot
    waiting: list[int] = []
    worker = worker_of(app, concurrency=concurrency, prefetch=prefetch)

    async def busy(i: int) -> int:
        now_running[0] += 1
        most[0] = max(most[0], now_running[0])
        runner = runner_of(worker)
        held.append(len(runner.held))
        unreported.append(len(runner.held) - runner.reporting)
        waiting.append(len(runner_of(worker).queued))
        await asyncio.sleep(0.01)
        now_running[0] -= 1
        return i

    task = declare(app, busy)
    handles = app.enqueue_many([task.job(i) for i in range(40)])
    with worker:
        assert [h.result(timeout=30) for h in handles] == list(range(40))
    assert most[0] == concurrency
    assert max(unreported) == concurrency + prefetch  # the first claim: 3 ran, the rest waited
    assert max(waiting) == prefetch
    assert max(held) <= 2 * (concurrency + prefetch)
    assert worker.stats.completed == 40 and worker.stats.claimed == 40


def test_prefetched_jobs_are_handed_back_at_a_stop_and_never_run(app: App) -> None:
    release = threading.Event()
    ran: list[int] = []

    async def blocker() -> str:
        await asyncio.to_thread(release.wait, 10)
        return "done"

    async def later(i: int) -> None:
        ran.append(i)

    first = declare(app, blocker).enqueue()
    task = declare(app, later)
    rest = [task.enqueue(i) for i in range(2)]
    worker = worker_of(app, concurrency=1, prefetch=2, grace=30)
    with worker:
        wait_for(lambda: len(runner_of(worker).queued) == 2, 10, "two jobs prefetched")
        worker.stop()  # the running job has its grace; the prefetched go back at once
        wait_for(lambda: worker.stats.handed_back == 2, 10, "the prefetched jobs handed back")
        release.set()
    assert first.result(timeout=10) == "done"
    assert ran == []
    for handle in rest:
        job = job_of(handle)
        assert isinstance(job.state, Waiting) and job.attempt == 0, job
    assert worker.stats.completed == 1 and worker.stats.claimed == 3


def test_a_prefetched_job_whose_lease_is_lost_never_runs(app: App) -> None:
    release = threading.Event()
    ran: list[str] = []

    async def blocker() -> None:
        await asyncio.to_thread(release.wait, 10)

    async def later() -> None:
        ran.append("later")

    first = declare(app, blocker).enqueue()
    second = declare(app, later).enqueue()
    worker = worker_of(app, concurrency=1, prefetch=1, lease_ms=600)
    with worker:
        wait_for(lambda: len(runner_of(worker).queued) == 1, 10, "a job prefetched")
        assert isinstance(second.cancel(), CancelApplied)
        wait_for(lambda: worker.stats.lost == 1, 10, "the next heartbeat to find it cancelled")
        release.set()
        assert first.result(timeout=10) is None
        wait_for(lambda: not runner_of(worker).held, 10, "the worker to hold nothing")
    assert ran == []
    with pytest.raises(JobCancelledError):
        second.result(timeout=5)


def test_with_prefetch_two_claims_are_in_flight_at_once(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two claim loops: one's call is in flight while the other's jobs start, so that Redis and
    # the worker do not take turns.
    in_flight: list[int] = [0]
    most: list[int] = [0]
    execute = AsyncQuasar.execute

    async def counted(self: AsyncQuasar, call: Any) -> Any:
        if call.script.name not in CLAIMS:
            return await execute(self, call)
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        try:
            return await execute(self, call)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(AsyncQuasar, "execute", counted)

    async def noop(i: int) -> int:
        return i

    task = declare(app, noop)
    handles = app.enqueue_many([task.job(i) for i in range(200)])
    worker = worker_of(app, concurrency=5, prefetch=5)
    with worker:
        assert [h.result(timeout=30) for h in handles] == list(range(200))
    assert most[0] == 2
    assert worker.stats.completed == 200 and worker.stats.claimed == 200


def test_the_lease_keeper_stops_when_its_stop_comes_with_the_last_outcomes(
    sync_q: Quasar,
) -> None:
    # The stop and outcomes taken in one go: the outcomes are sent, and the stop still ends the
    # thread (it used to be swallowed: the thread ran on, and a worker's stop waited 10 s).
    q = sync_q  # the keeper's thread calls it: the blocking client
    q.enqueue("s", id="j")
    claimed = q.claim("default", "w", 30_000)
    assert isinstance(claimed, ClaimApplied)
    results: list[Any] = []
    keeper = LeaseKeeper(q, "w", dispatch=lambda pairs: results.extend(r for _, r in pairs))
    lease = Lease(claimed.claim, 30_000, lambda *_: None)
    keeper.hold(lease)
    keeper.report_many([(lease, Complete, "j")])
    keeper._stop.set()
    keeper._outcomes.put(None)  # what stop() puts, here before the thread takes anything
    keeper.start()
    keeper._thread.join(5)
    assert not keeper._thread.is_alive()
    assert [type(r).__name__ for r in results] == ["OutcomeApplied"]
    assert isinstance(q.get_job("j").job.state, Succeeded)  # type: ignore[union-attr]


# --- idling and waking ---------------------------------------------------------------------------


CLAIMS = ("claim", "report_and_claim")  # a claim, alone or carrying outcomes


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the claim and other script calls of every asyncio client (the worker's)."""
    counts: Counter[str] = Counter()
    execute = AsyncQuasar.execute

    async def counted_execute(self: AsyncQuasar, call: Any) -> Any:
        counts["script"] += 1
        if call.script.name in CLAIMS:
            counts["claim"] += 1
        return await execute(self, call)

    monkeypatch.setattr(AsyncQuasar, "execute", counted_execute)
    return counts


def test_an_idle_worker_does_not_poll(app: App, claims: Counter[str]) -> None:
    async def idle_for(seconds: float) -> None:
        async with worker_of(app, maintenance_interval=1.0, idle_wait=5.0):
            await asyncio.sleep(seconds)  # the span measured, not a synchronisation
        await app.aclose()

    asyncio.run(idle_for(2.0))
    assert 1 <= claims["claim"] <= 3, claims
    assert claims["script"] <= 20, claims


def test_a_job_on_an_idle_queue_starts_at_once(app: App, claims: Counter[str]) -> None:
    started = threading.Event()

    def hello() -> str:
        started.set()
        return "hi"

    task = declare(app, hello)
    worker = Worker(app, idle_wait=15.0, maintenance_interval=60.0)
    with worker:
        wait_for(lambda: claims["claim"] >= 1, 10, "the worker to find the queue empty")
        handle = task.enqueue()
        assert started.wait(5), "the wake list did not wake the worker (it idles 15 s)"
        assert handle.result(timeout=5) == "hi"
    assert claims["claim"] <= 4, claims


def test_a_job_enqueued_to_an_idle_worker_is_claimed_by_the_wait_that_wakes_it(
    app: App, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a plain asyncio client (the real server here) the idle wait carries the next claim:
    # Redis runs it as the wait ends, so the woken worker needs no claim round trip of its own.
    claimed_by_wait: list[str] = []
    wake_then, idle = AsyncQuasar.wait_and_claim, Claimer.idle
    idling = threading.Event()

    ended: list[bool] = []  # each wait that came back (woken, or not: a timeout, an unblock)
    waiting: list[int] = []  # the client id of each wait, once Redis holds it

    async def watched(
        self: AsyncQuasar, queues: Any, timeout: float, claim: Any, on_wait: Any, *rest: Any
    ) -> Any:
        def held(client_id: int) -> None:
            waiting.append(client_id)
            on_wait(client_id)

        woke, result = await wake_then(self, queues, timeout, claim, held, *rest)
        claimed_by_wait.extend(c.job.id for c in getattr(result, "claims", ()))
        ended.append(woke)
        return woke, result

    async def waits(self: Claimer, lane: int, next_at: int | None) -> None:
        idling.set()
        await idle(self, lane, next_at)

    monkeypatch.setattr(AsyncQuasar, "wait_and_claim", watched)
    monkeypatch.setattr(Claimer, "idle", waits)

    async def hello() -> str:
        return "hi"

    task = declare(app, hello)
    worker = worker_of(app, idle_wait=15.0, maintenance_interval=60.0)
    with worker:
        assert idling.wait(10), "the worker did not find the queue empty"
        handle = task.enqueue()
        assert handle.result(timeout=10) == "hi"
        if backend == "redis":  # stop only once the worker waits again (else nothing to unblock)
            wait_for(lambda: len(waiting) >= 2, 10, "the worker to wait again")
    if backend == "redis":
        assert claimed_by_wait == [handle.id]
        # Woken by the job, then (idle again, for up to 15 s) ended by the stop's CLIENT UNBLOCK:
        # the wait comes back with its claim's answer rather than being cut off.
        assert ended == [True, False], ended
    else:  # fakeredis: the wait alone, then a claim
        assert claimed_by_wait == []


def test_jobs_of_the_waits_claim_start_before_the_idle_wait_ends_its_other_waits(
    app: App, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait's answer starts its jobs in the event loop's turn it comes in, not turns later
    # once the idle wait has woken, cancelled its stop and poke waits and decided: latency.
    events: list[str] = []
    start_claimed, answered, idle = Claimer.start_claimed, Claimer._answered, Claimer.idle
    idling = threading.Event()

    def starts(self: Claimer, queue: str, want: int, claims: Any) -> int:
        events.extend("start" for _ in claims)
        return start_claimed(self, queue, want, claims)

    def decides(self: Claimer, *args: Any) -> bool:
        events.append("decided")
        return answered(self, *args)

    async def waits(self: Claimer, lane: int, next_at: int | None) -> None:
        idling.set()
        await idle(self, lane, next_at)

    monkeypatch.setattr(Claimer, "start_claimed", starts)
    monkeypatch.setattr(Claimer, "_answered", decides)
    monkeypatch.setattr(Claimer, "idle", waits)

    async def hello() -> str:
        return "hi"

    task = declare(app, hello)
    with worker_of(app, idle_wait=15.0, maintenance_interval=60.0):
        assert idling.wait(10), "the worker did not find the queue empty"
        handle = task.enqueue()
        assert handle.result(timeout=10) == "hi"
    if backend == "redis":  # the wait carried the claim
        assert events[:2] == ["start", "decided"], events
    else:  # fakeredis: the wait alone, then a claim of its own
        assert events[:2] == ["decided", "start"], events


def test_a_waits_claim_starts_its_jobs_once_whichever_takes_its_answer_first() -> None:
    started: list[Any] = []

    class Claims:  # (what Woken uses of a Claimer)
        def __init__(self) -> None:
            self.asked, self.carrying = 10, 0
            self.reporter, self.stopping = self, asyncio.Event()

        def resume_carrying(self) -> None:
            self.carrying += 1

        def start_claimed(self, queue: str, want: int, claims: Any) -> int:
            started.append((queue, want, list(claims)))
            return len(claims)

    async def scenarios() -> None:
        loop = asyncio.get_running_loop()
        claim: Any = object()
        applied = t.ClaimsApplied(claims=(claim,))

        def answered(result: Any) -> asyncio.Future[Any]:
            pop: asyncio.Future[Any] = loop.create_future()
            pop.set_result((True, result))
            return pop

        def woken() -> tuple[Woken, Claims]:
            claims = Claims()
            return Woken(claims, "q", 10), claims  # type: ignore[arg-type]

        # its answer in while the idle wait is undecided: its jobs start, and its slots and the
        # outcomes' carrying are let go at once; the idle wait does not start them again
        first, claims = woken()
        first.answer(applied)
        assert started == [("q", 10, [claim])] and (claims.asked, claims.carrying) == (0, 1)
        first.decided = True
        await first.end(answered(applied), True)
        assert len(started) == 1 and (claims.asked, claims.carrying) == (0, 1)
        # the idle wait took the answer first (and let go itself): started once, by it
        second, claims = woken()
        second.decided = True
        second.answer(applied)
        assert len(started) == 1
        await second.end(answered(applied), True)
        assert len(started) == 2 and (claims.asked, claims.carrying) == (10, 0)
        # a wait given up on (cut short), answered late: left to Claimer._late
        third, _ = woken()
        third.decided = True
        third.answer(applied)
        await third.end(answered(applied), False)
        # a refusal starts nothing, as the idle wait's own taking of it, an error or a
        # cancelled wait do not
        refused = t.ClaimRefused(t.NothingClaimable(next_at=None))
        woken()[0].answer(refused)
        failed: asyncio.Future[Any] = loop.create_future()
        failed.set_exception(RedisUnavailable("gone"))
        cancelled: asyncio.Future[Any] = loop.create_future()
        cancelled.cancel()
        for pop in (answered(refused), failed, cancelled):
            fourth, _ = woken()
            fourth.decided = True
            await fourth.end(pop, pop is not cancelled and pop is not failed)
        assert len(started) == 2
        # its answer read whole and its jobs started, then the wait cancelled before it
        # returned: the wait counts as answered (its claim is not sent again, which would
        # replay the same jobs), and nothing starts twice
        fifth, _ = woken()
        fifth.answer(applied)
        assert len(started) == 3
        resends, kept = Resends(), set[Any]()
        owner = SimpleNamespace(
            resends=resends, background=SimpleNamespace(keep=kept.add), _late=lambda *_: None
        )
        call: Any = SimpleNamespace(call_id="c1")
        assert Claimer._answered(owner, cancelled, 0, "q", call, fifth.started)  # type: ignore[arg-type]
        assert not resends.pending() and kept == {cancelled}
        fifth.decided = True
        await fifth.end(cancelled, True)
        assert len(started) == 3
        # not started, the same cancelled wait is sent again
        assert not Claimer._answered(owner, cancelled, 0, "q", call, False)  # type: ignore[arg-type]
        assert resends.pop(0, "q") == (call, [])

    asyncio.run(scenarios())


def test_a_cut_short_wait_whose_claim_runs_after_its_resend_starts_its_jobs(
    namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wait cut short (a poke before Redis held it) whose cancellation redis-py swallows: the
    # claim is re-sent first and finds nothing (a refusal leaves no record to replay); the
    # wait's own claim then runs, with the same call id, and leases a job. That job must start,
    # not wait out its lease (the four-worker test saw it: the job's next attempt, a lease
    # later). (Real Redis: only a plain asyncio client sends a claim with its wait.)
    real_redis().close()
    app = App(REDIS_URL, namespace=namespace)
    wake_then = AsyncQuasar.wait_and_claim
    swallowed, second_wait, go = threading.Event(), threading.Event(), threading.Event()
    waits: list[str] = []

    async def cut_short_then_late(
        self: AsyncQuasar, queues: Any, timeout: float, call: Any, blocked: Any, *rest: Any
    ) -> Any:
        waits.append(str(call.args[0]))
        if len(waits) == 2:  # the wait after the re-sent claim: it claims nothing itself
            second_wait.set()
            await asyncio.sleep(timeout)
            return False, await self.execute(self.calls.counts("default"))
        if len(waits) > 2:
            return await wake_then(self, queues, timeout, call, blocked, *rest)
        try:
            await asyncio.sleep(30)  # waiting, its client id not known yet
        except asyncio.CancelledError:
            swallowed.set()  # as redis-py's wait_for can: the wait goes on
        while not go.is_set():
            await asyncio.sleep(0.01)
        return False, await self.execute(call)  # the claim runs now, after the re-sent one

    monkeypatch.setattr(AsyncQuasar, "wait_and_claim", cut_short_then_late)

    async def hello() -> str:
        return "hi"

    task = declare(app, hello)
    worker = worker_of(app, idle_wait=15.0, maintenance_interval=60.0)
    try:
        with worker:
            wait_for(lambda: waits, 10, "the worker to wait")
            loop = worker._loop
            assert loop is not None
            loop.call_soon_threadsafe(worker._poke.set)
            assert swallowed.wait(10) and second_wait.wait(10)
            assert len(waits) == 2  # the re-sent claim found nothing: the worker waits again
            handle = task.enqueue()
            go.set()
            assert handle.result(timeout=10) == "hi"  # not after its lease (30 s)
            assert job_of(handle).attempt == 1
    finally:
        delete_namespace(app.client.redis, namespace)
        app.client.redis.close()


def test_jobs_of_a_short_claim_start_before_the_next_claim_goes_out(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A claim that came back with fewer jobs than it asked for (the queue ran dry) lets its jobs
    # start before the next claim (most likely an empty one) is sent: latency at light load.
    events: list[str] = []
    execute, idle, wake_then = AsyncQuasar.execute, Claimer.idle, AsyncQuasar.wait_and_claim

    async def recorded(self: AsyncQuasar, call: Any) -> Any:
        if call.script.name in CLAIMS:
            events.append("claim")
        return await execute(self, call)

    async def claimed_on_waking(
        self: AsyncQuasar, queues: Any, timeout: float, call: Any, blocked: Any, on_answer: Any
    ) -> Any:
        def answered(result: Any) -> None:
            events.append("claim")  # (the claim that went with the wait: its reply is read)
            on_answer(result)

        return await wake_then(self, queues, timeout, call, blocked, answered)

    async def idling(self: Claimer, lane: int, next_at: int | None) -> None:
        events.append("idle")
        await idle(self, lane, next_at)

    monkeypatch.setattr(AsyncQuasar, "execute", recorded)
    monkeypatch.setattr(AsyncQuasar, "wait_and_claim", claimed_on_waking)
    monkeypatch.setattr(Claimer, "idle", idling)

    async def hello() -> str:
        events.append("start")
        return "hi"

    task = declare(app, hello)
    with worker_of(app, idle_wait=15.0, maintenance_interval=60.0):
        wait_for(lambda: "idle" in events, 10, "the worker to find the queue empty")
        handle = task.enqueue()
        assert handle.result(timeout=10) == "hi"
        wait_for(lambda: events.count("idle") >= 2, 10, "the worker to idle again")
    woken = events.index("idle") + 1
    assert events[woken : woken + 4] == ["claim", "start", "claim", "idle"], events


def test_outcomes_ride_the_next_claim_and_each_is_reported_once(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    carried: list[str] = []  # job ids whose outcome went with a claim
    by_keeper: list[str] = []  # ... and those the lease keeper reported
    execute = AsyncQuasar.execute

    async def recorded(self: AsyncQuasar, call: Any) -> Any:
        result = await execute(self, call)
        if call.script.name == "report_and_claim":
            count = int(call.args[6])
            carried.extend(str(call.args[8 + 11 * i]) for i in range(count))
        return result

    keeper_client = app.new_client()
    execute_many, execute_one = keeper_client.execute_many, keeper_client.execute

    def reports(calls: Any) -> None:
        for call in calls:
            if call.script.name == "report_many":
                count = int(call.args[3])
                by_keeper.extend(str(call.args[5 + 11 * i]) for i in range(count))

    def many(calls: Any) -> list[Any]:
        reports(calls)
        return execute_many(calls)

    def one(call: Any) -> Any:
        reports([call])
        return execute_one(call)

    monkeypatch.setattr(AsyncQuasar, "execute", recorded)
    monkeypatch.setattr(keeper_client, "execute_many", many)
    monkeypatch.setattr(keeper_client, "execute", one)
    monkeypatch.setattr(app, "new_client", lambda: keeper_client)

    async def quick(n: int) -> int:
        return n

    task = declare(app, quick)
    handles = app.enqueue_many([task.job(i) for i in range(24)])  # before the worker starts
    try:
        with worker_of(app, concurrency=4) as worker:
            assert [h.result(timeout=30) for h in handles] == list(range(24))
    finally:
        keeper_client.redis.close()
    assert sorted(carried + by_keeper) == sorted(h.id for h in handles), (carried, by_keeper)
    # The worker is full (4 of 24) when its first jobs end: the claims that follow carry them.
    assert len(carried) >= 4, (carried, by_keeper)
    assert worker.stats.completed == 24


def test_outcomes_of_a_claim_whose_reply_was_lost_are_reported_at_stop(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis goes away just as a claim carrying an outcome is sent: the worker keeps the call to
    # send again (same call id), and when it stops first the outcome goes to the lease keeper.
    execute = AsyncQuasar.execute
    refused: list[str] = []

    async def unreachable(self: AsyncQuasar, call: Any) -> Any:
        if call.script.name == "report_and_claim":
            refused.append(call.args[0])
            raise RedisUnavailable("Redis went away (simulated)")
        return await execute(self, call)

    monkeypatch.setattr(AsyncQuasar, "execute", unreachable)

    async def quick(n: int) -> int:
        return n

    task = declare(app, quick)
    first, second = app.enqueue_many([task.job(1), task.job(2)])
    with worker_of(app, concurrency=1, prefetch=0):  # one claim loop
        wait_for(lambda: len(refused) >= 2, 10, "the carrying claim to be sent again")
    assert len(set(refused)) == 1, "the claim was not sent again with its call id"
    assert first.result(timeout=10) == 1  # reported by the lease keeper at stop
    info = second.info()
    assert info is not None and isinstance(info.job.state, Waiting)  # never claimed


# --- bugs ----------------------------------------------------------------------------------------


def race_a_heartbeat(
    app: App, monkeypatch: pytest.MonkeyPatch, worker: Worker, *, renewed_first: bool
) -> tuple[bool, Any]:
    """Runs one job that returns while a heartbeat of it is in flight: held before it is sent, or
    (``renewed_first``) after Redis renewed the lease but before the keeper took the new token.
    Whether the race took place, and the job's result (or the exception that stood for it)."""
    gate = threading.Event()

    async def racing() -> str:
        await asyncio.to_thread(gate.wait, 10)
        return "done"

    keeper_client = app.new_client()
    execute_many = keeper_client.execute_many

    def racing_heartbeat(calls: Any) -> list[Any]:
        beat = any(call.script.name == "heartbeat" for call in calls) and not gate.is_set()
        results = execute_many(calls) if renewed_first or not beat else []
        if beat:
            gate.set()  # the job returns now: its outcome is queued, or carried by a claim
            assert worker._serving is not None
            keeper = worker._serving.keeper
            wait_for(lambda: any(x.finishing for x in keeper.held()), 10, "the outcome")
            if not renewed_first:
                results = execute_many(calls)
        return results

    monkeypatch.setattr(keeper_client, "execute_many", racing_heartbeat)
    monkeypatch.setattr(app, "new_client", lambda: keeper_client)
    task = declare(app, racing, lease_ms=600, max_attempts=1)
    try:
        with worker:
            handle = task.enqueue()
            try:
                value: Any = handle.result(timeout=15)
            except (JobFailedError, TimeoutError) as exc:
                value = exc
    finally:
        keeper_client.redis.close()
    return gate.is_set(), value


def test_a_completion_that_races_a_heartbeat_is_accepted(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job finishes while its heartbeat is in flight: its completion must still count."""
    worker = worker_of(app, lease_ms=600)
    raced, value = race_a_heartbeat(app, monkeypatch, worker, renewed_first=False)
    assert raced, "no heartbeat went through execute_many: update this test"
    assert value == "done", (
        f"BUG (worker._lease_keeper.LeaseKeeper._after_heartbeat): got {value!r}. A heartbeat "
        "that is in flight when the job reports keeps its new token away from the report, so "
        "the outcome goes out with the superseded token, is refused StaleLease, and the "
        "finished job runs again after its lease (or fails, on its last attempt)"
    )


def test_an_outcome_is_not_carried_by_a_claim_while_its_heartbeat_is_in_flight(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job ends while Redis has renewed its lease but the keeper has not yet taken the new
    token: the claim that goes out next must not carry the outcome with the old token."""
    worker = worker_of(app, lease_ms=600, concurrency=1)  # full: the next claim carries outcomes
    raced, value = race_a_heartbeat(app, monkeypatch, worker, renewed_first=True)
    assert raced, "no heartbeat went through execute_many: update this test"
    assert value == "done", f"the outcome went out with the superseded token: {value!r}"


def renewed(handle: JobHandle, claimed_ms: int) -> tuple[Leased, int] | None:
    """The job's lease and the server's now, once a heartbeat renewed the claim's lease."""
    info = handle.info()
    assert info is not None
    state = info.job.state
    assert isinstance(state, Leased), state
    if state.expires_at - (info.job.attempted_at or 0) == claimed_ms:
        return None
    return state, info.now


def test_the_worker_lease_applies_to_tasks_without_their_own(app: App) -> None:
    started = threading.Event()
    release = threading.Event()

    def steady() -> None:
        started.set()
        release.wait(30)

    task = declare(app, steady)  # no lease_ms of its own
    with worker_of(app, lease_ms=1500):
        handle = task.enqueue()
        assert started.wait(10)
        lease, now = wait_for(lambda: renewed(handle, 1500), 10, "a heartbeat")
        release.set()
    assert lease.expires_at - now <= 1500, (
        "BUG (worker._running.Runner.start_all / Task.lease_ms): the worker's lease_ms (quasar "
        "worker --lease-ms 1500) is overridden by a default lease of the task's, 30 s: a killed "
        "worker's jobs come back only after 30 s (the lease now ends in "
        f"{lease.expires_at - now} ms)"
    )


def test_claim_loop_survives_a_failed_wake_up(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    injected: list[Exception] = [redis.ConnectionError("injected: connection reset by peer")]
    rpush = redis.asyncio.Redis.rpush

    async def failing_rpush(self: Any, *args: Any) -> Any:
        if injected:
            raise injected.pop()
        return await rpush(self, *args)

    monkeypatch.setattr(redis.asyncio.Redis, "rpush", failing_rpush)

    def work(i: int) -> int:
        return i

    task = declare(app, work)
    handles = [task.enqueue(i) for i in range(3)]  # the first claim takes a full batch of 2
    with worker_of(app, concurrency=2):
        wait_for(lambda: not injected, 10, "the worker to push a wake-up")
        finished = eventually(
            lambda: all(isinstance(job_of(h).state, Succeeded) for h in handles), 3
        )
    assert finished, (
        "BUG (worker._claiming.Background.wake): the wake-up push after a full claim batch "
        "(AsyncQuasar.wake) fails outside the claim loop's QuasarError handling: one connection "
        "error (Redis restarting) ends the claim loop, and with it serve() and the `quasar "
        "worker` process "
        f"(or leaves it claiming nothing: see the next test); jobs: {[job_of(h) for h in handles]}"
    )


async def _swallow_once(flag: list[str], original: Any, client: Any) -> Any:
    if not flag:
        flag.append("in the call")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            flag.append("swallowed")  # what asyncio.wait_for inside redis-py 8 does at times
    return await original(client)


def test_a_cancelled_serve_ends_even_when_redis_swallows_the_cancellation(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag: list[str] = []
    original = redis.asyncio.Redis.time

    async def time_(self: Any) -> Any:
        return await _swallow_once(flag, original, self)

    monkeypatch.setattr(redis.asyncio.Redis, "time", time_)

    async def scenario() -> bool:
        worker = worker_of(app)
        client = app.aclient()
        running = asyncio.create_task(worker.serve())
        while not flag:  # the maintenance task is inside its first Redis call
            await asyncio.sleep(0.01)
        running.cancel()
        ended, _ = await asyncio.wait({running}, timeout=3)
        worker.stop()  # lets a hung serve() end, so that the test can clean up
        await asyncio.gather(running, return_exceptions=True)
        await client.redis.aclose()
        return bool(ended)

    ended = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert flag == ["in the call", "swallowed"]
    assert ended, (
        "BUG (worker.Worker.serve): serve() never returns once its claim loop has failed or it "
        "was cancelled, if the maintenance task's cancellation is swallowed (Python 3.11's "
        "asyncio.wait_for, which redis-py uses, does that at times): worker._maintenance."
        "Maintenance.run loops until the worker's stopping event is set, which nothing set; a "
        "`quasar worker` process then stays alive, claiming nothing"
    )


def test_stop_after_the_worker_ended_is_harmless(app: App) -> None:
    worker = worker_of(app)

    async def stopper() -> None:
        worker.stop()

    declare(app, stopper).enqueue()
    worker.run(install_signals=False)  # until the job stops it
    try:
        worker.stop()
    except RuntimeError as exc:
        pytest.fail(
            "BUG (worker.Worker.stop): stop() on a worker whose serve() has ended raises "
            f"{exc!r} (it calls call_soon_threadsafe on the closed loop); a second SIGTERM "
            "handler, a supervisor or a finally block calling stop() gets an exception"
        )


RUN_SCRIPT = """
import gc, sys
from quasar_redis import App, Worker
app = App(sys.argv[1], namespace=sys.argv[2])
worker = Worker(app, concurrency=1)
def stop() -> None:
    worker.stop()
app.task(stop, name="stop").enqueue()
worker.run(install_signals=False)
app.close()  # the sync client the enqueue above opened: the script's own, not run()'s
del worker, app
gc.collect()
print("stopped")
"""


def test_worker_run_closes_its_connections(namespace: str) -> None:
    client = real_redis()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-W",
                "always::ResourceWarning",
                "-c",
                RUN_SCRIPT,
                REDIS_URL,
                namespace,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        delete_namespace(client, namespace)
        client.close()
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr
    assert "unclosed" not in done.stderr, (
        "BUG (worker.Worker.run): run() ends its event loop without closing the loop's asyncio "
        "Redis client (app.aclient()) or the lease keeper's client; their connections are left "
        "open (ResourceWarning 'unclosed Connection', an error under pytest -W error):\n"
        + done.stderr[-2000:]
    )
