"""``quasar demo``: a realistic mix of jobs through in-process workers, with live progress.

The mix of jobs and their tasks are in ``_demo_jobs``.

``--workers`` workers run as asyncio tasks on one event loop (``await worker.serve()``) while the
jobs are enqueued in bulk (``App.enqueue_many``). Progress comes from ``counts(queue)``; the
summary adds the workers' own counters and the enqueue-to-start latency read back from the
completed jobs (``attempted_at - inserted_at``, for jobs due at enqueue and claimed once).
``--partitions P``: the namespace has P partitions, and the App and its clients are made so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import click
import redis
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import _types as t
from .._calls import NewJob
from .._connect import sync_client
from .._urls import MEMORY_URL, redact, where
from ..app import App
from ..errors import QuasarError
from ..worker import Worker, WorkerStats
from ._demo_jobs import QUEUES, declare, plan
from ._options import runtime_error
from .example import delete_namespace, holds_keys

ENQUEUE_BATCH = 500
POLL_SECONDS = 0.05  # how often the demo checks whether every job has finished
SHOW_SECONDS = 0.25  # how often the live view is redrawn
PLAIN_SECONDS = 0.5  # how often a progress line is printed when stdout is not a terminal
STATUS_ORDER = (
    t.Status.AVAILABLE,
    t.Status.SCHEDULED,
    t.Status.BLOCKED,
    t.Status.RETRYABLE,
    t.Status.EXECUTING,
    t.Status.COMPLETED,
    t.Status.DISCARDED,
    t.Status.CANCELLED,
)
FINISHED = (t.Status.COMPLETED, t.Status.DISCARDED, t.Status.CANCELLED)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class DemoConfig:
    jobs: int = 2000
    workers: int = 2
    concurrency: int = 20
    timeout: float = 120.0
    log_level: str = "WARNING"
    partitions: int | None = None  # None: one, and no read of the namespace's record


# --- watching ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """Counts of every demo queue at one moment, ``elapsed`` seconds into the run."""

    counts: dict[str, t.QueueCounts]
    elapsed: float

    def total(self, status: t.Status) -> int:
        return sum(getattr(c, status.value) for c in self.counts.values())

    @property
    def finished(self) -> int:
        return sum(self.total(status) for status in FINISHED)


async def snapshot(app: App, started: float) -> Snapshot:
    client = app.aclient()
    counts = {queue: await client.counts(queue) for queue in QUEUES}
    return Snapshot(counts, time.monotonic() - started)


def counts_table(snap: Snapshot) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="jobs by status", title_justify="left")
    table.add_column("status")
    for queue in QUEUES:
        table.add_column(queue, justify="right")
    table.add_column("all", justify="right", style="bold")
    for status in STATUS_ORDER:
        row = [str(getattr(snap.counts[q], status.value)) for q in QUEUES]
        table.add_row(status.value, *row, str(snap.total(status)))
    return table


def say(console: Console, text: str) -> None:
    """A plain line: no markup, no highlighting, never wrapped."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


class View(Protocol):
    def show(self, snap: Snapshot) -> None: ...


class LiveView:
    """A progress bar and the counts table, redrawn in place (stdout is a terminal)."""

    def __init__(self, console: Console, total: int) -> None:
        self.progress = Progress(
            TextColumn("finished"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.task = self.progress.add_task("jobs", total=total, rate="")
        self.live = Live(console=console, refresh_per_second=8)

    def __enter__(self) -> LiveView:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def show(self, snap: Snapshot) -> None:
        rate = f"{snap.finished / snap.elapsed:,.0f} jobs/s" if snap.elapsed > 0 else ""
        self.progress.update(self.task, completed=snap.finished, rate=rate)
        self.live.update(Group(self.progress, counts_table(snap)))


class PlainView:
    """A progress line every half second (stdout is not a terminal: CI, pipes, tests)."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self.last = -math.inf

    def show(self, snap: Snapshot) -> None:
        done = snap.finished >= self.total
        if snap.elapsed - self.last < PLAIN_SECONDS and not done:
            return
        self.last = snap.elapsed
        parts = [f"{s.value} {snap.total(s)}" for s in STATUS_ORDER]
        say(
            self.console,
            f"[{snap.elapsed:6.2f}s] finished {snap.finished}/{self.total}: {', '.join(parts)}",
        )


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the run saw: the last snapshot, the workers' counters, the jobs due at enqueue."""

    snap: Snapshot
    stats: WorkerStats
    due_now: frozenset[str]
    enqueue_seconds: float


def sum_stats(stats: Sequence[WorkerStats]) -> WorkerStats:
    total = WorkerStats()
    for s in stats:
        for f in dataclasses.fields(WorkerStats):
            setattr(total, f.name, getattr(total, f.name) + getattr(s, f.name))
    return total


async def enqueue(app: App, jobs: Sequence[NewJob]) -> frozenset[str]:
    """Enqueue in batches (a thread, not to block the workers); ids of jobs due at once."""
    due: set[str] = set()
    for i in range(0, len(jobs), ENQUEUE_BATCH):
        batch = jobs[i : i + ENQUEUE_BATCH]
        handles = await asyncio.to_thread(app.enqueue_many, batch)
        due.update(h.id for h, j in zip(handles, batch, strict=True) if not _later(j))
    return frozenset(due)


def _later(job: NewJob) -> bool:
    return bool(job.dependencies or job.delay_ms or job.available_at)


class DemoTimeout(Exception):
    def __init__(self, snap: Snapshot) -> None:
        super().__init__(f"{snap.finished} jobs finished after {snap.elapsed:.1f}s")
        self.snap = snap


def check_serving(serving: Sequence[asyncio.Task[None]]) -> None:
    """Raise what stopped a worker, if one has stopped (it should serve until told to stop)."""
    for task in serving:
        if task.done():
            task.result()
            raise click.ClickException("a worker stopped before every job had finished")


async def watch(
    app: App,
    total: int,
    view: View,
    started: float,
    timeout: float,
    serving: Sequence[asyncio.Task[None]],
) -> Snapshot:
    """Poll the counts until every job has finished; redraw ``view`` a few times a second."""
    shown = -math.inf
    while True:
        check_serving(serving)
        snap = await snapshot(app, started)
        done = snap.finished >= total
        if done or snap.elapsed - shown >= SHOW_SECONDS:
            view.show(snap)
            shown = snap.elapsed
        if done:
            return snap
        if snap.elapsed > timeout:
            raise DemoTimeout(snap)
        await asyncio.sleep(POLL_SECONDS)


async def run_workers(app: App, cfg: DemoConfig, jobs: Sequence[NewJob], view: View) -> Outcome:
    """Start the workers, enqueue, watch until every job has finished, stop the workers."""
    workers = [
        Worker(app, QUEUES, cfg.concurrency, grace=5.0, prune_max_age=None, prune_max_count=None)
        for _ in range(cfg.workers)
    ]
    started = time.monotonic()
    serving = [asyncio.create_task(w.serve()) for w in workers]
    await asyncio.sleep(0)  # let them start: a stop() before serve() runs would be lost
    try:
        due_now = await enqueue(app, jobs)
        enqueue_seconds = time.monotonic() - started
        snap = await watch(app, len(jobs), view, started, cfg.timeout, serving)
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*serving, return_exceptions=True)
    return Outcome(snap, sum_stats([w.stats for w in workers]), due_now, enqueue_seconds)


async def latencies(app: App, due_now: frozenset[str]) -> list[int]:
    """Enqueue-to-start (ms) of the completed jobs that were due at enqueue and claimed once."""
    client = app.aclient()
    out: list[int] = []
    for queue in QUEUES:
        cursor: str | None = None
        while True:
            page = await client.page_jobs(queue, t.Status.COMPLETED, after=cursor, limit=1000)
            out.extend(
                job.attempted_at - job.inserted_at
                for job in page.jobs
                if job.id in due_now and job.fencing_version == 1 and job.attempted_at is not None
            )
            cursor = page.next_cursor
            if cursor is None:
                break
    return out


def percentile(values: Sequence[int], q: float) -> int | None:
    """The nearest-rank percentile (``q`` in 0..1) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# --- the summary -------------------------------------------------------------------------------


def summary_table(cfg: DemoConfig, outcome: Outcome, waits: Sequence[int]) -> Table:
    snap, stats = outcome.snap, outcome.stats
    seconds = max(snap.elapsed, 1e-9)
    p50, p99 = percentile(waits, 0.50), percentile(waits, 0.99)
    table = Table(
        box=box.SIMPLE_HEAD,
        title="summary",
        title_justify="left",
        show_header=False,
        caption="(*) the jobs due at enqueue and claimed once; every job is enqueued at the "
        "start, so this is mostly time spent in the backlog",
        caption_justify="left",
    )
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_column("note", style="dim")
    table.add_row("jobs", str(cfg.jobs), f"{cfg.workers} workers x concurrency {cfg.concurrency}")
    table.add_row(
        "total time", f"{snap.elapsed:.2f} s", f"enqueue took {outcome.enqueue_seconds:.2f} s"
    )
    table.add_row(
        "throughput", f"{snap.finished / seconds:,.1f} jobs/s", "finished jobs / total time"
    )
    table.add_row("latency p50", _ms(p50), f"enqueue to start, over {len(waits)} jobs (*)")
    table.add_row("latency p99", _ms(p99), "")
    table.add_row("completed", str(snap.total(t.Status.COMPLETED)), "")
    table.add_row(
        "discarded", str(snap.total(t.Status.DISCARDED)), "failed for good, or out of attempts"
    )
    table.add_row("cancelled", str(snap.total(t.Status.CANCELLED)), "a dependency was discarded")
    table.add_row("attempts", str(stats.claimed), "claims, snoozed runs included")
    table.add_row("retries", str(stats.retried), "failed attempts retried by the policy")
    table.add_row("snoozed", str(stats.snoozed), "handed back without using an attempt")
    table.add_row("leases lost", str(stats.lost), "")
    return table


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value} ms"


# --- backends ----------------------------------------------------------------------------------


@contextmanager
def open_app(
    url: str, namespace: str, console: Console, partitions: int | None = None
) -> Iterator[App]:
    """The demo's App (of ``partitions``): embedded (``memory://``), or on ``url`` in an empty
    namespace that is deleted after."""
    if url == MEMORY_URL:
        yield App(url, namespace=namespace, partitions=partitions)
        return
    client = sync_client(url, socket_timeout=10)
    try:
        app = App(url, namespace=namespace, partitions=partitions)
        keys = app.client.keys
        client.ping()
        if holds_keys(client, keys, partitions):
            raise click.ClickException(
                f"namespace {namespace!r} already holds keys at {redact(url)}"
            )
        try:
            yield app
        finally:
            app.close()
            n = delete_namespace(client, keys, partitions)
            say(console, f"deleted the {n} keys of namespace {namespace!r}")
    except redis.RedisError as exc:
        raise runtime_error(exc, url) or exc from exc
    finally:
        client.close()


class OneLine(logging.Formatter):
    """A formatter that leaves tracebacks out, so that each record stays one line: the demo's
    failures are on purpose, and their tracebacks are in each job's failure history."""

    def format(self, record: logging.LogRecord) -> str:
        kept = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = kept


@contextmanager
def job_logging(level: str, console: Console) -> Iterator[None]:
    """The workers' log lines (one per job outcome at INFO) at ``level``, for this run only;
    tracebacks only at DEBUG."""
    handler: logging.Handler
    if console.is_terminal:
        handler = RichHandler(console=console, show_path=False)
    else:
        handler = logging.StreamHandler(sys.stderr)
    plain = "%(message)s" if console.is_terminal else LOG_FORMAT
    verbose = level.upper() == "DEBUG"
    handler.setFormatter(logging.Formatter(plain) if verbose else OneLine(plain))
    logger = logging.getLogger("quasar_redis")
    before = logger.level
    logger.setLevel(level.upper())
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


async def _main(app: App, cfg: DemoConfig, console: Console) -> tuple[Outcome, list[int]]:
    jobs = plan(declare(app), cfg.jobs, random.Random(), cfg.partitions)
    try:
        if console.is_terminal:
            with LiveView(console, len(jobs)) as live:
                outcome = await run_workers(app, cfg, jobs, live)
        else:
            outcome = await run_workers(app, cfg, jobs, PlainView(console, len(jobs)))
        return outcome, await latencies(app, outcome.due_now)
    finally:
        await app.aclose()


def run(url: str, namespace: str, cfg: DemoConfig, console: Console) -> Outcome:
    """Run the demo and print its summary; ClickException on a timeout or a Redis error."""
    on = where(url)
    parts = "" if cfg.partitions is None else f" ({cfg.partitions} partitions)"
    say(
        console,
        f"quasar demo: {cfg.jobs} jobs, {cfg.workers} workers, namespace {namespace!r}{parts}"
        f" on {on}",
    )
    try:
        with (
            open_app(url, namespace, console, cfg.partitions) as app,
            job_logging(cfg.log_level, console),
        ):
            outcome, waits = asyncio.run(_main(app, cfg, console))
            if not console.is_terminal:  # (a terminal still shows the live view's last frame)
                console.print(counts_table(outcome.snap))
            console.print(summary_table(cfg, outcome, waits))
    except DemoTimeout as exc:
        console.print(counts_table(exc.snap))
        raise click.ClickException(f"the demo did not finish in {cfg.timeout}s: {exc}") from exc
    except QuasarError as exc:
        raise runtime_error(exc, url) or exc from exc
    return outcome
