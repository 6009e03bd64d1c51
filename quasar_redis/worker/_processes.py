"""Plain-function tasks in processes of their own (``Worker(processes=N)``).

Each child process runs one job at a time; the worker's event loop sends it the task's import
path, the job's arguments and what ``current_job()`` shows, and waits for the answer on the
child's pipe without blocking. A run cancelled from the worker (its timeout passed, its lease
was lost, the worker hands it back at a stop) kills its child: the job stops at once, whatever
the function does, and a fresh child takes the slot. A child that dies on its own (a crash, an
``os._exit``, the kernel's OOM killer) fails its job (``ProcessDied``) and is replaced.

Children are started with the ``spawn`` method (a fresh interpreter: nothing of the worker's
threads, locks or connections is inherited), import the task's module themselves, ignore
SIGINT and SIGTERM (the worker decides when they stop) and exit when the worker is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from .._app_batches import task_app
from ..app import App, Task
from ..errors import ConfigurationError, InvalidArgument
from ..retry import PermanentFailure
from ._job import CancelFlag, JobContext, current
from ._progress import ChildProgress, ProgressBox, ProgressReport

log = logging.getLogger("quasar_redis.worker")

STOP_TIMEOUT = 5.0  # seconds a child gets to exit once told to stop, before it is killed
START_TIMEOUT = 120.0  # seconds a new child gets to import the tasks' modules
READY = "ready"
#: The exit code of a child whose import of the script started a Worker (sysexits' EX_CONFIG).
UNGUARDED_EXIT = 78
UNGUARDED = (
    "the script that starts the worker ran again in its process (a process imports the "
    "script, as multiprocessing's spawn does) and started a worker there: start it under "
    'if __name__ == "__main__":'
)


def leave_if_bootstrapping() -> None:
    """In a child process still importing the parent's main script (a script that starts a
    Worker at import, with no ``if __name__ == "__main__":``): exit at once with
    ``UNGUARDED_EXIT``, which the worker that started the child reports as ``UNGUARDED``, rather
    than start a worker in every child. ``_inheriting`` is the flag CPython's own check reads
    (``multiprocessing.spawn._check_not_importing_main``) and that it sets for that import."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise SystemExit(UNGUARDED_EXIT)


class ProcessDied(Exception):
    """The process running a job ended before the job did (a crash, ``os._exit``, a signal)."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a task's process, as its ``__cause__``."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class TaskPath:
    """Where a child finds a task's function: a module and a name in it."""

    module: str
    name: str


def task_path(task: Task[Any, Any]) -> TaskPath:
    """The import path of a plain-function task; InvalidArgument if a fresh process could not
    import it (a function made inside another, a lambda, a module that cannot be imported)."""
    fn = task.fn
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not name or "<" in name:
        raise InvalidArgument(
            f"task {task.name!r}: processes= runs tasks by import path, and {fn!r} has none "
            "(define it at the top level of a module)"
        )
    path = TaskPath(module, name)
    try:
        found = resolve(path)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"task {task.name!r}: cannot import {module}.{name}: {exc}") from None
    if found is not fn:
        raise InvalidArgument(
            f"task {task.name!r}: {module}.{name} is not the task's function "
            "(processes= runs tasks by import path)"
        )
    return path


def resolve(path: TaskPath) -> Callable[..., Any]:
    """The function at ``path`` (a Task found there stands for its function)."""
    found: Any = importlib.import_module(path.module)
    for part in path.name.split("."):
        found = getattr(found, part)
    return found.fn if isinstance(found, Task) else found


def app_at(path: TaskPath) -> App | None:
    """The app of the Task at ``path`` (its module imported already), or None."""
    found: Any = importlib.import_module(path.module)
    for part in path.name.split("."):
        found = getattr(found, part, None)
    return found.app if isinstance(found, Task) else None


# --- the child ---------------------------------------------------------------------------------


def child_main(conn: Connection, parent_pid: int, paths: tuple[TaskPath, ...]) -> None:
    """A child's life: import the tasks' modules (so that no job's timeout pays for it), say it
    is ready, then run the jobs it is sent, one at a time, until told to stop or until the
    worker is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    functions: dict[TaskPath, Callable[..., Any]] = {}
    try:
        for path in paths:
            functions[path] = resolve(path)
    except BaseException as exc:
        conn.send(f"cannot import {path.module}.{path.name}: {type(exc).__name__}: {exc}")
        return
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        path, args, kwargs, ctx = message
        conn.send(_run(functions, path, args, kwargs, ctx, ChildProgress(conn.send)))


def _run(
    functions: dict[TaskPath, Callable[..., Any]],
    path: TaskPath,
    args: list[Any],
    kwargs: dict[str, Any],
    ctx: JobContext,
    progress: ChildProgress,
) -> tuple[bool, Any, str]:
    """``(True, value, "")`` or ``(False, exception, its traceback)``, each one that pickles;
    the job's progress goes to the worker's process before (``progress``)."""
    token = current.set(JobContext(ctx.job, ctx.worker_id, CancelFlag(), None, ctx.read, progress))
    app_token = task_app.set(app) if (app := app_at(path)) is not None else None
    try:
        fn = functions.get(path)
        if fn is None:
            fn = functions[path] = resolve(path)
        value = fn(*args, **kwargs)
    except BaseException as exc:  # the job's failure, sent back as it is (or as near as pickles)
        text = "".join(traceback.format_exception(exc))
        return False, _picklable(exc), text
    finally:
        current.reset(token)
        if app_token is not None:
            task_app.reset(app_token)
        progress.forward(flush=False)  # its last report, ahead of the answer
    try:
        pickle.dumps(value)
    except Exception as exc:
        error = BadResult(f"the result cannot be sent from its process: {exc}")
        return False, error, f"{type(value).__name__}: {error}"
    return True, value, ""


class BadResult(PermanentFailure):
    """A result that cannot leave its process (it does not pickle): the job fails for good, as
    one its serializer cannot encode does (the same code would return the same again)."""


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _exit_when_orphaned(parent_pid: int) -> None:
    while True:
        threading.Event().wait(1.0)
        if os.getppid() != parent_pid:
            os._exit(1)


# --- the worker's side -------------------------------------------------------------------------


class Child:
    """One child process and the worker's end of its pipe."""

    def __init__(
        self, context: multiprocessing.context.SpawnContext, paths: tuple[TaskPath, ...]
    ) -> None:
        parent_end, child_end = context.Pipe()
        self.conn = parent_end
        self.process: BaseProcess = context.Process(
            target=child_main,
            args=(child_end, os.getpid(), paths),
            name="quasar-task",
            daemon=True,
        )
        self.process.start()
        child_end.close()
        self.jobs = 0
        self._ready()

    def _ready(self) -> None:
        """Wait until it has imported the tasks' modules (ProcessDied if it cannot)."""
        answer: Any = None
        try:
            if self.conn.poll(START_TIMEOUT):
                answer = self.conn.recv()
        except (EOFError, OSError):
            code = self._exit_code()
            answer = (
                UNGUARDED if code == UNGUARDED_EXIT else f"its process ended with exit code {code}"
            )
        if answer != READY:
            self.kill()
            raise ProcessDied(answer or f"its process did not start in {START_TIMEOUT:g} s")

    async def call(self, message: tuple[Any, ...], progress: ProgressBox) -> tuple[bool, Any, str]:
        """Send a job and wait for its answer; the job's progress reports that come first
        go to ``progress`` (flushed, without waiting, when the task asked)."""
        loop = asyncio.get_running_loop()
        readable: list[asyncio.Future[None]] = [loop.create_future()]
        fd = self.conn.fileno()

        def ready() -> None:
            if not readable[0].done():
                readable[0].set_result(None)

        loop.add_reader(fd, ready)
        try:
            self.conn.send(message)
            while True:
                await readable[0]
                answer: Any = self.conn.recv()
                if not isinstance(answer, ProgressReport):
                    break
                readable[0] = loop.create_future()
                progress.put(answer.report)
                if answer.flush:
                    progress.flush(wait=False)
        except (EOFError, OSError):
            code = await asyncio.to_thread(self._exit_code)
            raise ProcessDied(f"its process ended with exit code {code}") from None
        finally:
            loop.remove_reader(fd)
        done: tuple[bool, Any, str] = answer
        return done

    def _exit_code(self) -> int | None:
        self.process.join(STOP_TIMEOUT)
        return self.process.exitcode

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.process.kill()
        self.process.join(STOP_TIMEOUT)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(None)
        self.process.join(STOP_TIMEOUT)
        if self.process.is_alive():
            self.kill()
        self.conn.close()


class ProcessPool:
    """``size`` child processes running plain-function tasks, one job each at a time. A child
    runs at most ``max_jobs_per_process`` jobs (None: no limit), then a fresh one takes over."""

    def __init__(self, size: int, *, max_jobs_per_process: int | None = None) -> None:
        self.size = size
        self.max_jobs = max_jobs_per_process
        self._context = multiprocessing.get_context("spawn")
        self._idle: asyncio.Queue[Child] = asyncio.Queue()
        self._all: set[Child] = set()
        self._paths: dict[str, TaskPath] = {}
        self._closed = False

    def check(self, tasks: dict[str, Task[Any, Any]]) -> None:
        """Every plain-function task must be importable by path (InvalidArgument if not)."""
        for name, task in tasks.items():
            if not task.is_async:
                self._paths[name] = task_path(task)

    async def start(self) -> None:
        """Start every child (ConfigurationError if one cannot import the tasks' modules)."""
        spawned = await asyncio.gather(
            *(self._spawn() for _ in range(self.size)), return_exceptions=True
        )
        for child in spawned:
            if isinstance(child, Child):
                self._idle.put_nowait(child)
        failed = [e for e in spawned if isinstance(e, BaseException)]
        if failed:
            await self.close()
            raise ConfigurationError(
                f"the processes for plain-function tasks could not start: {failed[0]}"
            )

    async def _spawn(self) -> Child:
        child = await asyncio.to_thread(Child, self._context, tuple(self._paths.values()))
        self._all.add(child)
        return child

    async def run(
        self,
        task: Task[Any, Any],
        args: list[Any],
        kwargs: dict[str, Any],
        ctx: JobContext,
        timeout: float | None,
    ) -> Any:
        """Run ``task`` in an idle child (waiting for one); raises what the function raised.
        Past ``timeout`` seconds in its child (TimeoutError), or cancelled, the child is
        killed and replaced."""
        path = self._paths.get(task.name) or task_path(task)
        child = await self._idle.get()
        healthy = False
        try:
            call = child.call((path, args, kwargs, ctx), ctx.progress_box)
            ok, value, text = await asyncio.wait_for(call, timeout)
            healthy = True
        finally:
            self._done_with(child, healthy)
        if ok:
            return value
        value.__cause__ = RemoteTraceback(text)
        raise value

    def _done_with(self, child: Child, healthy: bool) -> None:
        child.jobs += 1
        if healthy and not self._closed and (self.max_jobs is None or child.jobs < self.max_jobs):
            self._idle.put_nowait(child)
            return
        self._all.discard(child)
        if healthy:
            threading.Thread(target=child.stop, daemon=True).start()
        else:
            threading.Thread(target=child.kill, daemon=True).start()
        if not self._closed:
            asyncio.get_running_loop().create_task(self._replace())

    async def _replace(self) -> None:
        """A fresh child in place of one that ended: tried again every few seconds until it
        starts (jobs wait for a process meanwhile)."""
        pause = 1.0
        while True:
            try:
                child = await self._spawn()
                break
            except Exception as exc:
                log.error("could not start a process for plain-function tasks: %s", exc)
            if self._closed:
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
        if self._closed:
            self._all.discard(child)
            await asyncio.to_thread(child.stop)
        else:
            self._idle.put_nowait(child)

    async def close(self) -> None:
        """Stop every child (a child still running a job is killed)."""
        self._closed = True
        children, self._all = list(self._all), set()
        await asyncio.gather(*(asyncio.to_thread(_stop_or_kill, c) for c in children))


def _stop_or_kill(child: Child) -> None:
    if child.process.is_alive():
        child.stop()
