"""Progress reported by a running job (docs/workflows.md, "Progress"): carried by heartbeats and
written only when it changed, sent at once when flushed and before the job's outcome, fenced by
the lease, refused when bad; from task processes too; shown by ``get_job``, a handle, the event
stream, the CLI and the dashboard. On both backends unless said otherwise."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import os
import threading
import time
from typing import Any

import pytest

from quasar_redis import (
    App,
    ClaimRefused,
    InvalidArgument,
    InvalidJob,
    JobApplied,
    JobRefused,
    LeaseExpired,
    Progress,
    Quasar,
    StaleLease,
    Status,
    Worker,
    current_job,
)
from quasar_redis.worker._job import JobContext

from . import progress_tasks as prt
from .helpers import REDIS_URL, applied, claimed, delete_namespace, real_redis, wait_for
from .test_process_pool import quasar

LEASE_MS = 600  # heartbeats every 200 ms
LONG_LEASE_MS = 600_000  # no heartbeat while a test looks


def progress_events(q: Quasar, job_id: str) -> list[tuple[float, str]]:
    """The job's ``progress`` events in the namespace's stream, oldest first: (value, message)."""
    found = []
    for _, fields in q.redis.xrange(q.keys.events):
        if fields.get(b"ev") == b"progress" and fields.get(b"job") == job_id.encode():
            found.append((float(fields[b"pv"]), fields[b"pm"].decode()))
    return found


# --- through a worker ----------------------------------------------------------------------------


def test_a_busy_reporter_writes_at_most_once_a_heartbeat(app: App) -> None:
    reports = 150

    @app.task(name="busy", lease_ms=LEASE_MS)
    def busy() -> int:
        for i in range(1, reports + 1):
            current_job().progress(i, f"item {i}")
            time.sleep(0.01)
        return reports

    started = time.monotonic()
    handle = busy.enqueue()
    app.drain()
    elapsed = time.monotonic() - started
    events = progress_events(app.client, handle.id)
    # Heartbeats come at least a third of the lease apart (each counts from the last one sent),
    # and each writes at most one update; the run's end adds one.
    assert 2 <= len(events) <= elapsed / (LEASE_MS / 3000) + 2, events
    assert all(a != b for a, b in itertools.pairwise(events))  # each a change
    assert events[-1] == (float(reports), f"item {reports}")  # the last report, at the end
    info = handle.info()
    assert info is not None and info.status is Status.COMPLETED and info.progress is not None
    assert info.progress == Progress(float(reports), f"item {reports}", info.progress.at_ms, 1)
    assert handle.progress() == info.progress


def test_a_job_that_reports_nothing_writes_no_progress(app: App) -> None:
    @app.task(name="quiet", lease_ms=LEASE_MS)
    def quiet() -> None:
        time.sleep(0.5)  # (a few heartbeats)

    handle = quiet.enqueue()
    app.drain()
    assert handle.progress() is None
    assert progress_events(app.client, handle.id) == []


def test_the_same_report_again_writes_nothing(app: App) -> None:
    @app.task(name="same", lease_ms=LEASE_MS)
    def same() -> None:
        for _ in range(60):
            current_job().progress(50, "half")
            time.sleep(0.01)

    handle = same.enqueue()
    app.drain()
    assert progress_events(app.client, handle.id) == [(50.0, "half")]


def test_a_flush_reaches_redis_at_once(app: App) -> None:
    go_on = threading.Event()

    @app.task(name="flushing", lease_ms=LONG_LEASE_MS)
    def flushing() -> None:
        current_job().progress(42, "half", flush=True)
        assert go_on.wait(60)
        current_job().progress(43)  # (not flushed: the run's end sends it)

    @app.task(name="aflushing", lease_ms=LONG_LEASE_MS)
    async def aflushing() -> None:
        ctx = current_job()
        ctx.progress(7, "seven")
        await ctx.aflush_progress()
        while not go_on.is_set():
            await asyncio.sleep(0.01)
        ctx.progress(8, flush=True)  # (on the loop: sent without waiting)
        await asyncio.sleep(0)

    handles = [flushing.enqueue(), aflushing.enqueue()]
    runner = threading.Thread(target=app.drain)
    runner.start()
    try:
        sync = wait_for(handles[0].progress, 60, "the flushed progress")
        done = wait_for(handles[1].progress, 60, "the awaited flush")
        assert (sync.value, sync.message, sync.attempt) == (42.0, "half", 1)
        assert (done.value, done.message) == (7.0, "seven")
        for handle in handles:  # still running: no heartbeat, no outcome wrote them
            info = handle.info()
            assert info is not None and info.status is Status.EXECUTING
    finally:
        go_on.set()
        runner.join(60)
    last = [handle.progress() for handle in handles]
    assert [(p.value, p.message) for p in last if p is not None] == [(43.0, None), (8.0, None)]


def test_bad_reports_are_refused_in_the_task_and_nothing_is_kept(app: App) -> None:
    bad: list[tuple[Any, Any]] = [
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        (10**400, None),
        ("5", None),
        (True, None),
        (None, None),
        (5, "x" * 201),
        (5, b"bytes"),
    ]

    @app.task(name="bad")
    def bad_reports() -> list[str]:
        refused = []
        for value, message in bad:
            try:
                current_job().progress(value, message)
            except InvalidArgument as exc:
                refused.append(str(exc))
        current_job().progress(1, "x" * 200)  # the longest message
        return refused

    handle = bad_reports.enqueue()
    app.drain()
    refused = handle.result(timeout=5)
    assert len(refused) == len(bad) and all("progress" in text for text in refused)
    assert handle.progress() == Progress(1.0, "x" * 200, handle.progress().at_ms, 1)  # type: ignore[union-attr]
    with pytest.raises(LookupError):
        current_job()


def test_progress_from_task_processes(app: App) -> None:
    steps = app.task(prt.steps, name="steps")
    with Worker(app, concurrency=2, processes=2, maintenance_interval=0.1, idle_wait=1.0):
        handles = [steps.enqueue(40) for _ in range(4)]
        pids = {h.result(timeout=60) for h in handles}
    assert os.getpid() not in pids
    for handle in handles:
        got = handle.progress()
        assert got is not None and (got.value, got.message) == (100.0, "step 40 of 40")
        events = progress_events(app.client, handle.id)
        assert events and events[-1] == (100.0, "step 40 of 40")


# --- the calls -----------------------------------------------------------------------------------


def job_and_events(q: Quasar, job_id: str) -> tuple[Any, int]:
    return q.redis.hgetall(f"{q.keys.root}job:{job_id}"), q.redis.xlen(q.keys.events)


def test_report_progress_is_fenced_and_writes_only_a_change(q: Quasar) -> None:
    applied(q.enqueue("s", id="j"))
    token = claimed(q.claim("default", "w", 60_000)).token
    assert isinstance(q.report_progress(token, "w", 10, "ten"), JobApplied)
    info = q.get_job("j")
    assert info is not None and info.progress is not None
    assert info.progress == Progress(10.0, "ten", info.progress.at_ms, 1)
    assert info.progress.at_ms <= info.now
    before = job_and_events(q, "j")
    assert isinstance(q.report_progress(token, "w", 10.0, "ten"), JobApplied)
    assert job_and_events(q, "j") == before  # the same report: nothing written, no event
    # A renewal does not make the token stale for progress: fence and nonce tell the lease.
    renewed = q.heartbeat(token, "w", 60_000)
    assert not isinstance(renewed, ClaimRefused)
    assert isinstance(q.report_progress(token, "w", 11), JobApplied)
    assert q.get_job("j").progress.value == 11.0  # type: ignore[union-attr]
    before = job_and_events(q, "j")
    for stale, worker in (
        (dataclasses.replace(token, nonce="other"), "w"),
        (dataclasses.replace(token, fencing_version=token.fencing_version + 1), "w"),
        (token, "someone else"),
    ):
        assert q.report_progress(stale, worker, 12) == JobRefused(StaleLease())
    expired = q.report_progress(token, "w", 12, now=renewed.claim.token.expires_at)
    assert isinstance(expired, JobRefused) and isinstance(expired.error, LeaseExpired)
    bad: list[tuple[Any, Any]] = [(math.nan, None), (math.inf, None), ("1", None), (1, "x" * 201)]
    for value, message in bad:
        with pytest.raises(InvalidArgument):
            q.report_progress(token, "w", value, message)
    assert job_and_events(q, "j") == before
    q.cancel("j")
    before = job_and_events(q, "j")
    assert q.report_progress(token, "w", 13) == JobRefused(StaleLease())
    assert job_and_events(q, "j") == before
    assert q.get_job("j").progress.value == 11.0  # type: ignore[union-attr]  # kept


def test_a_heartbeat_carries_progress_and_the_scripts_refuse_bad_text(sync_q: Quasar) -> None:
    q = sync_q
    applied(q.enqueue("s", id="j"))
    token = claimed(q.claim("default", "w", 60_000)).token
    beat = q.execute(q.calls.heartbeat(token, "w", 60_000, progress=("25.0", "quarter")))
    assert not isinstance(beat, ClaimRefused)
    token = beat.claim.token
    assert q.get_job("j").progress.message == "quarter"  # type: ignore[union-attr]
    assert progress_events(q, "j") == [(25.0, "quarter")]
    again = q.execute(q.calls.heartbeat(token, "w", 60_000, progress=("25.0", "quarter")))
    assert not isinstance(again, ClaimRefused)
    assert progress_events(q, "j") == [(25.0, "quarter")]  # unchanged: no event
    token = again.claim.token
    before = job_and_events(q, "j")
    for text, message in (("nan", ""), ("inf", ""), ("ten", ""), ("1" * 40, ""), ("1", "x" * 801)):
        refused = q.execute(q.calls.heartbeat(token, "w", 60_000, progress=(text, message)))
        assert isinstance(refused, ClaimRefused) and isinstance(refused.error, InvalidJob), text
    assert job_and_events(q, "j")[0] == before[0]


def test_a_retry_keeps_the_last_progress_with_its_attempt(sync_q: Quasar) -> None:
    q = sync_q
    applied(q.enqueue("s", id="j"))
    token = claimed(q.claim("default", "w", 60_000)).token
    q.report_progress(token, "w", 30, "first try")
    q.fail(token, "w", "boom")
    waiting = q.get_job("j")
    assert waiting is not None and waiting.progress is not None
    assert (waiting.progress.value, waiting.progress.attempt) == (30.0, 1)
    token = claimed(q.claim("default", "w", 60_000)).token
    assert q.get_job("j").progress.attempt == 1  # type: ignore[union-attr]
    q.report_progress(token, "w", 30, "first try")  # the same report, a new attempt: written
    assert q.get_job("j").progress.attempt == 2  # type: ignore[union-attr]
    assert len(progress_events(q, "j")) == 2


def test_a_resent_report_writes_nothing_more(q: Quasar) -> None:
    applied(q.enqueue("s", id="j"))
    token = claimed(q.claim("default", "w", 60_000)).token
    call = q.calls.report_progress(token, "w", 5, "five")
    assert isinstance(q.execute(call), JobApplied)
    assert isinstance(q.report_progress(token, "w", 6, "six"), JobApplied)
    before = job_and_events(q, "j")
    again = q.execute(call)  # (redis-py re-sending it after a lost reply): answered, not applied
    assert isinstance(again, JobApplied)
    assert job_and_events(q, "j") == before
    assert q.get_job("j").progress.value == 6.0  # type: ignore[union-attr]


@pytest.mark.parametrize("partitions", [2])
def test_progress_on_a_partitioned_namespace(
    sync_q: Quasar, namespace: str, backend: str, partitions: int
) -> None:
    q = Quasar(sync_q.redis, namespace, functions=backend == "redis", partitions=partitions)
    for job_id in ("a", "b", "c", "d"):
        applied(q.enqueue("s", id=job_id))
    tokens = []
    for _ in range(4):
        tokens.append(claimed(q.claim("default", "w", 60_000)).token)
    for token in tokens:
        assert isinstance(q.report_progress(token, "w", 10, token.job_id), JobApplied)
    for job_id in ("a", "b", "c", "d"):
        assert q.get_job(job_id).progress.message == job_id  # type: ignore[union-attr]


def test_a_context_refuses_bad_reports_outside_a_worker(sync_q: Quasar) -> None:
    job = applied(sync_q.enqueue("s", id="j"))
    ctx = JobContext(job, "w")
    with pytest.raises(InvalidArgument):
        ctx.progress(math.nan)
    ctx.progress(3, flush=True)  # no worker runs it: kept, nothing sent
    assert ctx.progress_box.pending == ("3.0", "")
    assert sync_q.get_job("j").progress is None  # type: ignore[union-attr]


# --- the command line and the dashboard (real Redis) ---------------------------------------------


def test_quasar_worker_processes_then_events_and_job_show_progress(namespace: str) -> None:
    client = real_redis()
    app = App(REDIS_URL, namespace=namespace)
    try:
        steps = app.task(prt.steps, name="steps")
        handle = steps.enqueue(20)
        done = quasar(
            "worker", "tests.progress_tasks:app", "--processes", "2", "--burst", namespace=namespace
        )
        assert done.returncode == 0, done.stderr
        got = handle.progress()
        assert got is not None and (got.value, got.message) == (100.0, "step 20 of 20")
        env = ("--redis-url", REDIS_URL, "--namespace", namespace)
        events = quasar("events", *env, "--no-follow", "-n", "1000", namespace=namespace)
        assert events.returncode == 0, events.stderr
        line = [x for x in events.stdout.splitlines() if "event=progress" in x][-1]
        assert f"job={handle.id} event=progress" in line
        assert line.endswith('value=100 message="step 20 of 20"')
        as_json = quasar("events", *env, "--no-follow", "-n", "1000", "--json", namespace=namespace)
        documents = [json.loads(x) for x in as_json.stdout.splitlines()]
        last = [d for d in documents if d["event"] == "progress"][-1]
        assert (last["value"], last["message"]) == (100.0, "step 20 of 20")
        shown = quasar("job", handle.id, *env, namespace=namespace)
        assert shown.returncode == 0, shown.stderr
        assert '100 "step 20 of 20" (attempt 1,' in shown.stdout
        document = json.loads(quasar("job", handle.id, *env, "--json", namespace=namespace).stdout)
        assert document["progress"]["value"] == 100.0
        assert document["progress"]["message"] == "step 20 of 20"
        assert document["progress"]["attempt"] == 1
    finally:
        delete_namespace(client, namespace)
        client.close()
        app.client.redis.close()


def test_the_dashboard_shows_progress(sync_q: Quasar, backend: str, namespace: str) -> None:
    import httpx

    from quasar_redis import AsyncQuasar
    from quasar_redis.dashboard import create_app

    q = sync_q
    for job_id in ("pct", "count", "none"):
        applied(q.enqueue("s", id=job_id, queue="mail"))
    tokens = {c.job.id: c.token for c in q.claim_many("mail", "w", 60_000, 3).claims}  # type: ignore[union-attr]
    q.report_progress(tokens["pct"], "w", 42.5, "resizing <b>")
    q.report_progress(tokens["count"], "w", 1234)

    async def run() -> None:
        client = AsyncQuasar(_async_twin(q), namespace, functions=backend == "redis")
        transport = httpx.ASGITransport(app=create_app(client=client))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://d.test") as http:
                page = (await http.get("/queues/mail", params={"status": "executing"})).text
                assert '<progress max="100" value="42.5">' in page
                assert "resizing &lt;b&gt;" in page
                assert "1234</span>" in page and 'value="1234"' not in page  # no bar
                job = (await http.get("/jobs/pct")).text
                assert 'id="progress"' in job and '<progress max="100" value="42.5">' in job
                assert 'id="progress"' not in (await http.get("/jobs/none")).text
        finally:
            await client.redis.aclose()

    asyncio.run(run())


def _async_twin(q: Quasar) -> Any:
    """An asyncio redis-py client of the same server as ``q``'s."""
    import fakeredis
    import redis.asyncio

    if isinstance(q.redis, fakeredis.FakeRedis):
        return fakeredis.FakeAsyncRedis(server=q.redis.connection_pool.connection_kwargs["server"])
    return redis.asyncio.Redis.from_url(REDIS_URL)
