"""Probes of workers and of the dashboard (docs/deploy.md): a ``quasar worker`` process answers
``/readyz`` once it serves and not while it drains after SIGTERM, answers ``/livez`` all along,
and is not ready while its Redis is down (but live, so that an outage restarts nothing);
``quasar probe`` says the same with its exit code; the dashboard's ``/healthz`` follows Redis."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from quasar_redis import AsyncQuasar, Quasar, Status
from quasar_redis.dashboard import create_app
from quasar_redis.worker._health import STALL_MIN_S, WorkerHealth, WorkerPhase

from .helpers import REDIS_URL, delete_namespace, free_port, real_redis, wait_for
from .probes import ROOT, Process, quasar
from .servers import server_in
from .test_worker_processes import enqueue, new_job

APP_PATH = "tests.worker_tasks:app"


@pytest.fixture
def cleanup(namespace: str) -> Iterator[None]:
    client = real_redis()
    try:
        yield
    finally:
        delete_namespace(client, namespace)
        client.close()


def start_worker(tmp_path: Path, url: str, namespace: str, *options: str) -> Process:
    env = {"QUASAR_TEST_URL": url, "QUASAR_TEST_NS": namespace}
    env["QUASAR_TEST_LOG"] = str(tmp_path / "tasks.log")
    command = quasar("worker", APP_PATH, "--lease-ms", "60000", *options)
    return Process.start(command, cwd=ROOT, env=env, log_path=tmp_path / "worker.log")


def status_of(q: Quasar, job_id: str) -> Status | None:
    info = q.get_job(job_id)
    return None if info is None else info.status


def probe(port: int, endpoint: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        quasar("probe", endpoint, "--port", str(port)),
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_worker_is_ready_until_it_drains_and_live_all_along(
    tmp_path: Path, namespace: str, cleanup: None
) -> None:
    port = free_port()
    worker = start_worker(tmp_path, REDIS_URL, namespace, "--health-port", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        ready = worker.wait_status(f"{base}/readyz", 200)
        assert ready["phase"] == "serving" and ready["ready"] and ready["problems"] == []
        assert probe(port, "readyz").returncode == 0
        gate = tmp_path / "gate"
        q = Quasar(redis.Redis.from_url(REDIS_URL), namespace)
        (job_id,) = enqueue(q, [new_job("wt.gated", str(gate))])
        log = tmp_path / "tasks.log"  # (a line as its run begins: claimed is not enough)
        wait_for(lambda: log.exists() and f"start {job_id}" in log.read_text(), 30, "the run")
        worker.proc.send_signal(signal.SIGTERM)  # the job gets its grace (30 s) to finish
        draining = worker.wait_status(f"{base}/readyz", 503)
        assert draining["phase"] == "draining" and not draining["ready"]
        assert draining["problems"] == ["the worker is draining"]
        live = worker.answer(f"{base}/livez")
        assert live is not None and live[0] == 200 and live[1]["live"]
        refused = probe(port, "readyz")
        assert refused.returncode == 1 and "the worker is draining" in refused.stderr
        assert probe(port, "livez").returncode == 0
        gate.touch()  # the job ends within its grace: the worker stops, exit 0
        assert worker.wait_exit() == 0
        assert status_of(q, job_id) is Status.COMPLETED
        q.redis.close()
    finally:
        worker.kill()


def test_a_worker_whose_redis_is_down_is_live_but_not_ready(tmp_path: Path, namespace: str) -> None:
    port = free_port()
    with server_in(tmp_path / "redis", durable=False) as server:
        server.start()
        # (--metrics-port serves the probes too: one server when both name one port)
        ports = ("--metrics-port", str(port), "--health-port", str(port))
        worker = start_worker(tmp_path, server.url, namespace, *ports)
        base = f"http://127.0.0.1:{port}"
        try:
            worker.wait_status(f"{base}/readyz", 200)
            assert worker.answer(f"{base}/metrics") is not None
            server.kill()
            down = worker.wait_status(f"{base}/readyz", 503)
            assert down["phase"] == "serving" and down["live"] and not down["ready"]
            assert any("Redis does not answer" in p for p in down["problems"]), down
            live = worker.answer(f"{base}/livez")
            assert live is not None and live[0] == 200, live
            server.start()  # back: ready again, without a restart
            worker.wait_status(f"{base}/readyz", 200)
            assert worker.stop() == 0
        finally:
            worker.kill()


def test_a_stalled_loop_or_lease_keeper_is_not_live() -> None:
    health = WorkerHealth(lease_ms=1000)
    assert health.stall_s == STALL_MIN_S  # (a short lease: the least bound)
    assert WorkerHealth(lease_ms=120_000).stall_s == 120.0
    starting = health.report()
    assert starting.phase is WorkerPhase.STARTING and starting.live and not starting.ready
    stopping = asyncio.Event()
    health.begin(stopping)
    rounds: list[float | None] = [0.0]
    health.serving(lambda: rounds[0])
    at = rounds[0] = 1000.0
    health._loop_at = at  # (the loop's last turn, as its ticker notes it)
    assert health.report(now=at + 1).ready
    late = health.report(now=at + STALL_MIN_S + 1)
    assert not late.live and not late.ready
    assert late.problems[:2] == (
        f"its event loop has not turned for {STALL_MIN_S + 1:.1f}s",
        f"its lease keeper has not turned for {STALL_MIN_S + 1:.1f}s",
    )
    health.claim_failed(ConnectionError("Connection refused"))
    failing = health.report(now=at + 1)
    assert failing.live and failing.problems == ("its last claim failed: Connection refused",)
    health.claimed()
    stopping.set()
    assert health.report(now=at + 1).problems == ("the worker is draining",)
    rounds[0] = None  # the lease keeper stopped as asked: no longer checked
    assert health.report(now=at + 1).lease_keeper_s is None
    health.end()
    assert health.report(now=at + 1).problems[0] == "the worker stopped"


def healthz(client: AsyncQuasar, **options: Any) -> tuple[int, Any, int]:
    """The dashboard's ``/healthz`` (status, body) and the status of its ``/``."""

    async def ask() -> tuple[int, Any, int]:
        transport = httpx.ASGITransport(app=create_app(client=client, **options))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                health = await http.get("/healthz")
                page = await http.get("/")
        finally:
            await client.redis.aclose()
        return health.status_code, health.json(), page.status_code

    return asyncio.run(ask())


def test_the_dashboard_healthz_follows_redis_and_needs_no_credentials(
    tmp_path: Path, namespace: str
) -> None:
    real_redis().close()
    up = AsyncQuasar(redis.asyncio.Redis.from_url(REDIS_URL), namespace)
    status, body, page = healthz(up, basic_auth="ops:secret")
    assert (status, body, page) == (200, {"ready": True, "problems": []}, 401)
    with server_in(tmp_path / "redis", durable=False) as server:
        server.start()
        server.kill()
        down = AsyncQuasar(redis.asyncio.Redis.from_url(server.url), namespace)
        status, body, _ = healthz(down)
    assert status == 503 and not body["ready"]
    assert body["problems"][0].startswith("Redis does not answer: ConnectionError")
