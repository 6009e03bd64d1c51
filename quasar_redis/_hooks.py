"""Worker lifecycle hooks and job middleware, registered on the ``App``.

- ``@app.on_startup`` / ``@app.on_shutdown``: a function (plain or ``async def``) of one
  argument, the worker's ``WorkerContext``. Startup hooks run in the order registered once the
  worker has reached Redis and before it claims anything; one that raises stops the start
  (``HookError``). Shutdown hooks run in the order registered once the worker's jobs have ended
  (and after a failed start too); one that raises is logged and the others still run.
- ``@app.middleware``: wraps every run of a task, in the order registered (the first is the
  outermost). Three forms: a generator function of the job (sync: a context manager around the
  run, on the worker's event loop), an async generator function of the job (the same, async),
  or an ``async def (job, call_next)`` that returns ``await call_next()`` (it may change the
  result). An exception a middleware raises fails the job as the task's own would.

Plain-function hooks run in a thread of their own, so that a slow one does not block the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._origins import origin
from .errors import HookError

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger("quasar_redis.worker")

CallNext = Callable[[], Awaitable[Any]]
#: A middleware in its one inner form: around a run, given the job and the rest of the chain.
Around = Callable[[Any, CallNext], Awaitable[Any]]
Hook = Callable[["WorkerContext"], Any]


@dataclass(eq=False)
class WorkerContext:
    """One serving worker, as its hooks and its tasks see it (``current_worker()``).

    ``state`` is free for the application: a startup hook puts what the tasks share on it (a
    connection pool, a client), a shutdown hook closes it. It lives as long as one ``serve()``.
    """

    worker_id: str
    app: App
    queues: tuple[str, ...]
    concurrency: int
    state: types.SimpleNamespace = field(default_factory=types.SimpleNamespace)


#: The worker whose hooks run, or whose loop runs the caller (see ``current_worker``).
serving: contextvars.ContextVar[WorkerContext] = contextvars.ContextVar("quasar_worker")


def name_of(fn: Any) -> str:
    """A hook's or a middleware's name for messages: ``module.qualname``."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}.{qualname}" if module else qualname


def _takes(fn: Any, count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments."""
    try:
        inspect.signature(fn).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins): trust the caller
        return True
    return True


def check_hook(fn: Any, what: str) -> Hook:
    """``fn`` if it is a function of one argument, else TypeError saying what a hook is."""
    if not callable(fn) or not _takes(fn, 1):
        raise TypeError(
            f"{what} hook {name_of(fn)} must be a function (plain or async def) of one argument, "
            "the WorkerContext"
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"{what} hook {name_of(fn)} must not be a generator function")
    hook: Hook = fn
    return hook


def as_around(fn: Any) -> Around:
    """A middleware in its inner form; TypeError for a function of none of the three forms."""
    if inspect.isasyncgenfunction(fn) and _takes(fn, 1):
        manager = contextlib.asynccontextmanager(fn)

        async def around_async(job: Any, call_next: CallNext) -> Any:
            async with manager(job):
                return await call_next()
            return None  # the middleware swallowed the run's exception: the run returned None

        return around_async
    if inspect.isgeneratorfunction(fn) and _takes(fn, 1):
        sync_manager = contextlib.contextmanager(fn)

        async def around_sync(job: Any, call_next: CallNext) -> Any:
            with sync_manager(job):
                return await call_next()
            return None

        return around_sync
    if inspect.iscoroutinefunction(fn) and _takes(fn, 2):
        around: Around = fn
        return around
    raise TypeError(
        f"middleware {name_of(fn)} must be a generator function of the job (sync: it yields once, "
        "around the run), an async generator function of the job, or an async function of "
        "(job, call_next) that returns await call_next()"
    )


def chain(arounds: tuple[Around, ...], job: Any, call: CallNext) -> Awaitable[Any]:
    """The run ``call`` inside every middleware of ``arounds``, the first outermost."""

    def step(index: int) -> Awaitable[Any]:
        if index == len(arounds):
            return call()
        return arounds[index](job, lambda: step(index + 1))

    return step(0)


class Hooks:
    """The hooks and middleware of one ``App``, in the order registered."""

    def __init__(self) -> None:
        self.startup: list[Hook] = []
        self.shutdown: list[Hook] = []
        self.middleware: list[Any] = []
        self.arounds: tuple[Around, ...] = ()

    def add_startup(self, fn: Any) -> None:
        self.startup.append(check_hook(fn, "startup"))

    def add_shutdown(self, fn: Any) -> None:
        self.shutdown.append(check_hook(fn, "shutdown"))

    def add_middleware(self, fn: Any) -> None:
        around = as_around(fn)
        self.middleware.append(fn)
        self.arounds = (*self.arounds, around)

    async def start(self, worker: WorkerContext) -> None:
        """Run the startup hooks in order; the first that raises: HookError (the rest do not
        run)."""
        for hook in self.startup:
            try:
                await _call(hook, worker)
            except Exception as exc:
                log.debug(
                    "worker %s: startup hook %s failed",
                    worker.worker_id,
                    name_of(hook),
                    exc_info=True,
                )
                raise HookError("startup", name_of(hook), origin(exc), exc) from exc

    async def stop(self, worker: WorkerContext) -> None:
        """Run every shutdown hook in order; one that raises is logged, the next still runs."""
        for hook in self.shutdown:
            try:
                await _call(hook, worker)
            except Exception:
                log.error(
                    "worker %s: shutdown hook %s failed",
                    worker.worker_id,
                    name_of(hook),
                    exc_info=True,
                )


async def _call(hook: Hook, worker: WorkerContext) -> None:
    if inspect.iscoroutinefunction(hook):
        await hook(worker)
        return
    result = await asyncio.to_thread(hook, worker)
    if inspect.isawaitable(result):  # a callable object whose __call__ is async
        await result
