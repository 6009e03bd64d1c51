"""The asyncio client, over ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import hiredis
import redis.asyncio

from . import _types as t
from ._base import (
    ClientBase,
    ClientOptions,
    Kept,
    is_cluster,
    kept_of,
    needs_command_name,
)
from ._calls import Call, NewJob
from ._coalescing import Coalescing, Pending, alone
from ._connect import async_client
from ._durable import Replicated
from ._enqueue_calls import Prepared, applied_id, created_id
from ._operations import JobOptions, Operations, public
from ._partition_ops import PartitionOps, keys_of, wake_lists
from ._pinned import apinned_parts
from ._replies import work_left
from ._sending import Ask, Command, Flow, Pipeline, Step
from ._wait_line import EarlyAnswer, WaitLines, wait_on, wait_pooled
from ._waits import block_slice, first_of
from .errors import QuasarError

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover
    from typing_extensions import Unpack

T = TypeVar("T")
P = ParamSpec("P")
A = TypeVar("A", bound="AsyncQuasar")


def coroutine(
    build: Callable[Concatenate[Any, P], Call[T]],
) -> Callable[Concatenate[AsyncQuasar, P], Coroutine[Any, Any, T]]:
    """The ``AsyncQuasar`` method sending the call ``build`` makes (see ``_operations``)."""

    async def method(self: AsyncQuasar, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.execute(build(self, *args, **kwargs))

    return public(method, build, "AsyncQuasar")


def _bytes(command: Command) -> Command:
    """``command`` with its arguments as bytes: redis-py's asyncio connection packs commands in
    Python, and encodes a str argument at about twice the cost of this (an enqueue of 100 jobs
    has 1,300)."""
    name, *rest = command
    return (name, *[a.encode() if type(a) is str else a for a in rest])


class AsyncQuasar(Coalescing, ClientBase):
    """Every transition and inspection of one namespace, as coroutines (same API as ``Quasar``).

    Refusals come back as values (``JobRefused``, ``ClaimRefused``, ``BatchRefused``);
    exceptions (``QuasarError``) mean a broken connection, damaged data or a programmer error.
    ``async with AsyncQuasar.from_url(url) as q:`` closes the redis-py client it made at the end.
    """

    _connect = staticmethod(async_client)

    def __init__(
        self,
        redis: Any,
        namespace: str = "default",
        *,
        coalesce: bool = True,
        **options: Unpack[ClientOptions],
    ) -> None:
        """``coalesce``: concurrent enqueues go to Redis as one call (see ``enqueue``); the other
        options are ``Quasar``'s."""
        self.coalesce = coalesce
        super().__init__(redis, namespace, **options)
        self._pending: list[Pending] = []
        self._flush_scheduled = False
        self._flushes: set[asyncio.Task[None]] = set()
        self._lone = 0

    @classmethod
    def from_url(
        cls: type[A],
        url: str,
        namespace: str = "default",
        *,
        coalesce: bool = True,
        **options: Unpack[ClientOptions],
    ) -> A:
        """As ``Quasar.from_url``, over ``redis.asyncio.Redis`` (``coalesce``: see ``__init__``)."""
        client = super().from_url(url, namespace, **options)
        client.coalesce = coalesce
        return client

    def _set_up(self) -> None:
        self._packed = _packed_sender(self.redis)
        self._send = self._packed or self._execute_command
        # (redis-py before 5.3 wants a command's name to lend a connection)
        self._named = self._packed is not None and needs_command_name(self.redis.connection_pool)
        # (a cluster client has no pool of its own: it never takes this way)
        self._lines = WaitLines(getattr(self.redis, "connection_pool", None), self._named)

    # plumbing -------------------------------------------------------------------------------------

    async def execute(self, call: Call[T]) -> T:
        """Send one call (FCALL or EVALSHA); what the server lacks is loaded, then sent again."""
        return await self._drive(self._sending(call))

    async def execute_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send many calls in one pipeline (one round trip); results in the same order."""
        return await self._drive(self._sending_many(calls))

    async def _drive(self, flow: Flow[T]) -> T:
        """Do each step ``flow`` asks for, feeding back its reply or the exception it raised."""
        reply: Any = None
        try:
            while True:
                step = flow.send(reply)
                try:
                    reply = await (self._send(step) if type(step) is tuple else self._do(step))
                except Exception as exc:
                    reply = exc
        except StopIteration as done:
            result: T = done.value
            return result

    async def _do(self, step: Step) -> Any:
        if isinstance(step, Pipeline):
            return await self._pipeline(step.commands)
        if isinstance(step, Replicated):
            return await self._replicated(step)
        if isinstance(step, Ask):
            return await getattr(self.redis, step.method)(*step.args)
        return await self._send(step)

    async def _replicated(self, step: Replicated) -> list[Any]:
        """Durable mode: the commands and WAIT on one connection (on a cluster, of each
        partition's primary: see ``_pinned``)."""
        if is_cluster(self.redis):
            return await apinned_parts(self.redis, self.keys.root, step.commands, step.wait)
        return await self._pipeline([*step.commands, step.wait])

    async def _execute_command(self, command: Command) -> Any:
        return await self.redis.execute_command(*_bytes(command))

    async def _pipeline(self, commands: Sequence[Command | None]) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for command in commands:
            if command is not None:
                # execute_command: redis-py blocks pipe.evalsha() in cluster pipelines, not this
                pipe.execute_command(*_bytes(command))
        replies = iter(await pipe.execute(raise_on_error=False))
        return [None if command is None else next(replies) for command in commands]

    async def load_scripts(self) -> None:
        """Load the function library (Redis 7+, where this client uses functions) and every
        script into Redis, for users that may run them but not load them (an ACL: see
        docs/security.md). Run it once per version of quasar_redis as an admin user, and again
        after a restart that lost them (scripts are never persisted; functions are, with the
        data). Loading what is there already is harmless."""
        return await self._drive(self._preloading())

    async def eviction_policy(self) -> str | None:
        """Redis's ``maxmemory-policy`` (anything but "noeviction" may lose jobs: see
        docs/guarantees.md); None where Redis refuses CONFIG, as some managed services do."""
        return await self._drive(self._asking_policy())

    async def aclose(self) -> None:
        """Close the redis-py client if ``from_url`` made it; one passed in stays open (the
        connections of the worker's waits close either way)."""
        await self._lines.close()
        if self._owns_redis:
            await self.redis.aclose()

    async def __aenter__(self: A) -> A:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # the calls (signatures and docs in _operations) -----------------------------------------------

    async def enqueue(
        self, stage: str, payload: Any = None, *, now: int | None = None, **job: Unpack[JobOptions]
    ) -> t.JobResult:
        """Enqueue one job: ``JobApplied(job)`` in ``Waiting``, or ``JobRefused(error)``.

        ``job`` takes the other fields of ``NewJob`` (``id``, ``queue``, ``dependencies``, ...).
        Concurrent calls (without ``now``) are coalesced: those made in one turn of the event
        loop go to Redis as one script call, each job checked and applied on its own.
        """
        return await self.enqueue_job(NewJob(stage, payload, **job), now=now)

    async def enqueue_job(self, job: NewJob, *, now: int | None = None) -> t.JobResult:
        """Enqueue one job described by a ``NewJob`` (coalesced as ``enqueue`` is)."""
        if now is None and self.coalesce:
            return await self._coalesced(job)
        return await self.execute(self.calls.enqueue(job, now))

    async def _enqueue_prepared(self, prepared: Prepared, payload: Any) -> str | t.JobRefused:
        """``Quasar._enqueue_prepared`` for asyncio: an enqueue alone in its turn of the event
        loop (nothing to coalesce it with) is sent at once; others are coalesced."""
        if self.coalesce and (self._pending or not alone(asyncio.get_running_loop())):
            return applied_id(await self._coalesced(prepared.new(payload)))
        call = self._prepared_call(prepared, payload)
        if call is None:
            return applied_id(await self.enqueue_job(prepared.new(payload)))
        self._lone += 1
        try:
            try:
                reply = await self._send(self._command(call))
            except Exception as exc:
                reply = exc
            job_id = created_id(call, reply)
            if job_id is not None:
                return job_id
            return applied_id(await self._drive(self._sending(call, reply)))
        finally:
            self._lone -= 1

    enqueue_many = coroutine(Operations.enqueue_many)
    enqueue_each = coroutine(Operations.enqueue_each)
    claim = coroutine(Operations.claim)
    claim_many = coroutine(Operations.claim_many)
    claim_job = coroutine(Operations.claim_job)
    complete = coroutine(Operations.complete)
    fail = coroutine(Operations.fail)
    permanent_fail = coroutine(Operations.permanent_fail)
    heartbeat = coroutine(Operations.heartbeat)
    report_progress = coroutine(Operations.report_progress)
    release = coroutine(Operations.release)
    report_many = coroutine(Operations.report_many)
    report_and_claim = coroutine(Operations.report_and_claim)
    expire = coroutine(Operations.expire)
    change = coroutine(Operations.change)
    update_input = coroutine(Operations.update_input)
    change_priority = coroutine(Operations.change_priority)
    reschedule = coroutine(Operations.reschedule)
    promote = coroutine(Operations.promote)
    cancel = coroutine(Operations.cancel)
    retry = coroutine(Operations.retry)
    sweep_expired = coroutine(Operations.sweep_expired)
    resume_cascades = coroutine(Operations.resume_cascades)
    promote_due = coroutine(Operations.promote_due)
    prune = coroutine(Operations.prune)
    purge = coroutine(Operations.purge)
    get_job = coroutine(Operations.get_job)
    counts = coroutine(Operations.counts)
    list_jobs = coroutine(Operations.list_jobs)
    page_jobs = coroutine(Operations.page_jobs)
    pause = coroutine(Operations.pause)
    resume = coroutine(Operations.resume)
    queues = coroutine(Operations.queues)
    workers = coroutine(Operations.workers)
    declare_schedule = coroutine(Operations.declare_schedule)
    fire_schedule = coroutine(Operations.fire_schedule)
    trigger_schedule = coroutine(Operations.trigger_schedule)
    schedules = coroutine(Operations.schedules)
    change_schedule = coroutine(Operations.change_schedule)
    pause_schedule = coroutine(Operations.pause_schedule)
    resume_schedule = coroutine(Operations.resume_schedule)
    remove_schedule = coroutine(Operations.remove_schedule)
    set_limits = coroutine(Operations.set_limits)
    set_group_limits = coroutine(Operations.set_group_limits)
    flow = coroutine(Operations.flow)
    dependencies = coroutine(Operations.dependencies)
    open_batch = coroutine(Operations.open_batch)
    close_batch = coroutine(Operations.close_batch)
    batch = coroutine(Operations.batch)
    batch_results = coroutine(Operations.batch_results)

    # the worker's waits ------------------------------------------------------------------------

    @property
    def can_wait_and_claim(self) -> bool:
        """Whether ``wait_and_claim`` can send a wait and a call in one write (a plain client)."""
        return self._packed is not None and not isinstance(self.calls, PartitionOps)

    async def wait_and_claim(
        self,
        queues: Sequence[str],
        timeout: float,
        call: Call[T],
        on_blocked: Callable[[int], None],
        on_answer: Callable[[T], None] | None = None,
    ) -> tuple[bool, T | BaseException]:
        """Wait for a wake-up token of ``queues`` (up to ``timeout`` seconds), then ``call``, in
        one write on a connection of their own: Redis runs the call the moment the wait ends (a
        client's later commands wait for its blocking one), so a worker woken by a new job has
        its claim in the same round trip. ``on_blocked`` gets the connection's client id as the
        wait starts: ``unblock(id)`` ends the wait early, and the call still runs. Whether a token
        was popped, and the call's result (or the error it met). ``on_answer`` gets the call's
        result (not an error) as soon as it is read: on a kept wait connection (``_wait_line``)
        from the connection's protocol in the event loop's turn the reply comes in
        (``EarlyAnswer``), else before this returns. Only where ``can_wait_and_claim``.

        A wait that is cancelled drops its connection: Redis forgets a blocked client that is
        gone, but a call it ran before that is answered to nobody (send it again: same call id).
        """
        assert self._packed is not None
        if not self._policy_checked:
            await self._drive(self._checking_policy())
        wait: Any = ("BLPOP", *(self.keys.wake(q) for q in queues), str(timeout))
        packed = b"".join(map(hiredis.pack_command, (("CLIENT", "ID"), wait, self._command(call))))
        line = await self._lines.take()
        early = None if line is None or on_answer is None else EarlyAnswer(call, on_answer)
        if line is None:
            pool, named = self.redis.connection_pool, self._named
            popped, reply = await wait_pooled(pool, named, packed, timeout, on_blocked)
        else:
            popped, reply = await wait_on(line, self._lines, packed, timeout, on_blocked, early)
        if isinstance(reply, Exception):
            return popped is not None, self._error(reply)
        if early is not None and early.answered:
            return popped is not None, early.result
        try:
            reply, left = work_left(reply)
            result = call.parse(reply)
            if left:
                result = await self._drive(self._carrying_on(call, result))
        except QuasarError as exc:
            return popped is not None, exc
        if on_answer is not None:
            on_answer(result)
        return popped is not None, result

    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up token of ``queues``; whether one came.

        The wait ends sooner on a client whose socket timeout is shorter (``_waits``)."""
        slots = wake_lists(self.calls, queues, is_cluster(self.redis))
        timeout = block_slice(self.redis, timeout)
        if len(slots) == 1:
            return await self.redis.blpop(slots[0], timeout=timeout) is not None
        return await first_of([self.redis.blpop(keys, timeout=timeout) for keys in slots])

    async def wake(self, queue: str) -> None:
        """Push a wake-up token for ``queue``: one idle worker of it looks for work."""
        await self.redis.rpush(keys_of(self.calls).wake(queue), "1")

    async def unblock(self, client_id: int) -> None:
        """End the wait of the connection ``client_id`` (``CLIENT UNBLOCK``) early."""
        await self.redis.execute_command("CLIENT", "UNBLOCK", client_id)

    async def server_time_ms(self) -> float:
        """The Redis server's clock, in milliseconds since the epoch."""
        seconds, micros = await self.redis.time()
        return float(seconds * 1000 + micros / 1000)


def _packed_sender(client: Any) -> Callable[[Command], Coroutine[Any, Any, Any]] | None:
    """A sender of one command packed by hiredis (C), for a plain ``redis.asyncio.Redis``.

    redis-py's asyncio connection packs a command in Python, joining a growing buffer for every
    argument: about 16 µs a job for the 14 arguments a coalesced enqueue sends per job (hiredis
    packs the same in a fifth of that). ``PackedSender`` sends the packed bytes instead; a
    cluster client or a single-connection client keeps ``execute_command``.
    """
    if type(client) is not redis.asyncio.Redis:
        return None
    if client.single_connection_client:
        return None
    return PackedSender(client.connection_pool)


class PackedSender:
    """Sends a command packed by hiredis with the client's own retry policy, as
    ``execute_command`` does, on the connection its pool keeps for quasar's calls (``Kept``) when
    no other command holds it, else on one the pool lends."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.takes_name = needs_command_name(pool)
        self.kept = kept_of(pool, redis.asyncio.ConnectionPool)

    async def __call__(self, command: Command) -> Any:
        packed = hiredis.pack_command(command)
        kept = self.kept
        if kept is not None and not kept.busy:
            kept.busy = True
            try:
                return await self.on_kept(kept, command, packed)
            finally:
                kept.busy = False
        conn = await self.lend(command[0])
        try:
            return await self.on(conn, packed)
        finally:
            await self.pool.release(conn)

    async def lend(self, name: Any) -> Any:
        pool = self.pool
        return await (pool.get_connection(name) if self.takes_name else pool.get_connection())

    async def on_kept(self, kept: Kept, command: Command, packed: bytes) -> Any:
        conn = kept.conn
        if conn is None:
            conn = kept.conn = await self.lend(command[0])
        else:  # (checked as the pool checks what it lends: one closed meanwhile, connected again)
            await self.pool.ensure_connection(conn)
        return await self.on(conn, packed)  # (redis-py disconnects a command stopped mid-way)

    @staticmethod
    async def on(conn: Any, packed: bytes) -> Any:
        async def once() -> Any:
            await _write(conn, packed)
            return await conn.read_response()

        async def fail(_: Exception) -> None:
            await conn.disconnect()

        return await conn.retry.call_with_retry(once, fail)


#: Whether ``asyncio.wait_for`` runs what it times in a task of its own (Python before 3.12).
WAIT_FOR_TASK = sys.version_info < (3, 12)
#: A command this small goes out whole: an asyncio transport's write waits only once its buffer
#: is past the high-water mark (64 KiB by default), and a pooled connection's buffer is empty.
SMALL_WRITE = 16 * 1024


async def _write(conn: Any, packed: bytes) -> None:
    """``conn.send_packed_command(packed)``: with the connection's socket timeout, redis-py times
    the write with ``asyncio.wait_for``, which before Python 3.12 makes a task of it (a turn of the
    loop more, about 8 µs of CPU a command). A write that cannot wait (a connected connection, no
    health check to send first, a small command) has nothing that timeout could end: it goes
    without, the timeout set back at once for the read."""
    if not (
        WAIT_FOR_TASK
        and len(packed) <= SMALL_WRITE
        and conn.is_connected
        and not conn.health_check_interval
    ):
        await conn.send_packed_command(packed)
        return
    timeout, conn.socket_timeout = conn.socket_timeout, None
    try:
        await conn.send_packed_command(packed)
    finally:
        if conn.socket_timeout is None:  # (unless redis-py changed it meanwhile: a maintenance)
            conn.socket_timeout = timeout
