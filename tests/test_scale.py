"""At scale, no call holds Redis longer than a stated bound, and memory per job stays under a
stated figure: 100,000 dependents of one job (cancel, failure with the cancel policy, completion)
and 1,000,000 jobs (pages by cursor, the offset's cap, counts, claims, reports, sweeps, prune).

Every duration is Redis's own (SLOWLOG, every command logged), on a redis-server of this module's
own: SLOWLOG and CONFIG SET are server-wide. Setting the jobs up (bulk enqueues of 1,000 jobs, a
bound of their own) is not held to the bound of the calls under test. The bound, BOUND_MS, is
docs/redis-layout.md's "Bounds" (10 ms on a 2-core machine shared with other work).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from quasar_redis import (
    CancelApplied,
    Complete,
    InvalidArgument,
    JobApplied,
    NewJob,
    OutcomeApplied,
    Quasar,
    Status,
)

from .helpers import T0, real_redis
from .servers import RedisServer, server_in

pytestmark = pytest.mark.heavy

#: How long one call may hold Redis (docs/redis-layout.md, "Bounds"): its CPU time, and the
#: SLOWLOG threshold.
BOUND_MS = 10.0
#: What SLOWLOG's wall time may show on a 2-core machine running other work beside the test
#: (docs/redis-layout.md, "Bounds": Redis descheduled in the middle of a call).
WALL_MS = 500.0
#: The batch of the calls under test (a worker's maintenance batch).
SIZE = 100
#: Memory per Waiting job, 100-byte payload, 16-character ids (docs/redis-layout.md, "Memory").
BYTES_PER_JOB_MAX = 450
FAN_OUT = 100_000
JOBS = 1_000_000
BATCH = 1_000
PIPELINE = 10  # enqueue calls per round trip
PAYLOAD = "x" * 100


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with server_in(Path(tmp_path_factory.mktemp("scale-redis")), durable=False) as server:
        server.start()
        yield server


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[redis.Redis]:
    client = real_redis(server.url)
    client.config_set("slowlog-max-len", 10_000)
    client.config_set("slowlog-log-slower-than", round(BOUND_MS * 1000))
    yield client
    client.close()


def cpu_ms(client: redis.Redis) -> float:
    """The CPU time Redis's main thread has used (INFO cpu), in ms."""
    info = client.info("cpu")
    return float(info["used_cpu_user_main_thread"] + info["used_cpu_sys_main_thread"]) * 1000


def enqueue_all(q: Quasar, jobs: Callable[[int], list[NewJob]], n: int) -> None:
    """``n`` jobs, ``jobs(start)`` making the batch from ``start``; PIPELINE calls a round trip."""
    calls = []
    for start in range(0, n, BATCH):
        calls.append(q.calls.enqueue_many(jobs(start), T0, ids_only=True))
        if len(calls) == PIPELINE or start + BATCH >= n:
            for result in q.execute_many(calls):
                assert result.ids, result
            calls = []


def measured(client: redis.Redis, q: Quasar, what: str, run: Callable[[], Any]) -> Any:
    """``run()``'s result, once Redis has shown that none of the calls ``q`` sent meanwhile held
    it BOUND_MS: by the CPU time its main thread spent on each (INFO cpu around each call: what
    the call itself costs, whatever else the machine runs) and by SLOWLOG (wall time, every
    command of BOUND_MS or more logged: on a loaded machine Redis may be descheduled in the
    middle of a short call, so those are held to WALL_MS only). Prints what it saw."""
    send, spent, names = q._send, [], []

    def metered(command: Any) -> Any:
        before = cpu_ms(client)
        try:
            return send(command)
        finally:
            spent.append(cpu_ms(client) - before)
            names.append(str(command[1]).rsplit("_", 1)[-1])

    client.slowlog_reset()
    q._send, started = metered, time.monotonic()
    try:
        result = run()
    finally:
        q._send = send
    took = time.monotonic() - started
    slow = [e["duration"] / 1000 for e in client.slowlog_get(10_000) if b"FCALL" in e["command"]]
    print(
        f"\n{what}: {len(spent)} calls in {took:.1f} s; CPU per call: the most "
        f"{max(spent):.2f} ms, mean {sum(spent) / len(spent):.2f} ms; SLOWLOG: {len(slow)} calls "
        f"of {BOUND_MS:.0f} ms or more (wall), the longest {max(slow, default=0):.1f} ms"
    )
    worst = sorted(zip(spent, names, strict=True), reverse=True)[:3]
    print("  the most CPU: " + ", ".join(f"{name} {ms:.2f} ms" for ms, name in worst))
    assert max(spent) < BOUND_MS, f"{what}: a call took {max(spent):.1f} ms of Redis's CPU"
    assert max(slow, default=0) < WALL_MS, f"{what}: a call held Redis {max(slow):.1f} ms"
    return result


def fan_out(q: Quasar, policy: str) -> None:
    q.enqueue("s", id="root", now=T0)
    enqueue_all(
        q,
        lambda start: (
            [
                NewJob("s", dependencies=["root"], on_dependency_failure=policy)  # type: ignore[arg-type]
            ]
            * BATCH
        ),
        FAN_OUT,
    )


def test_a_cancel_over_100000_dependents_is_cut_in_bounded_steps(client: redis.Redis) -> None:
    q = Quasar(client, "cancel")
    fan_out(q, "block")
    result = measured(client, q, "cancel, 100,000 dependents", lambda: q.cancel("root", now=T0 + 1))
    assert isinstance(result, CancelApplied) and len(set(result.cascaded)) == FAN_OUT
    counts = q.counts("default", now=T0 + 1)
    assert (counts.cancelled, counts.blocked) == (FAN_OUT + 1, 0)
    assert not client.exists(q.keys.root + "cascades")


@pytest.mark.parametrize("outcome", ["permanent_fail", "complete"])
def test_an_outcome_over_100000_dependents_is_cut_in_bounded_steps(
    client: redis.Redis, outcome: str
) -> None:
    """A failure cancelling 100,000 dependents that asked for it; a completion releasing them."""
    q = Quasar(client, outcome)
    fan_out(q, "cancel" if outcome == "permanent_fail" else "block")
    token = q.claim_job("root", "w", 600_000, now=T0).claim.token  # type: ignore[union-attr]
    if outcome == "permanent_fail":
        run, expected = lambda: q.permanent_fail(token, "w", "boom", now=T0 + 1), (FAN_OUT, 0, 0)
    else:
        run, expected = lambda: q.complete(token, "w", now=T0 + 1), (0, FAN_OUT, 0)
    result = measured(client, q, f"{outcome}, 100,000 dependents", run)
    assert isinstance(result, JobApplied)
    counts = q.counts("default", now=T0 + 1)
    assert (counts.cancelled, counts.available, counts.blocked) == expected


@pytest.fixture(scope="module")
def million(client: redis.Redis) -> Iterator[Quasar]:
    """1,000,000 Waiting jobs (100-byte payloads, generated 16-character ids) in one queue."""
    q = Quasar(client, "million")
    before = int(client.info("memory")["used_memory"])
    started = time.monotonic()
    enqueue_all(q, lambda start: [NewJob("s", PAYLOAD)] * BATCH, JOBS)
    took = time.monotonic() - started
    per_job = (int(client.info("memory")["used_memory"]) - before) / JOBS
    print(f"enqueued {JOBS:,} jobs in {took:.1f} s: {per_job:.0f} bytes per job")
    q.per_job = per_job  # type: ignore[attr-defined]
    yield q


def test_memory_per_job_over_1000000_jobs(million: Quasar) -> None:
    per_job: float = million.per_job  # type: ignore[attr-defined]
    assert million.counts("default", now=T0).available == JOBS
    assert per_job < BYTES_PER_JOB_MAX, f"{per_job:.0f} bytes per job"


def inspect(q: Quasar, now: int) -> None:
    """counts, a page by offset at its cap (and one past it, refused), 200 pages by cursor."""
    assert q.counts("default", now=now).available == JOBS
    assert len(q.list_jobs("default", Status.AVAILABLE, offset=1000, limit=100, now=now)) == 100
    with pytest.raises(InvalidArgument):
        q.list_jobs("default", Status.AVAILABLE, offset=1001, limit=100, now=now)
    seen, cursor = 0, None
    for _ in range(200):  # the first 20,000, by cursor
        page = q.page_jobs("default", Status.AVAILABLE, after=cursor, limit=100, now=now)
        seen, cursor = seen + len(page.jobs), page.next_cursor
    assert seen == 20_000 and cursor is not None


def work(q: Quasar, now: int) -> None:
    """20,000 claims by 100, their outcomes reported by 100, 10,000 more claims left to expire,
    producers' batches of 100 meanwhile; then sweeps and prunes by SIZE."""
    for i in range(300):
        claims = q.claim_many("default", "w", 10 if i >= 200 else 600_000, 100, now=now)
        if i < 200:
            outcomes = [Complete(c.token) for c in claims.claims]  # type: ignore[union-attr]
            results = q.report_many("w", outcomes, now=now)
            assert all(isinstance(r, OutcomeApplied) for r in results)
        if i % 30 == 0:
            assert q.enqueue_many([NewJob("s", PAYLOAD)] * 100, ids_only=True, now=now).ids  # type: ignore[union-attr]
    expired = 0
    while len(report := q.sweep_expired(limit=SIZE, now=now + 10).expired) == SIZE:
        expired += SIZE
    assert expired + len(report) == 10_000
    pruned = 0
    while n := q.prune(max_age_ms=0, limit=SIZE, now=now + 120_000):
        pruned += n
    assert pruned == 20_000


def test_calls_over_1000000_jobs_stay_within_their_bound(
    client: redis.Redis, million: Quasar
) -> None:
    q, now = million, T0 + 1
    measured(client, q, "counts, list_jobs, 200 pages", lambda: inspect(q, now))
    measured(
        client, q, "30,000 claims, 20,000 outcomes, enqueues, sweeps, prunes", lambda: work(q, now)
    )
    counts = q.counts("default", now=now + 120_000)
    assert (counts.completed, counts.retryable) == (0, 10_000)
    # an offset deep into an index of one status: a rank, O(log N)
    measured(
        client,
        q,
        "an offset deep in",
        lambda: q.list_jobs("default", Status.RETRYABLE, offset=9_900, now=now),
    )
