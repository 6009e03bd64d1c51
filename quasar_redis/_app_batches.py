"""Batches at the application's level (docs/workflows.md, "Batches"): ``App.open_batch`` and the
rest, and the members' results a callback reads (``current_job().batch_results()``), each
decoded with the app's serializer."""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._batch import PAGE_MAX, BatchInfo, BatchOpenResult, BatchPage
from ._calls import NewJob
from ._dependency_calls import DependencyResult, result_of

if TYPE_CHECKING:
    from ._call_codec import CallCodec
    from .aio import AsyncQuasar
    from .app import App
    from .client import Quasar


#: The app of the task a worker's child process runs (``Worker(processes=N)``): there the job's
#: context has no worker, and the task's own module made the app.
task_app: contextvars.ContextVar[App] = contextvars.ContextVar("quasar_task_app")


def page_results(codec: CallCodec, page: BatchPage) -> list[DependencyResult]:
    """The page's members as a callback's task sees them."""
    return [
        result_of(m.id, m.job, None if m.job is None else m.job.status(page.now), codec.result_of)
        for m in page.members
    ]


def member_results(app: App, client: Quasar, batch_id: str) -> list[DependencyResult]:
    """Every member's result, in the order they joined: one call per 1,000 members."""
    out: list[DependencyResult] = []
    start: int | None = 0
    while start is not None:
        page = client.batch_results(batch_id, start=start, count=PAGE_MAX)
        out += page_results(app.codec, page)
        start = page.next_start
    return out


async def amember_results(app: App, client: AsyncQuasar, batch_id: str) -> list[DependencyResult]:
    """``member_results`` on the asyncio client."""
    out: list[DependencyResult] = []
    start: int | None = 0
    while start is not None:
        page = await client.batch_results(batch_id, start=start, count=PAGE_MAX)
        out += page_results(app.codec, page)
        start = page.next_start
    return out


class AppBatches:
    """What ``App`` does with batches: its sync client's calls, results decoded."""

    codec: CallCodec

    @property
    def client(self) -> Quasar:
        raise NotImplementedError  # pragma: no cover (App's)

    def open_batch(
        self,
        batch_id: str,
        *,
        on_success: NewJob | None = None,
        on_failure: NewJob | None = None,
        on_complete: NewJob | None = None,
        jobs: Sequence[NewJob] = (),
        close: bool = False,
    ) -> BatchOpenResult:
        """Open a batch (``Quasar.open_batch``); a callback is a ``NewJob``, such as a task
        call's ``task.job(...)``. Members join with ``task.options(batch=batch_id)``, or are
        given as ``jobs`` (task calls' ``task.job(...)``) to join in the same call, all or
        nothing, ``close`` closing it then."""
        return self.client.open_batch(
            batch_id,
            on_success=on_success,
            on_failure=on_failure,
            on_complete=on_complete,
            jobs=jobs,
            close=close,
        )

    def close_batch(self, batch_id: str) -> bool:
        """Take no more members (``Quasar.close_batch``)."""
        return self.client.close_batch(batch_id)

    def batch(self, batch_id: str) -> BatchInfo | None:
        """The batch's counts and callbacks (``Quasar.batch``), or None."""
        return self.client.batch(batch_id)

    def batch_results(self, batch_id: str) -> list[DependencyResult]:
        """Every member's result, decoded with the app's serializer, in the order they
        joined."""
        app: Any = self
        return member_results(app, self.client, batch_id)
