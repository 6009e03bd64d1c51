"""Plain functions reporting progress, for ``Worker(processes=N)`` and ``quasar worker
tests.progress_tasks:app`` (URL from ``QUASAR_TEST_URL``, namespace from ``QUASAR_TEST_NS``): a
fresh process imports them by name, so they live at the top level of a module."""

from __future__ import annotations

import os

from quasar_redis import App, current_job

from .helpers import REDIS_URL

app = App(
    os.environ.get("QUASAR_TEST_URL", REDIS_URL),
    namespace=os.environ.get("QUASAR_TEST_NS", "progress-tasks-unset"),
)


def steps(n: int) -> int:
    """Reports 1..n percent of n steps, flushing the half-way one; its process id."""
    for i in range(1, n + 1):
        current_job().progress(100 * i / n, f"step {i} of {n}", flush=i == n // 2)
    return os.getpid()


app.task(steps, name="steps")
