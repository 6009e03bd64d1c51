"""What workers measure: the rolling store the dashboard charts, and Prometheus's /metrics of a
worker (``quasar worker --metrics-port``) and of the dashboard, parsed with prometheus-client's
own parser and checked against the queue's counts and the jobs run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from quasar_redis import App, AsyncQuasar, RateLimited, Status, Worker, current_job
from quasar_redis import _rolling as rolling
from quasar_redis.dashboard import create_app
from quasar_redis.prometheus import serve_worker_metrics
from quasar_redis.worker._metrics import BOUNDS, Histogram

from .helpers import REDIS_URL, app_url, delete_namespace, free_port, real_redis, wait_for

OK, BAD = 5, 2


@pytest.fixture
def app(backend: str, namespace: str) -> Iterator[App]:
    with app_url(backend, namespace) as url, App(url, namespace=namespace) as made:
        yield made


def declare_tasks(app: App) -> tuple[Any, Any]:
    def ok(n: int) -> int:
        return n * 2

    def bad() -> None:
        raise ValueError("no")

    return (
        app.task(ok, name="ok", queue="mail"),
        app.task(bad, name="bad", queue="mail", max_attempts=1),
    )


def worker_of(app: App, **options: Any) -> Worker:
    if "ok" not in app.tasks:
        declare_tasks(app)
    settings: dict[str, Any] = {"maintenance_interval": 0.05, "idle_wait": 1.0, **options}
    return Worker(app, ["mail"], 4, **settings)


def run_batch(app: App) -> None:
    ok, bad = app.tasks["ok"], app.tasks["bad"]
    for i in range(OK):
        ok.enqueue(i)
    for _ in range(BAD):
        bad.enqueue()
    counts = app.client.counts("mail")
    wait_for(
        lambda: (c := app.client.counts("mail")).completed == OK and c.discarded == BAD,
        60,
        f"{OK} jobs completed and {BAD} failed (first counts {counts})",
    )


def stored(app: App) -> list[rolling.Point]:
    client = app.client
    seconds, micros = client.redis.time()
    now_ms = seconds * 1000 + micros / 1000
    pipe = client.redis.pipeline(transaction=False)
    for command in rolling.read_commands(client.keys, now_ms):
        pipe.execute_command(*command)
    return rolling.points(now_ms, pipe.execute())


def totals(app: App, measure: str) -> int:
    return sum(p.total(measure, "mail") for p in stored(app))


def test_workers_write_their_counts_to_the_rolling_store(app: App) -> None:
    with worker_of(app):
        run_batch(app)
        wait_for(lambda: totals(app, "completed") == OK, 30, "the completed jobs in the store")
        wait_for(lambda: totals(app, "failed") == BAD, 30, "the failed jobs in the store")
        wait_for(lambda: totals(app, "started") == OK + BAD, 30, "the started jobs")
    series = stored(app)
    assert len(series) == rolling.WINDOW
    assert sum(rolling.throughput(series, "mail")) * rolling.BUCKET_S == OK
    assert sum(rolling.failures(series)) * rolling.BUCKET_S == BAD
    latencies = [v for v in rolling.latency_ms(series, "mail") if v is not None]
    assert latencies and all(v >= 0 for v in latencies)
    # bounded: one small hash per bucket, each expiring
    keys = list(app.client.redis.scan_iter(match=f"{app.client.keys.root}stats:*"))
    assert 1 <= len(keys) <= 2
    for key in keys:
        assert 0 < app.client.redis.ttl(key) <= rolling.TTL_S


def test_the_rolling_store_ignores_what_it_did_not_write() -> None:
    at = rolling.bucket_of(1_000_000_000_000)
    replies: list[Any] = [{}] * (rolling.WINDOW - 1) + [
        {b"mail:completed": b"20", b"mail:junk": b"x", b"other:completed": b"10"}
    ]
    series = rolling.points(at * 1000.0, replies)
    assert series[-1].at == at and series[0].at == at - (rolling.WINDOW - 1) * rolling.BUCKET_S
    assert rolling.throughput(series, "mail")[-1] == 20 / rolling.BUCKET_S
    assert rolling.throughput(series)[-1] == 30 / rolling.BUCKET_S
    assert rolling.latency_ms(series)[-1] is None


def test_histograms_are_cumulative() -> None:
    histogram = Histogram()
    for seconds in (0.001, 0.005, 0.2, 1000.0):
        histogram.observe(seconds)
    pairs = dict(histogram.cumulative())
    assert pairs["0.005"] == 2  # (bounds are inclusive, as Prometheus's le)
    assert pairs["0.25"] == 3
    assert pairs[str(BOUNDS[-1])] == 3
    assert pairs["+Inf"] == 4
    assert histogram.total == pytest.approx(1000.206)


def scrape(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return families(response.read().decode())


def families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(found: dict[str, Any], family: str, name: str, **labels: str) -> float:
    matches = [
        s.value
        for s in found[family].samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (family, name, labels, found[family].samples)
    return float(matches[0])


def total(found: dict[str, Any], outcome: str) -> float:
    samples = found["quasar_jobs"].samples if "quasar_jobs" in found else []
    return float(sum(s.value for s in samples if s.labels.get("outcome") == outcome))


def test_worker_metrics_match_the_jobs_run(app: App) -> None:
    port = free_port()
    with worker_of(app) as worker:
        server = serve_worker_metrics(worker, port, "127.0.0.1")
        try:
            run_batch(app)
            url = f"http://127.0.0.1:{port}/metrics"

            def counted() -> bool:  # (Redis applies an outcome before the worker hears back)
                found = scrape(url)
                return total(found, "completed") == OK and total(found, "failed") == BAD

            wait_for(counted, 30, "the outcomes counted")
            found = scrape(url)
        finally:
            server.close()
    counts = app.client.counts("mail")
    ok = {"queue": "mail", "task": "ok"}
    assert sample(found, "quasar_jobs", "quasar_jobs_total", outcome="completed", **ok) == OK
    assert sample(found, "quasar_jobs", "quasar_jobs_total", task="bad", outcome="failed") == BAD
    for status in Status:
        value = sample(
            found, "quasar_queue_jobs", "quasar_queue_jobs", queue="mail", status=status.value
        )
        assert value == getattr(counts, status.value)
    assert sample(found, "quasar_queue_paused", "quasar_queue_paused", queue="mail") == 0
    latency = "quasar_job_latency_seconds"
    assert sample(found, latency, f"{latency}_count", **ok) == OK
    assert sample(found, latency, f"{latency}_bucket", le="+Inf", task="bad") == BAD
    run = "quasar_job_run_seconds"
    assert sample(found, run, f"{run}_count", **ok) == OK
    assert sample(found, run, f"{run}_sum", **ok) >= 0
    worker_label = {"worker": worker.worker_id}
    assert (
        sample(found, "quasar_worker_free_slots", "quasar_worker_free_slots", **worker_label) == 4
    )
    running = "quasar_worker_running_jobs"
    assert sample(found, running, running, **worker_label) == 0


def test_lost_leases_and_expired_leases_are_counted(app: App) -> None:
    started = []

    async def waits() -> None:
        started.append(current_job().job.id)
        await asyncio.sleep(60)

    task = app.task(waits, name="waits", queue="mail", lease_ms=1000)
    with worker_of(app) as worker:
        handle = task.enqueue()
        wait_for(lambda: started, 30, "the job to start")
        app.client.cancel(handle.id)  # its next heartbeat is refused: the lease is stale
        wait_for(lambda: worker.metrics.snapshot().lost, 30, "the lost lease counted")
        assert worker.metrics.snapshot().lost == {("mail", "StaleLease"): 1}
    # a lease held by a worker that died: a worker's maintenance recovers it
    with worker_of(app) as worker:
        ghost = task.options(queue="ghosts").enqueue()
        claimed = app.client.claim("ghosts", "dead-worker", 1000)
        assert claimed.claim.job.id == ghost.id  # type: ignore[union-attr]
        wait_for(lambda: worker.metrics.snapshot().expired >= 1, 30, "the expired lease counted")


def test_a_worker_started_with_metrics_port_serves_them(tmp_path: Path, namespace: str) -> None:
    real_redis().close()
    port = free_port()
    env = {**os.environ, "QUASAR_TEST_URL": REDIS_URL, "QUASAR_TEST_NS": namespace}
    env["QUASAR_TEST_LOG"] = str(tmp_path / "log")
    command = [sys.executable, "-m", "quasar_redis", "worker", "tests.worker_tasks:app"]
    command += ["--metrics-port", str(port), "--log-level", "WARNING"]
    process = subprocess.Popen(command, env=env, cwd=Path(__file__).parent.parent)
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def served() -> dict[str, Any] | None:
            try:
                return scrape(url)
            except OSError:
                assert process.poll() is None, "the worker exited"
                return None

        found = wait_for(served, 60, "the worker's /metrics", every=0.2)
        assert "quasar_worker_free_slots" in found and "quasar_queue_jobs" in found
    finally:
        process.terminate()
        process.wait(30)
        client = real_redis()
        delete_namespace(client, namespace)
        client.close()


def test_the_dashboard_metrics_match_the_counts(app: App, backend: str) -> None:
    with worker_of(app) as worker:
        run_batch(app)

        async def scrape_dashboard() -> str:
            client = AsyncQuasar(
                app.connector.asyncio(), app.namespace, functions=backend == "redis"
            )
            dashboard = create_app(client=client)
            transport = httpx.ASGITransport(app=dashboard)
            try:
                async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                    response = await http.get("/metrics")
            finally:
                await client.redis.aclose()
            assert response.status_code == 200
            return response.text

        slots = "quasar_worker_free_slots"

        def idle() -> dict[str, Any] | None:  # (the registry says what ran at its last beat)
            found = families(asyncio.run(scrape_dashboard()))
            return found if sample(found, slots, slots, worker=worker.worker_id) == 4 else None

        found = wait_for(idle, 30, "the worker's free slots", every=0.2)
        counts = app.client.counts("mail")
        for status in Status:
            value = sample(
                found, "quasar_queue_jobs", "quasar_queue_jobs", queue="mail", status=status.value
            )
            assert value == getattr(counts, status.value)
        running = "quasar_worker_running_jobs"
        assert sample(found, running, running, worker=worker.worker_id) == 0


def test_a_stopping_worker_writes_what_it_counted_last(app: App) -> None:
    with worker_of(app, maintenance_interval=3600.0) as worker:  # (one round, at start)
        run_batch(app)
        wait_for(
            lambda: sum(worker.metrics.snapshot().outcomes.values()) == OK + BAD,
            30,
            "the outcomes counted",
        )
        # (the round at start may already have written the first outcomes: no check here)
    assert totals(app, "completed") == OK and totals(app, "failed") == BAD


def test_a_rate_limited_run_is_counted_on_the_worker_endpoint(app: App) -> None:
    """A task that raises ``RateLimited`` runs again later without using an attempt: its first
    run shows as outcome ``rate_limited`` of ``quasar_jobs_total``, its second as completed."""
    runs: list[int] = []

    def calls_out() -> str:
        runs.append(current_job().job.attempt)
        if len(runs) == 1:
            raise RateLimited(0.05)
        return "sent"

    task = app.task(calls_out, name="calls_out", queue="mail")
    port = free_port()
    with worker_of(app) as worker:
        server = serve_worker_metrics(worker, port, "127.0.0.1")
        try:
            handle = task.enqueue()
            url = f"http://127.0.0.1:{port}/metrics"

            def counted() -> dict[str, Any] | None:
                found = scrape(url)
                done = total(found, "completed") == 1 and total(found, "rate_limited") == 1
                return found if done else None

            found = wait_for(counted, 30, "the rate-limited run and the completed one counted")
        finally:
            server.close()
    labels = {"queue": "mail", "task": "calls_out"}
    name = "quasar_jobs_total"
    assert sample(found, "quasar_jobs", name, outcome="rate_limited", **labels) == 1
    assert sample(found, "quasar_jobs", name, outcome="completed", **labels) == 1
    assert "rate_limited" in found["quasar_jobs"].documentation
    assert app.client.get_job(handle.id).job.attempt == 1  # type: ignore[union-attr]
