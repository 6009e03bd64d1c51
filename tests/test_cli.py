"""The ``quasar`` command line: the quick start example on both backends, and ``quasar events``."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from quasar_redis import Quasar
from quasar_redis.cli import main
from quasar_redis.cli._events import format_event
from quasar_redis.cli.example import FLOW, flow_id, holds_keys
from quasar_redis.cli.example import delete_namespace as delete_namespace_keys

from .helpers import NO_URL, REDIS_URL, claimed, delete_namespace, real_redis

#: Each step's result, in order, as ``quasar example`` prints it.
EXPECTED = [
    "JobApplied: A Waiting, attempt 0/3",
    "JobApplied: B Waiting, attempt 0/3, 1 dependency pending",
    "JobApplied: C Waiting, attempt 0/3",
    "ClaimApplied: A Leased(by worker-1, fence 1), attempt 1/3;",
    "ClaimRefused(NothingClaimable(next_at=",
    "JobInfo: B status blocked, waiting on A",
    "JobApplied: A Succeeded(inline), attempt 1/3, result {'resized': 'cat-1024.png'}",
    "ClaimApplied: B Leased(by worker-2, fence 1), attempt 1/3;",
    "JobApplied: B RetryWaiting('upstream timeout'), attempt 1/3",
    "ClaimApplied: B Leased(by worker-1, fence 2), attempt 2/3;",
    "JobRefused(StaleLease())",
    "JobApplied: B Succeeded(inline), attempt 2/3, result {'thumbnail': 'cat-64.png'}",
    "JobApplied: D Waiting, attempt 0/3",
    "ClaimApplied: D Leased(by worker-1, fence 1), attempt 1/3;",
    "JobApplied: D Failed('card declined'), attempt 1/3",
    "JobApplied: D RetryWaiting('card declined'), attempt 1/4",
    "ClaimApplied: D Leased(by worker-1, fence 2), attempt 2/4;",
    "JobApplied: D Succeeded(inline), attempt 2/4, result {'paid': 995}",
    "QueueCounts: available 0, scheduled 1, executing 0, completed 3, retryable 0, "
    "discarded 0, cancelled 0, blocked 0",
    "JobInfo: C status scheduled",
]


def run(*args: str) -> Result:
    # No URL in the environment: the embedded default must not depend on the caller's.
    return CliRunner().invoke(main, ["example", *args], env=NO_URL)


def results(output: str) -> list[str]:
    return re.findall(r"^    -> (.*)$", output, flags=re.MULTILINE)


def check_steps(output: str, partitions: int | None = None) -> None:
    """Each step's result as expected; with ``partitions``, A and B (one flow) are named by
    their ids in the flow's partition."""
    ids = {name: flow_id(FLOW, name, partitions) for name in ("A", "B")}
    got = results(output)
    assert len(got) == len(EXPECTED), output
    for line, step in zip(got, EXPECTED, strict=True):
        expected = re.sub(r"\b[AB]\b", lambda m: ids[m.group()], step)
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


def test_example_on_partitions_runs_on_embedded_fakeredis() -> None:
    result = run("--namespace", "cli-test", "--partitions", "3")
    assert result.exit_code == 0, result.output
    said = "namespace 'cli-test' (3 partitions) on an embedded fakeredis server"
    assert said in result.output
    assert "JobApplied: 0~A Waiting" in result.output  # (crc32("cat.png") % 3 == 0)
    check_steps(result.output, 3)


def test_example_on_partitions_on_real_redis_leaves_no_keys() -> None:
    client = real_redis()
    namespace = f"cli-{uuid.uuid4().hex[:12]}"
    patterns = (f"quasar:{{{namespace}}}:*", f"quasar:{{{namespace}/*")
    try:
        result = run("--redis-url", REDIS_URL, "--namespace", namespace, "--partitions", "3")
        assert result.exit_code == 0, result.output
        assert f"namespace {namespace!r} (3 partitions) on {REDIS_URL}" in result.output
        check_steps(result.output, 3)
        deleted = re.search(rf"deleted the (\d+) keys of namespace '{namespace}'", result.output)
        assert deleted and int(deleted.group(1)) > 4  # (the record, jobs in every partition)
        assert [k for m in patterns for k in client.scan_iter(match=m, count=1000)] == []
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_deleting_a_namespace_keeps_a_namespace_tagged_with_its_name() -> None:
    client = real_redis()
    namespace = f"cli-{uuid.uuid4().hex[:12]}"
    mine = Quasar(client, namespace, partitions=3)
    theirs = Quasar(client, "other", tag=namespace, partitions=3)
    try:
        for q in (mine, theirs):
            for n in range(6):
                q.enqueue("s", id=f"job}}:{n}")  # (a "}:" in an id, as a partition root has)
        assert holds_keys(client, mine.keys, 3)
        kept = sorted(client.scan_iter(match=f"quasar:{{{namespace}/*}}/other:*", count=1000))
        assert delete_namespace_keys(client, mine.keys, 3) > 6
        assert not holds_keys(client, mine.keys, 3)
        assert sorted(client.scan_iter(match=f"quasar:{{{namespace}/*", count=1000)) == kept
        assert len(kept) > 6 and theirs.get_job("job}:0") is not None
    finally:
        delete_namespace(client, namespace)
        client.close()


@pytest.mark.parametrize("command", ["example", "demo"])
def test_a_namespace_that_holds_keys_is_refused(command: str) -> None:
    client = real_redis()
    namespace = f"cli-{uuid.uuid4().hex[:12]}"
    key = f"quasar:{{{namespace}}}:seq"
    client.set(key, b"7")
    try:
        args = [command, "--redis-url", REDIS_URL, "--namespace", namespace]
        result = CliRunner().invoke(main, args, env=NO_URL)
        assert result.exit_code == 1
        assert "already holds keys" in result.output
        assert client.get(key) == b"7"
    finally:
        client.delete(key)
        client.close()


@pytest.mark.parametrize("command", ["example", "demo"])
def test_an_unreachable_redis_is_reported(command: str) -> None:
    args = [command, "--redis-url", "redis://127.0.0.1:1/0"]
    result = CliRunner().invoke(main, args, env=NO_URL)
    assert result.exit_code == 1
    assert "Error: cannot reach Redis at redis://127.0.0.1:1/0" in result.output


def test_example_reports_a_bad_namespace() -> None:
    result = run("--namespace", "bad{tag}")
    assert result.exit_code == 2  # a usage error, as every command has it
    assert "Error: namespace must be 1-64 characters" in result.output


# --- quasar events ---------------------------------------------------------------------------

EVENT_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) job=(\S+) event=(\S+) queue=(\S+) attempt=(\d+)$"
)


def events(*args: str) -> Result:
    return CliRunner().invoke(main, ["events", *args], env=NO_URL)


def parsed(output: str) -> list[tuple[str, str, str, str]]:
    lines = []
    for line in output.splitlines():
        found = EVENT_LINE.match(line)
        assert found, line
        lines.append((found.group(2), found.group(3), found.group(4), found.group(5)))
    return lines


@pytest.fixture
def with_events() -> Iterator[tuple[Any, str]]:
    """A namespace on the real Redis with six events: a available, b blocked, a executing,
    a completed, b available (its dependency succeeded), b cancelled."""
    client = real_redis()
    namespace = f"cli-{uuid.uuid4().hex[:12]}"
    q = Quasar(client, namespace)
    q.enqueue("s", id="a", queue="mail")
    q.enqueue("s", id="b", queue="mail", dependencies=["a"])
    q.complete(claimed(q.claim("mail", "w", 30_000)).token, "w", result=1)
    q.cancel("b")
    try:
        yield client, namespace
    finally:
        delete_namespace(client, namespace)
        client.close()


def test_events_prints_the_stream_oldest_first(with_events: tuple[Any, str]) -> None:
    client, namespace = with_events
    result = events("--redis-url", REDIS_URL, "--namespace", namespace, "--no-follow")
    assert result.exit_code == 0, result.output
    assert parsed(result.output) == [
        ("a", "available", "mail", "0"),
        ("b", "blocked", "mail", "0"),
        ("a", "executing", "mail", "1"),
        ("a", "completed", "mail", "1"),
        ("b", "available", "mail", "0"),
        ("b", "cancelled", "mail", "0"),
    ]
    # The time is the stream entry's id (milliseconds, UTC).
    first_id, fields = client.xrange(f"quasar:{{{namespace}}}:events", count=1)[0]
    assert result.output.splitlines()[0] == format_event(first_id, fields)[0]
    millis = int(first_id.split(b"-")[0])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(millis // 1000))
    assert result.output.startswith(f"{stamp}.{millis % 1000:03d}Z job=a event=available")


def test_events_count_keeps_the_newest(with_events: tuple[Any, str]) -> None:
    _, namespace = with_events
    result = events("--redis-url", REDIS_URL, "--namespace", namespace, "--no-follow", "-n", "2")
    assert result.exit_code == 0, result.output
    assert parsed(result.output) == [
        ("b", "available", "mail", "0"),
        ("b", "cancelled", "mail", "0"),
    ]
    none = events("--redis-url", REDIS_URL, "--namespace", namespace, "--no-follow", "-n", "0")
    assert none.exit_code == 0 and none.output == ""


def test_events_of_an_empty_namespace_print_nothing() -> None:
    real_redis().close()
    namespace = f"cli-{uuid.uuid4().hex[:12]}"
    result = events("--redis-url", REDIS_URL, "--namespace", namespace, "--no-follow")
    assert result.exit_code == 0 and result.output == ""


def test_events_refuses_bad_input() -> None:
    no_url = events("--namespace", "shop", "--no-follow")
    assert no_url.exit_code == 2
    assert "Error: no Redis URL: give --redis-url" in no_url.output
    bad_name = events("--redis-url", REDIS_URL, "--namespace", "a{b}", "--no-follow")
    assert bad_name.exit_code == 2
    assert "Error: namespace must be 1-64 characters" in bad_name.output
    unreachable = events("--redis-url", "redis://127.0.0.1:1/0", "--namespace", "x", "--no-follow")
    assert unreachable.exit_code == 1
    assert "Error: cannot reach Redis at redis://127.0.0.1:1/0" in unreachable.output


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no line in time"
    return proc.stdout.readline().decode().rstrip("\n")


def test_events_follow_prints_new_events_until_interrupted(
    with_events: tuple[Any, str],
) -> None:
    client, namespace = with_events
    # SIGINT raises KeyboardInterrupt even where the test runner's parent ignores it.
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from quasar_redis.cli import main; main(sys.argv[1:])"
    )
    args = ["events", "--redis-url", REDIS_URL, "--namespace", namespace, "--count", "1"]
    env = {k: v for k, v in os.environ.items() if k not in NO_URL}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        first = EVENT_LINE.match(read_line(proc, 20))
        assert first and first.group(2, 3) == ("b", "cancelled")
        time.sleep(0.3)  # it now blocks in XREAD
        Quasar(client, namespace).enqueue("s", id="c", queue="mail")
        new = EVENT_LINE.match(read_line(proc, 10))
        assert new and new.group(2, 3, 4) == ("c", "available", "mail")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        assert proc.stderr is not None and proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("-1", "'-1' is neither 'auto' nor a nonnegative integer"),
        ("x", "'x' is neither 'auto' nor a nonnegative integer"),
        ("1.5", "'1.5' is neither 'auto' nor a nonnegative integer"),
        ("AUTO", "'AUTO' is neither 'auto' nor a nonnegative integer"),
    ],
)
def test_worker_refuses_a_bad_prefetch(bad: str, said: str) -> None:
    result = CliRunner().invoke(main, ["worker", "tests.worker_tasks:app", "--prefetch", bad])
    assert result.exit_code == 2
    assert "--prefetch" in result.output and said in result.output, result.output


def test_only_a_job_still_running_keeps_the_worker_command_from_a_clean_exit() -> None:
    # `quasar worker` ends the process at once (os._exit) only when a plain-function job runs
    # past the grace period: the pool's idle threads, still ending, must not count (in-process,
    # as under CliRunner, that os._exit ended the test run itself).
    import threading as th

    from quasar_redis.cli._worker import job_threads_outlive

    ending = th.Thread(target=time.sleep, args=(0.2,), name="quasar-task_0")
    ending.start()
    assert not job_threads_outlive(2.0)
    release = th.Event()
    stuck = th.Thread(target=release.wait, args=(30,), name="quasar-task_1")
    stuck.start()
    try:
        assert job_threads_outlive(0.2)
    finally:
        release.set()
        stuck.join()
