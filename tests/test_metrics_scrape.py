"""Scraping as Prometheus does (docs/observability.md): the ``/metrics`` of ``quasar worker
--metrics-port`` and of ``quasar dashboard`` fetched over HTTP from processes on real Redis, with
Prometheus's own ``Accept`` header and without one: both answer the text format 0.0.4, every
sample carries ``namespace``, and two namespaces scraped side by side give distinct series."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from quasar_redis import Quasar, Status

from .helpers import REDIS_URL, delete_namespace, free_port, real_redis, wait_for
from .probes import ROOT, Process, quasar
from .test_worker_processes import enqueue, new_job

#: What Prometheus 3 asks for: OpenMetrics first.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
Series = set[tuple[str, frozenset[tuple[str, str]]]]
EXPECTED = {"quasar_jobs_total", "quasar_queue_jobs", "quasar_worker_free_slots"}


def scrape(url: str, accept: str | None) -> tuple[str, str]:
    """The content type and body of one scrape of ``url``."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def series(text: str) -> Series:
    """Every sample's name and labels, parsed by prometheus-client's parser."""
    return {
        (sample.name, frozenset(sample.labels.items()))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def namespaces(namespace: str) -> Iterator[tuple[str, str]]:
    client = real_redis()
    pair = (namespace, f"{namespace}-b")
    try:
        yield pair
    finally:
        for made in pair:
            delete_namespace(client, made)
        client.close()


def test_both_endpoints_serve_one_format_with_a_namespace_label(
    tmp_path: Path, namespaces: tuple[str, str]
) -> None:
    processes: list[Process] = []
    scraped: dict[str, Series] = {}
    try:
        for namespace in namespaces:
            endpoints = start_both(tmp_path, namespace, processes)
            for process, url in endpoints:  # (each fails the test with its output if it exits)
                process.wait_status(url, 200)
            run_one_job(namespace, worker=endpoints[0][0])
            # (the queues' depth is read at most once a second: a scrape may come before the job's)
            scraped[namespace] = wait_for(
                partial(scrape_all, endpoints, namespace),
                30,
                f"{sorted(EXPECTED)} scraped",
                every=0.2,
            )
    finally:
        for process in processes:
            process.kill()
    first, second = (scraped[n] for n in namespaces)
    assert not first & second  # side by side in one Prometheus: no series of one is the other's


def scrape_all(endpoints: list[tuple[Process, str]], namespace: str) -> Series | None:
    """Every series the ``endpoints`` of ``namespace`` serve, scraped with Prometheus's
    ``Accept`` and without one, each checked for the format and the label; None until
    ``EXPECTED`` are all among them."""
    found: Series = set()
    for _process, url in endpoints:
        for accept in (PROMETHEUS_ACCEPT, None):
            content_type, text = scrape(url, accept)
            assert content_type == TEXT_0_0_4, (url, accept)
            got = series(text)
            assert got, url
            unlabelled = [s for s in got if ("namespace", namespace) not in s[1]]
            assert not unlabelled, (url, unlabelled[:5])
            found |= got
    return found if {name for name, _ in found} >= EXPECTED else None


def start_both(
    tmp_path: Path, namespace: str, processes: list[Process]
) -> list[tuple[Process, str]]:
    """A worker and a dashboard of ``namespace`` (kept in ``processes``), each with the URL of
    its /metrics."""
    worker_port, dashboard_port = free_port(), free_port()
    env = {"QUASAR_TEST_URL": REDIS_URL, "QUASAR_TEST_NS": namespace}
    env["QUASAR_TEST_LOG"] = str(tmp_path / f"{namespace}.log")
    worker = Process.start(
        quasar("worker", "tests.worker_tasks:app", "--metrics-port", str(worker_port)),
        cwd=ROOT,
        env=env,
        log_path=tmp_path / f"{namespace}-worker.log",
    )
    processes.append(worker)
    options = ["--redis-url", REDIS_URL, "--namespace", namespace, "--port", str(dashboard_port)]
    dashboard = Process.start(
        quasar("dashboard", *options),
        cwd=ROOT,
        env={},
        log_path=tmp_path / f"{namespace}-dashboard.log",
    )
    processes.append(dashboard)
    return [
        (worker, f"http://127.0.0.1:{worker_port}/metrics"),
        (dashboard, f"http://127.0.0.1:{dashboard_port}/metrics"),
    ]


def run_one_job(namespace: str, worker: Process) -> None:
    """Enqueue one job of ``namespace`` and wait until ``worker`` ran it."""
    q = Quasar(redis.Redis.from_url(REDIS_URL), namespace)
    try:
        (job_id,) = enqueue(q, [new_job("wt.quick")])

        def completed() -> bool:
            if worker.proc.poll() is not None:
                pytest.fail(f"the worker exited ({worker.proc.returncode}):\n{worker.output()}")
            info = q.get_job(job_id)
            return info is not None and info.status is Status.COMPLETED

        wait_for(completed, 60, "the job run")
    finally:
        q.redis.close()
