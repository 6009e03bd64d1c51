"""Worker processes under faults (real Redis, real ``quasar worker`` processes).

Each test starts ``python -m quasar_redis worker tests.worker_tasks:app`` processes on a namespace
of its own, kills, stops, continues or terminates them, and then checks the final state of every
job in Redis and the append-only log the tasks write (one line per attempt start and end, see
``worker_tasks``). Every wait is on a condition with a deadline; every process a test starts is
killed when it ends. The Redis-restart test runs a ``redis-server`` of its own (AOF, fsync always).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from quasar_redis import (
    BatchApplied,
    Cancelled,
    Failed,
    Job,
    Leased,
    NewJob,
    Quasar,
    QuasarError,
    Succeeded,
    Waiting,
)
from quasar_redis._call_codec import payload_of

from . import worker_tasks as wt
from .consistency import check
from .helpers import REDIS_URL, delete_namespace, real_redis
from .helpers import wait_for as wait_every
from .servers import RedisServer, server_in

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
APP_PATH = "tests.worker_tasks:app"
QUEUE = "default"
T = TypeVar("T")


# --- waiting -------------------------------------------------------------------------------------


def wait_for(check: Callable[[], T | None], timeout: float, what: str, every: float = 0.05) -> T:
    """``helpers.wait_for``, asking every 50 ms by default (the checks read logs and Redis)."""
    return wait_every(check, timeout, what, every)


# --- the tasks' log ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One line of the tasks' log: an attempt's start, or its end and how it ended."""

    event: str
    job: str
    attempt: int
    worker: str
    how: str = ""


def read_log(path: Path) -> list[Line]:
    """The complete lines of the log (a line still being written is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = []
    for raw in text.split("\n")[:-1]:
        parts = raw.split(" ")
        lines.append(Line(parts[0], parts[1], int(parts[2]), parts[3], " ".join(parts[4:])))
    return lines


def lines_of(lines: Sequence[Line], job_id: str) -> list[tuple[str, int, str, str]]:
    return [(x.event, x.attempt, x.worker, x.how) for x in lines if x.job == job_id]


# --- worker processes ----------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {self.name} did not exit in {timeout}s:\n{self.stderr()[-3000:]}")


@dataclass
class Fleet:
    """The worker processes of one test, on one Redis and namespace; ``close`` kills them all."""

    folder: Path
    url: str
    namespace: str
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.folder / "tasks.log"

    def log(self) -> list[Line]:
        return read_log(self.log_path)

    def start(
        self,
        name: str,
        *,
        lease_ms: int,
        concurrency: int = 4,
        grace: float = 5.0,
        prefetch: int | str = "auto",
    ) -> WorkerProcess:
        env = {
            **os.environ,
            "QUASAR_TEST_URL": self.url,
            "QUASAR_TEST_NS": self.namespace,
            "QUASAR_TEST_LOG": str(self.log_path),
            "QUASAR_TEST_WORKER": name,
        }
        args = [sys.executable, "-m", "quasar_redis", "worker", APP_PATH]
        args += ["--lease-ms", str(lease_ms), "--concurrency", str(concurrency)]
        args += ["--grace", str(grace), "--worker-id", f"{name}-{self.namespace}"]
        args += ["--prefetch", str(prefetch)]
        stderr_path = self.folder / f"{name}.stderr"
        with stderr_path.open("wb") as err:
            proc = subprocess.Popen(
                args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err
            )
        worker = WorkerProcess(name, proc, stderr_path)
        self.workers.append(worker)
        return worker

    def started(self, worker: WorkerProcess, timeout: float = 30.0) -> WorkerProcess:
        """Waits until ``worker`` logged that it runs."""

        def up() -> bool:
            if not worker.alive():
                pytest.fail(f"worker {worker.name} exited:\n{worker.stderr()[-3000:]}")
            return " started: queues " in worker.stderr()

        wait_for(up, timeout, f"worker {worker.name} to start")
        return worker

    def alive(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive()]

    def dead(self) -> list[WorkerProcess]:
        return [w for w in self.workers if not w.alive()]

    def keep_running(
        self, start: Callable[[str], WorkerProcess], count: int, done: Callable[[], bool]
    ) -> None:
        """Replaces each worker that dies (as a supervisor would) until ``done()``; 90 s at most."""
        deadline = time.monotonic() + 90
        while not done():
            if time.monotonic() >= deadline:
                pytest.fail("timed out after 90s with workers kept running")
            while len(self.alive()) < count:
                start(f"{len(self.workers) + 1}")
            time.sleep(0.05)

    def close(self) -> None:
        for worker in self.workers:
            if worker.alive():
                worker.signal(signal.SIGCONT)
                worker.signal(signal.SIGKILL)
        for worker in self.workers:
            worker.proc.wait(30)


@pytest.fixture
def fleet(tmp_path: Path, namespace: str) -> Iterator[Fleet]:
    client = real_redis()
    made = Fleet(tmp_path, REDIS_URL, namespace)
    try:
        yield made
    finally:
        made.close()
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture
def q(fleet: Fleet) -> Iterator[Quasar]:
    client = Quasar(redis.Redis.from_url(fleet.url), fleet.namespace)
    yield client
    client.redis.close()


# --- jobs ----------------------------------------------------------------------------------------


def new_job(stage: str, *args: Any, **options: Any) -> NewJob:
    return NewJob(stage=stage, payload=payload_of(args, {}), **options)


BATCH = 500


def enqueue(q: Quasar, jobs: Sequence[NewJob]) -> list[str]:
    """Enqueues ``jobs`` in batches of ``BATCH``; the ids, in order."""
    ids: list[str] = []
    for i in range(0, len(jobs), BATCH):
        result = q.enqueue_many(jobs[i : i + BATCH])
        assert isinstance(result, BatchApplied), result
        ids += [job.id for job in result.jobs]
    return ids


def get_jobs(q: Quasar, ids: Sequence[str]) -> dict[str, Job]:
    """Every job of ``ids`` (a few pipelines); fails on a missing one."""
    out: dict[str, Job] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        for job_id, info in zip(
            chunk, q.execute_many([q.calls.get_job(j) for j in chunk]), strict=True
        ):
            assert info is not None, f"job {job_id} was lost"
            out[job_id] = info.job
    return out


def job(q: Quasar, job_id: str) -> Job:
    info = q.get_job(job_id)
    assert info is not None, f"job {job_id} was lost"
    return info.job


def all_succeeded(q: Quasar, ids: Sequence[str]) -> bool:
    return all(isinstance(j.state, Succeeded) for j in get_jobs(q, ids).values())


def leased_by(q: Quasar, job_id: str) -> Leased:
    state = job(q, job_id).state
    assert isinstance(state, Leased), state
    return state


def started_by(fleet: Fleet, ids: Sequence[str], worker: str, attempt: int = 1) -> bool:
    seen = {(x.job, x.attempt, x.worker) for x in fleet.log() if x.event == "start"}
    return all((job_id, attempt, worker) in seen for job_id in ids)


# --- kill -9, SIGSTOP, SIGTERM -------------------------------------------------------------------


def test_kill_9_mid_job_runs_it_again_on_another_worker(fleet: Fleet, q: Quasar) -> None:
    lease = wt.SHORT_LEASE_MS
    a = fleet.started(fleet.start("A", lease_ms=lease, concurrency=3))
    ids = enqueue(q, [new_job("wt.hang_first") for _ in range(3)])
    wait_for(lambda: started_by(fleet, ids, "A"), 20, "A to start the 3 jobs")

    a.signal(signal.SIGKILL)
    assert a.wait_exit(10) == -signal.SIGKILL
    leases = {job_id: leased_by(q, job_id) for job_id in ids}  # as A left them
    assert all(lease.worker_id.startswith("A-") for lease in leases.values()), leases
    fleet.start("B", lease_ms=lease, concurrency=3)
    wait_for(lambda: all_succeeded(q, ids), 30, "every job to succeed on B")

    for job_id, done in get_jobs(q, ids).items():
        assert done.attempt == 2, done
        assert done.result == {"job": job_id, "attempt": 2, "worker": "B"}
        assert done.attempted_at is not None
        assert done.attempted_at >= leases[job_id].expires_at, "taken over before A's lease ended"
        assert lines_of(fleet.log(), job_id) == [
            ("start", 1, "A", ""),
            ("start", 2, "B", ""),
            ("end", 2, "B", "ok"),
        ]


def refusal(stderr: str, job_id: str) -> str | None:
    """How the stopped worker learned that ``job_id`` was no longer its own, if it did."""
    found = re.search(rf"job {job_id}: lease lost \((\w+)\)", stderr)
    return None if found is None else found.group(0)


def test_sigstop_past_the_lease_cannot_overwrite_the_takeover(
    fleet: Fleet, q: Quasar, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    lease = wt.SHORT_LEASE_MS
    a = fleet.started(fleet.start("A", lease_ms=lease, concurrency=2))
    x, y = enqueue(q, [new_job("wt.hang_first"), new_job("wt.gate_first_sync", str(gate))])
    wait_for(lambda: started_by(fleet, [x, y], "A"), 20, "A to start both jobs")

    a.signal(signal.SIGSTOP)
    fleet.started(fleet.start("B", lease_ms=lease, concurrency=2))
    wait_for(lambda: all_succeeded(q, [x, y]), 30, "B to take both jobs over and complete them")
    before = get_jobs(q, [x, y])
    gate.touch()  # A's first attempt of y finishes as soon as A runs again
    a.signal(signal.SIGCONT)

    refusals = wait_for(
        lambda: a.stderr() if all(refusal(a.stderr(), j) for j in (x, y)) else None,
        20,
        "A to be refused on both jobs",
    )
    assert all("(StaleLease)" in str(refusal(refusals, j)) for j in (x, y)), refusals
    assert "lease lost (StaleLease)" in str(refusal(refusals, x)), "x hangs: only a heartbeat"
    print(f"A was told: {refusal(refusals, x)!r}; {refusal(refusals, y)!r}")
    ends = {(x, 1, "A", "cancelled"), (y, 1, "A", "ok")}
    wait_for(
        lambda: ends <= {(e.job, e.attempt, e.worker, e.how) for e in fleet.log()},
        20,
        "A's first attempts to end (x cancelled, y finished late)",
    )
    after = get_jobs(q, [x, y])
    assert after == before, "the stopped worker's late calls changed a job"
    for job_id in (x, y):
        assert after[job_id].result == {"job": job_id, "attempt": 2, "worker": "B"}
        assert ("end", 2, "B", "ok") in lines_of(fleet.log(), job_id)
    a.signal(signal.SIGTERM)
    assert a.wait_exit(20) == 0, a.stderr()[-3000:]


def test_a_superseded_revisions_completion_is_refused_and_the_new_result_stands(
    fleet: Fleet, q: Quasar, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    lease = wt.LONG_LEASE_MS  # (no heartbeat comes before the end: A's completion is refused)
    a = fleet.started(fleet.start("A", lease_ms=lease, concurrency=1, prefetch=0))
    enqueue(q, [new_job("wt.revised", str(gate), id="r")])
    wait_for(lambda: started_by(fleet, ["r"], "A"), 20, "A to start revision 0")
    assert leased_by(q, "r").worker_id.startswith("A-")
    fleet.started(fleet.start("B", lease_ms=lease, concurrency=1, prefetch=0))
    enqueue(q, [new_job("wt.revised", "", id="r", input_revision=1)])  # A runs on, busy

    def succeeded() -> Job | None:
        found = job(q, "r")
        return found if isinstance(found.state, Succeeded) else None

    done = wait_for(succeeded, 30, "B to run revision 1")
    assert done.result == {"job": "r", "attempt": 1, "worker": "B", "revision": 1}

    gate.touch()  # A's run of revision 0 ends, and reports
    told = wait_for(lambda: refusal(a.stderr(), "r"), 20, "A's completion to be refused")
    assert told == "job r: lease lost (StaleLease)", a.stderr()[-3000:]
    assert (
        "job r: lease lost (StaleLease), input revision 1 replaced 0; "
        "its outcome from attempt 1 was refused" in a.stderr()
    ), a.stderr()[-3000:]
    assert lines_of(fleet.log(), "r") == [
        ("start", 1, "A", ""),
        ("start", 1, "B", ""),
        ("end", 1, "B", "ok"),
        ("end", 1, "A", "ok"),
    ]
    assert job(q, "r") == done  # B's result stands


def test_sigterm_finishes_running_jobs_and_hands_back_the_rest(
    fleet: Fleet, q: Quasar, tmp_path: Path
) -> None:
    g1, g2 = tmp_path / "g1", tmp_path / "g2"
    lease = wt.LONG_LEASE_MS
    finishing = enqueue(q, [new_job("wt.gated", str(g1)) for _ in range(2)])
    held = enqueue(q, [new_job("wt.gated", str(g2)), new_job("wt.gated_sync", str(g2))])
    queued = enqueue(q, [new_job("wt.quick", priority=5) for _ in range(6)])
    w1 = fleet.started(fleet.start("W1", lease_ms=lease, concurrency=4, grace=3.0))
    wait_for(lambda: started_by(fleet, finishing + held, "W1"), 20, "W1 to start 4 jobs")

    w1.signal(signal.SIGTERM)
    wait_for(lambda: "stopping: finishing 4" in w1.stderr(), 20, "W1 to take the signal")
    g1.touch()
    assert w1.wait_exit(30) == 0, w1.stderr()[-3000:]

    jobs = get_jobs(q, finishing + held + queued)
    for job_id in finishing:
        assert jobs[job_id].result == {"job": job_id, "attempt": 1, "worker": "W1"}
    for job_id in held + queued:
        assert isinstance(jobs[job_id].state, Waiting), jobs[job_id]
        assert jobs[job_id].attempt == 0, jobs[job_id]
    handed_back = re.findall(
        r"job (\w+) stage=\S+ attempt=1 status=available \(handed back\)", w1.stderr()
    )
    assert sorted(handed_back) == sorted(held)
    assert lines_of(fleet.log(), held[0]) == [("start", 1, "W1", ""), ("end", 1, "W1", "cancelled")]
    # The plain function sees its cancel flag within 10 ms, but the worker may exit before.
    assert lines_of(fleet.log(), held[1]) in (
        [("start", 1, "W1", "")],
        [("start", 1, "W1", ""), ("end", 1, "W1", "Interrupted")],
    )

    g2.touch()
    w2 = fleet.start("W2", lease_ms=lease, concurrency=4)
    ids = finishing + held + queued
    wait_for(lambda: all_succeeded(q, ids), 30, "W2 to run the rest")
    log = fleet.log()
    for job_id in ids:
        ok = [x for x in log if x.job == job_id and x.how == "ok"]
        assert len(ok) == 1, lines_of(log, job_id)
        assert ok[0].worker == ("W1" if job_id in finishing else "W2")
        assert job(q, job_id).attempt == 1
    w2.signal(signal.SIGTERM)
    assert w2.wait_exit(20) == 0, w2.stderr()[-3000:]


# --- a poison job --------------------------------------------------------------------------------


def ended(q: Quasar, job_id: str) -> bool:
    return isinstance(job(q, job_id).state, Failed | Succeeded | Cancelled)


def test_poison_job_ends_discarded_after_max_attempts(fleet: Fleet, q: Quasar) -> None:
    (poison,) = enqueue(q, [new_job("wt.poison", max_attempts=3)])

    def start(name: str) -> WorkerProcess:
        return fleet.start(f"P{name}", lease_ms=wt.SHORT_LEASE_MS, concurrency=2)

    fleet.keep_running(start, 2, lambda: ended(q, poison))
    done = job(q, poison)
    assert isinstance(done.state, Failed), done
    assert done.attempt == 3
    assert done.error is not None and "lease expired" in done.error.message, done.error

    # Each attempt killed the worker that ran it; the third is dead too (its lease expired).
    wait_for(lambda: len(fleet.dead()) >= 3, 20, "three dead workers")
    (sentinel,) = enqueue(q, [new_job("wt.quick_short")])
    wait_for(lambda: all_succeeded(q, [sentinel]), 30, "a live worker to run a healthy job")
    assert [x.attempt for x in fleet.log() if x.job == poison] == [1, 2, 3]
    assert [w.proc.returncode for w in fleet.dead()] == [-signal.SIGKILL] * 3, "ran again"
    assert job(q, poison) == done


# --- 10,000 jobs on 4 workers --------------------------------------------------------------------

MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Plan:
    """One job of the mix, and what its policy says must become of it."""

    index: int
    sync: bool
    fail_times: int
    permanent: bool
    sleep_ms: int
    deps: tuple[int, ...]
    cancel_on_failure: bool
    fate: str  # "succeeded" | "failed" | "blocked" | "cancelled"

    @property
    def id(self) -> str:
        return f"mix-{self.index:05d}"

    @property
    def attempts(self) -> int:
        """The attempts the job makes (its final ``attempt``)."""
        if self.fate == "succeeded":
            return self.fail_times + 1
        if self.fate == "failed":
            return 1 if self.permanent else MAX_ATTEMPTS
        return 0

    def job(self) -> NewJob:
        return new_job(
            "wt.mixed_sync" if self.sync else "wt.mixed",
            self.fail_times,
            self.permanent,
            self.sleep_ms,
            id=self.id,
            queue=QUEUE,
            max_attempts=MAX_ATTEMPTS,
            dependencies=[f"mix-{d:05d}" for d in self.deps],
            on_dependency_failure="cancel" if self.cancel_on_failure else "block",
        )


def fate_of(fail_times: int, permanent: bool, deps: Sequence[Plan], cancel: bool) -> str:
    """The final state the job's policy and its dependencies' fates give it."""
    dep_fates = {d.fate for d in deps}
    if "cancelled" in dep_fates or (cancel and "failed" in dep_fates):
        return "cancelled"
    if dep_fates - {"succeeded"}:
        return "blocked"
    return "failed" if permanent or fail_times >= MAX_ATTEMPTS else "succeeded"


def make_plans(n: int, seed: int) -> list[Plan]:
    """Jobs in batches of ``BATCH``; a job depends on earlier ones that are not cancelled (an
    enqueue depending on a cancelled job is refused), and a job cancelled on a dependency's
    failure depends only on jobs of its own batch (one depending on a job that has already
    failed is refused too)."""
    rng = random.Random(seed)
    plans: list[Plan] = []
    for i in range(n):
        fail_times = rng.choices([0, 1, 2, 3], weights=[70, 15, 8, 7])[0]
        permanent = rng.random() < 0.03
        sleep_ms = 0 if rng.random() < 0.7 else rng.randint(1, 20)
        cancel = rng.random() < 0.5
        first = i - i % BATCH if cancel else i - 300
        candidates = [p for p in plans[max(0, first) :] if p.fate != "cancelled"]
        deps: list[Plan] = []
        if candidates and rng.random() < 0.15:
            deps = rng.sample(candidates, min(len(candidates), rng.randint(1, 2)))
        fate = fate_of(fail_times, permanent, deps, cancel)
        sync = rng.random() < 0.25
        index_deps = tuple(d.index for d in deps)
        plans.append(Plan(i, sync, fail_times, permanent, sleep_ms, index_deps, cancel, fate))
    return plans


STATE_OF_FATE = {"succeeded": Succeeded, "failed": Failed, "cancelled": Cancelled}


def check_job(plan: Plan, got: Job) -> None:
    assert got.attempt == plan.attempts, (plan, got)
    if plan.fate == "blocked":
        assert isinstance(got.state, Waiting) and got.pending_dependencies > 0, (plan, got)
        return
    assert isinstance(got.state, STATE_OF_FATE[plan.fate]), (plan, got)
    if plan.fate == "succeeded":
        assert isinstance(got.result, dict) and got.result["attempt"] == got.attempt, got
    if plan.fate == "failed":
        assert got.error is not None, got
        assert got.error.kind == ("PermanentFailure" if plan.permanent else "Boom"), got.error


def check_log(plan: Plan, lines: Sequence[Line]) -> None:
    """One start and one end per attempt; one ``ok`` end, the last attempt's, if it succeeded."""
    starts = [x.attempt for x in lines if x.event == "start"]
    ends = [(x.attempt, x.how) for x in lines if x.event == "end"]
    assert sorted(starts) == list(range(1, plan.attempts + 1)), (plan, lines)
    hows = dict(ends)
    assert len(hows) == len(ends) == len(starts), (plan, lines)
    failing = "PermanentFailure" if plan.permanent else "Boom"
    expected = {a: failing for a in starts}
    if plan.fate == "succeeded":
        expected[plan.attempts] = "ok"
    assert hows == expected, (plan, lines)


def expected_counts(plans: Sequence[Plan]) -> dict[str, int]:
    fates = Counter(p.fate for p in plans)
    return {
        "completed": fates["succeeded"],
        "discarded": fates["failed"],
        "cancelled": fates["cancelled"],
        "blocked": fates["blocked"],
        "available": 0,  # a blocked job is counted as blocked only
        "scheduled": 0,
        "retryable": 0,
        "executing": 0,
    }


def counts_now(q: Quasar) -> dict[str, int]:
    c = q.counts(QUEUE)
    names = ("completed", "discarded", "cancelled", "blocked", "available", "scheduled")
    return {n: getattr(c, n) for n in (*names, "retryable", "executing")}


@pytest.mark.parametrize("prefetch", [0, "auto"])
def test_four_workers_run_10000_jobs_as_their_policies_say(
    fleet: Fleet, q: Quasar, prefetch: int | str
) -> None:
    # Without prefetch, and with the default ("auto": with these short jobs, up to 16 waiting
    # for a slot, two claims in flight per worker).
    plans = make_plans(10_000, seed=3)
    expected = expected_counts(plans)
    assert min(expected[k] for k in ("completed", "discarded", "cancelled", "blocked")) > 0
    workers = [
        fleet.start(f"M{i}", lease_ms=wt.LONG_LEASE_MS, concurrency=16, prefetch=prefetch)
        for i in range(4)
    ]
    for worker in workers:
        fleet.started(worker)
    started = time.monotonic()
    enqueue(q, [p.job() for p in plans])  # while the workers run
    wait_for(lambda: counts_now(q) == expected, 150, f"the counts {expected}", every=0.25)
    elapsed = time.monotonic() - started

    jobs = get_jobs(q, [p.id for p in plans])
    by_job: dict[str, list[Line]] = defaultdict(list)
    log = fleet.log()
    for line in log:
        by_job[line.job].append(line)
    for plan in plans:
        check_job(plan, jobs[plan.id])
        check_log(plan, by_job.get(plan.id, []))
    assert len(by_job) == len([p for p in plans if p.attempts])
    attempts = sum(j.attempt for j in jobs.values())
    assert len([x for x in log if x.event == "start"]) == attempts

    for worker in workers:
        worker.signal(signal.SIGTERM)
    assert [w.wait_exit(30) for w in workers] == [0] * 4
    stderr = "".join(w.stderr() for w in workers)
    outcomes = re.findall(r"job (\S+) stage=\S+ attempt=(\d+) status=(\S+)", stderr)
    assert len(outcomes) == attempts, "every attempt's outcome is reported once"
    completed = Counter(job_id for job_id, _, how in outcomes if how == "completed")
    assert set(completed.values()) == {1} and len(completed) == expected["completed"]
    assert "refused" not in stderr and "lease lost" not in stderr
    report = check(q.redis, fleet.namespace)
    assert report.ok, report
    print(f"10,000 jobs, {attempts} attempts on 4 workers in {elapsed:.1f}s")


# --- Redis restarted under load ------------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with server_in(tmp_path / "redis", durable=True) as server:
        yield server


@pytest.mark.parametrize("prefetch", [0, "auto"])
def test_redis_restart_under_load_loses_no_acknowledged_job(
    own_redis: RedisServer, tmp_path: Path, namespace: str, prefetch: int | str
) -> None:
    own_redis.start()
    fleet = Fleet(tmp_path, own_redis.url, namespace)
    q = Quasar(redis.Redis.from_url(own_redis.url), namespace)
    try:
        run_through_restart(own_redis, fleet, q, prefetch)
    finally:
        fleet.close()
        q.redis.close()


def finished(q: Quasar, count: int) -> bool:
    """Whether ``count`` jobs of the queue have finished (Redis may be down: then not)."""
    try:
        c = q.counts(QUEUE)
    except QuasarError:
        return False
    return c.completed + c.discarded + c.cancelled >= count


def run_through_restart(server: RedisServer, fleet: Fleet, q: Quasar, prefetch: int | str) -> None:
    gate = fleet.folder / "gate"

    def start(name: str) -> WorkerProcess:
        return fleet.start(f"R{name}", lease_ms=wt.LONG_LEASE_MS, concurrency=16, prefetch=prefetch)

    # Both serve before the kill: a worker still starting when Redis goes away only comes up
    # once it is back, and may find the work done by then.
    survivors = [fleet.started(w) for w in (start("1"), start("2"))]
    # Jobs that hold their lease across the restart: the kill is under load, whatever the speed.
    held = enqueue(q, [new_job("wt.gated", str(gate), priority=-1) for _ in range(8)])
    acknowledged = held + enqueue(q, [new_job("wt.quick") for _ in range(1000)])
    wait_for(lambda: finished(q, 200), 60, "the workers to get going")
    wait_for(lambda: {x.job for x in fleet.log() if x.event == "start"} >= set(held), 30, "held")

    server.kill(signal.SIGKILL)
    with pytest.raises(QuasarError):
        q.enqueue_many([new_job("wt.quick", id=f"unacknowledged-{i}") for i in range(10)])
    server.start()
    mark = len(fleet.log())
    start("3")  # never saw Redis go away: the jobs get done whatever becomes of R1 and R2
    acknowledged += enqueue(q, [new_job("wt.quick") for _ in range(1000)])
    gate.touch()
    fleet.keep_running(start, 3, lambda: finished(q, len(acknowledged)))

    assert all_succeeded(q, acknowledged)
    assert all(q.get_job(f"unacknowledged-{i}") is None for i in range(10))
    assert {x.job for x in fleet.log() if x.how == "ok"} == set(acknowledged)
    for worker in fleet.alive():
        fleet.started(worker).signal(signal.SIGTERM)  # (a worker still starting would just die)
    codes = {w.name: w.wait_exit(30) for w in fleet.workers}
    assert all(codes[w.name] == 0 for w in fleet.workers if w not in survivors), codes
    after = {x.worker for x in fleet.log()[mark:] if x.how == "ok"}
    for worker in survivors:
        check_reconnected(worker, after)
    report = check(q.redis, fleet.namespace)
    assert report.ok, report


def check_reconnected(worker: WorkerProcess, worked_after: set[str]) -> None:
    """A worker that lived through the Redis restart ran jobs after it and stopped cleanly."""
    stderr = worker.stderr()
    assert "Traceback" not in stderr, (
        f"{worker.name} died or hung when Redis restarted. If the traceback ends in the wake-up "
        "push (AsyncQuasar.wake): BUG (worker._claiming.Background.wake), the wake-up push "
        "after a full claim batch fails outside the claim loop's QuasarError handling (shown "
        "every time by test_worker.py::test_claim_loop_survives_a_failed_wake_up; here it "
        f"depends on where the kill lands):\n{stderr[-3000:]}"
    )
    assert worker.proc.returncode == 0, f"{worker.name} exited badly:\n{stderr[-3000:]}"
    assert worker.name in worked_after, f"{worker.name} ran no job after the restart"
