"""Flow control under a fleet of worker processes (real Redis, real ``quasar worker`` processes):
fair turns between groups, a group's rate and the concurrency caps, read back from the event
stream.

Each test enqueues its jobs on a namespace of its own, sets its limits, then starts
``python -m quasar_redis worker tests.flow_tasks:app`` processes. The event stream is read while
the workers run (it is trimmed: a reader that fell behind what the stream still holds fails the
test rather than miss a start). An entry of the stream is one script's run of one event; the
scripts run one at a time, so the order of the stream is the order in which the jobs started,
and a job's executing event is its lease's start. Every process a test starts is killed when it
ends, and the namespace's keys are deleted (never FLUSHDB: the server may be shared).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from quasar_redis import UNLIMITED, BatchApplied, Leased, NewJob, Quasar, Rate, Succeeded
from quasar_redis._call_codec import payload_of

from . import flow_tasks as ft
from .helpers import REDIS_URL, delete_namespace, real_redis, wait_for

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parent.parent
APP_PATH = "tests.flow_tasks:app"
QUEUE = "default"
BATCH = 1000


# --- the event stream ----------------------------------------------------------------------------


def stream_id(raw: bytes | str) -> tuple[int, int]:
    ms, seq = (raw.decode() if isinstance(raw, bytes) else raw).split("-")
    return int(ms), int(seq)


@dataclass(frozen=True)
class Event:
    """One job's event: the stream entry's time (ms), the job and the status it entered."""

    ms: int
    job: str
    ev: str


@dataclass
class EventReader:
    """Reads the events that come after those the stream held when it was made, in order.

    Each read is one transaction of XINFO STREAM and XRANGE: when the stream no longer holds the
    last entry read (nor anything older), entries after it may have been trimmed unread, and the
    test fails rather than count from a partial stream."""

    client: redis.Redis
    key: str
    events: list[Event] = field(default_factory=list)
    last: tuple[int, int] = (0, 0)
    started: set[str] = field(default_factory=set)  # the jobs with an executing event
    first_start_ms: int | None = None

    def __post_init__(self) -> None:
        self.last = stream_id(self.client.xinfo_stream(self.key)["last-generated-id"])

    def read(self) -> list[Event]:
        pipe = self.client.pipeline(transaction=True)
        pipe.xinfo_stream(self.key)
        pipe.xrange(self.key, min=f"({self.last[0]}-{self.last[1]}", max="+")
        info, entries = pipe.execute()
        first = info["first-entry"]
        gone = first is None or stream_id(first[0]) > self.last  # the last entry read is gone
        if gone and stream_id(info["last-generated-id"]) > self.last:
            pytest.fail(f"the event stream was trimmed past {self.last} before it was read")
        for raw_id, fields in entries:
            self.last = stream_id(raw_id)
            if b"job" not in fields:  # a queue's event (paused, resumed)
                continue
            ev = fields[b"ev"].decode()
            for job in fields[b"job"].decode().split(" "):
                self.events.append(Event(self.last[0], job, ev))
                if ev == "executing":
                    self.started.add(job)
                    if self.first_start_ms is None:
                        self.first_start_ms = self.last[0]
        return self.events

    def starts(self) -> list[Event]:
        return [e for e in self.events if e.ev == "executing"]


# --- worker processes ----------------------------------------------------------------------------


@dataclass
class Fleet:
    """The worker processes of one test; ``close`` kills those still running."""

    folder: Path
    namespace: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    app: str = APP_PATH  # the workers' app

    def worker_id(self, name: str) -> str:
        return f"{name}-{self.namespace}"

    def stderr(self, name: str) -> str:
        return (self.folder / f"{name}.stderr").read_text(errors="replace")

    def start(self, name: str, *, concurrency: int, lease_ms: int) -> None:
        env = {**os.environ, "QUASAR_TEST_URL": REDIS_URL, "QUASAR_TEST_NS": self.namespace}
        args = [sys.executable, "-m", "quasar_redis", "worker", self.app, "--queue", QUEUE]
        args += ["--concurrency", str(concurrency), "--lease-ms", str(lease_ms)]
        args += ["--grace", "0", "--worker-id", self.worker_id(name)]
        with (self.folder / f"{name}.stderr").open("wb") as err:
            self.procs[name] = subprocess.Popen(
                args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err
            )

    def check(self) -> None:
        """Fails when a worker the test did not kill has exited."""
        for name, proc in self.procs.items():
            if name not in self.killed and proc.poll() is not None:
                pytest.fail(f"worker {name} exited:\n{self.stderr(name)[-3000:]}")

    def kill(self, name: str) -> None:
        self.killed.add(name)
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(30)


@pytest.fixture
def fleet(tmp_path: Path, namespace: str) -> Iterator[Fleet]:
    client = real_redis()  # skips without a server (fails under QUASAR_REQUIRE_REDIS=1)
    made = Fleet(tmp_path, namespace)
    try:
        yield made
    finally:
        made.close()
        delete_namespace(client, namespace)
        client.close()


@pytest.fixture
def q(fleet: Fleet) -> Iterator[Quasar]:
    client = Quasar(redis.Redis.from_url(REDIS_URL), fleet.namespace)
    yield client
    client.redis.close()


# --- jobs ----------------------------------------------------------------------------------------


def new_job(stage: str, *args: Any, group: str | None = None) -> NewJob:
    return NewJob(stage=stage, payload=payload_of(args, {}), queue=QUEUE, group=group)


def enqueue(q: Quasar, jobs: Sequence[NewJob]) -> list[str]:
    """Enqueues ``jobs`` in batches of ``BATCH``; the ids, in order."""
    ids: list[str] = []
    for i in range(0, len(jobs), BATCH):
        result = q.enqueue_many(jobs[i : i + BATCH], ids_only=True)
        assert isinstance(result, BatchApplied), result
        ids += result.ids
    return ids


def start_fleet(fleet: Fleet, count: int, *, concurrency: int, lease_ms: int) -> list[str]:
    names = [f"w{i}" for i in range(count)]
    for name in names:
        fleet.start(name, concurrency=concurrency, lease_ms=lease_ms)
    return names


# --- fairness ------------------------------------------------------------------------------------

BIG = 100_000
SMALL_GROUPS = 10
SMALL = 10


def test_ten_small_groups_are_not_stuck_behind_100k_jobs_of_one_group(
    fleet: Fleet, q: Quasar
) -> None:
    enqueue(q, [new_job("ft.noop", group="big") for _ in range(BIG)])
    small_ids = enqueue(
        q,
        [new_job("ft.noop", group=f"small-{g}") for g in range(SMALL_GROUPS) for _ in range(SMALL)],
    )
    small = set(small_ids)
    reader = EventReader(q.redis, q.keys.events)  # from here on: nothing has started yet
    start_fleet(fleet, 4, concurrency=4, lease_ms=ft.LONG_LEASE_MS)

    def every_small_started() -> bool:
        fleet.check()
        reader.read()
        return small <= reader.started

    wait_for(every_small_started, 120, "every job of the small groups to start", every=0.005)
    fleet.close()
    starts = reader.starts()
    last_small = max(i for i, e in enumerate(starts) if e.job in small)
    big_before = sum(1 for e in starts[:last_small] if e.job not in small)
    print(f"\nbig group's starts before the last small group's job started: {big_before}")
    # The bound: every group with ready jobs holds one place in the turns; a group whose job
    # starts goes to the back, behind every other group (its turn is the highest given so far),
    # also between the turns of one claim of many. So the turns go in rounds, one start per
    # group in each, and no group starts twice in a round. A small group has 10 jobs: its last
    # starts in round 10, and in those 10 rounds "big" started at most one job each: at most 10
    # of its starts come before the last small job's. The claims run one at a time, and the
    # stream lists their starts in the order they were leased: the count is exact, no slack.
    assert big_before <= SMALL
    assert Counter(e.job for e in starts if e.job in small) == dict.fromkeys(small, 1)


# --- a group's rate ------------------------------------------------------------------------------

RATE = Rate(20, per=1.0, burst=5)
PERIOD_MS = 5000


def most_in_a_window(times: Sequence[int], window_ms: int) -> int:
    """The most of ``times`` (ms) in any window [t, t + window_ms) that opens at one of them."""
    ordered = sorted(times)
    most, j = 0, 0
    for i, t in enumerate(ordered):
        while j < len(ordered) and ordered[j] < t + window_ms:
            j += 1
        most = max(most, j - i)
    return most


def test_a_rated_group_keeps_its_rate_while_an_unlimited_one_runs_freely(
    fleet: Fleet, q: Quasar
) -> None:
    limited = enqueue(q, [new_job("ft.noop", group="limited") for _ in range(400)])
    free = enqueue(q, [new_job("ft.noop", group="free") for _ in range(20_000)])
    q.set_limits(QUEUE, group_rate=RATE)
    q.set_group_limits(QUEUE, "free", rate=UNLIMITED)
    reader = EventReader(q.redis, q.keys.events)
    start_fleet(fleet, 2, concurrency=4, lease_ms=ft.LONG_LEASE_MS)  # 8 jobs at once

    def period_over() -> bool:
        fleet.check()
        reader.read()
        first = reader.first_start_ms
        return first is not None and reader.last[0] - first >= PERIOD_MS

    wait_for(period_over, 120, f"{PERIOD_MS} ms of starts", every=0.005)
    fleet.close()
    reader.read()
    starts = reader.starts()
    begin = starts[0].ms
    in_period = [e for e in starts if e.ms < begin + PERIOD_MS]
    limited_ids, free_ids = set(limited), set(free)
    limited_starts = [e for e in in_period if e.job in limited_ids]
    free_count = sum(1 for e in in_period if e.job in free_ids)
    # The rate sees the time of each claim (the server's clock in the script), which the job
    # keeps as attempted_at; the stream entry is written at the script's end, a little later.
    started = [e.job for e in starts if e.job in limited_ids]
    assert len(started) == len(set(started)), "a limited job started twice"
    jobs = q.execute_many([q.calls.get_job(job_id) for job_id in started])
    claimed_at = [info.job.attempted_at for info in jobs if info is not None]
    assert len(claimed_at) == len(started)
    assert all(at is not None for at in claimed_at)
    at_claims = most_in_a_window([at for at in claimed_at if at is not None], RATE.window_ms)
    at_events = most_in_a_window([e.ms for e in limited_starts], RATE.window_ms)
    print(
        f"\nin {PERIOD_MS} ms: limited started {len(limited_starts)}, free {free_count}; "
        f"most limited starts in a {RATE.window_ms} ms window: {at_claims} by claim time, "
        f"{at_events} by event time (bound {RATE.limit + RATE.burst})"
    )
    # The bound (GCRA, lua/include/flow_control.lua): one start every T = 1000 ms / 20 = 50 ms,
    # the burst a tolerance of B * T = 250 ms. A start at `now` needs tat - B*T <= now, and sets
    # tat to max(tat, now) + T; after a start at s1, the k-th start therefore comes at
    # s_k >= s1 + (k - 1) * T - B * T. For k = 20 + B + 1: s_k - s1 >= 20 * T = 1000 ms, so a
    # window [t, t + 1000 ms) holds at most 20 + B = 25 starts.
    assert at_claims <= RATE.limit + RATE.burst
    # Over 5 s (of claim times: an event is stamped a little after its claim, so a period of
    # event times may hold a claim from just before it) the limited group starts at most
    # 25 + 4 * 20 = 105 jobs; the free group, held by nothing but the 8 slots, starts far more
    # meanwhile.
    times = sorted(at for at in claimed_at if at is not None)
    in_five = [at for at in times if at < times[0] + PERIOD_MS]
    assert len(in_five) <= RATE.limit + RATE.burst + RATE.limit * (PERIOD_MS // 1000 - 1)
    assert free_count > 5 * len(limited_starts)


# --- concurrency caps ----------------------------------------------------------------------------

GROUP_CAP = 3
QUEUE_CAP = 5
# A lease ends with any event of a job that was executing: completed, retryable, available,
# scheduled (a retry's delay), discarded, cancelled, expired.


def leased_counts(
    events: Sequence[Event], group_of: dict[str, str | None]
) -> tuple[int, Counter[str | None]]:
    """The most leases of the queue, and of each group, at once, event by event."""
    executing: set[str] = set()
    now_queue, now_group = 0, Counter[str | None]()
    most_queue, most_group = 0, Counter[str | None]()
    for e in events:
        g = group_of[e.job]
        if e.ev == "executing":
            assert e.job not in executing, f"{e.job} leased while leased"
            executing.add(e.job)
            now_queue += 1
            now_group[g] += 1
            most_queue = max(most_queue, now_queue)
            most_group[g] = max(most_group[g], now_group[g])
        elif e.job in executing:
            executing.remove(e.job)
            now_queue -= 1
            now_group[g] -= 1
    return most_queue, most_group


def test_caps_hold_through_retries_and_a_killed_worker(fleet: Fleet, q: Quasar) -> None:
    group_of: dict[str, str | None] = {}
    # The fault's place: the first job hangs on its first attempt, and its worker is killed
    # while it holds that lease (and whatever else it holds then).
    (hung,) = enqueue(q, [new_job("ft.nap", 150, False, True, group="a")])
    group_of[hung] = "a"
    for group, count in (("a", 24), ("b", 24), (None, 12)):
        jobs = [new_job("ft.nap", 150, i % 4 == 0, group=group) for i in range(count)]
        group_of.update(dict.fromkeys(enqueue(q, jobs), group))
    q.set_limits(QUEUE, concurrency=QUEUE_CAP, group_concurrency=GROUP_CAP)
    reader = EventReader(q.redis, q.keys.events)
    names = start_fleet(fleet, 3, concurrency=4, lease_ms=ft.SHORT_LEASE_MS)
    leased_key = q.keys.queue(QUEUE, "leased")

    def holders() -> dict[str, list[str]]:
        """The workers holding leases of the queue, and which."""
        fleet.check()
        reader.read()
        held: dict[str, list[str]] = {}
        for raw in q.redis.zrange(leased_key, 0, -1):
            info = q.get_job(raw.decode())
            state = None if info is None else info.job.state
            if isinstance(state, Leased):
                held.setdefault(state.worker_id, []).append(raw.decode())
        return held

    def holder_of_hung() -> str | None:
        return next((w for w, jobs in holders().items() if hung in jobs), None)

    victim = wait_for(holder_of_hung, 60, "the hanging job to start", every=0.005)
    fleet.kill(next(name for name in names if fleet.worker_id(name) == victim))
    lost = holders().get(victim, [])  # its leases as it left them: they must run out

    def all_succeeded() -> bool:
        fleet.check()
        reader.read()
        jobs = q.execute_many([q.calls.get_job(job_id) for job_id in group_of])
        return all(info is not None and isinstance(info.job.state, Succeeded) for info in jobs)

    wait_for(all_succeeded, 120, "every job to succeed", every=0.05)
    fleet.close()
    events = reader.read()
    most_queue, most_group = leased_counts(events, group_of)
    retried = sum(1 for e in events if e.ev not in {"executing", "completed"})
    print(
        f"\nmost leased at once: queue {most_queue} (cap {QUEUE_CAP}), "
        f"group a {most_group['a']}, group b {most_group['b']} (cap {GROUP_CAP}), "
        f"without a group {most_group[None]}; leases ended otherwise than completed: {retried} "
        f"({len(lost)} of them the killed worker's)"
    )
    # A claim leases a job of the queue only while ZCARD leased < the cap, and of a group only
    # while its gactive < its cap; both count every lease begun and not ended, ended ones being
    # exactly those with an event since (a lease that ran out counts until a claim expires it,
    # and the expiry is an event of its own, before that claim's leases).
    assert most_queue <= QUEUE_CAP
    assert most_group["a"] <= GROUP_CAP
    assert most_group["b"] <= GROUP_CAP
    # The killed worker's leases ran out, and their jobs ran again: the hanging one first of all
    # (its first attempt never ends but with its worker).
    for job_id in {hung, *lost}:
        done = q.get_job(job_id)
        assert done is not None and done.job.attempt >= 2, done
    assert sum(1 for e in events if e.ev == "completed") == len(group_of)
