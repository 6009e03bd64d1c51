"""The synchronous client, over ``redis.Redis`` or ``redis.cluster.RedisCluster``."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import hiredis
import redis

from . import _types as t
from ._base import ClientBase, Kept, is_cluster, kept_of, needs_command_name
from ._calls import Call, NewJob
from ._connect import sync_client
from ._durable import Replicated
from ._enqueue_calls import Prepared, applied_id, created_id
from ._operations import JobOptions, Operations, public
from ._pinned import pinned_parts
from ._sending import Ask, Command, Flow, Pipeline, Step

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover
    from typing_extensions import Unpack

T = TypeVar("T")
P = ParamSpec("P")
Q = TypeVar("Q", bound="Quasar")


def blocking(build: Callable[Concatenate[Any, P], Call[T]]) -> Callable[Concatenate[Quasar, P], T]:
    """The ``Quasar`` method sending the call ``build`` makes (see ``_operations``)."""

    def method(self: Quasar, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.execute(build(self, *args, **kwargs))

    return public(method, build, "Quasar")


class Quasar(ClientBase):
    """Every transition and inspection of one namespace, as blocking calls.

    Refusals come back as values (``JobRefused``, ``ClaimRefused``, ``BatchRefused``);
    exceptions (``QuasarError``) mean a broken connection, damaged data or a programmer error.
    ``with Quasar.from_url(url) as q:`` closes the redis-py client it made at the end.
    """

    _connect = staticmethod(sync_client)

    def _set_up(self) -> None:
        self._packed = _packed_sender(self.redis)
        self._send: Callable[[Command], Any] = self._packed or self._execute_command

    # plumbing -------------------------------------------------------------------------------------

    def execute(self, call: Call[T]) -> T:
        """Send one call (FCALL or EVALSHA); what the server lacks is loaded, then sent again."""
        return self._drive(self._sending(call))

    def execute_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send many calls in one pipeline (one round trip); results in the same order."""
        return self._drive(self._sending_many(calls))

    def _drive(self, flow: Flow[T]) -> T:
        """Do each step ``flow`` asks for, feeding back its reply or the exception it raised."""
        reply: Any = None
        try:
            while True:
                step = flow.send(reply)
                try:
                    reply = self._send(step) if type(step) is tuple else self._do(step)
                except Exception as exc:
                    reply = exc
        except StopIteration as done:
            result: T = done.value
            return result

    def _do(self, step: Step) -> Any:
        if isinstance(step, Pipeline):
            return self._pipeline(step.commands)
        if isinstance(step, Replicated):
            return self._replicated(step)
        if isinstance(step, Ask):
            return getattr(self.redis, step.method)(*step.args)
        return self._send(step)

    def _replicated(self, step: Replicated) -> list[Any]:
        """Durable mode: the commands and WAIT on one connection (on a cluster, of each
        partition's primary: see ``_pinned``)."""
        if is_cluster(self.redis):
            return pinned_parts(self.redis, self.keys.root, step.commands, step.wait)
        return self._pipeline([*step.commands, step.wait])

    def _execute_command(self, command: Command) -> Any:
        return self.redis.execute_command(*command)

    def _pipeline(self, commands: Sequence[Command | None]) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for command in commands:
            if command is not None:
                # execute_command: redis-py blocks pipe.evalsha() in cluster pipelines, not this
                pipe.execute_command(*command)
        replies = iter(pipe.execute(raise_on_error=False))
        return [None if command is None else next(replies) for command in commands]

    def load_scripts(self) -> None:
        """Load the function library (Redis 7+, where this client uses functions) and every
        script into Redis, for users that may run them but not load them (an ACL: see
        docs/security.md). Run it once per version of quasar_redis as an admin user, and again
        after a restart that lost them (scripts are never persisted; functions are, with the
        data). Loading what is there already is harmless."""
        return self._drive(self._preloading())

    def eviction_policy(self) -> str | None:
        """Redis's ``maxmemory-policy`` (anything but "noeviction" may lose jobs: see
        docs/guarantees.md); None where Redis refuses CONFIG, as some managed services do."""
        return self._drive(self._asking_policy())

    def close(self) -> None:
        """Close the redis-py client if ``from_url`` made it; one passed in stays open."""
        if self._owns_redis:
            self.redis.close()

    def __enter__(self: Q) -> Q:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # the calls (signatures and docs in _operations) -----------------------------------------------

    def enqueue(
        self, stage: str, payload: Any = None, *, now: int | None = None, **job: Unpack[JobOptions]
    ) -> t.JobResult:
        """Enqueue one job: ``JobApplied(job)`` in ``Waiting``, or ``JobRefused(error)``.

        ``job`` takes the other fields of ``NewJob`` (``id``, ``queue``, ``dependencies``, ...).
        """
        return self.execute(self.calls.enqueue(NewJob(stage, payload, **job), now))

    def enqueue_job(self, job: NewJob, *, now: int | None = None) -> t.JobResult:
        """Enqueue one job described by a ``NewJob``."""
        return self.execute(self.calls.enqueue(job, now))

    def _enqueue_prepared(self, prepared: Prepared, payload: Any) -> str | t.JobRefused:
        """Enqueue one job of ``prepared`` (``prepare``) with ``payload``: the new job's id, or
        its refusal. What a task's ``enqueue`` sends: the call sent at once, its common reply
        read without a ``Job`` made of it."""
        call = self._prepared_call(prepared, payload)
        if call is None:
            return applied_id(self.enqueue_job(prepared.new(payload)))
        try:
            reply = self._send(self._command(call))
        except Exception as exc:
            reply = exc
        job_id = created_id(call, reply)
        if job_id is not None:
            return job_id
        return applied_id(self._drive(self._sending(call, reply)))

    enqueue_many = blocking(Operations.enqueue_many)
    enqueue_each = blocking(Operations.enqueue_each)
    claim = blocking(Operations.claim)
    claim_many = blocking(Operations.claim_many)
    claim_job = blocking(Operations.claim_job)
    complete = blocking(Operations.complete)
    fail = blocking(Operations.fail)
    permanent_fail = blocking(Operations.permanent_fail)
    heartbeat = blocking(Operations.heartbeat)
    report_progress = blocking(Operations.report_progress)
    release = blocking(Operations.release)
    report_many = blocking(Operations.report_many)
    report_and_claim = blocking(Operations.report_and_claim)
    expire = blocking(Operations.expire)
    change = blocking(Operations.change)
    update_input = blocking(Operations.update_input)
    change_priority = blocking(Operations.change_priority)
    reschedule = blocking(Operations.reschedule)
    promote = blocking(Operations.promote)
    cancel = blocking(Operations.cancel)
    retry = blocking(Operations.retry)
    sweep_expired = blocking(Operations.sweep_expired)
    resume_cascades = blocking(Operations.resume_cascades)
    promote_due = blocking(Operations.promote_due)
    prune = blocking(Operations.prune)
    purge = blocking(Operations.purge)
    get_job = blocking(Operations.get_job)
    counts = blocking(Operations.counts)
    list_jobs = blocking(Operations.list_jobs)
    page_jobs = blocking(Operations.page_jobs)
    pause = blocking(Operations.pause)
    resume = blocking(Operations.resume)
    queues = blocking(Operations.queues)
    workers = blocking(Operations.workers)
    declare_schedule = blocking(Operations.declare_schedule)
    fire_schedule = blocking(Operations.fire_schedule)
    trigger_schedule = blocking(Operations.trigger_schedule)
    schedules = blocking(Operations.schedules)
    change_schedule = blocking(Operations.change_schedule)
    pause_schedule = blocking(Operations.pause_schedule)
    resume_schedule = blocking(Operations.resume_schedule)
    remove_schedule = blocking(Operations.remove_schedule)
    set_limits = blocking(Operations.set_limits)
    set_group_limits = blocking(Operations.set_group_limits)
    flow = blocking(Operations.flow)
    dependencies = blocking(Operations.dependencies)
    open_batch = blocking(Operations.open_batch)
    close_batch = blocking(Operations.close_batch)
    batch = blocking(Operations.batch)
    batch_results = blocking(Operations.batch_results)


def _packed_sender(client: Any) -> Callable[[Command], Any] | None:
    """A sender of one command packed by hiredis (C), for a plain ``redis.Redis``.

    redis-py's ``execute_command`` costs far more than the round trip's own system calls (its
    argument handling, packing in Python, per-command bookkeeping): on a 2-core machine about
    110 µs of client CPU for a PING against 20 µs for the socket calls. ``PackedSender`` sends
    the packed bytes instead; a cluster client, a single-connection client and fakeredis keep
    ``execute_command``.
    """
    if type(client) is not redis.Redis or client.connection is not None:
        return None
    return PackedSender(client.connection_pool)


class PackedSender:
    """Sends a command packed by hiredis under the client's own retry policy, as
    ``execute_command`` does (a connection that asks to reconnect is reconnected after), on the
    connection its pool keeps for quasar's calls (``Kept``) when no other thread's command holds
    it, else on one the pool lends."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.takes_name = needs_command_name(pool)
        self.kept = kept_of(pool, redis.ConnectionPool, threading.Lock())

    def __call__(self, command: Command) -> Any:
        packed = hiredis.pack_command(command)
        kept = self.kept
        if kept is not None and kept.lock.acquire(blocking=False):
            try:
                return self.on_kept(kept, command, packed)
            finally:
                kept.lock.release()
        conn = self.lend(command[0])
        try:
            return self.on(conn, packed)
        finally:
            self.pool.release(conn)

    def lend(self, name: Any) -> Any:
        return self.pool.get_connection(name) if self.takes_name else self.pool.get_connection()

    def on_kept(self, kept: Kept, command: Command, packed: bytes) -> Any:
        conn, pid = kept.conn, os.getpid()
        if conn is None or kept.owner != pid:  # (after a fork: the parent's socket)
            conn = kept.conn = self.lend(command[0])
            kept.owner = pid
        else:  # (checked as the pool checks what it lends: one closed meanwhile, connected again)
            self.pool.ensure_connection(conn)
        return self.on(conn, packed)  # (redis-py disconnects a command stopped mid-way)

    @staticmethod
    def on(conn: Any, packed: bytes) -> Any:
        def once() -> Any:
            conn.send_packed_command([packed])  # (bytes as they are: a list of buffers)
            return conn.read_response()

        try:
            return conn.retry.call_with_retry(once, lambda _: conn.disconnect())
        finally:
            reconnect = getattr(conn, "should_reconnect", None)
            if reconnect is not None and reconnect():  # (redis-py 7+: a server maintenance)
                conn.disconnect()
                conn.connect()
