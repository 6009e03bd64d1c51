"""The Worker: its settings, and its life: serve (or run, or ``with``), stop, drain.

While it serves, its parts are those of ``Serving`` (``_serving``: made in order, stopped in
ordered steps): the lease keeper, the reporter, the runner, the claim loops, maintenance and the
registry entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Literal

from .._hooks import WorkerContext, serving
from .._keys import check_name
from ..app import App
from ..errors import InvalidArgument
from ._health import WorkerHealth
from ._metrics import WorkerMetrics
from ._outcomes import WorkerStats
from ._prefetch import Prefetch
from ._processes import ProcessPool, leave_if_bootstrapping
from ._serving import Serving
from ._startup import (
    announce,
    check_eviction,
    check_settings,
    connect,
    declare_limits,
    freeze_startup,
    unfreeze_startup,
)

log = logging.getLogger("quasar_redis.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


class Worker:
    """Runs the tasks of ``app`` for ``queues`` with up to ``concurrency`` jobs at once.

    At start it tries to reach Redis for ``connect_timeout`` seconds (then RedisUnavailable);
    refused credentials or permissions raise AuthenticationError / PermissionDenied at once, at
    start or later. ``burst``: stop once nothing of its queues is claimable and none of its jobs
    runs (jobs scheduled for later stay). ``max_jobs``: stop once it has run that many (each
    attempt counts). ``processes``: run plain-function tasks in that many processes of their
    own (one job each at a time; a job past its timeout, or whose lease is lost, is stopped by
    killing its process), each replaced after ``max_jobs_per_process`` jobs if set; None: in
    threads. Settings out of bounds raise InvalidArgument. A Redis whose
    ``maxmemory-policy`` may evict keys is refused (ConfigurationError) unless ``allow_eviction``
    (or the app's own ``allow_eviction``, which also lets its tasks enqueue there).

    ``run()`` serves on an event loop of its own until SIGTERM / SIGINT; ``await serve()`` on
    the running loop until ``stop()``. ``with worker:`` serves in a thread of its own for the
    block, ``async with worker:`` as a task of the running loop; either stops it at the block's
    end (running jobs get their ``grace``) and waits for it.
    """

    def __init__(
        self,
        app: App,
        queues: Sequence[str] = ("default",),
        concurrency: int = 10,
        *,
        prefetch: int | Literal["auto"] = "auto",
        worker_id: str | None = None,
        lease_ms: int = 30_000,
        grace: float = 30.0,
        idle_wait: float = 5.0,
        maintenance_interval: float = 1.0,
        prune_max_age: float | None = 7 * 86_400.0,
        prune_max_count: int | None = 100_000,
        connect_timeout: float = 10.0,
        burst: bool = False,
        max_jobs: int | None = None,
        allow_eviction: bool = False,
        processes: int | None = None,
        max_jobs_per_process: int | None = None,
    ) -> None:
        if isinstance(queues, str) or not queues:
            raise InvalidArgument(f"queues must be a non-empty list of names: got {queues!r}")
        leave_if_bootstrapping()
        check_settings(
            concurrency=concurrency,
            lease_ms=lease_ms,
            grace=grace,
            connect_timeout=connect_timeout,
            max_jobs=max_jobs,
            prefetch=prefetch,
            processes=processes,
            max_jobs_per_process=max_jobs_per_process,
        )
        self.app = app
        self.queues = [check_name(q, "queue") for q in queues]
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.worker_id = worker_id or default_worker_id()
        self.lease_ms = lease_ms
        self.grace = grace
        self.idle_wait = idle_wait
        self.maintenance_interval = maintenance_interval
        self.prune_max_age = prune_max_age
        self.prune_max_count = prune_max_count
        self.connect_timeout = connect_timeout
        self.burst = burst
        self.max_jobs = max_jobs
        self.allow_eviction = allow_eviction
        self.processes = processes
        self.max_jobs_per_process = max_jobs_per_process
        self.stats = WorkerStats()
        self.metrics = WorkerMetrics()  # what quasar_redis.prometheus exposes
        self.health = WorkerHealth(lease_ms)  # what its probes read (/livez, /readyz)
        # Jobs it may hold beyond ``concurrency`` now (prefetch="auto": from recent run times).
        self._prefetch = Prefetch(prefetch, concurrency)
        self._signals = 0
        self._stop_requested = False
        # While it serves (and after): its loop, the loop's events, and its parts.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = asyncio.Event()  # no more claims, no job starts
        self._slot = asyncio.Event()  # a slot may have freed
        self._poke = asyncio.Event()  # look for work again
        self._serving: Serving | None = None
        # ``with`` / ``async with``: the thread or task serving, and what ended it
        self._thread: threading.Thread | None = None
        self._started: threading.Event | None = None  # set once it serves (or cannot)
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        # Its hooks' and tasks' view of it (``current_worker()``), made anew by each serve().
        self.context: WorkerContext | None = None
        # run(): the worker owns its process; _frozen: its start-up's objects are frozen.
        self._owns_process = False
        self._frozen = False

    # serving ------------------------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> None:
        """Run until stopped (SIGTERM / SIGINT when ``install_signals``).

        The worker owns its process: once started, what its start-up made is kept out of the
        garbage collector's full collections until it returns (``freeze_startup``)."""
        self._owns_process = True
        try:
            asyncio.run(self._serve_and_close(install_signals))
        finally:
            self._owns_process = False
            if self._frozen:
                self._frozen = False
                unfreeze_startup()

    async def _serve_and_close(self, install_signals: bool) -> None:
        try:
            await self.serve(install_signals=install_signals)
        finally:
            await self.app.aclose()  # the loop ends here: its client must not outlive it

    async def serve(self, *, install_signals: bool = False) -> None:
        """Run on the current event loop until ``stop()``."""
        self._loop = loop = asyncio.get_running_loop()
        self._stopping, self._slot, self._poke = asyncio.Event(), asyncio.Event(), asyncio.Event()
        if self._stop_requested:  # stop() came before serve() started
            self._stopping.set()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
        self.health.begin(self._stopping)
        ticker = asyncio.create_task(self.health.tick())
        try:
            await self._serve_connected()
        finally:
            ticker.cancel()
            self.health.end()

    async def _serve_connected(self) -> None:
        """Reach Redis, check it, then serve until stopped."""
        processes = self._process_pool()
        await connect(self.app, self.connect_timeout, self._stopping)
        await check_eviction(self.app, self.allow_eviction or self.app.allow_eviction)
        await declare_limits(self.app, self.queues, self.worker_id)
        self.context = WorkerContext(self.worker_id, self.app, tuple(self.queues), self.concurrency)
        token = serving.set(self.context)
        try:
            await self._serve_started(processes)
        finally:
            serving.reset(token)

    async def _serve_started(self, processes: ProcessPool | None) -> None:
        """Run the startup hooks, then serve until stopped (the shutdown hooks are a step of the
        stop: ``Serving.stop_steps``)."""
        hooks, context = self.app.hooks, self.context
        assert context is not None
        try:
            await hooks.start(context)
            if processes is not None:
                await processes.start()
        except BaseException:
            await hooks.stop(context)
            raise
        self._serving = serving = Serving(
            self,
            context,
            processes,
            prefetch=self._prefetch,
            stopping=self._stopping,
            slot=self._slot,
            poke=self._poke,
        )
        serving.start_loops()
        self.health.serving(serving.keeper.last_round)
        announce(self.worker_id, self.app, self.queues, self._settings())
        if self._owns_process and not self._frozen:
            self._frozen = freeze_startup()
        if self._started is not None:  # ``with``: the block begins
            self._started.set()
        await serving.run()

    def _process_pool(self) -> ProcessPool | None:
        """The processes plain-function tasks run in, if asked for; InvalidArgument for a task
        a fresh process cannot import."""
        if self.processes is None:
            return None
        pool = ProcessPool(self.processes, max_jobs_per_process=self.max_jobs_per_process)
        pool.check(self.app.tasks)
        return pool

    def _settings(self) -> str:
        """The settings the start line shows."""
        text = f"concurrency {self.concurrency}, prefetch {self.prefetch}"
        text += ", burst" if self.burst else ""
        text += f", {self.processes} processes" if self.processes else ""
        return text if self.max_jobs is None else f"{text}, max_jobs {self.max_jobs}"

    # stopping -----------------------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> None:
        """Stop claiming; running jobs get ``grace`` seconds (none if ``immediate``)."""
        if immediate:
            self.grace = 0.0
        self._stop_requested = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if _on_loop(loop):
            self._stop_now()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to stop
                loop.call_soon_threadsafe(self._stop_now)

    def _stop_now(self) -> None:
        self._stopping.set()
        self._slot.set()
        if self._serving is not None:
            runner = self._serving.runner
            runner.hand_back_queued()  # (the grace is for jobs that run)
            if self.grace <= 0:
                runner.hand_back_all()

    def _on_signal(self) -> None:
        self._signals += 1
        immediate = self._signals > 1
        running = self._serving.runner.live if self._serving is not None else 0
        log.info("worker %s: %s", self.worker_id, stop_message(running, self.grace, immediate))
        self.stop(immediate=immediate)

    # with / async with --------------------------------------------------------------------------

    def __enter__(self) -> Worker:
        """Serve in a thread of its own, on an event loop of its own, until the block ends.

        The block begins once it serves; an error that keeps it from serving (Redis refused or
        out of reach) is raised here."""
        self._started = started = threading.Event()
        self._error = None
        self._thread = threading.Thread(
            target=self._serve_in_thread, name="quasar-worker", daemon=True
        )
        self._thread.start()
        started.wait()
        if self._error is not None:
            self.__exit__(None, None, None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop (running jobs get their grace) and wait until it has stopped and closed its
        connections; an exception that ended it is raised here."""
        self.stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _serve_in_thread(self) -> None:
        try:
            asyncio.run(self._serve_and_close(False))
        except BaseException as exc:  # raised in the thread that leaves the ``with`` block
            self._error = exc
        finally:
            if self._started is not None:
                self._started.set()

    async def __aenter__(self) -> Worker:
        """Serve as a task of the running event loop until the block ends."""
        self._task = asyncio.create_task(self.serve())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop (running jobs get their grace) and wait until it has stopped. The loop's asyncio
        client (``app.aclient()``) is the app's: ``await app.aclose()`` closes it."""
        task, self._task = self._task, None
        self.stop()
        if task is not None:
            await task


def stop_message(running: int, grace: float, immediate: bool) -> str:
    """What a stop asked for by a signal does, for its log line."""
    jobs = f"{running} running job{'' if running == 1 else 's'}"
    if immediate or grace <= 0:
        return f"stopping now: handing back {jobs}" if running else "stopping now"
    if not running:
        return "stopping: no job running"
    return f"stopping: finishing {jobs}, up to {grace:g} s; Ctrl-C again to stop now"


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
