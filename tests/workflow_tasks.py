"""Tasks for the workflow fleet test (``test_workflows_fleet``): ``tests.workflow_tasks:app``.

The app reads its Redis URL from ``QUASAR_TEST_URL`` and its namespace from ``QUASAR_TEST_NS``;
``declare`` gives the same tasks to a test's own app of that namespace, which enqueues the
workflow. The callback lists each of its runs under a key of the namespace, so that a test
counts every run.
"""

from __future__ import annotations

import os
from typing import Any

from quasar_redis import App, current_job

from .helpers import REDIS_URL


def runs_key(root: str) -> str:
    """Where the runs of the chord's callback are listed (under the namespace's ``root``)."""
    return f"{root}test-callback-runs"


def declare(app: App) -> dict[str, Any]:
    @app.task(name="wt.square", max_attempts=1)
    async def square(i: int, fail_first: bool) -> int:
        """``i`` squared; a member asked to fail fails its first run for good (an operator's
        retry gives it a second)."""
        if fail_first and current_job().attempt == 1:
            raise ValueError(f"member {i}: planned failure of its first run")
        return i * i

    @app.task(name="wt.collect", max_attempts=5)
    async def collect(values: list[int]) -> list[int]:
        """The chord's callback: its run listed, the results it was given returned."""
        client = app.aclient()
        await client.redis.rpush(runs_key(client.keys.root), current_job().job.id)
        return values

    return {"square": square, "collect": collect}


app = App(
    os.environ.get("QUASAR_TEST_URL", REDIS_URL),
    namespace=os.environ.get("QUASAR_TEST_NS", "workflow-tasks-unset"),
)
declare(app)
