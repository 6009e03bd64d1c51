"""A result the worker cannot send (over ``Limits.max_payload_bytes``, or one its serializer
cannot encode) fails its job for good at the first attempt, with the reason as the job's error:
never a lost lease waited out and retried. Shown through a real worker (async, thread and
process tasks), ``quasar job`` and the dashboard's job page."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import redis.asyncio
from click.testing import CliRunner

from quasar_redis import App, AsyncQuasar, Job, JobFailedError, Limits, Worker
from quasar_redis.cli import main
from quasar_redis.dashboard import create_app

from . import process_tasks as pt
from .helpers import REDIS_URL, delete_namespace, real_redis

TOO_LARGE = "result is 2097157 bytes, over the limit of 1048576"  # (msgpack: 5 bytes of header)


async def big_async() -> str:
    return "x" * (2 << 20)


def worker_of(app: App, **options: Any) -> Worker:
    return Worker(app, maintenance_interval=0.1, idle_wait=1.0, **options)


def failed(handle: Any) -> Job:
    with pytest.raises(JobFailedError) as raised:
        handle.result(timeout=30)
    job: Job = raised.value.job
    return job


def shown_by_the_cli(job_id: str, namespace: str) -> tuple[dict[str, Any], str]:
    env = {"QUASAR_REDIS_URL": REDIS_URL, "REDIS_URL": None, "QUASAR_NAMESPACE": namespace}
    document = CliRunner().invoke(main, ["job", job_id, "--json"], env=env)
    text = CliRunner().invoke(main, ["job", job_id], env=env)
    assert document.exit_code == 0 and text.exit_code == 0, document.output + text.output
    return json.loads(document.output), text.output


def shown_by_the_dashboard(job_id: str, namespace: str) -> str:
    async def page() -> str:
        client = AsyncQuasar(redis.asyncio.Redis.from_url(REDIS_URL), namespace)
        transport = httpx.ASGITransport(app=create_app(client=client))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://d.test") as http:
                found = await http.get(f"/jobs/{job_id}")
        finally:
            await client.redis.aclose()
        assert found.status_code == 200, found.text
        return found.text

    return asyncio.run(page())


@pytest.mark.parametrize("how", ["async", "thread"])
def test_a_result_over_the_limit_fails_its_job_once(app: App, how: str) -> None:
    fn = big_async if how == "async" else pt.two_megabytes
    big = app.task(fn, name="big", max_attempts=3)
    with worker_of(app) as worker:
        job = failed(big.enqueue())
    assert job.attempt == 1 and worker.stats.lost == 0
    assert job.error is not None and job.error.kind == "ResultTooLarge"
    assert job.error.message == TOO_LARGE


def test_the_limit_is_the_apps_own(backend: str, namespace: str) -> None:
    url = "memory://" if backend == "fake" else REDIS_URL
    with App(url, namespace=namespace, limits=Limits(max_payload_bytes=100)) as app:
        sized = app.task(lambda n: "x" * n, name="sized", max_attempts=3)
        try:
            with worker_of(app):
                assert sized.enqueue(90).result(timeout=30) == "x" * 90
                job = failed(sized.enqueue(200))
        finally:
            delete_namespace(app.client.redis, namespace)
    assert job.attempt == 1 and job.error is not None
    assert job.error.message == "result is 202 bytes, over the limit of 100"


def test_an_unencodable_result_fails_its_job_once(app: App) -> None:
    odd = app.task(pt.unencodable, name="odd", max_attempts=3)
    with worker_of(app):
        job = failed(odd.enqueue())
    assert job.attempt == 1 and job.error is not None and job.error.kind == "BadResult"
    assert "cannot be encoded as msgpack" in job.error.message


@pytest.mark.parametrize("fn", [pt.two_megabytes, pt.unencodable, pt.unsendable])
def test_a_process_task_fails_its_job_once(app: App, fn: Any) -> None:
    task = app.task(fn, name=fn.__name__, max_attempts=3)
    with worker_of(app, processes=1, concurrency=1):
        job = failed(task.enqueue())
    assert job.attempt == 1 and job.error is not None
    kind = "ResultTooLarge" if fn is pt.two_megabytes else "BadResult"
    assert job.error.kind == kind
    if fn is pt.two_megabytes:
        assert job.error.message == TOO_LARGE


def test_quasar_job_and_the_dashboard_show_the_reason(namespace: str) -> None:
    real_redis().close()  # skip (or fail under QUASAR_REQUIRE_REDIS=1) without a server
    with App(REDIS_URL, namespace=namespace) as app:
        big = app.task(pt.two_megabytes, name="big", max_attempts=3)
        try:
            with worker_of(app):
                job_id = failed(big.enqueue()).id
            shown(job_id, namespace)
        finally:
            delete_namespace(app.client.redis, namespace)


def shown(job_id: str, namespace: str) -> None:
    document, text = shown_by_the_cli(job_id, namespace)
    assert document["attempt"] == 1
    assert document["error"]["kind"] == "ResultTooLarge"
    assert document["error"]["message"] == TOO_LARGE
    assert f"ResultTooLarge: {TOO_LARGE}" in text
    page = shown_by_the_dashboard(job_id, namespace)
    assert "ResultTooLarge" in page and TOO_LARGE in page
