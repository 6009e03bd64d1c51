"""A running task reads how its dependencies ended (``current_job().dependency_results()``):
in ``app.drain()``, in an async task, and in a task run in a process of its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from quasar_redis import (
    App,
    ClaimApplied,
    DependencyResult,
    JobContext,
    Worker,
    current_job,
)
from quasar_redis._handles import JobHandle

from . import process_tasks as pt


def parents(app: App) -> tuple[JobHandle, JobHandle, JobHandle]:
    @app.task(name="fine", max_attempts=1)
    def fine(n: int) -> dict[str, int]:
        return {"n": n}

    @app.task(name="broken", max_attempts=1)
    def broken() -> None:
        raise ValueError("no such order")

    @app.task(name="never")
    def never() -> None:
        raise AssertionError("cancelled before it runs")

    ok, bad = fine.enqueue(7), broken.enqueue()
    gone = never.options(delay=3600).enqueue()
    assert app.client.cancel(gone.id, reason="not needed") is not None
    return ok, bad, gone


def expected(ok: JobHandle, bad: JobHandle, gone: JobHandle) -> list[DependencyResult]:
    return [
        DependencyResult(ok.id, "completed", {"n": 7}),
        DependencyResult(bad.id, "discarded", None, "ValueError", "no such order"),
        DependencyResult(gone.id, "cancelled", None, "Cancelled", "not needed"),
    ]


def test_a_task_reads_its_dependencies_results_and_errors(app: App) -> None:
    ok, bad, gone = parents(app)
    seen: list[DependencyResult] = []

    @app.task(name="report")
    def report() -> str:
        results = current_job().dependency_results()
        seen.extend(results)
        return ", ".join(r.id for r in results if r.succeeded)

    handle = report.options(depends_on=[ok, bad, gone], on_dependency_failure="run").enqueue()
    app.drain()
    assert seen == expected(ok, bad, gone)
    assert [r.succeeded for r in seen] == [True, False, False]
    assert handle.result(timeout=10) == ok.id


def test_an_async_task_reads_them_too(app: App) -> None:
    ok, bad, gone = parents(app)
    seen: list[DependencyResult] = []

    @app.task(name="report")
    async def report() -> int:
        seen.extend(await current_job().adependency_results())
        return len(seen)

    handle = report.options(depends_on=[ok, bad, gone], on_dependency_failure="run").enqueue()
    app.drain()
    assert seen == expected(ok, bad, gone)
    assert handle.result(timeout=10) == 3


def test_a_job_without_dependencies_reads_none_without_redis() -> None:
    ctx = JobContext.__new__(JobContext)
    object.__setattr__(ctx, "job", type("J", (), {"dependencies": ()})())
    object.__setattr__(ctx, "read", None)
    assert ctx.dependency_results() == []
    assert asyncio.run(ctx.adependency_results()) == []


def test_a_task_in_a_process_of_its_own_reads_them(app: App) -> None:
    # (the parents end by hand, on a queue of their own: the worker runs the reader alone)
    q = app.client
    for job_id in ("ok", "bad", "gone"):
        q.enqueue("parent", id=job_id, queue="parents")
    claim = q.claim_job("ok", "w", 60_000)
    assert isinstance(claim, ClaimApplied)
    q.complete(claim.claim.token, "w", result={"n": 7})
    claim = q.claim_job("bad", "w", 60_000)
    assert isinstance(claim, ClaimApplied)
    q.permanent_fail(claim.claim.token, "w", "no such order", kind="ValueError")
    q.cancel("gone", reason="not needed")
    reader = app.task(pt.read_dependencies, name="read_dependencies")
    handle = reader.options(depends_on=["ok", "bad", "gone"], on_dependency_failure="run").enqueue()
    worker = Worker(app, concurrency=2, processes=2, maintenance_interval=0.1, idle_wait=1.0)
    with worker:
        got: Any = handle.result(timeout=60)
    ids = ("ok", "bad", "gone")
    want = [
        [r.id, r.status, r.value, r.error_kind, r.error_message, r.succeeded]
        for r in expected(*(JobHandle(app, i) for i in ids))
    ]
    assert got == want


def test_outside_a_worker_the_read_says_why() -> None:
    with pytest.raises(LookupError):
        current_job()


def test_an_expired_dependency_says_so(app: App) -> None:
    q = app.client
    q.enqueue("parent", id="late", queue="parents", expires_in_ms=60_000)
    info = q.get_job("late")
    assert info is not None and info.job.deadline is not None
    assert q.sweep_expired(now=info.job.deadline + 1).past_deadline == ("late",)
    seen: list[DependencyResult] = []

    @app.task(name="after")
    def after() -> None:
        seen.extend(current_job().dependency_results())

    after.options(depends_on=["late"], on_dependency_failure="run").enqueue()
    app.drain()
    (late,) = seen
    assert (late.id, late.status, late.value, late.error_kind) == (
        "late",
        "expired",
        None,
        "Expired",
    )
    assert late.error_message is not None and "deadline" in late.error_message
    assert not late.succeeded
