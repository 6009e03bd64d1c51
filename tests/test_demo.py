"""``quasar demo``: the mix it enqueues, its summary on both backends (of one partition and of
several, and on a Redis Cluster), and what it leaves behind."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from click.testing import CliRunner, Result
from redis.cluster import RedisCluster

from quasar_redis import App, JobError, Worker
from quasar_redis._partitions import hashed, partition_of, placement
from quasar_redis.cli import main
from quasar_redis.cli._demo_jobs import CHAIN, declare, plan
from quasar_redis.cli.demo import percentile

from .cluster import cluster_or_skip
from .helpers import NO_URL, REDIS_URL, REQUIRE, delete_namespace, real_redis


def run(*args: str) -> Result:
    # No URL in the environment: the embedded default must not depend on the caller's.
    return CliRunner().invoke(main, ["demo", *args], env=NO_URL)


def summary(output: str) -> dict[str, str]:
    """The summary table's rows: name -> value (the number, with its unit)."""
    assert "\nsummary" in output, output
    section = output.split("\nsummary", 1)[1]
    rows: dict[str, str] = {}
    for name in ("jobs", "total time", "throughput", "latency p50", "latency p99", "completed"):
        rows[name] = _row(section, name)
    for name in ("discarded", "cancelled", "attempts", "retries", "snoozed", "leases lost"):
        rows[name] = _row(section, name)
    return rows


def _row(section: str, name: str) -> str:
    found = re.search(rf"^\s*{name}\s+(\S+(?: (?:s|ms|jobs/s))?)", section, flags=re.MULTILINE)
    assert found, (name, section)
    return found.group(1)


def check_summary(output: str, jobs: int) -> dict[str, str]:
    rows = summary(output)
    assert int(rows["jobs"]) == jobs
    finished = int(rows["completed"]) + int(rows["discarded"]) + int(rows["cancelled"])
    assert finished == jobs, output
    assert int(rows["discarded"]) >= 1  # the card charge fails for good
    assert int(rows["cancelled"]) >= 1  # and its receipt is cancelled with it
    assert int(rows["retries"]) > 0  # at least one e-mail fails once
    assert int(rows["attempts"]) >= jobs - int(rows["cancelled"])
    assert int(rows["leases lost"]) == 0
    assert re.fullmatch(r"[\d,]+\.\d jobs/s", rows["throughput"]), rows["throughput"]
    assert float(rows["throughput"].split()[0].replace(",", "")) > 0
    assert re.fullmatch(r"\d+ ms", rows["latency p50"]), rows["latency p50"]
    assert re.fullmatch(r"\d+ ms", rows["latency p99"]), rows["latency p99"]
    assert int(rows["latency p50"].split()[0]) <= int(rows["latency p99"].split()[0])
    return rows


#: No --partitions (one partition, as ever), and three partitions.
PARTITIONS = pytest.mark.parametrize(
    ("options", "said"), [([], ""), (["--partitions", "3"], " (3 partitions)")], ids=["P-", "P3"]
)


@PARTITIONS
def test_demo_runs_on_embedded_fakeredis_by_default(options: list[str], said: str) -> None:
    result = run("--jobs", "200", "--concurrency", "10", *options)
    assert result.exit_code == 0, result.output
    found = re.search(r"namespace 'demo-[0-9a-f]{8}'(.*) on an embedded fakeredis", result.output)
    assert found and found.group(1) == said
    check_summary(result.output, 200)
    # Not a terminal: plain progress lines, no live rendering (no escape sequences).
    assert re.search(r"^\[\s*\d+\.\d\ds\] finished 200/200: available 0, ", result.output, re.M)
    assert "\x1b[" not in result.output
    assert "deleted the" not in result.output


def demo_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``quasar demo`` in a process of its own (its log handler, as a user sees it)."""
    env = {k: v for k, v in os.environ.items() if k not in NO_URL}
    return subprocess.run(
        [sys.executable, "-m", "quasar_redis", "demo", "--jobs", "100", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_demo_logs_failures_in_one_line_each_and_no_traceback() -> None:
    done = demo_process()
    assert done.returncode == 0, done.stderr
    subprocess_output = done.stdout + done.stderr
    assert "Traceback" not in subprocess_output
    assert "\nsummary" in done.stdout
    # the retried e-mails are one line each; the card declined (a final failure) is an ERROR
    assert re.search(
        r" WARNING quasar_redis\.worker: job \S+ stage=demo\.send_email attempt=1 "
        r"status=retryable \(retry in [\d.]+s\) .* error=SmtpBusy: ",
        done.stderr,
    )
    assert re.search(
        r" ERROR quasar_redis\.worker: job order-1-charge stage=demo\.charge_card "
        r"attempt=1 status=discarded \(failed permanently\) .* card declined",
        done.stderr,
    )


def test_demo_shows_the_tracebacks_at_debug() -> None:
    done = demo_process("--log-level", "DEBUG")
    assert done.returncode == 0, done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert "SmtpBusy: SMTP server busy" in done.stderr


def namespace_keys(client: Any, namespace: str) -> list[Any]:
    """Every key of ``namespace``: under its root and under every partition's."""
    patterns = (f"quasar:{{{namespace}}}:*", f"quasar:{{{namespace}/*")
    return [key for match in patterns for key in client.scan_iter(match=match, count=1000)]


@PARTITIONS
def test_demo_on_real_redis_leaves_no_keys(options: list[str], said: str) -> None:
    client = real_redis()
    namespace = f"demo-test-{uuid.uuid4().hex[:12]}"
    try:
        args = ["--redis-url", REDIS_URL, "--namespace", namespace, "--jobs", "300", *options]
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert f"namespace {namespace!r}{said} on {REDIS_URL}" in result.output
        check_summary(result.output, 300)
        deleted = re.search(rf"deleted the (\d+) keys of namespace '{namespace}'", result.output)
        assert deleted and int(deleted.group(1)) > 300  # (a hash per job at least)
        assert namespace_keys(client, namespace) == []
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("0", "partitions must be a whole number from 1 to 1024: got 0"),
        ("-1", "partitions must be a whole number from 1 to 1024: got -1"),
        ("x", "'x' is not a valid integer"),
        ("2000", "partitions must be a whole number from 1 to 1024: got 2000"),
    ],
)
@pytest.mark.parametrize("command", ["demo", "example"])
def test_a_bad_number_of_partitions_is_refused_writing_nothing(
    command: str, bad: str, says: str
) -> None:
    client = real_redis()
    namespace = f"demo-test-{uuid.uuid4().hex[:12]}"
    args = [command, "--redis-url", REDIS_URL, "--namespace", namespace, "--partitions", bad]
    try:
        result = CliRunner().invoke(main, args, env=NO_URL)
        assert result.exit_code == 2, result.output
        assert f"Error: Invalid value for '--partitions': {says}" in result.output
        assert result.output.count("\n") == 1 and "Traceback" not in result.output
        assert namespace_keys(client, namespace) == []
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.mark.heavy
@pytest.mark.cluster
def test_demo_and_example_on_partitions_of_a_cluster_leave_no_keys() -> None:
    cluster = cluster_or_skip(REQUIRE)
    url = f"redis+cluster://127.0.0.1:{cluster.startup_port}"
    try:
        for command, extra in (("demo", ["--jobs", "300"]), ("example", [])):
            namespace = f"{command}-test-{uuid.uuid4().hex[:12]}"
            args = [command, "--redis-url", url, "--namespace", namespace, "--partitions", "3"]
            result = CliRunner().invoke(main, [*args, *extra], env=NO_URL)
            assert result.exit_code == 0, result.output
            assert re.search(rf"deleted the \d+ keys of namespace '{namespace}'", result.output)
            if command == "demo":
                check_summary(result.output, 300)
            else:
                assert result.output.rstrip().endswith("done"), result.output
            with RedisCluster(host="127.0.0.1", port=cluster.startup_port) as every_node:
                assert namespace_keys(every_node, namespace) == []
    finally:
        cluster.stop()


def test_demo_gives_up_after_its_timeout() -> None:
    # The e-mail that fails once is retried 45 ms or more later: not all done after 10 ms.
    result = run("--jobs", "100", "--timeout", "0.01")
    assert result.exit_code == 1
    assert "Error: the demo did not finish in 0.01s" in result.output
    assert "jobs by status" in result.output


class BrokenWorker(Worker):
    async def serve(self, *, install_signals: bool = False) -> None:
        raise RuntimeError("the worker broke")


def test_demo_stops_when_a_worker_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("quasar_redis.cli.demo.Worker", BrokenWorker)
    started = time.monotonic()
    result = run("--jobs", "50")
    assert isinstance(result.exception, RuntimeError), result.output
    assert str(result.exception) == "the worker broke"
    assert time.monotonic() - started < 30  # not the 120 s timeout


def test_demo_refuses_bad_options() -> None:
    assert run("--jobs", "5").exit_code == 2
    assert run("--workers", "0").exit_code == 2
    bad = run("--namespace", "bad{tag}")
    assert bad.exit_code == 2  # a usage error, as every command has it
    assert "Error: namespace must be 1-64 characters" in bad.output


def test_the_mix_holds_every_kind_of_job() -> None:
    app = App("memory://", namespace="mix")
    tasks = declare(app)
    for total in (10, 2000):
        jobs = plan(tasks, total, random.Random(7))
        assert len(jobs) == total
        stages = {job.stage for job in jobs}
        assert {"demo.pipeline_step", "demo.charge_card", "demo.send_receipt"} <= stages
        assert "demo.send_email" in stages
        steps = [job for job in jobs if job.stage == "demo.pipeline_step"]
        assert len(steps) == len(CHAIN) * max(1, total // 250)
        assert all(len(job.dependencies) == (0 if i % 5 == 0 else 1) for i, job in enumerate(steps))
        receipt = next(job for job in jobs if job.stage == "demo.send_receipt")
        assert receipt.dependencies == ["order-1-charge"]
        assert receipt.on_dependency_failure == "cancel"
    for count in (None, 1, 3, 7):  # each job with its dependencies, its flow: none refused
        n = count or 1
        jobs = plan(tasks, 2000, random.Random(7), count)
        assert not [job for job in jobs if isinstance(placement(job, n), JobError)]
        chain = [job for job in jobs if job.stage == "demo.pipeline_step"][: len(CHAIN)]
        assert {partition_of(job.id, n) for job in chain} == {hashed("chain-0", n)}
        assert {job.flow for job in chain} == {"chain-0"}
        assert chain[0].id == (
            "chain-0-fetch" if n == 1 else f"{hashed('chain-0', n)}~chain-0-fetch"
        )
    big = plan(tasks, 2000, random.Random(7))
    assert {j.stage for j in big} >= {"demo.noop", "demo.resize", "demo.checksum", "demo.report"}
    assert any(j.delay_ms for j in big)
    assert {j.queue for j in big} == {"default", "images", "emails", "reports"}


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5], 0.99) == 5
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(list(reversed(values)), 1.0) == 100
