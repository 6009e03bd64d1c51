"""The CLI and the dashboard read and change a namespace through one implementation, against
real Redis: a retry of every failed job pages the same and passes every job's fence from
either; ``quasar worker --redis-url`` serves the Redis it names, not the app's own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio
from click.testing import CliRunner

from quasar_redis import App, AsyncQuasar, NewJob, Quasar, Status
from quasar_redis._calls import CallBuilder
from quasar_redis.cli import main
from quasar_redis.dashboard import create_app

from .helpers import REDIS_URL, delete_namespace, real_redis
from .locked_redis import closed_port
from .test_dashboard import BASE, confirmed_post

FAILED = 250
QUASAR = Path(sys.executable).parent / "quasar"


@pytest.fixture
def rq(namespace: str) -> Iterator[Quasar]:
    client = Quasar(real_redis(), namespace)
    try:
        yield client
    finally:
        delete_namespace(client.redis, namespace)
        client.redis.close()


def fail_many(q: Quasar, n: int) -> dict[str, int]:
    """``n`` failed (discarded) jobs of queue mail; each id with its fence."""
    q.enqueue_many(
        [NewJob("t", None, id=f"f{i:03d}", queue="mail", max_attempts=1) for i in range(n)]
    )
    for i in range(n):
        token = q.claim_job(f"f{i:03d}", "w", 30_000).claim.token  # type: ignore[union-attr]
        q.fail(token, "w", "no")
    return {
        job.id: job.fencing_version for job in q.page_jobs("mail", Status.DISCARDED, limit=n).jobs
    }


class Sent:
    """Every page asked for (queue, status, limit) and every retry sent (id, fence)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pages: list[tuple[str, str, int]] = []
        self.retries: list[tuple[str, int | None]] = []
        page_jobs, retry = CallBuilder.page_jobs, CallBuilder.retry

        def paging(calls: CallBuilder, queue: str, status: Any, *args: Any) -> Any:
            self.pages.append((queue, Status(status).value, args[1]))
            return page_jobs(calls, queue, status, *args)

        def retrying(calls: CallBuilder, job_id: str, fence: int | None, *args: Any) -> Any:
            self.retries.append((job_id, fence))
            return retry(calls, job_id, fence, *args)

        monkeypatch.setattr(CallBuilder, "page_jobs", paging)
        monkeypatch.setattr(CallBuilder, "retry", retrying)


def test_a_retry_of_every_failed_job_is_the_same_from_the_cli_and_the_dashboard(
    rq: Quasar, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = f"{namespace}-dash"
    dashboard_q = Quasar(rq.redis, other)
    try:
        fences = fail_many(rq, FAILED)
        dashboard_fences = fail_many(dashboard_q, FAILED)
        by_cli = Sent(monkeypatch)
        args = ["retry", "--all-failed", "mail", "--redis-url", REDIS_URL, "--namespace", namespace]
        ran = CliRunner().invoke(main, args, env={"QUASAR_NAMESPACE": None})
        assert ran.exit_code == 0, ran.output
        assert ran.output == f"retried {FAILED} job(s)\n"
        monkeypatch.undo()
        by_dashboard = Sent(monkeypatch)

        async def retry_all() -> str:
            client = AsyncQuasar(redis.asyncio.Redis.from_url(REDIS_URL), other)
            transport = httpx.ASGITransport(app=create_app(client=client))
            try:
                async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
                    done = await confirmed_post(http, "/confirm/retry-all?queue=mail")
                    return str(done.headers["location"])
            finally:
                await client.redis.aclose()

        assert f"n={FAILED}" in asyncio.run(retry_all())
        for sent, expected in ((by_cli, fences), (by_dashboard, dashboard_fences)):
            assert sorted(sent.retries) == sorted(expected.items())  # every fence, once each
        assert by_dashboard.pages == by_cli.pages == [("mail", "discarded", 500)]
        assert rq.counts("mail").available == dashboard_q.counts("mail").available == FAILED
    finally:
        delete_namespace(rq.redis, other)


TASKS = """
import os
from quasar_redis import App

app = App({url!r}, namespace=os.environ["QUASAR_NAMESPACE"])


@app.task(queue="mail", name="send")
def send() -> None:
    pass
"""


@pytest.mark.parametrize("own", ["nowhere", None])
def test_a_worker_serves_the_redis_its_redis_url_names(
    rq: Quasar, namespace: str, tmp_path: Path, own: str | None
) -> None:
    nowhere = f"redis://127.0.0.1:{closed_port()}/0"  # the app's own URL: no Redis there
    (tmp_path / "tasks.py").write_text(TASKS.format(url=own and nowhere))
    with App(REDIS_URL, namespace=namespace) as producer:
        send = producer.task(lambda: None, name="send", queue="mail")
        for _ in range(3):
            send.enqueue()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QUASAR_REDIS_URL")}
    env["QUASAR_NAMESPACE"] = namespace

    def burst(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(QUASAR), "worker", "tasks:app", "-q", "mail", "--burst", *args]
        return subprocess.run(
            command, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    done = burst("--connect-timeout", "5", "--redis-url", REDIS_URL)
    assert done.returncode == 0, done.stderr
    assert rq.counts("mail").completed == 3
    assert f"Redis {REDIS_URL}" in done.stderr  # (its start line names the Redis it serves)
    refused = burst("--connect-timeout", "1")  # without it: the app's own URL, or none
    assert refused.returncode == (1 if own else 2)  # out of reach; no URL at all: a usage error
    assert (nowhere if own else "no Redis URL") in refused.stderr
