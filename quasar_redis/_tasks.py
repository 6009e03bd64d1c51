"""Tasks: a function declared with ``App.task``, its per-call options, and the registry of an
app's tasks by name (what a worker looks a job's task up in)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from . import _tracing
from . import _types as t
from ._binding import CallCheck, did_you_mean, script_name_problem
from ._calls import NewJob
from ._codec import encode
from ._dedup import Dedup, derived_key
from ._enqueue_calls import Prepared, prepare
from ._handles import JobHandle
from ._ids import id_error
from ._keys import check_name
from ._workflows import Signature
from .errors import ConfigurationError, InvalidArgument, InvalidTaskCall, QuasarError
from .retry import Exponential, PolicyLike, RetryPolicy, as_policy

if TYPE_CHECKING:
    from .app import App

P = ParamSpec("P")
R = TypeVar("R")
#: ``NewJob(...)`` of every field, positionally, without a frozen dataclass's per-field stores.
_build_job = t.builder(NewJob)
#: How a task finds a call's flow group: a parameter's name, or a function of the arguments.
GroupBy = str | Callable[..., Any]


def _ms(task: str, what: str, seconds: float | None) -> int | None:
    """Seconds as whole ms; ``InvalidTaskCall`` for infinity or NaN, which have none."""
    if seconds is None:
        return None
    if not math.isfinite(seconds):
        problem = f"{what} must be a finite number of seconds, not {seconds!r}"
        raise InvalidTaskCall(task, t.InvalidJob(problem))
    return round(seconds * 1000)


def _at_ms(task: str, run_at: datetime | float | None, what: str = "run_at") -> int | None:
    if isinstance(run_at, datetime):
        return round(run_at.timestamp() * 1000)
    return _ms(task, what, run_at)


def _dep_id(dep: str | JobHandle | t.Job) -> str:
    return dep if isinstance(dep, str) else dep.id


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-call options: ``id`` makes the enqueue idempotent; ``delay``/``run_at`` schedule it;
    ``deadline``/``expires_in`` let it expire unstarted."""

    id: str | None = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    delay: float | None = None
    run_at: datetime | float | None = None
    depends_on: Sequence[str | JobHandle | t.Job] = ()
    on_dependency_failure: t.DependencyPolicy = "block"
    flow: str | None = None  # a partitioned namespace's flow key (docs/scaling.md)
    #: Not started by then (a datetime, or seconds since the epoch), it expires and never runs.
    deadline: datetime | float | None = None
    expires_in: float | None = None  # seconds from the enqueue: ``deadline``, relative
    dedup: Dedup | None = None  # a dedup key; without one, of the task and its arguments
    #: with ``id``: a higher revision than the stored job's replaces its input (a supersede,
    #: docs/lifecycle.md); the same one is the idempotent no-op, a lower one ``StaleRevision``
    input_revision: int = 0
    #: the job's flow group (docs/flow-control.md); None: the task's ``group_by``, if any
    group: str | None = None
    #: the open batch the job joins (docs/workflows.md, "Batches")
    batch: str | None = None


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
    #: each call's flow group: a parameter's name, or a function of the call's arguments
    group_by: GroupBy | None = None

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
        """The same task with per-call options (see ``EnqueueOptions``); TypeError, naming the
        task and the options there are, for one there is not."""
        known = [f.name for f in fields(EnqueueOptions)]
        for name in opts:
            if name not in known:
                raise TypeError(
                    f"task {self.name!r}: options() has no option {name!r}"
                    f"{did_you_mean(name, known)}; "
                    f"the options: {', '.join(known)}"
                )
        return replace(self, options_=replace(self.options_, **opts))

    def job(self, *args: P.args, **kwargs: P.kwargs) -> NewJob:
        """The job this call would enqueue, for ``App.enqueue_many``; ``InvalidTaskCall`` for a
        call the function cannot take, whose arguments cannot be encoded, or whose ``id`` or
        ``depends_on`` names no job id (``docs/lifecycle.md``, job ids). With tracing on, a
        ``create`` span: the job's run continues its trace."""
        return self.job_of(args, kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This call with the task's options, not enqueued: a step of a workflow (``chain``,
        ``group``, ``chord``; docs/workflows.md). Checked when the workflow is enqueued."""
        return Signature(self, args, kwargs)

    def job_of(
        self, args: Sequence[Any], kwargs: dict[str, Any], *, receives: str | None = None
    ) -> NewJob:
        """``job(*args, **kwargs)``; a workflow's job ``receives`` a result before ``args``
        (``_workflows``)."""
        tracer = self.app.tracer()
        if tracer is None:
            return self._new_job(args, kwargs, None, receives)
        with _tracing.producing(tracer, "create", self._queue, self.app.namespace, task=self.name):
            return self._new_job(args, kwargs, _tracing.carrier(), receives)

    @property
    def _queue(self) -> str:
        return self.queue if self.options_.queue is None else self.options_.queue

    @cached_property
    def _fixed(self) -> tuple[Any, ...]:
        """What every call's job takes from the task and its options alone, worked out at the
        first call (``InvalidTaskCall`` at each call for a time that is not finite: nothing is
        kept): the queue, priority, attempts, times in ms, policy, flow key, revision and batch,
        in ``NewJob``'s order."""
        o = self.options_
        return (
            self.queue if o.queue is None else o.queue,
            o.input_revision,
            self.priority if o.priority is None else o.priority,
            self.max_attempts if o.max_attempts is None else o.max_attempts,
            _at_ms(self.name, o.run_at),
            _ms(self.name, "delay", o.delay),
            o.on_dependency_failure,
            o.flow,
            _at_ms(self.name, o.deadline, "deadline"),
            _ms(self.name, "expires_in", o.expires_in),
        )

    def _new_job(
        self,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        trace: dict[str, str] | None,
        receives: str | None = None,
    ) -> NewJob:
        o = self.options_
        deps = [_dep_id(d) for d in o.depends_on]
        if o.id is not None or deps:
            for value, what in [(o.id, "id"), *((d, "dependency") for d in deps)]:
                if value is not None and (problem := id_error(value, what)) is not None:
                    raise InvalidTaskCall(self.name, t.InvalidJob(problem))
        payload = self.app.encode_call(self, args, kwargs, trace, receives)
        fixed = self._fixed
        dedup = o.dedup
        if dedup is not None and dedup.key is None:
            dedup = self._dedup(args, kwargs, payload, trace)
        group = o.group
        if group is None and self.group_by is not None:
            group = self._group(args, kwargs)
        return self._job(fixed, payload, deps, dedup, group)

    def _job(
        self,
        fixed: tuple[Any, ...],
        payload: Any,
        deps: Sequence[str],
        dedup: Dedup | None,
        group: str | None,
    ) -> NewJob:
        """The job of a call: ``payload`` and what is the call's own (its dependencies, dedup
        key, group), the rest from the task and its options (``fixed``: ``_fixed``)."""
        queue, revision, priority, attempts, at, delay, policy, flow, deadline, expires = fixed
        o = self.options_
        return _build_job(
            self.name,
            payload,
            o.id,
            queue,
            "inline",
            revision,
            deps,
            priority,
            attempts,
            at,
            delay,
            policy,
            flow,
            deadline,
            expires,
            dedup,
            group,
            o.batch,
        )

    @cached_property
    def _prepared(self) -> Prepared | None:
        """Every call's enqueue worked out but for its id and payload, when nothing else of a
        call's job varies (no id, dependencies, dedup key or group of its options; see
        ``prepare``); else None, and each call builds its job."""
        o = self.options_
        if o.id is not None or o.depends_on or o.dedup is not None or o.group is not None:
            return None
        if self.group_by is not None:
            return None
        try:
            fixed = self._fixed
        except InvalidTaskCall:  # (a time that is not finite: each call raises it)
            return None
        return prepare(self._job(fixed, None, (), None, None))

    def _handle(self, prepared: Prepared, got: str | t.JobRefused) -> JobHandle:
        """The handle of the job ``_enqueue_prepared`` answered ``got`` for."""
        if isinstance(got, str):
            return JobHandle(self.app, got)
        return self.app.handle_of(prepared.job, got)

    def _group(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
        """The call's group by the task's ``group_by``: a text or an integer, or
        ``InvalidTaskCall``."""
        by = self.group_by
        if by is None:
            return None
        if isinstance(by, str):
            named = self.call_check.named(args, kwargs)
            if by not in named:
                problem = f"group_by names {by!r}, which this call does not give"
                raise InvalidTaskCall(self.name, t.InvalidJob(problem))
            value = named[by]
        else:
            value = by(*args, **kwargs)
        if isinstance(value, bool) or not isinstance(value, str | int):
            problem = f"a group must be a text or an integer, not {value!r}"
            raise InvalidTaskCall(self.name, t.InvalidJob(problem))
        group = str(value)
        if (bad := id_error(group, "group")) is not None:
            raise InvalidTaskCall(self.name, t.InvalidJob(bad))
        return group

    def _dedup(
        self, args: Sequence[Any], kwargs: dict[str, Any], payload: Any, trace: Any
    ) -> Dedup | None:
        """The call's dedup option, its key derived when none is given: from the task's name and
        its arguments (the payload without the trace context, which differs call by call)."""
        dedup = self.options_.dedup
        if dedup is None or dedup.key is not None:
            return dedup
        if trace is not None:
            payload = self.app.encode_call(self, args, kwargs, None)
        return replace(dedup, key=derived_key(self.name, encode(payload)))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Enqueue a call; with an ``id`` option, enqueuing the same id again is a no-op. With
        tracing on, inside a ``send`` span whose trace the job's run continues."""
        tracer = self.app.tracer()
        if tracer is None:
            prepared = self._prepared
            if prepared is not None:  # (the common call: only its payload its own)
                payload = self.app.encode_call(self, args, kwargs)
                return self._handle(prepared, self.app.client._enqueue_prepared(prepared, payload))
            new = self._new_job(args, kwargs, None)
            return self.app.handle_of(new, self.app.client.enqueue_job(new))
        with self._sending(tracer) as span:
            new = self._new_job(args, kwargs, _tracing.carrier())
            handle = self.app.handle_of(new, self.app.client.enqueue_job(new))
            span.set_attribute("messaging.message.id", handle.id)
            return handle

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """``enqueue`` for asyncio code."""
        tracer = self.app.tracer()
        if tracer is None:
            prepared = self._prepared
            if prepared is not None:
                payload = self.app.encode_call(self, args, kwargs)
                got = await self.app.aclient()._enqueue_prepared(prepared, payload)
                return self._handle(prepared, got)
            new = self._new_job(args, kwargs, None)
            return self.app.handle_of(new, await self.app.aclient().enqueue_job(new))
        with self._sending(tracer) as span:
            new = self._new_job(args, kwargs, _tracing.carrier())
            handle = self.app.handle_of(new, await self.app.aclient().enqueue_job(new))
            span.set_attribute("messaging.message.id", handle.id)
            return handle

    def _sending(self, tracer: Any) -> Any:
        return _tracing.producing(tracer, "send", self._queue, self.app.namespace, task=self.name)


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """What ``App.task`` takes besides the function, checked by ``TaskRegistry.declare``."""

    name: str | None = None
    queue: str = "default"
    max_attempts: int = 3
    priority: int = 0
    lease_ms: int | None = None
    retry: PolicyLike = field(default_factory=Exponential)
    timeout: float | None = None
    result_ttl: float | None = None
    group_by: GroupBy | None = None

    def check(self, task: str) -> None:
        """InvalidArgument (a ValueError) naming ``task``, the setting and its value, for a
        setting out of range (ConfigurationError for the queue name)."""
        group_by = self.group_by
        bounds = [
            (
                self.lease_ms is None or self.lease_ms >= 1,
                f"lease_ms must be None or milliseconds >= 1: got {self.lease_ms!r}",
            ),
            (self.max_attempts >= 1, f"max_attempts must be >= 1: got {self.max_attempts!r}"),
            (
                self.result_ttl is None or 0 <= self.result_ttl < 10**9,
                f"result_ttl must be None or seconds >= 0: got {self.result_ttl!r}",
            ),
            (
                group_by is None or (isinstance(group_by, str) and group_by) or callable(group_by),
                f"group_by must be a parameter's name or a function of the call: got {group_by!r}",
            ),
        ]
        for ok, problem in bounds:
            if not ok:
                raise InvalidArgument(f"task {task!r}: {problem}")
        check_name(self.queue, "queue")


class TaskRegistry(dict[str, "Task[Any, Any]"]):
    """An app's tasks by name: each name declared once."""

    def declare(
        self, app: App, fn: Callable[P, R], settings: TaskSettings, *, embedded: bool
    ) -> Task[P, R]:
        """``fn`` as a task of ``app`` under ``settings``, registered; ConfigurationError for a
        function a worker could not import by name (``embedded``: no worker process needs to),
        QuasarError for a name declared twice."""
        s = settings
        stage = s.name or f"{fn.__module__}.{fn.__qualname__}"
        problem = None if s.name or embedded else script_name_problem(fn)
        if problem is not None:
            raise ConfigurationError(problem)
        if stage in self:
            raise QuasarError(
                f"a task named {stage!r} is declared twice: give one of them a name of its own "
                "(@app.task(name=...))"
            )
        s.check(stage)
        task = Task(
            app,
            fn,
            stage,
            s.queue,
            s.max_attempts,
            s.priority,
            s.lease_ms,
            as_policy(s.retry),
            s.timeout,
            result_ttl=s.result_ttl,
            group_by=s.group_by,
        )
        self[stage] = task
        return task
