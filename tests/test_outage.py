"""Finished jobs and a short Redis outage (real Redis, real ``quasar worker`` processes).

A worker's jobs finish and their outcomes go out; the outage begins just as the first of them
would reach Redis (the proxy's hook on the report call: the jobs have run and recorded it, their
outcomes are pending). A finished job's lease is renewed while its outcome waits, and no try
waits past the lease's end, so an outage shorter than two thirds of the lease less 0.1 s (1.9 s
on a 3 s lease, docs/workers.md) runs no finished job twice; one longer than the lease runs each
again, and loses none. "Ran" is what the tasks wrote to their own log, one line per start. Each
outage is timed from the moment it began and measured: a round whose outage the machine stretched
(the test's own thread ran late to end it) is not counted, and another runs in its place.

The outages: a proxy that cuts every connection and refuses new ones, and a full Redis
(``maxmemory`` reached, ``noeviction``) on a server of the test's own, whose heartbeats still run
(``allow-oom``) while the outcomes are refused.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from quasar_redis import Quasar, Succeeded

from . import worker_tasks as wt
from .helpers import delete_namespace, real_redis, url_of
from .proxy import Proxy, has
from .servers import RedisServer, server_in
from .test_redis_full import fill, room
from .test_worker_processes import Fleet, enqueue, get_jobs, new_job, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

JOBS = 5
#: Inside the bound of a 3 s lease (1.9 s), with room for a loaded machine's scheduling delays
#: (docs/workers.md, "The bound"), and past the lease itself.
INSIDE_S = 1.5
PAST_S = 4.5
#: On a 4 s lease, Redis full for this long (its heartbeats run all along).
FULL_S = 3.0
#: A round whose outage the machine stretched (the test's own thread ran late to end it) by more
#: than this is not counted, and another runs in its place; at most LATE_ROUNDS of them.
LATE_S = 0.15
LATE_ROUNDS = 10


class Outage:
    """A worker behind a proxy, the test's own client straight to Redis, and the fault: what
    starts it (from the proxy's thread, just before a report call is forwarded) and ends it."""

    def __init__(self, fleet: Fleet, proxy: Proxy, q: Quasar, begin: Callable[[], None]) -> None:
        self.fleet, self.proxy, self.q, self.begin = fleet, proxy, q, begin
        self.rounds = 0
        self.placed: list[list[str]] = []  # each round's jobs, if its outage was as long as meant
        self.lengths: list[float] = []  # each round's outage, as it was

    def run(self, stage: str, lease_s: float, outage_s: float, end: Callable[[], None]) -> None:
        """One round: JOBS jobs run; once every one has started, their gate opens at a moment
        that moves with the round through a third of the lease (where its renewal falls); the
        outage begins with their first report and lasts ``outage_s``, timed from the moment it
        began (``lengths``: as it was; a round whose outage the machine stretched by more than
        LATE_S is not ``placed``); then every job ends Succeeded."""
        self.rounds += 1
        gate = self.fleet.folder / f"gate-{self.rounds}"
        jobs = [new_job(stage, str(gate), id=f"r{self.rounds}-{i}") for i in range(JOBS)]
        ids = enqueue(self.q, jobs)
        wait_for(lambda: self._logged("start", ids), 30, "the jobs to start")
        started = time.monotonic()
        began: list[float] = []
        begun = threading.Event()

        def begin() -> None:
            self.begin()
            began.append(time.monotonic())
            begun.set()

        self.proxy.before_next(has(b"report"), begin)
        offset = (self.rounds % 10) / 10 * lease_s / 3
        time.sleep(max(0.0, started + offset - time.monotonic()))  # the moment, not a wait
        gate.touch()
        if not begun.wait(30):
            pytest.fail("no outcome was reported")
        wait_for(lambda: self._logged("end", ids), 10, "the tasks to record their ends")
        time.sleep(max(0.0, began[0] + outage_s - time.monotonic()))  # the outage's length
        end()
        length = time.monotonic() - began[0]
        self.lengths.append(round(length, 3))
        if length <= outage_s + LATE_S:
            self.placed.append(ids)
        wait_for(lambda: self._succeeded(ids), 60, "every job to succeed")

    def rounds_placed(self, count: int, run: Callable[[], None]) -> None:
        """``run`` rounds until ``count`` of them had the outage meant (at most LATE_ROUNDS
        more: a machine that stretches more than that fails the test)."""
        while len(self.placed) < count:
            if self.rounds - len(self.placed) > LATE_ROUNDS:
                pytest.fail(f"the outage ran late in too many rounds: {self.lengths}")
            run()

    def placed_starts(self) -> Counter[str]:
        """How many times each job of the rounds ``placed`` started."""
        jobs = {job for ids in self.placed for job in ids}
        return Counter(job for job in self.starts().elements() if job in jobs)

    def check_placed(self, count: int) -> None:
        """Every job of the rounds ``placed`` started once: else the worker's log (its retries,
        with their times) and each round's outage, to see where the time went."""
        starts = self.placed_starts()
        twice = sorted(job for job, n in starts.items() if n > 1)
        worker = "".join(w.stderr()[-6000:] for w in self.fleet.workers)
        assert not twice, f"ran twice: {twice}; outages (s): {self.lengths}\n{worker}"
        assert len(starts) == count * JOBS

    def _logged(self, event: str, ids: list[str]) -> bool:
        seen = {line.job for line in self.fleet.log() if line.event == event}
        return seen >= set(ids)

    def _succeeded(self, ids: list[str]) -> bool:
        return all(isinstance(j.state, Succeeded) for j in get_jobs(self.q, ids).values())

    def starts(self) -> Counter[str]:
        """How many times each job started, by the tasks' own log."""
        return Counter(line.job for line in self.fleet.log() if line.event == "start")


def _proxy_to(client: redis.Redis) -> Proxy:
    kwargs = client.connection_pool.connection_kwargs
    return Proxy(kwargs["host"], int(kwargs["port"])).start()


@contextlib.contextmanager
def _worker_behind(
    tmp_path: Path, namespace: str, server: redis.Redis, lease_ms: int, begin: Callable[[], None]
) -> Iterator[Outage]:
    """A worker process on ``server`` through a proxy, started and ready for rounds."""
    proxy = _proxy_to(server)
    fleet = Fleet(tmp_path, f"redis://127.0.0.1:{proxy.port}/0", namespace)
    q = Quasar(redis.Redis.from_url(url_of(server)), namespace)
    try:
        fleet.started(fleet.start("w1", lease_ms=lease_ms, concurrency=JOBS, prefetch=0))
        yield Outage(fleet, proxy, q, begin)
    finally:
        fleet.close()
        proxy.close()
        delete_namespace(q.redis, namespace)
        q.redis.close()


def test_an_outage_inside_the_bound_runs_no_finished_job_twice(
    tmp_path: Path, namespace: str
) -> None:
    """20 rounds of 5 jobs, each round's outage (1.5 s, connections refused) beginning as their
    outcomes go out, at a moment that moves through the lease's renewal period: none runs twice,
    every one succeeds."""
    server = real_redis()
    with _worker_behind(tmp_path, namespace, server, wt.OUTAGE_LEASE_MS, lambda: None) as out:
        out.begin = out.proxy.refuse
        lease_s = wt.OUTAGE_LEASE_MS / 1000
        admit = out.proxy.admit
        out.rounds_placed(20, lambda: out.run("wt.gated_outage", lease_s, INSIDE_S, admit))
        print(f"\noutages (s): {out.lengths}")
        out.check_placed(20)
    server.close()


def test_an_outage_past_the_lease_runs_the_finished_jobs_again_and_loses_none(
    tmp_path: Path, namespace: str
) -> None:
    """The same with a 4.5 s outage on a 3 s lease: the leases end in Redis meanwhile, each job
    runs again (at least once delivery) and ends Succeeded."""
    server = real_redis()
    with _worker_behind(tmp_path, namespace, server, wt.OUTAGE_LEASE_MS, lambda: None) as out:
        out.begin = out.proxy.refuse
        out.run("wt.gated_outage", wt.OUTAGE_LEASE_MS / 1000, PAST_S, out.proxy.admit)
        assert out.starts() == Counter({f"r1-{i}": 2 for i in range(JOBS)})
    server.close()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    with server_in(tmp_path / "redis", durable=False) as server:
        server.start()
        yield server


def test_redis_full_for_3s_on_a_4s_lease_runs_no_finished_job_twice(
    tmp_path: Path, namespace: str, own_server: RedisServer
) -> None:
    """20 rounds of 5 jobs, Redis full (OOM refusals) for 3 s from their first report: the
    heartbeats run on a full Redis, the outcomes go in once it has room; none runs twice."""
    admin = redis.Redis.from_url(own_server.url)
    try:
        with _worker_behind(
            tmp_path, namespace, admin, wt.FULL_LEASE_MS, lambda: fill(admin)
        ) as out:
            lease_s = wt.FULL_LEASE_MS / 1000
            out.rounds_placed(
                20, lambda: out.run("wt.gated_full", lease_s, FULL_S, lambda: room(admin))
            )
            print(f"\noutages (s): {out.lengths}")
            out.check_placed(20)
    finally:
        room(admin)
        admin.close()
