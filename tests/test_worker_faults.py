"""The worker when its own making of an outcome goes wrong: a retry policy that raises or answers
no delay, a snooze Redis cannot keep. Each job ends Failed with a typed error and frees its lease;
none stays leased while the worker lives."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis
import redis.exceptions as rex

from quasar_redis import App, AsyncQuasar, Snooze, current_job
from quasar_redis.errors import (
    CorruptJobError,
    InvalidArgument,
    PermissionDenied,
    ProtocolError,
    RedisUnavailable,
)
from quasar_redis.retry import FromFunction, as_policy
from quasar_redis.worker._transient import passes

from . import test_worker as tw
from .helpers import delete_namespace, wait_for
from .servers import RedisServer


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, -1, 1e13, "1", True])
def test_a_snooze_or_a_fixed_retry_delay_redis_cannot_keep_is_refused_at_once(bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="snooze delay"):
        Snooze(bad)
    if isinstance(bad, float | int) and not isinstance(bad, bool):
        with pytest.raises(InvalidArgument, match="retry delay"):
            as_policy(bad)


def _raises(attempt: int, error: BaseException) -> float | None:
    raise RuntimeError("policy broke")


@pytest.mark.parametrize(
    ("answer", "says"),
    [(_raises, "RuntimeError: policy broke"), (math.inf, "finite"), (math.nan, "finite")],
    ids=["raises", "inf", "nan"],
)
def test_a_retry_policy_that_raises_or_answers_no_delay_fails_the_job(
    app: App, answer: Any, says: str
) -> None:
    policy = FromFunction(answer if callable(answer) else lambda attempt, error: answer)

    def flaky() -> None:
        raise ValueError("boom")

    task = tw.declare(app, flaky, max_attempts=5, retry=policy)
    with tw.worker_of(app) as worker:
        job = tw.failure_of(task.enqueue())
        wait_for(lambda: not tw.runner_of(worker).held, 10, "the worker to let the job go")
        assert worker.stats.failed == 1
    assert job.attempt == 1
    assert job.error.kind == "WorkerError"
    assert "retry policy" in job.error.message and says in job.error.message
    assert "ValueError: boom" in job.error.message


class _Unchecked(Snooze):
    """A snooze whose delay skipped the check."""

    def __init__(self) -> None:
        Exception.__init__(self, "never")
        self.delay = math.inf


def test_a_snooze_redis_cannot_keep_fails_the_job(app: App) -> None:
    def forever() -> None:
        if current_job().attempt == 1:
            raise _Unchecked()

    def infinite() -> None:
        raise Snooze(math.inf)

    unchecked = tw.declare(app, forever, max_attempts=3)
    refused = tw.declare(app, infinite, max_attempts=1)
    with tw.worker_of(app) as worker:
        jobs = [tw.failure_of(unchecked.enqueue()), tw.failure_of(refused.enqueue())]
        wait_for(lambda: not tw.runner_of(worker).held, 10, "the worker to let the jobs go")
    assert jobs[0].error.kind == "WorkerError" and "snooze" in jobs[0].error.message
    assert jobs[1].error.kind == "InvalidArgument" and "snooze delay" in jobs[1].error.message


# --- heartbeats whose answer was lost -------------------------------------------------------------


@pytest.mark.parametrize("beats", [1, 3], ids=["ends-at-once", "runs-on"])
def test_a_heartbeat_whose_reply_was_lost_is_sent_again_with_its_call_id(
    app: App, monkeypatch: pytest.MonkeyPatch, beats: int
) -> None:
    """Redis renews the lease but the reply is lost: the heartbeat sent next is the same call
    (same call id), answered with the new token, so the lease holds and the job completes. A job
    that ends at once has its outcome wait for that answer (and its token)."""
    keeper_client = app.new_client()
    execute_many = keeper_client.execute_many
    sent: list[str] = []  # call ids of heartbeats, in order

    def losing_the_first_reply(calls: Any) -> list[Any]:
        results = execute_many(calls)
        beats = [call.call_id for call in calls if call.script.name == "heartbeat"]
        sent.extend(beats)
        if beats and len(sent) == len(beats):
            raise RedisUnavailable("reply lost")
        return results

    monkeypatch.setattr(keeper_client, "execute_many", losing_the_first_reply)
    monkeypatch.setattr(app, "new_client", lambda: keeper_client)
    runs: list[int] = []

    def slow() -> str:
        runs.append(current_job().attempt)
        wait_for(lambda: len(sent) >= beats, 15, "heartbeats")
        return "done"

    task = tw.declare(app, slow, lease_ms=600, max_attempts=1)
    try:
        with tw.worker_of(app, lease_ms=600) as worker:
            assert task.enqueue().result(timeout=20) == "done"
            assert worker.stats.lost == 0
    finally:
        keeper_client.redis.close()
    assert runs == [1]
    assert sent[0] == sent[1], "the heartbeat whose reply was lost went out as a new call"
    assert len(set(sent)) == len(sent) - 1


# --- errors that pass ----------------------------------------------------------------------------


def test_outcomes_refused_while_redis_is_out_of_memory_are_reported_once_it_has_room(
    private_server: RedisServer, namespace: str
) -> None:
    """Redis refuses every call (OOM) for a few seconds just as jobs finish, on 4 s leases: no
    finished result is dropped, none runs twice, no lease is lost."""
    made = App(private_server.url, namespace=namespace)
    admin = redis.Redis.from_url(private_server.url)
    gate = threading.Event()
    runs: Counter[int] = Counter()

    def held(n: int) -> int:
        runs[n] += 1
        gate.wait(20)
        return n

    task = tw.declare(made, held, lease_ms=4000, max_attempts=1)
    try:
        with tw.worker_of(made, lease_ms=4000, concurrency=5) as worker:
            handles = [task.enqueue(n) for n in range(5)]
            wait_for(lambda: sum(runs.values()) == 5, 10, "the jobs to start")
            admin.config_set("maxmemory", 1)
            gate.set()
            time.sleep(3)
            admin.config_set("maxmemory", 0)
            assert [handle.result(timeout=30) for handle in handles] == list(range(5))
            # (the worker counts an outcome when its reply is back, a moment after Redis
            # applied it and the results above could be read)
            wait_for(lambda: worker.stats.completed == 5, 10, "the worker to count its outcomes")
            assert worker.stats.lost == 0
    finally:
        admin.config_set("maxmemory", 0)
        delete_namespace(admin, namespace)
        admin.close()
        made.client.redis.close()
    assert runs == Counter(range(5))


def _refused(error: Exception) -> ProtocolError:
    """The error a client raises for ``error`` from Redis (``from`` it, as the clients do)."""
    try:
        raise ProtocolError(f"script error: {error}") from error
    except ProtocolError as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "can_pass"),
    [
        (RedisUnavailable("connection refused"), True),
        (_refused(rex.ResponseError("BUSY Redis is busy running a script.")), True),
        (
            _refused(rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")),
            True,
        ),
        (_refused(rex.ReadOnlyError("You can't write against a read only replica.")), True),
        (_refused(rex.ResponseError("CLUSTERDOWN The cluster is down")), True),
        (_refused(rex.ResponseError("MASTERDOWN Link with MASTER is down")), True),
        (_refused(rex.ResponseError("Function not found")), True),
        (_refused(rex.NoScriptError("No matching script.")), True),
        (_refused(rex.ResponseError("ERR wrong number of arguments")), False),
        (PermissionDenied("NOPERM"), False),
        (CorruptJobError("j", "no sq"), False),
    ],
)
def test_the_errors_that_can_pass(error: BaseException, can_pass: bool) -> None:
    assert passes(error) is can_pass


def test_outcomes_refused_by_a_busy_redis_are_sent_again_until_accepted(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each report and claim is refused BUSY a few times (the script never ran): the outcomes
    go out again, none is dropped, no job runs twice. Outcomes go out with a claim
    (``report_and_claim``, the worker's asyncio client) or through the lease keeper
    (``report_many``, its blocking client), as timing has it: both are refused."""
    client = app.new_client()
    refusals = Counter[str]()
    execute = AsyncQuasar.execute

    async def busy_claims(self: AsyncQuasar, call: Any) -> Any:
        if call.script.name.startswith("report") and refusals[call.script.name] < 3:
            refusals[call.script.name] += 1
            raise _refused(rex.ResponseError("BUSY Redis is busy running a script."))
        return await execute(self, call)

    monkeypatch.setattr(AsyncQuasar, "execute", busy_claims)

    def busy(send: Any) -> Any:
        def sending(calls: Any) -> Any:
            names = [c.script.name for c in (calls if isinstance(calls, list) else [calls])]
            name = next((n for n in names if n.startswith("report")), None)
            if name is not None and refusals[name] < 3:
                refusals[name] += 1
                raise _refused(rex.ResponseError("BUSY Redis is busy running a script."))
            return send(calls)

        return sending

    monkeypatch.setattr(client, "execute", busy(client.execute))
    monkeypatch.setattr(client, "execute_many", busy(client.execute_many))
    monkeypatch.setattr(app, "new_client", lambda: client)
    runs: Counter[int] = Counter()

    def quick(n: int) -> int:
        runs[n] += 1
        return n

    task = tw.declare(app, quick, max_attempts=1)
    try:
        with tw.worker_of(app, concurrency=4) as worker:
            handles = [task.enqueue(n) for n in range(8)]
            assert [handle.result(timeout=30) for handle in handles] == list(range(8))
            assert worker.stats.lost == 0
    finally:
        client.redis.close()
    assert runs == Counter(range(8))
    assert refusals["report_many"] + refusals["report_and_claim"] >= 3, refusals
