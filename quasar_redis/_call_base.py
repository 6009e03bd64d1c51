"""What every call builder shares: the ``Call`` value, what a call is built from (``NewJob``,
``Limits``, ``WorkerEntry``) and ``BuilderBase``, which makes a ``Call`` of a script."""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from . import _types as t
from ._args import MAX_PAYLOAD_BYTES, Arg, now_arg, text_arg
from ._dedup import Dedup
from ._ids import id_error
from ._keys import KeySpace
from ._scripts import Script, scripts

T = TypeVar("T")


POLICIES = ("block", "cancel", "run")


class Keep(enum.Enum):
    """What ``change`` takes for a job's payload it leaves as it is (any other value, None
    included, is a new payload)."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True, slots=True)
class JobChange:
    """What ``change`` changes of a waiting job (``Operations.change`` says what each means);
    what holds its default is kept."""

    payload: Any | Keep = KEEP
    input_revision: int | None = None
    priority: int | None = None
    available_at: int | None = None
    delay_ms: int | None = None
    promote: bool = False


def new_call_id() -> str:
    return os.urandom(8).hex()


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits a client enforces on what it sends (checked again inside the scripts)."""

    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    max_dependencies: int = 100
    max_batch: int = 1000


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One script call, ready to send: ``args`` after KEYS[1]; ``parse`` reads the reply.

    ``early`` is a result known without Redis (a refusal of input Python cannot even encode).
    ``absorb`` adds to the result what each step of the cascade work the call left adds (the
    dependents a cancel cancelled): see ``CallBuilder.cascade``.

    On a partitioned namespace (``_partitions``) ``keys`` are the KEYS of the partition the call
    goes to (empty: the client's own), and a call spread over partitions has a ``spread``: the
    flow that sends its parts and makes one result of theirs (given the client).
    """

    script: Script
    args: tuple[Arg, ...]
    parse: Callable[[Any], T] = field(repr=False)
    early: T | None = None
    absorb: Callable[[T, t.CascadeReport], T] | None = field(default=None, repr=False)
    keys: tuple[str, ...] = ()
    spread: Callable[[Any], Generator[Any, Any, T]] | None = field(default=None, repr=False)

    def on(self, keys: tuple[str, ...]) -> Call[T]:
        """This call sent with ``keys`` (a partition's): itself when ``keys`` is empty."""
        return dataclasses.replace(self, keys=keys) if keys else self

    @property
    def call_id(self) -> str:
        """The id the script records the call under (its first argument, ARGV[1]): a re-sent
        call carries the same one. A call answered without Redis, or spread over partitions (its
        parts carry ids of their own), has none: ""."""
        return str(self.args[0]) if self.args else ""


def dependency_id(dep: Any) -> Any:
    """The id a dependency names: a job id as given, or a ``Job``'s id (anything else as is, for
    the caller to refuse)."""
    return dep.id if isinstance(dep, t.Job) else dep


@dataclass(frozen=True, slots=True)
class NewJob:
    """What to enqueue. ``available_at`` (absolute ms) wins over ``delay_ms`` (from server now).
    ``deadline`` (absolute ms) or ``expires_in_ms`` (from server now), at most one: a job not
    started by then expires unstarted (``Expired``) and never runs."""

    stage: str
    payload: Any = None
    id: str | None = None
    queue: str = "default"
    input_ref: str = "inline"
    input_revision: int = 0
    dependencies: Sequence[str | t.Job] = ()
    priority: int = 0
    max_attempts: int = 3
    available_at: int | None = None
    delay_ms: int | None = None
    on_dependency_failure: t.DependencyPolicy = "block"
    #: Where the job goes on a partitioned namespace: with every job of the same flow key
    #: (docs/scaling.md). A job id's rule; it changes nothing on a namespace of one partition.
    flow: str | None = None
    deadline: int | None = None
    expires_in_ms: int | None = None
    #: A dedup key (``Unique``, ``Throttle``, ``Debounce``): while another job holds it, the
    #: enqueue is answered with that job (docs/deduplication.md).
    dedup: Dedup | None = None
    #: Its flow group (a tenant, an account): jobs of different groups of a queue take turns,
    #: and a group may have its own rate and concurrency limits (docs/flow-control.md). A job
    #: id's rule; on a partitioned namespace it is the flow key when ``flow`` is not given.
    group: str | None = None
    #: The open batch it joins (docs/workflows.md, "Batches"): counted there when it ends.
    batch: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """What a live worker announces of itself in the registry (``announce``)."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    running: tuple[str, ...]
    version: str
    #: The runs it ended since it started, and how many of them failed (its own counts).
    processed: int = 0
    failed: int = 0


class BuilderBase:
    """Makes the ``Call`` of a script for one namespace; the call builders extend it."""

    def __init__(self, keys: KeySpace, limits: Limits | None = None) -> None:
        self.keys = keys
        self.limits = limits or Limits()
        self._scripts = scripts()

    def _new_id(self) -> str:
        """A job id made for a job enqueued without one."""
        return new_call_id()

    def _new_ids(self) -> tuple[str, str]:
        """A call's id and ``_new_id``'s, made at once."""
        made = os.urandom(16).hex()
        return made[:16], made[16:]

    def _call(self, name: str, args: Sequence[Arg], parse: Callable[[Any], T]) -> Call[T]:
        return Call(self._scripts[name], (new_call_id(), *args), parse)

    def _by_id(
        self,
        name: str,
        job_id: Any,
        now: int | None,
        rest: tuple[Arg, ...],
        parse: Callable[[Any], T],
        refused: Callable[[t.InvalidJob], T],
    ) -> Call[T]:
        """The call of a transition of one job by its id; answered without Redis (an
        ``InvalidJob``) when ``job_id`` is no job id (``_ids``), as the script would answer."""
        bad = id_error(job_id, "job_id")
        if bad is not None:
            return Call(self._scripts[name], (), parse, refused(t.InvalidJob(bad)))
        return self._call(name, (now_arg(now), text_arg(job_id), *rest), parse)
