"""The app of the real-time schedule test: ``quasar worker tests.schedule_tasks:app`` (URL from
``QUASAR_TEST_URL``, namespace from ``QUASAR_TEST_NS``), with one schedule of one second."""

from __future__ import annotations

import os

from quasar_redis import App

from .helpers import REDIS_URL

app = App(
    os.environ.get("QUASAR_TEST_URL", REDIS_URL),
    namespace=os.environ.get("QUASAR_TEST_NS", "schedule-tasks-unset"),
)


@app.periodic(every=1, name="beat")
def beat() -> str:
    return "beat"
