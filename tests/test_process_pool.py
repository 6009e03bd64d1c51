"""``Worker(processes=N)``: plain-function tasks in processes of their own, on both backends (the
processes only compute: the worker talks to Redis), and ``quasar worker --processes``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from quasar_redis import App, Connector, Fixed, Job, JobFailedError, Status, Worker
from quasar_redis.errors import ConfigurationError, InvalidArgument

from . import process_tasks as pt
from .helpers import REDIS_URL, delete_namespace, real_redis, wait_for

ROOT = Path(__file__).resolve().parent.parent


def worker_of(app: App, processes: int, **options: Any) -> Worker:
    return Worker(
        app,
        concurrency=options.pop("concurrency", processes),
        processes=processes,
        maintenance_interval=0.1,
        idle_wait=1.0,
        **options,
    )


def failed_job(handle: Any, timeout: float = 30) -> Job:
    with pytest.raises(JobFailedError) as failed:
        handle.result(timeout=timeout)
    job: Job = failed.value.job
    return job


def dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def pid_in(path: Path) -> int | None:
    text = path.read_text() if path.exists() else ""
    return int(text) if text else None


def test_plain_functions_run_in_processes_of_their_own(app: App) -> None:
    digest = app.task(pt.digest, name="digest")
    ask = app.task(pt.who_am_i, name="who_am_i")

    async def on_the_loop() -> int:
        return os.getpid()

    native = app.task(on_the_loop, name="on_the_loop")
    with worker_of(app, 2, concurrency=4):
        handles = [digest.enqueue(20_000) for _ in range(8)]
        results = [h.result(timeout=60) for h in handles]
        who = ask.enqueue()
        job_id, attempt, worker_id, child = who.result(timeout=30)
        assert native.enqueue().result(timeout=30) == os.getpid()  # async tasks stay on the loop
    pids = {pid for pid, _ in results}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2
    assert len({text for _, text in results}) == 1  # the same computation everywhere
    assert (job_id, attempt) == (who.id, 1)  # current_job() in the process: its job
    assert worker_id and child != os.getpid()


def test_a_job_past_its_timeout_is_killed_and_its_slot_recovered(app: App, tmp_path: Path) -> None:
    stuck = app.task(pt.busy_forever, name="busy_forever", timeout=1.0, max_attempts=1)
    square = app.task(pt.pid, name="pid")
    pid_file = tmp_path / "pid"
    with worker_of(app, 1):
        job = failed_job(stuck.enqueue(str(pid_file)))
        assert job.error is not None
        assert (job.error.kind, job.error.message) == ("Timeout", "timed out after 1.0s")
        child = pid_in(pid_file)
        assert child is not None
        wait_for(lambda: dead(child), 10, "the timed-out job's process to be killed")
        # the one slot is back, in a fresh process
        assert square.enqueue().result(timeout=30) not in (child, os.getpid())


def test_errors_cross_from_the_process_with_their_class(app: App) -> None:
    seen: list[type[BaseException]] = []

    def policy(attempt: int, error: BaseException) -> float | None:
        seen.append(type(error))
        return None

    refuse = app.task(pt.refuse, name="refuse", retry=policy)
    give_up = app.task(pt.give_up, name="give_up")
    with worker_of(app, 1):
        job = failed_job(refuse.enqueue("no such order"))
        permanent = failed_job(give_up.enqueue())
    assert seen == [pt.Refused]  # the policy sees the task's own class
    assert job.error is not None and (job.error.kind, job.error.message) == (
        "Refused",
        "no such order",
    )
    assert permanent.attempt == 1 and permanent.error is not None
    assert permanent.error.message == "not worth another attempt"


def test_snooze_from_a_process(app: App, tmp_path: Path) -> None:
    snooze = app.task(pt.snooze_once, name="snooze_once")
    with worker_of(app, 1) as worker:
        assert snooze.enqueue(str(tmp_path / "flag")).result(timeout=30) == "awake at attempt 1"
    assert worker.stats.snoozed == 1


def test_a_process_that_dies_fails_its_job_and_is_replaced(app: App) -> None:
    crash = app.task(pt.crash, name="crash", max_attempts=2, retry=Fixed(0))
    pid = app.task(pt.pid, name="pid")
    with worker_of(app, 1):
        job = failed_job(crash.enqueue(7))
        assert pid.enqueue().result(timeout=30) != os.getpid()
    assert job.attempt == 2  # the crash is a failure like any other: retried, then failed
    assert job.error is not None and job.error.kind == "ProcessDied"
    assert "exit code 7" in job.error.message


def test_a_result_that_cannot_cross_fails_the_job_clearly(app: App) -> None:
    unsendable = app.task(pt.unsendable, name="unsendable", max_attempts=3)
    with worker_of(app, 1):
        job = failed_job(unsendable.enqueue())
    assert job.attempt == 1  # failed for good: the same code would return the same again
    assert job.error is not None and job.error.kind == "BadResult"
    assert "cannot be sent from its process" in job.error.message


def test_processes_are_replaced_after_max_jobs_per_process(app: App) -> None:
    pid = app.task(pt.pid, name="pid")
    with worker_of(app, 1, max_jobs_per_process=2):
        pids = [pid.enqueue().result(timeout=30) for _ in range(6)]
    assert [pids[0]] * 2 == pids[:2] and pids[2] == pids[3] and pids[4] == pids[5]
    assert len(set(pids)) == 3


def test_a_stop_hands_back_a_running_job_and_kills_its_process(app: App, tmp_path: Path) -> None:
    sleeper = app.task(pt.sleep_forever, name="sleep_forever")
    pid_file = tmp_path / "pid"
    worker = worker_of(app, 1, grace=0.2)
    with worker:
        handle = sleeper.enqueue(str(pid_file))
        child = wait_for(lambda: pid_in(pid_file), 30, "the job to start in its process")
    wait_for(lambda: dead(child), 10, "the handed-back job's process to be killed")
    info = handle.info()
    assert info is not None and info.status is Status.AVAILABLE  # handed back, not failed
    assert info.job.error is None


def test_a_task_a_process_cannot_import_is_refused_at_start(app: App) -> None:
    def nested() -> None: ...

    app.task(nested, name="nested")
    with pytest.raises(InvalidArgument, match="processes= runs tasks by import path"):
        Worker(app, processes=1).run(install_signals=False)


def test_a_task_module_a_process_cannot_import_stops_the_start(app: App) -> None:
    from . import process_tasks_broken

    app.task(process_tasks_broken.fine, name="fine")
    with pytest.raises(ConfigurationError) as refused:
        Worker(app, processes=2).run(install_signals=False)
    assert str(refused.value) == (
        "the processes for plain-function tasks could not start: cannot import "
        "tests.process_tasks_broken.fine: RuntimeError: this module does not load in a child "
        "process"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"processes": 0}, "processes must be None or an integer >= 1: got 0"),
        ({"processes": True}, "processes must be None or an integer >= 1: got True"),
        ({"processes": 1, "max_jobs_per_process": 0}, "max_jobs_per_process must be None"),
    ],
)
def test_bad_process_settings_are_refused(options: dict[str, Any], message: str) -> None:
    app = App(connector=Connector("memory://"), namespace="unused")
    with pytest.raises(InvalidArgument, match=message):
        Worker(app, **options)


# --- the command line ------------------------------------------------------------------------


def quasar(*args: str, namespace: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QUASAR_TEST_URL": REDIS_URL, "QUASAR_TEST_NS": namespace}
    return subprocess.run(
        [sys.executable, "-m", "quasar_redis", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        check=False,
    )


def test_quasar_worker_runs_plain_functions_in_processes(namespace: str) -> None:
    client = real_redis()
    app = App(REDIS_URL, namespace=namespace)
    try:
        square = app.task(pt.square.fn, name="square")
        handles = [square.enqueue(i) for i in range(12)]
        started = time.monotonic()
        done = quasar(
            "worker", "tests.process_tasks:app", "--processes", "2", "--burst", namespace=namespace
        )
        assert done.returncode == 0, done.stderr
        assert "2 processes" in done.stderr  # the start line; --concurrency follows --processes
        assert "concurrency 2," in done.stderr
        results = [h.result(timeout=5) for h in handles]
        assert [r[0] for r in results] == [i * i for i in range(12)]
        assert len({r[1] for r in results}) == 2
        assert time.monotonic() - started < 120
    finally:
        delete_namespace(client, namespace)
        client.close()
        app.client.redis.close()


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_quasar_worker_refuses_a_bad_process_count(value: str, namespace: str) -> None:
    done = quasar("worker", "tests.process_tasks:app", "--processes", value, namespace=namespace)
    assert done.returncode == 2
    assert "--processes" in done.stderr and "Traceback" not in done.stderr


SCRIPT = """
from quasar_redis import App, Worker

app = App("memory://", namespace="guard")


def square(x: int) -> int:
    return x * x


task = app.task(square, name="square")
{body}
"""
RUN = """handle = task.enqueue(3)
with Worker(app, processes=1, concurrency=1):
    print("result", handle.result(timeout=60))
"""


def run_script(folder: Path, guarded: bool) -> subprocess.CompletedProcess[str]:
    body = "if __name__ == '__main__':\n" + textwrap.indent(RUN, "    ") if guarded else RUN
    (folder / "script.py").write_text(SCRIPT.format(body=body))
    return subprocess.run(
        [sys.executable, "script.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_script_that_starts_processes_with_no_main_guard_is_told_in_one_line(
    tmp_path: Path,
) -> None:
    done = run_script(tmp_path, guarded=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("quasar_redis.errors.ConfigurationError: the processes for ")
    assert last.endswith('start it under if __name__ == "__main__":')
    assert "bootstrapping phase" not in done.stderr  # (multiprocessing's own message)
    assert done.stderr.count("Traceback") == 1  # the script's, none from its process
    assert run_script(tmp_path, guarded=True).stdout == "result 9\n"
