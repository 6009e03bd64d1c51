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

import importlib
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from . import _tracing
from . import _types as t
from ._app_batches import AppBatches
from ._app_flow import AppFlow
from ._app_schedules import Periodic
from ._base import ClientOptions
from ._call_codec import CallCodec
from ._calls import Limits, NewJob
from ._connector import Clients, Connector
from ._durable import Durable, check_durable
from ._enqueue_refusals import enqueue_refused
from ._environment import namespace as environment_namespace
from ._handles import JobHandle
from ._hooks import Hook, Hooks
from ._keys import check_name
from ._partitions import check_partitions
from ._schedules import Schedule
from ._tasks import EnqueueOptions, GroupBy, Task, TaskRegistry, TaskSettings
from .aio import AsyncQuasar
from .client import Quasar
from .retry import Exponential, PolicyLike
from .serializers import MSGPACK, Serializer

__all__ = ["App", "Connector", "EnqueueOptions", "Task"]

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M")


class App(AppBatches, Periodic, AppFlow):
    """Tasks and clients of one namespace of one Redis.

    ``url=None`` takes ``QUASAR_REDIS_URL``, then ``REDIS_URL``, from the environment at its
    first connection (an enqueue, a worker), and refuses then (ConfigurationError) without
    either: the app and its tasks can be declared and imported without a URL. ``"memory://"``
    runs on an embedded in-memory server (see ``Connector``). ``namespace=None`` takes
    ``QUASAR_NAMESPACE``, else ``"default"``. ``with App(...) as app:`` (or ``async with``)
    closes the clients the app opened. ``serializer`` encodes task arguments and results
    (``serializers``; msgpack with extension types by default): producers and workers of a
    namespace must share it.
    ``tracing=False`` turns OpenTelemetry spans off for this app (docs/observability.md); hooks
    and middleware for its workers are declared with ``on_startup``, ``on_shutdown`` and
    ``middleware`` (docs/hooks.md). ``allow_eviction=True`` lets its clients enqueue, and its
    workers serve, where Redis may evict keys (``maxmemory-policy``: docs/guarantees.md).
    ``durable=Durable(replicas=1, timeout_ms=1000)`` has every write of its clients, and of its
    workers' calls through them, wait for replicas (docs/guarantees.md, "Failover").
    ``partitions``: the namespace's number of partitions, given to every client it makes
    (docs/scaling.md).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str | None = None,
        connector: Connector | None = None,
        limits: Limits | None = None,
        events: bool = True,
        serializer: Serializer | None = None,
        tracing: bool = True,
        allow_eviction: bool = False,
        durable: Durable | None = None,
        partitions: int | None = None,
    ) -> None:
        self.namespace = check_name(environment_namespace(namespace), "namespace")
        self.connector = connector or Connector(url)
        self.limits = limits
        self.events = events
        self.codec = CallCodec(MSGPACK if serializer is None else serializer)
        self.tracing = tracing
        self.allow_eviction = allow_eviction
        self.durable = check_durable(durable)
        self.partitions = check_partitions(partitions)
        self.tasks = TaskRegistry()
        #: The periodic schedules of its tasks, by name (``periodic``, ``schedule``): every worker
        #: of the app declares and fires them (docs/schedules.md).
        self.schedules: dict[str, Schedule] = {}
        #: The limits of its queues (``limit``), by queue: every worker of the app serving the
        #: queue sets them as it starts (docs/flow-control.md).
        self.queue_limits: dict[str, dict[str, Any]] = {}
        self.hooks = Hooks()
        self.clients = Clients(self.connector, self.namespace, self._options)

    @property
    def serializer(self) -> Serializer:
        """The serializer of task arguments and results."""
        return self.codec.serializer

    @property
    def client(self) -> Quasar:
        """The sync client (one per app)."""
        return self.clients.sync

    def new_client(self) -> Quasar:
        """A sync client on a connection pool of its own (for a thread of its own), closed by
        its ``close()``."""
        return self.clients.new_sync()

    def connect(self, url: str | None = None, *, namespace: str | None = None) -> None:
        """Make this app's clients of ``url`` and of ``namespace`` (each: as it is when None)
        from now on (``quasar worker --redis-url --namespace``); the clients it made before are
        closed."""
        self.clients.close()
        if namespace is not None:
            self.namespace = check_name(namespace, "namespace")
        if url is not None:
            self.connector = Connector(url)
        self.clients = Clients(self.connector, self.namespace, self._options)

    def _options(self) -> ClientOptions:
        """The options of the clients this app makes."""
        return ClientOptions(
            limits=self.limits,
            events=self.events,
            allow_eviction=self.allow_eviction,
            durable=self.durable,
            partitions=self.partitions,
        )

    def aclient(self) -> AsyncQuasar:
        """The asyncio client of the running event loop (one per loop)."""
        return self.clients.asyncio()

    async def aclose(self) -> None:
        """Close the asyncio client of the running event loop (before the loop ends)."""
        await self.clients.aclose()

    def close(self) -> None:
        """Close the sync client."""
        self.clients.close()

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
        group_by: GroupBy | None = None,
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
        group_by: GroupBy | None = None,
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
        group_by: GroupBy | None = None,
    ) -> Any:
        """Declare a task (``@app.task`` or ``@app.task(queue=..., ...)``).

        ``result_ttl``: seconds to keep a job of it once it succeeded (0: drop it at the first
        prune after the 60 s re-send window); None: until the namespace-wide prune.
        ``group_by``: each call's flow group (docs/flow-control.md): the name of one of the
        function's parameters, whose argument is the group, or a function of the call's
        arguments that returns it; ``.options(group=...)`` overrides it per call.
        """

        settings = TaskSettings(
            name, queue, max_attempts, priority, lease_ms, retry, timeout, result_ttl, group_by
        )

        def declare(f: Callable[P, R]) -> Task[P, R]:
            return self.tasks.declare(self, f, settings, embedded=self.connector.embedded)

        return declare(fn) if fn is not None else declare

    # hooks and middleware (docs/hooks.md)

    def on_startup(self, fn: Hook) -> Hook:
        """Declare a startup hook: ``fn(worker)`` (plain or async; ``worker`` a
        ``WorkerContext``) runs in every worker before it claims a job, in the order declared. One
        that raises keeps the worker from starting (``HookError``)."""
        self.hooks.add_startup(fn)
        return fn

    def on_shutdown(self, fn: Hook) -> Hook:
        """Declare a shutdown hook: ``fn(worker)`` runs in every worker once its jobs have ended
        (after a failed start too), in the order declared; one that raises is logged and the
        next still runs."""
        self.hooks.add_shutdown(fn)
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
            raise enqueue_refused(result, jobs)
        return [JobHandle(self, job_id) for job_id in result.ids]

    def handle(self, job_id: str) -> JobHandle:
        """The handle of the job ``job_id`` (nothing is sent)."""
        return JobHandle(self, job_id)

    def encode_call(
        self,
        task: Task[Any, Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        trace: dict[str, str] | None = None,
        receives: str | None = None,
    ) -> Any:
        """The payload of a call of ``task`` (with the trace context ``trace``; receiving a
        workflow's result first: ``receives``), encoded; ``InvalidTaskCall`` if the function
        cannot take these arguments or the serializer cannot encode them."""
        return self.codec.encode(task.name, task.call_check, args, kwargs, trace, receives)

    def call_of(self, job: t.Job) -> tuple[list[Any], dict[str, Any]]:
        """The arguments of the call ``job`` runs (TypeError / CorruptDataError if none)."""
        args, kwargs, _ = self.codec.traced_call_of(job)
        return args, kwargs

    def traced_call_of(self, job: t.Job) -> tuple[list[Any], dict[str, Any], Any]:
        """``call_of``, and the trace context its enqueue stored (None if none)."""
        return self.codec.traced_call_of(job)

    def result_of(self, job: t.Job) -> Any:
        """The result ``job`` stored (None if it stored none)."""
        return self.codec.result_of(job)

    def handle_of(self, job: NewJob, result: t.JobResult) -> JobHandle:
        """The handle of ``job`` once a client enqueued it with ``result``: the new job's, or
        the existing job's when ``job`` has an id already enqueued (an idempotent enqueue);
        ``JobRefusedError`` for any other refusal. What ``Task.enqueue`` returns."""
        if isinstance(result, t.JobApplied):
            return JobHandle(self, result.job.id)
        if isinstance(result.error, t.DuplicateJob) and job.id is not None:
            return JobHandle(self, job.id)
        raise enqueue_refused(result.error, [job])

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
