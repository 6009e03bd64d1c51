"""Sending, written once and IO-free: what to send, what a failure needs, when to send again.

A send is a generator (a ``Flow``) that yields what it wants done and is sent the reply, or the
exception that doing it raised, as a value; it returns the call's result (or raises). The sync
and asyncio clients only drive it (``Quasar._drive``, ``AsyncQuasar._drive``): they do each
step with their own IO and feed the outcome back, as httpx drives an authentication flow.

A step is one of:

- a command (a plain ``tuple``): sent on the client's fast path (hiredis-packed on a plain
  client, ``execute_command`` elsewhere);
- a ``Pipeline``: its commands in one round trip, each reply or error in place (``None`` where
  a call was not sent);
- a ``Replicated`` (durable mode, ``_durable``): commands and a WAIT on one connection;
- an ``Ask``: a redis-py client method (``script_load``, routed to every primary of a cluster;
  ``config_get``).

A call that leaves cascade work in Redis (a cancel, failure or completion whose dependents did
not all fit in its bound: its reply is ``{"More", reply}``) is carried on before its result is
handed over: one bounded step after another (lua/resume_cascades.lua), each a call of its own, until
none is left.

What the server lacks is loaded and the failed call sent again, at most ``SENDS`` times: the
function library missing ("function not found": a restart without persistence, a flush), then
loaded with ``FUNCTION LOAD``; functions unusable (Redis 6.2, an ACL refusing FCALL), then
scripts from now on; a script missing (NOSCRIPT), then ``SCRIPT LOAD``.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.exceptions as rex

from ._access import database_of, permission_denied, refusal
from ._calls import Call, CallBuilder
from ._durable import Durable, Replicated, confirm, fewest, split, writes
from ._partitions import checking_record
from ._policy import evicting, eviction_refused, policy_of, warn_policy
from ._replies import work_left
from ._scripts import Library, Script, scripts
from .errors import (
    ProtocolError,
    RedisFull,
    RedisUnavailable,
)

T = TypeVar("T")

Command = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Commands sent in one round trip; the reply is a list, an error in place of a failed one's
    reply, ``None`` where the command is ``None``."""

    commands: list[Command | None]


@dataclass(frozen=True, slots=True)
class Ask:
    """A call of the redis-py client's method ``method`` with ``args``."""

    method: str
    args: tuple[Any, ...]


Step = Command | Pipeline | Ask | Replicated
#: A send: yields steps, is sent each step's reply (or the exception it raised), returns a result.
Flow = Generator[Step, Any, T]

# How many times a call is sent at most: first, after loading the library, after falling back to
# scripts and loading them.
SENDS = 3
#: ``Sending._sending``'s ``sent`` when the call has not been sent yet.
NOT_SENT: Any = object()

CONNECTION_ERRORS = (rex.ConnectionError, rex.TimeoutError)
#: What redis-py's cluster client raises once its own retries are spent while a slot has no
#: primary yet (a failover) or its keys are on two nodes (a migration: TRYAGAIN, "TTL
#: exhausted"): nothing was applied, and the same call can be sent again.
CLUSTER_PASSING = (
    rex.ClusterError,
    rex.TryAgainError,
    rex.MasterDownError,
    rex.RedisClusterException,
)


def is_noscript(exc: BaseException) -> bool:
    return isinstance(exc, rex.NoScriptError) or (
        isinstance(exc, rex.ResponseError) and str(exc).startswith("NOSCRIPT")
    )


def functions_unusable(exc: BaseException) -> bool:
    """Redis before 7 (no FCALL / FUNCTION), or a user not allowed to use them. A refusal of
    anything else (a command a function runs, a key) is no reason to give functions up."""
    text = str(exc).lower()
    if isinstance(exc, rex.NoPermissionError) or text.startswith("noperm"):
        return "'fcall" in text or "'function" in text
    return isinstance(exc, rex.ResponseError) and text.startswith(
        ("unknown command", "err unknown command")
    )


@dataclass
class Recovery:
    """What failed calls need before they are sent again, or nothing (``bool(r)`` is false)."""

    load_library: bool = False
    use_scripts: bool = False  # stop using functions on this client: EVALSHA from now on
    scripts: list[Script] = field(default_factory=list)  # to SCRIPT LOAD

    def __bool__(self) -> bool:
        return self.load_library or self.use_scripts or bool(self.scripts)


def missing(exc: BaseException) -> str | None:
    """What a failed call lacked: "library", "functions" (unusable here) or "script"; None when
    the error is a real one."""
    if isinstance(exc, rex.ResponseError) and str(exc).lower() == "function not found":
        return "library"
    if functions_unusable(exc):
        return "functions"
    if is_noscript(exc):
        return "script"
    return None


def recovery(failures: Sequence[tuple[BaseException, Call[Any]]]) -> Recovery:
    """Decide how to recover from the errors of calls sent once."""
    out = Recovery()
    for exc, call in failures:
        kind = missing(exc)
        if kind == "library":
            out.load_library = True
        elif kind == "functions":
            out.use_scripts = True
        elif kind == "script" and call.script not in out.scripts:
            out.scripts.append(call.script)
    return out


def library_load_error(exc: BaseException) -> bool | None:
    """After FUNCTION LOAD failed: True when functions cannot be used here (fall back to
    scripts), False when the library is there after all (another client loaded it), None when
    the error is real."""
    if isinstance(exc, rex.ResponseError) and "already exists" in str(exc):
        return False
    if functions_unusable(exc):
        return True
    return None


def map_error(exc: BaseException, database: int | None = None) -> BaseException:
    """Our exception for a redis-py one raised by a script call; ``database``: the number the
    client selects, for the error of one the server lacks."""
    refused = refusal(exc, database)  # (an AuthenticationError is a ConnectionError: never retried)
    if refused is not None:
        return refused
    denied = permission_denied(exc)
    if denied is not None:
        return denied
    if isinstance(exc, CONNECTION_ERRORS):
        return RedisUnavailable(str(exc) or type(exc).__name__)
    if isinstance(exc, CLUSTER_PASSING):
        return RedisUnavailable(
            f"the cluster cannot serve the namespace's slot now ({type(exc).__name__}: {exc}): "
            "a failover or a slot migration under way; send the call again"
        )
    if isinstance(exc, rex.OutOfMemoryError) or "used memory > 'maxmemory'" in str(exc):
        return RedisFull(
            f"Redis is out of memory ({exc}): nothing was written; raise maxmemory or free "
            "memory (prune finished jobs, cancel unwanted ones), then try again"
        )
    if isinstance(exc, rex.ResponseError):
        return ProtocolError(f"script error: {exc}")
    return exc


def failures(
    calls: Sequence[Call[Any] | None], replies: Sequence[Any]
) -> list[tuple[int, BaseException, Call[Any]]]:
    """The pipelined calls whose reply is an error, with their positions."""
    return [
        (i, reply, call)
        for i, (call, reply) in enumerate(zip(calls, replies, strict=True))
        if call is not None and isinstance(reply, Exception)
    ]


def merged(
    todo: Sequence[Call[Any] | None], got: Sequence[Any], replies: Sequence[Any]
) -> list[Any]:
    """The replies so far, with those of the calls just sent (``todo``) replaced by ``got``."""
    return [r if c is not None else old for c, r, old in zip(todo, got, replies, strict=True)]


def resend(
    todo: Sequence[Call[Any] | None], got: Sequence[Any]
) -> tuple[Recovery, list[Call[Any] | None]]:
    """What the failed calls need, and the calls to send again once it is done."""
    failed = [(i, exc, call) for i, exc, call in failures(todo, got) if missing(exc)]
    plan = recovery([(exc, call) for _, exc, call in failed])
    again = {i for i, _, _ in failed}
    return plan, [c if i in again else None for i, c in enumerate(todo)]


def parse_all(calls: Sequence[Call[Any]], replies: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """Results of a pipeline, in order, and the positions of the calls that left cascade work."""
    results, more = [], []
    for i, call in enumerate(calls):
        if call.early is not None:
            results.append(call.early)
            continue
        reply = replies[i]
        if isinstance(reply, Exception):
            raise map_error(reply) from reply
        reply, left = work_left(reply)
        if left:
            more.append(i)
        results.append(call.parse(reply))
    return results, more


class Sending:
    """The flows of a client: one call, a pipeline, recovery and the eviction-policy check.

    Its state: whether calls go as functions (FCALL) or scripts (EVALSHA), the library, the keys
    every call gets, and what the server's eviction policy is known to be.

    The policy is asked before the first call, and again before the next call once a connection
    of the client connected again or broke (``_server_changed``): the server may be another, or
    reconfigured (the call whose connection reconnects is sent as it connects, before that).
    While it may evict keys, an enqueue is refused (``EvictionPolicyError``) unless
    ``allow_eviction``; the other calls go on, with one warning. ``_policy_checked`` is the one
    test on the way of every call: true once the policy is asked and there is nothing to refuse.
    """

    redis: Any
    functions: bool
    durable: Durable | None
    library: Library
    calls: CallBuilder
    allow_eviction: bool
    _checks_policy: bool
    _script_keys: tuple[str, ...]
    _policy_checked: bool
    _policy_asked: bool
    partitions: int | None  # the client's number of partitions, when it was given one
    _record_checked: bool  # whether the namespace's record of partitions says the same
    _evicting: str | None  # the policy, when it may evict keys
    _warned: str | None  # the policy last warned of

    def _command(self, call: Call[Any]) -> Command:
        """The command sending ``call``: FCALL of its function, or EVALSHA of its script."""
        keys = call.keys or self._script_keys
        if self.functions:
            return ("FCALL", call.script.function, len(keys), *keys, *call.args)
        return ("EVALSHA", call.script.sha, len(keys), *keys, *call.args)

    def _sending(self, call: Call[T], sent: Any = NOT_SENT) -> Flow[T]:
        """One call: sent, and sent again once what the server lacks is loaded. ``sent``: the
        reply (or exception) of the call sent already as the first send would have sent it
        (``_enqueue_prepared``), read here as that send's."""
        if call.early is not None:
            return call.early
        if not self._policy_checked and sent is NOT_SENT:
            yield from self._checking_policy(call)
        if call.spread is not None:
            return (yield from call.spread(self))
        durable = self._durable_of((call,))
        for attempt in range(SENDS):
            if sent is not NOT_SENT:
                reply, acked, sent = sent, None, NOT_SENT
            elif durable is None:  # (the hot path: the command alone, as one step)
                reply, acked = (yield self._command(call)), None
            else:
                got, acked = yield from self._sending_once([self._command(call)], durable)
                reply = got[0] if isinstance(got, list) else got
            if not isinstance(reply, Exception):
                return (yield from self._finishing(call, reply, durable, acked))
            yield from self._failed(call, reply, attempt == SENDS - 1)
        raise AssertionError("unreachable")

    def _failed(self, call: Call[Any], exc: Exception, last: bool) -> Flow[None]:
        """``call`` failed with ``exc``: what the server lacks loaded before the next send, or
        our error raised (nothing to load, or the ``last`` send)."""
        if isinstance(exc, CONNECTION_ERRORS):
            self._server_changed()
        plan = recovery([(exc, call)])
        if not plan or last:
            raise self._error(exc) from exc
        try:
            yield from self._recovering(plan)
        except Exception as error:
            raise self._error(error) from error

    def _sending_many(self, calls: Sequence[Call[Any]]) -> Flow[list[Any]]:
        """Many calls in one pipeline; those that met a missing library or script sent again.
        (Calls spread over partitions go one after the other, each sending its own parts.)"""
        if any(call.spread is not None for call in calls):
            return (yield from self._sending_each(calls))
        if not self._policy_checked:
            yield from self._checking_each(calls)
        todo: list[Call[Any] | None] = [c if c.early is None else None for c in calls]
        replies: list[Any] = [None] * len(calls)
        durable = self._durable_of(calls)
        acked: Any = None
        try:
            for attempt in range(SENDS):
                commands = [None if c is None else self._command(c) for c in todo]
                got, wait = yield from self._sending_once(commands, durable)
                if isinstance(got, Exception):
                    raise got
                acked = fewest(acked, wait)
                replies = merged(todo, got, replies)
                plan, todo = resend(todo, got)
                if not plan or attempt == SENDS - 1:
                    break
                yield from self._recovering(plan)
        except rex.RedisError as exc:
            if isinstance(exc, CONNECTION_ERRORS):
                self._server_changed()
            raise self._error(exc) from exc
        results, more = parse_all(calls, replies)
        for i in more:
            results[i] = yield from self._carrying_on(calls[i], results[i])
        if durable is not None:
            self._confirm(durable, acked, results, calls)
        return results

    def _finishing(self, call: Call[T], reply: Any, durable: Durable | None, acked: Any) -> Flow[T]:
        """``call``'s result from its reply: its cascade work carried on, its replicas
        confirmed in durable mode."""
        reply, left = work_left(reply)
        result = call.parse(reply)
        if left:
            result = yield from self._carrying_on(call, result)
        if durable is not None:
            self._confirm(durable, acked, result, [call])
        return result

    def _checking_each(self, calls: Sequence[Call[Any]]) -> Flow[None]:
        for call in calls:
            yield from self._checking_policy(call)

    def _durable_of(self, calls: Sequence[Call[Any]]) -> Durable | None:
        """The client's durable mode, where ``calls`` write (else None: nothing to wait for)."""
        if self.durable is not None and any(writes(c) for c in calls):
            return self.durable
        return None

    def _confirm(
        self, durable: Durable, acked: Any, result: Any, calls: Sequence[Call[Any]]
    ) -> None:
        """Durable mode: ``NotReplicated`` unless WAIT counted enough replicas."""
        try:
            confirm(durable, acked, result, calls)
        except rex.RedisError as exc:  # (WAIT refused: an ACL without +wait, a replica)
            raise self._error(exc) from exc

    def _sending_once(self, commands: list[Command | None], durable: Durable | None) -> Flow[Any]:
        """One round trip: the replies (or the exception), and WAIT's reply in durable mode.
        A single command goes alone (the fast path), many in a pipeline."""
        if durable is not None:
            got = yield Replicated(commands, durable.wait)
            return (got, None) if isinstance(got, Exception) else split(got)
        if len(commands) == 1 and commands[0] is not None:
            return [(yield commands[0])], None
        return (yield Pipeline(commands)), None

    def _sending_each(self, calls: Sequence[Call[Any]]) -> Flow[list[Any]]:
        """Calls one after the other (those spread over partitions pipeline their parts)."""
        done = []
        for call in calls:
            done.append((yield from self._sending(call)))
        return done

    def _carrying_on(self, call: Call[T], result: T) -> Flow[T]:
        """``call``'s result once the cascade work it left is done: a step at a time (each one
        bounded call, so other clients' calls run between them), each step's gains absorbed."""
        while True:
            step = yield from self._sending(self.calls.carry_on(call).on(call.keys))
            if call.absorb is not None:
                result = call.absorb(result, step)
            if not step.more:
                return result

    def _recovering(self, plan: Recovery) -> Flow[None]:
        """Load what is missing: the function library, or scripts (see ``Recovery``)."""
        if plan.use_scripts:
            self.functions = False
        if plan.load_library and self.functions:
            reply = yield ("FUNCTION", "LOAD", self.library.source)
            if isinstance(reply, Exception):
                self._library_refused(reply)
        for script in plan.scripts:
            reply = yield Ask("script_load", (script.source,))
            if isinstance(reply, Exception):
                raise reply

    def _preloading(self) -> Flow[None]:
        """Load the function library (where this client uses functions) and every script, so
        that users who may not load them (an ACL) find them there."""
        if self.functions:
            reply = yield ("FUNCTION", "LOAD", self.library.source)
            denied = isinstance(reply, Exception) and permission_denied(reply) is not None
            unusable = library_load_error(reply) if isinstance(reply, Exception) else False
            if isinstance(reply, Exception) and (denied or unusable is None):
                raise self._error(reply) from reply
            self.functions = not unusable  # (Redis 6.2, "unknown command": scripts from now on)
        for script in scripts().values():
            reply = yield Ask("script_load", (script.source,))
            if isinstance(reply, Exception):
                raise self._error(reply) from reply

    def _library_refused(self, exc: BaseException) -> None:
        """FUNCTION LOAD failed: scripts from now on, or nothing to do, or a real error. A user
        the ACL refuses FUNCTION LOAD stays on functions: the library is an admin's to load
        (``load_scripts``), and the next call finds it once loaded."""
        unusable = library_load_error(exc)
        if unusable is None or isinstance(exc, rex.NoPermissionError):
            raise exc
        self.functions = not unusable

    def _asking_policy(self) -> Flow[str | None]:
        """Redis's ``maxmemory-policy``; None where CONFIG is refused (some managed Redis)."""
        reply = yield Ask("config_get", ("maxmemory-policy",))
        return None if isinstance(reply, Exception) else policy_of(reply)

    def _checking_policy(self, call: Call[Any] | None = None) -> Flow[None]:
        """Ask the policy if it is not known (a refused CONFIG, as on some managed Redis, says
        nothing); refuse ``call`` if it enqueues while Redis may evict keys, unless allowed
        (asking again at the next call); warn once of such a policy otherwise. First, for a
        client given its partitions, check the namespace's record of them."""
        if not self._record_checked:
            yield from checking_record(self.calls.keys, self.partitions, self._error)
            self._record_checked = True
        if not self._policy_asked:
            reply = yield Ask("config_get", ("maxmemory-policy",))
            self._evicting = None if isinstance(reply, Exception) else evicting(reply)
            self._policy_asked = True  # (after the reply: the connection it made is asked)
        policy = self._evicting
        refusing = policy is not None and not self.allow_eviction
        self._policy_checked = not refusing
        if policy is None:
            return
        if refusing and call is not None and call.script.name == "enqueue":
            self._policy_asked = False  # (the next call asks: the policy may be set back)
            raise eviction_refused(policy)
        if self._warned != policy:
            self._warned = policy
            warn_policy({"maxmemory-policy": policy})

    def _error(self, exc: BaseException) -> BaseException:
        """``map_error`` of ``exc``, for this client's database."""
        return map_error(exc, database_of(self.redis))

    def _server_changed(self) -> None:
        """A connection connected (again) or broke: ask the eviction policy before the next
        call (from ``watch_connections``, in whatever thread connected)."""
        if self._checks_policy:
            self._policy_asked = self._policy_checked = False
