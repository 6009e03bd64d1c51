"""Periodic schedules (docs/schedules.md), on both backends and both clients: declaration as an
upsert, one job per tick whatever the number of schedulers, missed ticks skipped or run once,
pause, resume, trigger and remove, the ticks of a cron expression at daylight-saving edges, bad
input refused with nothing written, and two real worker processes, one killed midway."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from quasar_redis import (
    App,
    ClaimApplied,
    CorruptDataError,
    CorruptKeyError,
    Declared,
    Fired,
    InvalidArgument,
    InvalidSchedule,
    NotFired,
    Quasar,
    Schedule,
    Skipped,
    Waiting,
)
from quasar_redis._schedules import Ticker, drive
from quasar_redis.cli import main
from quasar_redis.worker._scheduler import Scheduler

from .clients import clients
from .helpers import REDIS_URL, applied, delete_namespace, real_redis, snapshot, wait_for

ROOT = Path(__file__).resolve().parent.parent
MIN = 60_000
T0 = 1_800_000_000_000  # a whole minute (and 5 minutes) in ms since the epoch


def every(name: str = "tick", seconds: float = 60, **settings: Any) -> Schedule:
    return Schedule.of(name, "jobs.tick", every=seconds, **settings)


def job_ids(q: Quasar, queue: str = "default") -> list[str]:
    return sorted(j.id for j in q.list_jobs(queue, "available", limit=1000, now=T0 * 2))


# --- declaration ---------------------------------------------------------------------------------


def test_a_declaration_is_an_upsert_that_keeps_paused_and_last(q: Quasar) -> None:
    s = every(payload={"n": 1})
    assert q.declare_schedule(s, now=T0 + 1) == Declared("created", T0 + MIN)
    assert q.declare_schedule(s, now=T0 + 2) == Declared("unchanged", T0 + MIN)
    assert isinstance(q.fire_schedule(s, T0 + MIN, now=T0 + MIN), Fired)
    assert q.pause_schedule("tick") is True
    changed = every(seconds=120, payload={"n": 2})
    assert q.declare_schedule(changed, now=T0 + MIN + 5) == Declared("updated", T0 + 2 * MIN)
    [info] = q.schedules(now=T0 + MIN + 6)
    assert (info.spec, info.paused, info.last_tick, info.next_tick) == (
        "every 120000",
        True,
        T0 + MIN,
        T0 + 2 * MIN,
    )
    assert (info.declared_at, info.created_at, info.declared) == (T0 + MIN + 5, T0 + 1, True)
    assert not q.schedules(now=T0 + MIN + 5 + 120_001)[0].declared  # no worker declares it now
    # the old settings' ticks are not fired any more
    assert q.fire_schedule(s, T0 + 2 * MIN, now=T0 + 2 * MIN) == NotFired("changed", T0 + 2 * MIN)


# --- one job per tick ----------------------------------------------------------------------------


def test_a_tick_fires_one_job_with_the_ticks_id_and_a_second_firing_changes_nothing(
    q: Quasar,
) -> None:
    s = every(payload=[1, 2], queue="beats", priority=5, max_attempts=2)
    q.declare_schedule(s, now=T0)
    fired = q.fire_schedule(s, T0 + MIN, now=T0 + MIN + 10)
    assert fired == Fired("tick@" + str(T0 + MIN), T0 + 2 * MIN, True)
    before = snapshot(q)
    assert q.fire_schedule(s, T0 + MIN, now=T0 + MIN + 20) == NotFired("fired", T0 + 2 * MIN)
    assert snapshot(q) == before
    info = q.get_job(f"tick@{T0 + MIN}")
    assert info is not None
    job = info.job
    assert (job.stage, job.queue, job.priority, job.max_attempts, job.payload) == (
        "jobs.tick",
        "beats",
        5,
        2,
        [1, 2],
    )
    assert isinstance(job.state, Waiting)
    assert q.fire_schedule(s, T0 + 2 * MIN, now=T0 + 2 * MIN - 1) == NotFired("early", T0 + 2 * MIN)


def test_a_resent_fire_gets_the_first_answer_and_enqueues_nothing_more(q: Quasar) -> None:
    s = every()
    q.declare_schedule(s, now=T0)
    call = q.calls.fire_schedule(s, T0 + MIN, T0 + MIN)
    first = q.execute(call)
    assert isinstance(first, Fired) and first.fresh
    before = snapshot(q)
    assert q.execute(call) == first  # the same call id: a re-sent call
    assert {k: v for k, v in snapshot(q).items() if ":call:" not in k} == {
        k: v for k, v in before.items() if ":call:" not in k
    }
    assert job_ids(q) == [f"tick@{T0 + MIN}"]


def test_resent_declarations_and_changes_get_their_first_answers(q: Quasar) -> None:
    s = every()
    declare = q.calls.declare_schedule(s, T0)
    assert q.execute(declare) == q.execute(declare) == Declared("created", T0 + MIN)
    pause = q.calls.change_schedule("tick", "pause", T0)
    assert q.execute(pause) is True
    assert q.execute(pause) is True  # (a new pause would say False: it is paused already)
    assert q.pause_schedule("tick", now=T0) is False
    skip = q.calls.fire_schedule(every(grace=0), T0 + MIN, T0 + MIN + 1)
    q.resume_schedule("tick", now=T0)
    assert q.fire_schedule(every(grace=0), T0 + MIN, now=T0 + MIN + 1) == NotFired(
        "changed", T0 + MIN
    )
    assert q.declare_schedule(every(grace=0), now=T0 + 1).outcome == "updated"
    assert q.execute(skip) == q.execute(skip) == Skipped(T0 + 2 * MIN)


def test_three_schedulers_and_four_workers_over_a_simulated_hour_make_one_job_per_tick(
    redis_client: Any, backend: str, namespace: str
) -> None:
    """Three schedulers and four workers, each worker running a scheduler too (as every worker
    does) and claiming and completing jobs, driven with explicit now in varied orders, some of
    them late now and then: one job per tick, none missed, and each run once."""
    schedules = [
        every("half-minute", 30),
        Schedule.of("five", "jobs.five", "*/5 * * * *", tz="Europe/Paris"),
        Schedule.of("minute", "jobs.minute", "* * * * *", tz="America/New_York", missed="once"),
    ]
    clients = [Quasar(redis_client, namespace, functions=backend == "redis") for _ in range(7)]
    tickers = [Ticker(schedules) for _ in clients]
    workers = range(3, 7)  # the last four also claim and complete what the schedules enqueue
    rng = random.Random(7)
    now = T0 + 1
    for client, ticker in zip(clients, tickers, strict=True):
        ticker.declared_all(client.execute_many(ticker.declaring(client.calls, now)))
    end = T0 + 3_600_000
    completed: list[str] = []

    def work(i: int, at: int) -> None:
        claims = clients[i].claim_many("default", f"w{i}", 60_000, 5, now=at)
        for claim in getattr(claims, "claims", ()):
            applied(clients[i].complete(claim.token, f"w{i}", now=at))
            completed.append(claim.job.id)

    while now < end:
        now = min(end, now + rng.randint(200, 9_000))
        order = list(range(7))
        rng.shuffle(order)
        for i in order:
            if rng.random() < 0.2:
                continue  # this one is late this time (a GC pause, a busy event loop)
            now += rng.randint(0, 40)
            drive(tickers[i].firing(clients[i].calls, now, explicit=True), clients[i].execute_many)
            if i in workers:
                work(i, now)
    for client, ticker in zip(clients, tickers, strict=True):  # a last round, past the end
        drive(ticker.firing(client.calls, end + 1_000, explicit=True), client.execute_many)
    for i in workers:
        work(i, end + 2_000)
    expected = {f"half-minute@{T0 + k * 30_000}" for k in range(1, 121)}
    expected |= {f"five@{T0 + k * 300_000}" for k in range(1, 13)}
    expected |= {f"minute@{T0 + k * MIN}" for k in range(1, 61)}
    assert len(completed) == len(set(completed)) == len(expected)  # each job run once
    assert set(completed) == expected
    assert int(redis_client.get(clients[0].keys.seq)) == len(expected)  # no job besides


def test_the_workers_scheduler_declares_again_and_fires_what_is_due(
    redis_client: Any, backend: str, namespace: str
) -> None:
    """The asyncio scheduler each worker runs (worker/_scheduler.py), driven with explicit now:
    it declares at its first round and again 30 s later, and fires each tick once."""
    s = every("tick", 10)
    with clients("async", redis_client) as make:
        driven: Any = make(namespace, functions=backend == "redis")
        scheduler = Scheduler(
            client=driven.client,
            schedules=[s],
            stopping=asyncio.Event(),
            redis_ms=lambda: 0.0,
            worker_id="w",
        )
        run = driven.loop.run_until_complete
        assert run(scheduler.round(T0 + 1, explicit=True)) == 0  # declared; nothing due yet
        assert run(scheduler.round(T0 + 10_000, explicit=True)) == 1
        assert run(scheduler.round(T0 + 10_001, explicit=True)) == 0
        assert run(scheduler.round(T0 + 35_000, explicit=True)) == 2  # 20 s and 30 s
        [info] = driven.schedules(now=T0 + 35_000)
        assert (info.declared_at, info.last_tick) == (T0 + 35_000, T0 + 30_000)
    made = job_ids(Quasar(redis_client, namespace))
    assert made == [f"tick@{T0 + k * 10_000}" for k in (1, 2, 3)]


# --- missed ticks --------------------------------------------------------------------------------


def test_after_downtime_skip_drops_the_missed_ticks_and_once_runs_them_once(q: Quasar) -> None:
    skip, once = every("skip", missed="skip", grace=30), every("once", missed="once", grace=30)
    for s in (skip, once):
        q.declare_schedule(s, now=T0)
    later = T0 + 10 * MIN + 5_000  # ten ticks missed; the latest one 5 s ago (within grace)
    tickers = {s.name: Ticker([s]) for s in (skip, once)}
    for s in (skip, once):
        tickers[s.name].declared(s, Declared("unchanged", T0 + MIN))
        drive(tickers[s.name].firing(q.calls, later, explicit=True), q.execute_many)
    # skip: nothing for the nine ticks more than 30 s late; the latest one, on time, fires
    # once: one job for the nine, then the latest one
    assert job_ids(q) == sorted(
        [f"skip@{T0 + 10 * MIN}", f"once@{T0 + 9 * MIN}", f"once@{T0 + 10 * MIN}"]
    )
    [info_once, info_skip] = q.schedules(now=later)
    assert info_once.next_tick == info_skip.next_tick == T0 + 11 * MIN
    assert (info_skip.last_tick, info_once.last_tick) == (T0 + 10 * MIN, T0 + 10 * MIN)


def test_a_skipped_tick_moves_the_schedule_on_without_a_job(q: Quasar) -> None:
    s = every(grace=10)
    q.declare_schedule(s, now=T0)
    assert q.fire_schedule(s, T0 + MIN, now=T0 + MIN + 10_001) == Skipped(T0 + 2 * MIN)
    assert job_ids(q) == []
    assert q.fire_schedule(s, T0 + MIN, now=T0 + MIN + 10_002) == NotFired("fired", T0 + 2 * MIN)


# --- operators -----------------------------------------------------------------------------------


def test_a_worker_told_too_soon_sends_the_same_tick_later_never_a_time_between_ticks(
    q: Quasar,
) -> None:
    """A worker whose clock runs ahead of the server's is told "early" and waits a moment; the
    tick it sends then is the schedule's own, so that no job is made for a time between two
    ticks (which would leave the tick before it without one)."""
    s = Schedule.of("soon", "jobs.soon", every=1)
    ticker = Ticker([s])
    ticker.declared_all([q.declare_schedule(s, now=T0 - 500)])
    assert ticker.tick(s, T0) == T0
    early = q.fire_schedule(s, T0, now=T0 - 3)  # the server's clock is 3 ms behind
    assert early == NotFired("early", T0)
    ticker.took(s, early, T0)
    assert ticker.tick(s, T0 + 199) is None and ticker.next_due() == T0 + 200
    assert ticker.tick(s, T0 + 200) == T0  # the tick itself, not the time it is sent at
    fired = q.fire_schedule(s, T0, now=T0 + 200)
    assert isinstance(fired, Fired) and fired.job_id == f"soon@{T0}"
    ticker.took(s, fired, T0 + 200)
    assert ticker.tick(s, T0 + 999) is None and ticker.tick(s, T0 + 1000) == T0 + 1000
    paused = NotFired("paused", T0 + 1000)
    ticker.took(s, paused, T0 + 1000)
    assert ticker.tick(s, T0 + 1999) is None and ticker.tick(s, T0 + 2000) == T0 + 1000


def test_pause_resume_trigger_and_remove(q: Quasar) -> None:
    s = every()
    q.declare_schedule(s, now=T0)
    assert q.pause_schedule("tick", now=T0) is True
    assert q.pause_schedule("tick", now=T0) is False
    assert q.fire_schedule(s, T0 + MIN, now=T0 + MIN) == NotFired("paused", T0 + MIN)
    trigger = q.trigger_schedule("tick", now=T0 + 7)  # paused or not
    assert trigger == Fired(f"tick@{T0 + 7}", T0 + MIN, True)
    assert q.trigger_schedule("tick", now=T0 + 7) == NotFired("duplicate", T0 + MIN)
    assert q.resume_schedule("tick", now=T0 + MIN) is True
    assert q.fire_schedule(s, T0 + MIN, now=T0 + MIN) == Fired(f"tick@{T0 + MIN}", T0 + 2 * MIN)
    assert q.remove_schedule("tick") is True
    assert q.schedules() == []
    assert q.fire_schedule(s, T0 + 2 * MIN, now=T0 + 2 * MIN) == NotFired("missing", None)
    assert q.trigger_schedule("tick") == NotFired("missing", None)
    with pytest.raises(InvalidArgument, match="unknown schedule"):
        q.remove_schedule("tick")
    with pytest.raises(InvalidArgument, match="schedule name"):
        q.pause_schedule("no good")
    assert job_ids(q) == sorted([f"tick@{T0 + 7}", f"tick@{T0 + MIN}"])


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression"),
        ({"cron": "* * *"}, "invalid cron expression"),
        ({"cron": "0 0 30 2 *"}, "invalid cron expression"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"cron": "* * * * *", "tz": ""}, "time zone"),
        ({"every": 0}, "every must be"),
        ({"every": -5}, "every must be"),
        ({"every": float("nan")}, "finite"),
        ({"every": 60, "missed": "later"}, "missed"),
        ({"every": 60, "grace": -1}, "grace"),
        ({"every": 60, "queue": "a b"}, "queue"),
        ({"every": 60, "stage": "tests.<lambda>"}, "is no stage"),
        ({}, "either a cron expression or every"),
        ({"cron": "* * * * *", "every": 60}, "either a cron expression or every"),
    ],
)
def test_bad_settings_are_refused_typed_and_nothing_is_written(
    q: Quasar, app: App, settings: dict[str, Any], message: str
) -> None:
    settings = dict(settings)  # (the parameter is shared by every run of the test)
    cron, stage = settings.pop("cron", None), settings.pop("stage", "jobs.tick")
    with pytest.raises(InvalidSchedule, match=message):
        Schedule.of("tick", stage, cron, **settings)
    with pytest.raises(InvalidSchedule, match=message):  # (a lambda's task name is no stage)
        app.periodic(cron, name="tick", **settings)(lambda: None)
    assert app.schedules == {} and app.tasks == {}  # the task is not declared either
    assert snapshot(q) == {} and snapshot(app.client) == {}


def test_the_script_refuses_bad_arguments_itself_and_writes_nothing(q: Quasar) -> None:
    s = every()
    call = q.calls.declare_schedule(s, T0)
    for index, bad in ((4, ""), (6, "bad queue"), (9, "x"), (11, "never"), (13, "-1")):
        args = list(call.args)
        args[index] = bad
        with pytest.raises(InvalidArgument):
            q.execute(type(call)(call.script, tuple(args), call.parse))
    assert snapshot(q) == {}
    with pytest.raises(InvalidSchedule):
        q.declare_schedule("not a schedule")  # type: ignore[arg-type]
    for tick in (-1, 1.5, "1", True):
        with pytest.raises(InvalidArgument, match="tick"):
            q.fire_schedule(s, tick)  # type: ignore[arg-type]
    fire = q.calls.fire_schedule(s, T0 + MIN, T0 + MIN)
    for index, bad in ((3, "x"), (4, str(T0)), (5, "")):  # tick, a next tick before it, digest
        args = list(fire.args)
        args[index] = bad
        with pytest.raises(InvalidArgument):
            q.execute(type(fire)(fire.script, tuple(args), fire.parse))
    assert snapshot(q) == {}


def test_schedule_keys_written_by_hand_are_corrupt_data_and_nothing_changes(q: Quasar) -> None:
    s = every()
    q.declare_schedule(s, now=T0)
    q.redis.hset(q.keys.schedule("tick"), "pr", "high")
    with pytest.raises(CorruptDataError, match="schedule:tick"):
        q.schedules()
    q.redis.delete(q.keys.schedule("tick"))
    q.redis.set(q.keys.schedule("tick"), "not a hash")
    before = snapshot(q)
    for call in (
        lambda: q.declare_schedule(s, now=T0),
        lambda: q.fire_schedule(s, T0 + MIN, now=T0 + MIN),
        lambda: q.pause_schedule("tick"),
    ):
        with pytest.raises(CorruptKeyError, match="holds a string, expected a hash"):
            call()
    assert snapshot(q) == before
    q.redis.delete(q.keys.schedules)
    q.redis.set(q.keys.schedules, "not a sorted set")
    with pytest.raises(CorruptKeyError, match="holds a string, expected a zset"):
        q.schedules()


# --- daylight saving -----------------------------------------------------------------------------


def utc(year: int, month: int, day: int, hour: int, minute: int) -> int:
    moment = datetime(year, month, day, hour, minute, tzinfo=timezone.utc)
    return round(moment.timestamp() * 1000)


def test_a_time_skipped_by_daylight_saving_fires_at_the_first_time_after_it() -> None:
    # Europe/Paris, 29 March 2026: 02:00 CET becomes 03:00 CEST; there is no 02:30
    s = Schedule.of("night", "jobs.night", "30 2 * * *", tz="Europe/Paris")
    before = utc(2026, 3, 28, 1, 30)  # 02:30 CET on the 28th
    assert s.after(before) == utc(2026, 3, 29, 1, 0)  # 03:00 CEST, the first time after the gap
    assert s.after(utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 30, 0, 30)  # 02:30 CEST after
    assert s.latest(utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 29, 1, 0)
    assert s.latest(utc(2026, 3, 29, 0, 59)) == before


def test_a_time_that_happens_twice_fires_once_unless_the_hour_is_any() -> None:
    # Europe/Paris, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice
    daily = Schedule.of("night", "jobs.night", "30 2 * * *", tz="Europe/Paris")
    assert daily.after(utc(2026, 10, 24, 12, 0)) == utc(2026, 10, 25, 0, 30)  # the first 02:30
    assert daily.after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)  # not the second
    hourly = Schedule.of("half", "jobs.half", "30 * * * *", tz="Europe/Paris")
    assert hourly.after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 25, 1, 30)  # both 02:30s
    assert hourly.latest(utc(2026, 10, 25, 1, 45)) == utc(2026, 10, 25, 1, 30)


def test_ticks_across_a_daylight_saving_edge_fire_one_job_each(q: Quasar) -> None:
    s = Schedule.of("half", "jobs.half", "30 * * * *", tz="Europe/Paris")
    start = utc(2026, 10, 24, 23, 0)  # 01:00 CEST
    q.declare_schedule(s, now=start)
    ticker = Ticker([s])
    ticker.declared(s, Declared("unchanged", s.after(start)))
    for second in range(0, 4 * 3600, 20):  # a round every 20 s: no tick is ever late
        drive(ticker.firing(q.calls, start + second * 1000, explicit=True), q.execute_many)
    # 01:30 CEST, 02:30 CEST, 02:30 CET, 03:30 CET: four ticks an hour apart in UTC
    assert job_ids(q) == [f"half@{utc(2026, 10, 24, 23, 30) + h * 3_600_000}" for h in range(4)]
    assert ZoneInfo("Europe/Paris").utcoffset(datetime(2026, 10, 25, 3)) == timedelta(hours=1)


# --- the docs -----------------------------------------------------------------------------------


def test_the_examples_of_the_docs_run_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "schedules.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 4
    scope: dict[str, Any] = {"__name__": "docs_schedules"}
    try:
        for block in blocks:
            exec(compile(block, "docs/schedules.md", "exec"), scope)
    finally:
        if "app" in scope:
            scope["app"].close()
    out = capsys.readouterr().out
    assert "['refresh-dashboards', 'sweep-carts', 'weekly-digest']" in out
    assert "unknown time zone 'Mars/Olympus'" in out and "every must be positive" in out
    assert "Fired(job_id='sweep-carts@1800000030000', next_tick=1800000060000, fresh=True)" in out
    assert "NotFired(reason='paused', next_tick=1800000060000)" in out


# --- real worker processes -----------------------------------------------------------------------


@pytest.fixture
def fleet(tmp_path: Path, namespace: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    client = real_redis()
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()  # (nothing, for one that ended and was waited for)
            proc.wait(10)
        delete_namespace(client, namespace)
        client.close()


def start_worker(tmp_path: Path, namespace: str, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    env = {"QUASAR_TEST_URL": REDIS_URL, "QUASAR_TEST_NS": namespace, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "quasar_redis", "worker", "tests.schedule_tasks:app"]
    args += ["--worker-id", f"{name}-{namespace}"]
    log = tmp_path / f"{name}.stderr"

    with log.open("wb") as err:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=err,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    return proc, log


@pytest.mark.slow
def test_two_worker_processes_one_killed_midway_make_one_job_per_tick(
    tmp_path: Path, namespace: str, fleet: list[subprocess.Popen[bytes]]
) -> None:
    q = Quasar.from_url(REDIS_URL, namespace)
    workers = [start_worker(tmp_path, namespace, name) for name in ("a", "b")]
    fleet.extend(proc for proc, _ in workers)
    for _, log in workers:

        def up(log: Path = log) -> bool | None:
            return " started: " in log.read_text(errors="replace") or None

        wait_for(up, 30, "a worker started")

    def ticks() -> list[int]:
        keys = q.redis.scan_iter(match=f"{q.keys.root}job:beat@*", count=1000)
        return sorted(int(k.decode().rsplit("@", 1)[1]) for k in keys)

    wait_for(lambda: len(ticks()) >= 4 or None, 30, "four ticks")
    killed = workers[0][0]
    killed.kill()  # -9: no stop, no retire
    killed.wait(10)
    at_kill = len(ticks())
    wait_for(lambda: len(ticks()) >= at_kill + 6 or None, 30, "six ticks more")
    survivor = workers[1][0]
    survivor.terminate()
    survivor.wait(30)
    found = ticks()
    assert len(found) >= 10
    missed = [a + 1000 for a, b in itertools.pairwise(found) if b - a != 1000]
    logs = "\n".join(log.read_text(errors="replace")[-4000:] for _, log in workers)
    assert not missed, f"ticks without a job after {missed} in {found}:\n{logs}"  # none missed
    assert int(q.redis.get(q.keys.seq)) == len(found)  # one job per tick, and no other
    [info] = q.schedules()
    assert info.name == "beat" and info.last_tick == found[-1]
    q.close()


# --- the command line ----------------------------------------------------------------------------


def test_the_schedules_commands_list_pause_resume_trigger_and_remove(namespace: str) -> None:
    q = Quasar.from_url(REDIS_URL, namespace)
    try:
        q.declare_schedule(every("tick"))
        q.declare_schedule(every("gone"), now=10**12)  # declared in 2001: by no running worker
        base = ["--redis-url", REDIS_URL, "--namespace", namespace]

        def run(*args: str) -> Any:
            return CliRunner().invoke(main, ["schedules", *args, *base])

        listed = run("list", "--json")
        assert listed.exit_code == 0, listed.output
        rows = {row["name"]: row for row in json.loads(listed.output)}
        assert (rows["tick"]["declared"], rows["gone"]["declared"]) == (True, False)
        assert rows["tick"]["spec"] == "every 60000" and rows["tick"]["paused"] is False
        table = run("list")
        assert "declared by no running worker" in table.output and "tick" in table.output
        assert run("pause", "tick").output == "schedule 'tick' paused\n"
        assert run("pause", "tick").output == "schedule 'tick': unchanged\n"
        assert q.schedules()[1].paused
        assert run("resume", "tick", "--json").output.count('"changed": true') == 1
        triggered = run("trigger", "tick", "--json")
        job_id = json.loads(triggered.output)["job_id"]
        assert job_id.startswith("tick@") and q.get_job(job_id) is not None
        assert run("remove", "gone").output == "schedule 'gone' removed\n"
        before = snapshot(q)
        missing = run("remove", "gone")
        assert missing.exit_code == 1 and "unknown schedule 'gone'" in missing.output
        assert run("trigger", "gone").exit_code == 1
        assert snapshot(q) == before
        assert [s.name for s in q.schedules()] == ["tick"]
    finally:
        delete_namespace(q.redis, namespace)
        q.close()


# --- partitions ----------------------------------------------------------------------------------


def test_a_partitioned_namespace_keeps_schedules_and_their_jobs_in_partition_0(
    redis_client: Any, backend: str, namespace: str
) -> None:
    q = Quasar(redis_client, namespace, functions=backend == "redis", partitions=3)
    s = every()
    assert q.declare_schedule(s, now=T0) == Declared("created", T0 + MIN)
    fired = q.fire_schedule(s, T0 + MIN, now=T0 + MIN)
    assert fired == Fired(f"0~tick@{T0 + MIN}", T0 + 2 * MIN)
    assert q.fire_schedule(s, T0 + MIN, now=T0 + MIN) == NotFired("fired", T0 + 2 * MIN)
    triggered = q.trigger_schedule("tick", now=T0 + 5)
    assert isinstance(triggered, Fired) and triggered.job_id == f"0~tick@{T0 + 5}"
    [listed] = q.schedules()
    assert (listed.name, listed.last_job) == ("tick", f"0~tick@{T0 + MIN}")
    assert q.pause_schedule("tick") is True
    part = q.keys.part(0)
    assert redis_client.exists(part.schedule("tick"), part.job(f"0~tick@{T0 + MIN}")) == 2
    info = q.get_job(f"0~tick@{T0 + MIN}")  # found where any client looks for it
    assert info is not None and info.job.stage == "jobs.tick"
    claimed_ids = set()
    for _ in range(3):  # a claim by queue takes the partitions in turn
        result = q.claim("default", "w", 60_000, now=T0 + 2 * MIN)
        if isinstance(result, ClaimApplied):
            claimed_ids.add(result.claim.job.id)
    assert claimed_ids == {f"0~tick@{T0 + MIN}", f"0~tick@{T0 + 5}"}
