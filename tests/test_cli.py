"""The ``quasar`` command line: the quick start example on both backends."""

from __future__ import annotations

import re
import uuid

from click.testing import CliRunner, Result

from quasar_redis.cli import main

from .conftest import REDIS_URL, real_redis

#: Each step's result, in order, as ``quasar example`` prints it.
EXPECTED = [
    "JobApplied: A Waiting, attempt 0/3",
    "JobApplied: B Waiting, attempt 0/3, 1 dependency pending",
    "JobApplied: C Waiting, attempt 0/3",
    "ClaimApplied: A Leased(by worker-1, fence 1), attempt 1/3;",
    "ClaimRefused(NothingClaimable(next_at=",
    "JobInfo: B status available, waiting on A",
    "JobApplied: A Succeeded(inline), attempt 1/3, result {'resized': 'cat-1024.png'}",
    "ClaimApplied: B Leased(by worker-2, fence 1), attempt 1/3;",
    "JobApplied: B RetryWaiting('upstream timeout'), attempt 1/3",
    "ClaimApplied: B Leased(by worker-1, fence 2), attempt 2/3;",
    "JobRefused(StaleLease())",
    "JobApplied: B Succeeded(inline), attempt 2/3, result {'thumbnail': 'cat-64.png'}",
    "JobApplied: D Waiting, attempt 0/3",
    "ClaimApplied: D Leased(by worker-1, fence 1), attempt 1/3;",
    "JobApplied: D Failed('card declined'), attempt 1/3",
    "JobApplied: D RetryWaiting('card updated'), attempt 1/4",
    "ClaimApplied: D Leased(by worker-1, fence 2), attempt 2/4;",
    "JobApplied: D Succeeded(inline), attempt 2/4, result {'paid': 995}",
    "QueueCounts: available 0, scheduled 1, executing 0, completed 3, retryable 0, "
    "discarded 0, cancelled 0, blocked 0",
    "JobInfo: C status scheduled",
]


def run(*args: str) -> Result:
    # REDIS_URL unset: the embedded default must not depend on the caller's environment.
    return CliRunner().invoke(main, ["example", *args], env={"REDIS_URL": None})


def results(output: str) -> list[str]:
    return re.findall(r"^    -> (.*)$", output, flags=re.MULTILINE)


def check_steps(output: str) -> None:
    got = results(output)
    assert len(got) == len(EXPECTED), output
    for line, expected in zip(got, EXPECTED, strict=True):
        assert line.startswith(expected), (line, expected)
    assert output.rstrip().endswith("done")


def test_example_runs_on_embedded_fakeredis_by_default() -> None:
    result = run("--namespace", "cli-test")
    assert result.exit_code == 0, result.output
    assert "namespace 'cli-test' on an embedded fakeredis server" in result.output
    check_steps(result.output)


def test_example_picks_a_fresh_namespace() -> None:
    first, second = run(), run()
    assert first.exit_code == 0 and second.exit_code == 0
    names = [re.search(r"namespace '(example-[0-9a-f]{8})'", r.output) for r in (first, second)]
    assert names[0] and names[1] and names[0].group(1) != names[1].group(1)


def test_example_on_real_redis_leaves_no_keys() -> None:
    client = real_redis()
    namespace = f"cli-{uuid.uuid4().hex[:12]}"
    pattern = f"quasar:{{{namespace}}}:*"
    try:
        result = run("--redis-url", REDIS_URL, "--namespace", namespace)
        assert result.exit_code == 0, result.output
        assert f"namespace {namespace!r} on {REDIS_URL}" in result.output
        check_steps(result.output)
        assert re.search(rf"deleted the \d+ keys of namespace '{namespace}'", result.output)
        assert list(client.scan_iter(match=pattern, count=1000)) == []
    finally:
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
        client.close()


def test_example_refuses_a_namespace_that_holds_keys() -> None:
    client = real_redis()
    namespace = f"cli-{uuid.uuid4().hex[:12]}"
    key = f"quasar:{{{namespace}}}:seq"
    client.set(key, b"7")
    try:
        result = run("--redis-url", REDIS_URL, "--namespace", namespace)
        assert result.exit_code == 1
        assert "already holds keys" in result.output
        assert client.get(key) == b"7"
    finally:
        client.delete(key)
        client.close()


def test_example_reports_an_unreachable_redis() -> None:
    result = run("--redis-url", "redis://127.0.0.1:1/0")
    assert result.exit_code == 1
    assert "Error: Redis at redis://127.0.0.1:1/0" in result.output


def test_example_reports_a_bad_namespace() -> None:
    result = run("--namespace", "bad{tag}")
    assert result.exit_code == 1
    assert "ConfigurationError" in result.output
