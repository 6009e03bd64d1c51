"""Plain functions for the tests of ``Worker(processes=N)``: a fresh process imports them by
name, so they live at the top level of a module. ``app`` serves ``quasar worker
tests.process_tasks:app`` (URL from ``QUASAR_TEST_URL``, namespace from ``QUASAR_TEST_NS``)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any

from quasar_redis import App, PermanentFailure, Snooze, current_job

from .helpers import REDIS_URL

app = App(
    os.environ.get("QUASAR_TEST_URL", REDIS_URL),
    namespace=os.environ.get("QUASAR_TEST_NS", "process-tasks-unset"),
)


class Refused(ValueError):
    """An error of the task's own, which the retry policy sees by its class."""


def pid() -> int:
    return os.getpid()


def digest(rounds: int) -> tuple[int, str]:
    """CPU-bound: ``rounds`` of SHA-256; its process id and the last digest."""
    data = b"quasar"
    for _ in range(rounds):
        data = hashlib.sha256(data).digest()
    return os.getpid(), data.hex()


def who_am_i() -> list[Any]:
    ctx = current_job()
    return [ctx.job.id, ctx.attempt, ctx.worker_id, os.getpid()]


def sleep_forever(pid_file: str) -> None:
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    while True:  # ignores everything but a kill
        time.sleep(3600)


def busy_forever(pid_file: str) -> None:
    """Holds the GIL in a loop that no exception can stop: only killing its process can."""
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    threading.Event().wait(0)
    n = 0
    while True:
        n += 1


def refuse(message: str) -> None:
    raise Refused(message)


def give_up() -> None:
    raise PermanentFailure("not worth another attempt")


def snooze_once(flag_file: str) -> str:
    """Snoozes on its first run (``flag_file`` missing), then answers."""
    if not os.path.exists(flag_file):
        open(flag_file, "w").close()
        raise Snooze(0.05)
    return f"awake at attempt {current_job().attempt}"


def crash(code: int) -> None:
    os._exit(code)


def unsendable() -> Any:
    return threading.Lock()


def two_megabytes() -> str:
    """A result twice the default limit (``Limits.max_payload_bytes``, 1 MiB)."""
    return "x" * (2 << 20)


def unencodable() -> Any:
    """A result that pickles but that msgpack cannot encode."""
    return object()


@app.task(name="square")
def square(x: int) -> list[int]:
    return [x * x, os.getpid()]


def read_dependencies() -> list[list[Any]]:
    """How each dependency of the job ended, as the task in its process reads it."""
    return [
        [r.id, r.status, r.value, r.error_kind, r.error_message, r.succeeded]
        for r in current_job().dependency_results()
    ]
