"""Many workers on one queue (real Redis only): every job runs to completion exactly once.

Workers claim (in batches and one at a time) and complete; every claim is recorded with its fence
and nonce, every completion with its outcome. The checks: every job claimed and completed, each by
exactly one applied completion whose fence is the job's final fence; no two leases of one job
overlap in server time; every refused completion was a stale one. First 8 threads over one shared
connection pool, then 4 processes (spawn) with a client each, then workers that oversleep their
short lease on some jobs so that another worker takes over.
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.synchronize
import time
import traceback
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from quasar_redis import (
    BatchApplied,
    Claim,
    ClaimApplied,
    ClaimsApplied,
    Job,
    JobApplied,
    LeaseExpired,
    NewJob,
    NothingClaimable,
    Quasar,
    StaleLease,
    Status,
)

from .helpers import REDIS_URL, delete_namespace, real_redis

pytestmark = pytest.mark.slow

JOBS = 5_000
THREADS = 8
PROCESSES = 4
BATCH = 16
LONG_LEASE = 120_000
WORKER_DEADLINE_S = 45.0
QUEUE = "work"


@dataclass(frozen=True)
class Claimed:
    """One lease a worker got."""

    job_id: str
    worker: str
    fence: int
    nonce: str
    attempt: int
    attempted_at: int
    expires_at: int

    @classmethod
    def of(cls, claim: Claim, worker: str) -> Claimed:
        job, token = claim.job, claim.token
        at = job.attempted_at or 0
        return cls(
            job.id, worker, token.fencing_version, token.nonce, job.attempt, at, token.expires_at
        )


@dataclass(frozen=True)
class Completion:
    """One completion a worker sent: ``error`` is None when it was applied."""

    job_id: str
    worker: str
    fence: int
    nonce: str
    error: str | None


@dataclass(frozen=True)
class Plan:
    """What one worker does. ``sleepy`` jobs make it oversleep their first lease."""

    namespace: str
    worker: str
    lease_ms: int
    total: int
    sleepy: frozenset[str] = frozenset()
    oversleep_s: float = 0.0
    wait_for_all: bool = False  # poll until every job is done (leases may still expire)


@dataclass
class Log:
    claims: list[Claimed] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)


# --- the worker -----------------------------------------------------------------------------------


def claim_some(q: Quasar, plan: Plan, turn: int) -> tuple[Claim, ...]:
    """A batch on odd turns, one job on even turns; () when nothing is claimable."""
    if turn % 2:
        many = q.claim_many(QUEUE, plan.worker, plan.lease_ms, BATCH)
        if isinstance(many, ClaimsApplied):
            return many.claims
        error = many.error
    else:
        one = q.claim(QUEUE, plan.worker, plan.lease_ms)
        if isinstance(one, ClaimApplied):
            return (one.claim,)
        error = one.error
    assert isinstance(error, NothingClaimable), error
    return ()


def finish(q: Quasar, plan: Plan, claim: Claim) -> Completion:
    if claim.job.attempt == 1 and claim.job.id in plan.sleepy:
        time.sleep(plan.oversleep_s)
    token = claim.token
    result = q.complete(token, plan.worker, result=plan.worker)
    if isinstance(result, JobApplied):
        return Completion(token.job_id, plan.worker, token.fencing_version, token.nonce, None)
    assert isinstance(result.error, StaleLease | LeaseExpired), result
    name = type(result.error).__name__
    return Completion(token.job_id, plan.worker, token.fencing_version, token.nonce, name)


def done(q: Quasar, plan: Plan) -> bool:
    return not plan.wait_for_all or q.counts(QUEUE).completed >= plan.total


def run_worker(q: Quasar, plan: Plan) -> Log:
    """Claim and complete until nothing is left to do."""
    log = Log()
    deadline = time.monotonic() + WORKER_DEADLINE_S
    turn = 0
    while time.monotonic() < deadline:
        turn += 1
        claims = claim_some(q, plan, turn)
        if not claims:
            if done(q, plan):
                return log
            time.sleep(0.005)
            continue
        log.claims.extend(Claimed.of(c, plan.worker) for c in claims)
        for c in sorted(claims, key=lambda c: c.job.id in plan.sleepy):  # oversleep last
            log.completions.append(finish(q, plan, c))
    raise AssertionError(f"worker {plan.worker} was still busy after {WORKER_DEADLINE_S} s")


def process_main(
    url: str,
    plan: Plan,
    start: multiprocessing.synchronize.Barrier,
    out: multiprocessing.Queue[Any],
) -> None:
    """Entry point of a spawned process: its own client, its own worker; the log goes to ``out``."""
    try:
        client = redis.Redis.from_url(url)
        try:
            start.wait(timeout=60)  # every process starts claiming at once
            out.put(run_worker(Quasar(client, plan.namespace), plan))
        finally:
            client.close()
    except BaseException:
        out.put(traceback.format_exc())


def run_processes(plans: Sequence[Plan]) -> list[Log]:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(len(plans)), ctx.Queue()
    procs = [ctx.Process(target=process_main, args=(REDIS_URL, p, start, out)) for p in plans]
    for proc in procs:
        proc.start()
    try:
        results = [out.get(timeout=WORKER_DEADLINE_S + 30) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        out.close()
        out.join_thread()
    failures = [r for r in results if not isinstance(r, Log)]
    assert not failures, "".join(failures)
    return [r for r in results if isinstance(r, Log)]


# --- checks ---------------------------------------------------------------------------------------


def finished_jobs(q: Quasar, total: int) -> dict[str, Job]:
    jobs: dict[str, Job] = {}
    for offset in range(0, total + 1, 1000):
        for job in q.list_jobs(QUEUE, Status.COMPLETED, offset=offset, limit=1000):
            jobs[job.id] = job
    return jobs


def check_leases(job: Job, claims: list[Claimed]) -> None:
    """Fences 1..n, attempt n, and each lease granted only after the one before ran out."""
    claims = sorted(claims, key=lambda c: c.fence)
    assert [c.fence for c in claims] == list(range(1, len(claims) + 1)), (job.id, claims)
    assert [c.attempt for c in claims] == list(range(1, len(claims) + 1)), (job.id, claims)
    assert (job.fencing_version, job.attempt) == (len(claims), len(claims)), (job, claims)
    for before, after in itertools.pairwise(claims):
        assert after.attempted_at >= before.expires_at, f"{job.id} leased twice at once: {claims}"


def check_completions(
    jobs: dict[str, Job], last: dict[str, Claimed], completions: Sequence[Completion]
) -> None:
    """One applied completion per job, under its last lease; the others were stale."""
    applied = [c for c in completions if c.error is None]
    assert Counter(c.job_id for c in applied) == Counter(set(jobs)), "each job completed once"
    for c in applied:
        assert c.fence == jobs[c.job_id].fencing_version, c
        assert (c.worker, c.nonce) == (last[c.job_id].worker, last[c.job_id].nonce), c
        assert jobs[c.job_id].result == c.worker, c
    for c in completions:
        if c.error is not None:
            assert c.fence < jobs[c.job_id].fencing_version, f"refused its last lease: {c}"


def check(q: Quasar, logs: Sequence[Log], ids: set[str]) -> tuple[list[Claimed], dict[str, Job]]:
    """Every invariant of the run; returns every claim and every job as it ended."""
    claims = [c for log in logs for c in log.claims]
    completions = [c for log in logs for c in log.completions]
    assert len({c.nonce for c in claims}) == len(claims), "a nonce was handed out twice"
    by_job: dict[str, list[Claimed]] = defaultdict(list)
    for c in claims:
        by_job[c.job_id].append(c)
    assert set(by_job) == ids, "some jobs were never claimed"
    jobs = finished_jobs(q, len(ids))
    assert set(jobs) == ids, f"{len(ids - set(jobs))} jobs did not end Succeeded"
    for job_id, job in jobs.items():
        check_leases(job, by_job[job_id])
    last = {job_id: max(claims, key=lambda c: c.fence) for job_id, claims in by_job.items()}
    check_completions(jobs, last, completions)
    counts = q.counts(QUEUE)
    assert counts.completed == len(ids)
    assert counts.available + counts.executing + counts.retryable + counts.discarded == 0, counts
    return claims, jobs


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def shared() -> Iterator[tuple[redis.Redis, str]]:
    """One connection pool for every thread, and a namespace of its own."""
    client = real_redis()
    namespace = f"t-conc-{uuid.uuid4().hex[:10]}"
    try:
        yield client, namespace
    finally:
        delete_namespace(client, namespace)
        client.close()


def fill(q: Quasar, total: int, max_attempts: int = 3) -> set[str]:
    ids = [f"job-{i:05d}" for i in range(total)]
    for start in range(0, total, 1000):
        chunk = ids[start : start + 1000]
        batch = [NewJob("work", i, id=i, queue=QUEUE, max_attempts=max_attempts) for i in chunk]
        assert isinstance(q.enqueue_many(batch), BatchApplied)
    return set(ids)


# --- tests ----------------------------------------------------------------------------------------


def test_threads_complete_every_job_exactly_once(shared: tuple[redis.Redis, str]) -> None:
    client, namespace = shared
    q = Quasar(client, namespace)
    ids = fill(q, JOBS)
    plans = [Plan(namespace, f"thread-{i}", LONG_LEASE, JOBS) for i in range(THREADS)]
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        logs = list(pool.map(lambda p: run_worker(Quasar(client, namespace), p), plans))
    claims, _ = check(q, logs, ids)
    assert len(claims) == JOBS, "no lease expired, so every job was claimed exactly once"
    assert {c.attempt for c in claims} == {1}
    assert sum(1 for log in logs if log.claims) > 1, "the work was not shared"


def test_processes_complete_every_job_exactly_once(shared: tuple[redis.Redis, str]) -> None:
    client, namespace = shared
    q = Quasar(client, namespace)
    ids = fill(q, JOBS)
    logs = run_processes([Plan(namespace, f"proc-{i}", LONG_LEASE, JOBS) for i in range(PROCESSES)])
    claims, _ = check(q, logs, ids)
    assert len(claims) == JOBS, "no lease expired, so every job was claimed exactly once"
    assert {c.attempt for c in claims} == {1}
    assert sum(1 for log in logs if log.claims) > 1, "the work was not shared"


def test_stale_workers_are_refused_and_another_takes_over(shared: tuple[redis.Redis, str]) -> None:
    client, namespace = shared
    q = Quasar(client, namespace)
    total = 200
    ids = fill(q, total, max_attempts=10)
    sleepy = frozenset(sorted(ids)[::12])  # 17 jobs whose first worker oversleeps
    plans = [
        Plan(namespace, f"thread-{i}", 300, total, sleepy, oversleep_s=0.45, wait_for_all=True)
        for i in range(4)
    ]
    with ThreadPoolExecutor(max_workers=len(plans)) as pool:
        logs = list(pool.map(lambda p: run_worker(Quasar(client, namespace), p), plans))
    claims, jobs = check(q, logs, ids)
    completions = [c for log in logs for c in log.completions]
    stale = {c.job_id for c in completions if c.error is not None}
    assert sleepy <= stale, "a worker that overslept its lease must be refused"
    for job_id in sleepy:
        assert jobs[job_id].attempt >= 2
    by_job: dict[str, set[str]] = defaultdict(set)
    for c in claims:
        by_job[c.job_id].add(c.worker)
    assert any(len(by_job[j]) > 1 for j in sleepy), "no other worker took over an expired lease"
