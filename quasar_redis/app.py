"""The task API: an application bound to Redis, tasks declared with a decorator, job handles.

::

    app = App("redis://localhost:6379/0", namespace="shop")  # or QUASAR_REDIS_URL / REDIS_URL

    @app.task(queue="emails", max_attempts=5, retry=Exponential(base=2))
    def send_receipt(order_id: int) -> str:
        ...

    handle = send_receipt.enqueue(42)
    handle.result(timeout=30)

Arguments and results travel as the app's serializer makes them (msgpack with extension types
by default, see ``serializers``); a call the function cannot take, or whose arguments cannot be
encoded, is refused at enqueue (``InvalidTaskCall``), before anything is sent.
``App("memory://")`` runs on an embedded in-memory server that no other process sees.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from . import _tracing
from . import _types as t
from ._base import ClientOptions
from ._binding import CallCheck, script_name_problem, unencodable
from ._calls import Limits, NewJob
from ._codec import Encoded
from ._connect import async_client, sync_client
from ._handles import JobHandle
from ._hooks import Hook, Hooks, check_hook
from ._ids import id_error
from ._keys import check_name
from ._urls import MEMORY_URL
from .aio import AsyncQuasar
from .client import Quasar
from .errors import (
    ConfigurationError,
    CorruptDataError,
    InvalidTaskCall,
    JobRefusedError,
    QuasarError,
)
from .retry import Exponential, PolicyLike, RetryPolicy, as_policy
from .serializers import MSGPACK, Serializer, name_of

if TYPE_CHECKING:
    from ._memory import MemoryServer

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M")


URL_VARIABLES = ("QUASAR_REDIS_URL", "REDIS_URL")


def redis_url(url: str | None = None) -> str:
    """``url``, else the first of ``QUASAR_REDIS_URL`` and ``REDIS_URL`` set in the environment.

    Neither: ConfigurationError, so that a producer that forgets its URL fails at once instead
    of enqueuing into a server no worker sees.
    """
    if url is not None:
        return url
    for variable in URL_VARIABLES:
        if os.environ.get(variable):
            return os.environ[variable]
    raise ConfigurationError(
        "no Redis URL: pass one (App('redis://127.0.0.1:6379/0')) or set QUASAR_REDIS_URL "
        f"(or REDIS_URL); App({MEMORY_URL!r}) asks for an embedded in-memory server, which no "
        "other process sees"
    )


def _memory_server() -> MemoryServer:
    # Imported here, not above: fakeredis and lupa load only when memory:// is asked for.
    module = importlib.import_module(f"{__package__}._memory")
    server: MemoryServer = module.MemoryServer()
    return server


class Connector:
    """Makes sync and asyncio clients of one Redis server, or of one embedded server.

    ``url``: a Redis URL (``redis://``, ``rediss://`` for TLS, ``unix://``; a Redis Cluster,
    ``redis+cluster://host:port[,host:port...]``; a primary that Redis Sentinel manages,
    ``redis+sentinel://host:26379[,host:port...]/service_name``: see docs/operations.md), or
    ``memory://`` for an embedded in-memory server private to this connector; ``None``: the
    URL in the environment (``QUASAR_REDIS_URL``, then ``REDIS_URL``), else ConfigurationError.
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = redis_url(url)
        self._server = _memory_server() if self.url == MEMORY_URL else None

    @property
    def embedded(self) -> bool:
        """Whether the clients are of an embedded server (``memory://``)."""
        return self._server is not None

    def sync(self) -> Any:
        """A new sync client, on a connection pool of its own."""
        if self._server is not None:
            return self._server.sync()
        return sync_client(self.url)

    def asyncio(self) -> Any:
        """A new asyncio client, on a connection pool of its own."""
        if self._server is not None:
            return self._server.asyncio()
        return async_client(self.url)


def payload_of(
    args: Sequence[Any], kwargs: dict[str, Any], trace: dict[str, str] | None = None
) -> dict[str, Any]:
    """The payload envelope of a call: ``a`` its positional arguments, ``k`` its keyword
    arguments, and ``t`` the trace context of its enqueue when tracing is on."""
    if trace is None:
        return {"a": list(args), "k": kwargs}
    return {"a": list(args), "k": kwargs, "t": trace}


def args_of(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """The call arguments in a job payload made by ``payload_of``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("a", []), list):
        raise TypeError("the payload is not a task call (expected {'a': [...], 'k': {...}})")
    kwargs = payload.get("k", {})
    if not isinstance(kwargs, dict):
        raise TypeError("the payload's keyword arguments are not a map")
    return list(payload.get("a", [])), kwargs


def _ms(task: str, what: str, seconds: float | None) -> int | None:
    """Seconds as whole ms; ``InvalidTaskCall`` for infinity or NaN, which have none."""
    if seconds is None:
        return None
    if not math.isfinite(seconds):
        problem = f"{what} must be a finite number of seconds, not {seconds!r}"
        raise InvalidTaskCall(task, t.InvalidJob(problem))
    return round(seconds * 1000)


def _at_ms(task: str, run_at: datetime | float | None) -> int | None:
    if isinstance(run_at, datetime):
        return round(run_at.timestamp() * 1000)
    return _ms(task, "run_at", run_at)


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-call options: ``id`` makes the enqueue idempotent; ``delay``/``run_at`` schedule it."""

    id: str | None = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    delay: float | None = None
    run_at: datetime | float | None = None
    depends_on: Sequence[str | JobHandle | t.Job] = ()
    on_dependency_failure: t.DependencyPolicy = "block"


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A function declared with ``App.task``: call it to run it here, enqueue it to run anywhere."""

    app: App
    fn: Callable[P, R]
    name: str
    queue: str = "default"
    max_attempts: int = 3
    priority: int = 0
    lease_ms: int | None = None  # None: the lease of the worker that runs it
    retry: RetryPolicy = field(default_factory=Exponential)
    timeout: float | None = None
    options_: EnqueueOptions = field(default_factory=EnqueueOptions)
    result_ttl: float | None = None  # seconds; None: the namespace-wide prune only

    @cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @cached_property
    def result_ttl_ms(self) -> int | None:
        """``result_ttl`` in milliseconds, as the completion sends it."""
        return None if self.result_ttl is None else round(self.result_ttl * 1000)

    @cached_property
    def call_check(self) -> CallCheck:
        """The function's signature, read once, that every enqueued call is checked against."""
        return CallCheck(self.fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def options(self, **opts: Any) -> Task[P, R]:
        """The same task with per-call options (see ``EnqueueOptions``)."""
        return replace(self, options_=replace(self.options_, **opts))

    def job(self, *args: P.args, **kwargs: P.kwargs) -> NewJob:
        """The job this call would enqueue, for ``App.enqueue_many``; ``InvalidTaskCall`` for a
        call the function cannot take, whose arguments cannot be encoded, or whose ``id`` or
        ``depends_on`` names no job id (``docs/lifecycle.md``, job ids). With tracing on, a
        ``create`` span: the job's run continues its trace."""
        tracer = self.app.tracer()
        if tracer is None:
            return self._new_job(args, kwargs, None)
        with _tracing.producing(tracer, "create", self._queue, self.app.namespace, task=self.name):
            return self._new_job(args, kwargs, _tracing.carrier())

    @property
    def _queue(self) -> str:
        return self.queue if self.options_.queue is None else self.options_.queue

    def _new_job(
        self, args: Sequence[Any], kwargs: dict[str, Any], trace: dict[str, str] | None
    ) -> NewJob:
        o = self.options_
        deps = [_dep_id(d) for d in o.depends_on]
        for value, what in [(o.id, "id"), *((d, "dependency") for d in deps)]:
            if value is not None and (problem := id_error(value, what)) is not None:
                raise InvalidTaskCall(self.name, t.InvalidJob(problem))
        return NewJob(
            stage=self.name,
            payload=self.app.encode_call(self, args, kwargs, trace),
            id=o.id,
            queue=self.queue if o.queue is None else o.queue,
            dependencies=deps,
            priority=self.priority if o.priority is None else o.priority,
            max_attempts=self.max_attempts if o.max_attempts is None else o.max_attempts,
            available_at=_at_ms(self.name, o.run_at),
            delay_ms=_ms(self.name, "delay", o.delay),
            on_dependency_failure=o.on_dependency_failure,
        )

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Enqueue a call; with an ``id`` option, enqueuing the same id again is a no-op. With
        tracing on, inside a ``send`` span whose trace the job's run continues."""
        tracer = self.app.tracer()
        if tracer is None:
            new = self._new_job(args, kwargs, None)
            return self.app._handle(new, self.app.client.enqueue_job(new))
        with self._sending(tracer) as span:
            new = self._new_job(args, kwargs, _tracing.carrier())
            handle = self.app._handle(new, self.app.client.enqueue_job(new))
            span.set_attribute("messaging.message.id", handle.id)
            return handle

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """``enqueue`` for asyncio code."""
        tracer = self.app.tracer()
        if tracer is None:
            new = self._new_job(args, kwargs, None)
            return self.app._handle(new, await self.app.aclient().enqueue_job(new))
        with self._sending(tracer) as span:
            new = self._new_job(args, kwargs, _tracing.carrier())
            handle = self.app._handle(new, await self.app.aclient().enqueue_job(new))
            span.set_attribute("messaging.message.id", handle.id)
            return handle

    def _sending(self, tracer: Any) -> Any:
        return _tracing.producing(tracer, "send", self._queue, self.app.namespace, task=self.name)


def _dep_id(dep: str | JobHandle | t.Job) -> str:
    return dep if isinstance(dep, str) else dep.id


class App:
    """Tasks and clients of one namespace of one Redis.

    ``url=None`` takes ``QUASAR_REDIS_URL``, then ``REDIS_URL``, from the environment, and
    refuses (ConfigurationError) without either; ``"memory://"`` runs on an embedded in-memory
    server (see ``Connector``). ``with App(...) as app:`` (or ``async with``) closes the clients
    the app opened. ``serializer`` encodes task arguments and results (``serializers``; msgpack
    with extension types by default): producers and workers of a namespace must share it.
    ``tracing=False`` turns OpenTelemetry spans off for this app (docs/observability.md); hooks
    and middleware for its workers are declared with ``on_startup``, ``on_shutdown`` and
    ``middleware`` (docs/hooks.md). ``allow_eviction=True`` lets its clients enqueue, and its
    workers serve, where Redis may evict keys (``maxmemory-policy``: docs/guarantees.md).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str = "default",
        connector: Connector | None = None,
        limits: Limits | None = None,
        events: bool = True,
        serializer: Serializer | None = None,
        tracing: bool = True,
        allow_eviction: bool = False,
    ) -> None:
        self.namespace = check_name(namespace, "namespace")
        self.connector = connector or Connector(url)
        self.limits = limits
        self.events = events
        self.serializer: Serializer = MSGPACK if serializer is None else serializer
        self.tracing = tracing
        self.allow_eviction = allow_eviction
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.hooks = Hooks()
        self._client: Quasar | None = None
        self._aclients: dict[int, AsyncQuasar] = {}

    @property
    def client(self) -> Quasar:
        """The sync client (one per app)."""
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def new_client(self) -> Quasar:
        """A sync client on a connection pool of its own (for a thread of its own), closed by
        its ``close()``."""
        return Quasar.owning(self.connector.sync(), self.namespace, **self._options())

    def _options(self) -> ClientOptions:
        """The options of the clients this app makes."""
        return ClientOptions(
            limits=self.limits, events=self.events, allow_eviction=self.allow_eviction
        )

    def aclient(self) -> AsyncQuasar:
        """The asyncio client of the running event loop (one per loop)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(id(loop))
        if client is None:
            client = AsyncQuasar.owning(self.connector.asyncio(), self.namespace, **self._options())
            self._aclients = {id(loop): client}
        return client

    async def aclose(self) -> None:
        """Close the asyncio client of the running event loop (before the loop ends)."""
        client = self._aclients.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        """Close the sync client."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the running event loop's asyncio client, then the sync client."""
        await self.aclose()
        self.close()

    @overload
    def task(
        self,
        fn: Callable[P, R],
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 3,
        priority: int = 0,
        lease_ms: int | None = None,
        retry: PolicyLike = ...,
        timeout: float | None = None,
        result_ttl: float | None = None,
    ) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 3,
        priority: int = 0,
        lease_ms: int | None = None,
        retry: PolicyLike = ...,
        timeout: float | None = None,
        result_ttl: float | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 3,
        priority: int = 0,
        lease_ms: int | None = None,
        retry: PolicyLike = Exponential(),  # noqa: B008 - frozen, shared on purpose
        timeout: float | None = None,
        result_ttl: float | None = None,
    ) -> Any:
        """Declare a task (``@app.task`` or ``@app.task(queue=..., ...)``).

        ``result_ttl``: seconds to keep a job of it once it succeeded (0: drop it at the first
        prune after the 60 s re-send window); None: until the namespace-wide prune.
        """

        def declare(f: Callable[P, R]) -> Task[P, R]:
            stage = name or f"{f.__module__}.{f.__qualname__}"
            problem = None if name or self.connector.embedded else script_name_problem(f)
            if problem is not None:
                raise ConfigurationError(problem)
            if stage in self.tasks:
                raise QuasarError(f"a task named {stage!r} is declared twice")
            if (lease_ms is not None and lease_ms < 1) or max_attempts < 1:
                raise ValueError("lease_ms and max_attempts must be positive")
            if result_ttl is not None and not 0 <= result_ttl < 10**9:
                raise ValueError("result_ttl must be None or seconds, at least 0")
            check_name(queue, "queue")
            task = Task(
                self, f, stage, queue, max_attempts, priority, lease_ms, as_policy(retry), timeout
            )
            if result_ttl is not None:
                task = replace(task, result_ttl=result_ttl)
            self.tasks[stage] = task
            return task

        return declare(fn) if fn is not None else declare

    # hooks and middleware (docs/hooks.md)

    def on_startup(self, fn: Hook) -> Hook:
        """Declare a startup hook: ``fn(worker)`` (plain or async; ``worker`` a
        ``WorkerContext``) runs in every worker before it claims a job, in the order declared. One
        that raises keeps the worker from starting (``HookError``)."""
        self.hooks.startup.append(check_hook(fn, "startup"))
        return fn

    def on_shutdown(self, fn: Hook) -> Hook:
        """Declare a shutdown hook: ``fn(worker)`` runs in every worker once its jobs have ended
        (after a failed start too), in the order declared; one that raises is logged and the
        next still runs."""
        self.hooks.shutdown.append(check_hook(fn, "shutdown"))
        return fn

    def middleware(self, fn: M) -> M:
        """Declare a middleware around every run of this app's tasks, inside those declared
        before it: a generator function ``fn(job)`` that yields once (sync), an async generator
        function ``fn(job)``, or ``async def fn(job, call_next)`` returning ``await
        call_next()``; ``job`` is the run's ``JobContext``. TypeError for any other function."""
        self.hooks.add_middleware(fn)
        return fn

    def tracer(self) -> Any:
        """The OpenTelemetry tracer its enqueues and runs are traced with, or None: tracing is
        off (``tracing=False``, opentelemetry-api not installed, or no tracer provider set)."""
        return _tracing.tracer() if self.tracing else None

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[JobHandle]:
        """Enqueue many task calls (``task.job(...)``) in one call, all or nothing."""
        tracer = self.tracer()
        if tracer is None:
            return self._enqueue_many(jobs)
        queues = {job.queue for job in jobs}
        queue = next(iter(queues)) if len(queues) == 1 else None
        with _tracing.producing(tracer, "send", queue, self.namespace, count=len(jobs)):
            return self._enqueue_many(jobs)

    def _enqueue_many(self, jobs: Sequence[NewJob]) -> list[JobHandle]:
        result = self.client.enqueue_many(jobs, ids_only=True)
        if isinstance(result, t.BatchRefused):
            raise JobRefusedError(result)
        return [JobHandle(self, job_id) for job_id in result.ids]

    def handle(self, job_id: str) -> JobHandle:
        return JobHandle(self, job_id)

    def encode_call(
        self,
        task: Task[Any, Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        trace: dict[str, str] | None = None,
    ) -> Any:
        """The payload of a call of ``task`` (with the trace context ``trace``), encoded;
        ``InvalidTaskCall`` if the function cannot take these arguments or the serializer cannot
        encode them."""
        check = task.call_check
        problem = check.problem(args, kwargs)
        if problem is None:
            try:
                return Encoded(self.serializer.dumps(payload_of(args, kwargs, trace)))
            except (TypeError, ValueError, OverflowError) as exc:
                problem = unencodable(self.serializer, check.named(args, kwargs), exc)
        raise InvalidTaskCall(task.name, t.InvalidJob(problem))

    def call_of(self, job: t.Job) -> tuple[list[Any], dict[str, Any]]:
        """The arguments of the call ``job`` runs (TypeError / CorruptDataError if none)."""
        return args_of(self._load(job.raw_payload, "payload", job.id))

    def traced_call_of(self, job: t.Job) -> tuple[list[Any], dict[str, Any], Any]:
        """``call_of``, and the trace context its enqueue stored (None if none)."""
        payload = self._load(job.raw_payload, "payload", job.id)
        args, kwargs = args_of(payload)
        return args, kwargs, payload.get("t")

    def result_of(self, job: t.Job) -> Any:
        """The result ``job`` stored (None if it stored none)."""
        return None if not job.raw_result else self._load(job.raw_result, "result", job.id)

    def _load(self, data: bytes, what: str, job_id: str) -> Any:
        try:
            return self.serializer.loads(data)
        except Exception as exc:  # a user's serializer may raise anything on data it did not write
            raise CorruptDataError(
                f"{what} of job {job_id!r} is not valid {name_of(self.serializer)}: {exc}"
            ) from None

    def _handle(self, new: NewJob, result: t.JobResult) -> JobHandle:
        if isinstance(result, t.JobApplied):
            return JobHandle(self, result.job.id)
        if isinstance(result.error, t.DuplicateJob) and new.id is not None:
            return JobHandle(self, new.id)  # idempotent enqueue: the job is already there
        raise JobRefusedError(result.error)

    # running jobs here, for tests (the worker package imports this module: imported when called)

    def drain(
        self,
        queues: str | Sequence[str] | None = None,
        *,
        timeout: float | None = 60.0,
        concurrency: int = 10,
    ) -> int:
        """Run every claimable job of ``queues`` (default: the queues of the app's tasks) in this
        process until none is left, and return how many runs that took; jobs scheduled for
        later stay. A worker in burst mode underneath (see docs/workers.md, "Testing your
        tasks"); TimeoutError after ``timeout`` seconds. From a running event loop: ``adrain``."""
        worker: Any = importlib.import_module(f"{__package__}.worker")
        runs: int = worker.drain(self, queues, timeout=timeout, concurrency=concurrency)
        return runs

    async def adrain(
        self,
        queues: str | Sequence[str] | None = None,
        *,
        timeout: float | None = 60.0,
        concurrency: int = 10,
    ) -> int:
        """``drain`` on the running event loop."""
        worker: Any = importlib.import_module(f"{__package__}.worker")
        runs: int = await worker.adrain(self, queues, timeout=timeout, concurrency=concurrency)
        return runs
