"""Tasks for the flow-control fleet tests (``test_flow_fleet``): ``tests.flow_tasks:app``.

The app reads its Redis URL from ``QUASAR_TEST_URL`` and its namespace from ``QUASAR_TEST_NS``.
It declares no queue limits: each test sets its own in Redis before its workers start.
"""

from __future__ import annotations

import asyncio
import os

from quasar_redis import App, current_job

from .helpers import REDIS_URL

#: The lease of ``nap``, whose worker a test kills: short, so that its jobs come back quickly.
#: Run ``nap`` on workers whose ``--lease-ms`` equals it.
SHORT_LEASE_MS = 2000
#: The lease of ``noop``: long, so that a loaded machine never lets one run out.
LONG_LEASE_MS = 60_000

app = App(
    os.environ.get("QUASAR_TEST_URL", REDIS_URL),
    namespace=os.environ.get("QUASAR_TEST_NS", "flow-tasks-unset"),
)


class PlannedFailure(Exception):
    """The failure of a ``nap`` job's first attempt, when asked for."""


@app.task(name="ft.noop", lease_ms=LONG_LEASE_MS, max_attempts=3, retry=0.05)
async def noop() -> None:
    """Nothing at all: the claims are what the tests look at."""


@app.task(name="ft.nap", lease_ms=SHORT_LEASE_MS, max_attempts=10, retry=0.05)
async def nap(sleep_ms: int, fail_first: bool, hang_first: bool = False) -> int:
    """Sleeps ``sleep_ms``, then fails its first attempt when ``fail_first``; with
    ``hang_first`` its first attempt never ends (only the end of its worker ends it)."""
    attempt = current_job().attempt
    if hang_first and attempt == 1:
        await asyncio.sleep(3600)
    await asyncio.sleep(sleep_ms / 1000)
    if fail_first and attempt == 1:
        raise PlannedFailure("planned failure of the first attempt")
    return attempt
