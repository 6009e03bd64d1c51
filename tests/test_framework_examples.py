"""docs/examples: the FastAPI and Django examples and the worker hooks example, run against the
real Redis as written."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quasar_redis import JobFailedError, Worker

from .helpers import REDIS_URL, delete_namespace, real_redis, wait_for

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
EXAMPLE_MODULES = ("fastapi_shop", "django_shop", "worker_hooks")


@pytest.fixture
def shop(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The examples' environment: the real Redis, a namespace of their own, their directory on
    the path; the namespace is deleted after."""
    client = real_redis()
    namespace = f"shop-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("QUASAR_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("SHOP_NAMESPACE", namespace)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    try:
        yield namespace
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] in EXAMPLE_MODULES]:
            del sys.modules[name]
        delete_namespace(client, namespace)
        client.close()


def fastapi_shop() -> Any:
    return importlib.import_module("fastapi_shop")  # (fastapi is in the test extra: no skip)


async def requests(module: Any, calls: list[tuple[str, str, dict[str, int]]]) -> list[Any]:
    """The answers of the web app to ``calls`` (method, path, query), in order, inside its
    lifespan, as a server would run it."""
    import httpx

    transport = httpx.ASGITransport(app=module.api)
    async with (
        module.lifespan(module.api),
        httpx.AsyncClient(transport=transport, base_url="http://shop") as client,
    ):
        return [(await client.request(m, path, params=query)).json() for m, path, query in calls]


def test_fastapi_with_the_worker_in_its_lifespan(
    shop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_WORKER", "1")
    module = fastapi_shop()
    assert asyncio.run(requests(module, [("GET", "/sums", {"a": 2, "b": 3})])) == [{"sum": 5}]


def test_fastapi_with_a_worker_process(shop: str) -> None:
    module = fastapi_shop()
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES)}
    command = [sys.executable, "-m", "quasar_redis", "worker", "fastapi_shop:tasks"]
    worker = subprocess.Popen(
        command, cwd=EXAMPLES, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        calls = [("POST", "/sums", {"a": 4, "b": 5}), ("GET", "/sums", {"a": 1, "b": 1})]
        posted, got = asyncio.run(requests(module, calls))
        assert got == {"sum": 2}
        handle = module.tasks.client.get_job
        wait_for(lambda: handle(posted["job"]).job.result == 9, 10, "the first job's result")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=20)
    module.tasks.close()
    assert worker.returncode == 0, stderr.decode()[-2000:]


def test_django_views_enqueue_and_a_worker_runs_the_jobs(shop: str) -> None:
    from django.conf import settings  # (django is in the test extra: no skip)

    if not settings.configured:
        settings.configure(
            ROOT_URLCONF="django_shop.urls",
            ALLOWED_HOSTS=["testserver"],
            QUASAR_REDIS_URL=REDIS_URL,
            QUASAR_NAMESPACE=shop,
        )
    else:  # configured by an earlier test in this process: point it at this namespace
        settings.QUASAR_NAMESPACE = shop
    from django.test import Client

    tasks = importlib.import_module("django_shop.tasks")
    client = Client()
    response = client.get("/sums/", {"a": 20, "b": 22})
    assert response.status_code == 202
    job = response.json()["job"]
    assert client.get(f"/sums/{job}/").json() == {"status": "available"}
    with Worker(tasks.app, concurrency=2, idle_wait=1.0):
        wait_for(lambda: client.get(f"/sums/{job}/").status_code == 200, 10, "the worker to run it")
    assert client.get(f"/sums/{job}/").json() == {"status": "completed", "sum": 42}
    assert client.get("/sums/nope/").status_code == 404
    tasks.app.close()


def test_worker_hooks_open_a_pool_per_worker_and_report_failures(
    shop: str, caplog: pytest.LogCaptureFixture
) -> None:
    example: Any = importlib.import_module("worker_hooks")
    views = [example.count_view.enqueue("home") for _ in range(3)]
    nameless = example.count_view.enqueue("")
    client = real_redis()
    try:
        with caplog.at_level(logging.ERROR, logger="shop.errors"):
            assert example.app.drain() == 4
        assert sorted(h.result(timeout=5) for h in views) == [1, 2, 3]
        assert client.get(f"{shop}:views:home") == b"3"
        with pytest.raises(JobFailedError) as failed:
            nameless.result(timeout=5)
        assert failed.value.job.error.kind == "PermanentFailure"
        [report] = [r for r in caplog.records if r.name == "shop.errors"]
        assert report.getMessage() == f"job {nameless.id} (shop.count_view) failed, attempt 1 of 3"
    finally:
        example.app.close()
        client.delete(f"{shop}:views:home")
        client.close()
