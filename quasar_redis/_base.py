"""What the sync and asyncio clients share: set-up checks, error mapping, NOSCRIPT detection."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from ._calls import Call, CallBuilder, Limits, NewJob
from ._keys import KeySpace
from ._scripts import Library, Script, library
from .errors import ConfigurationError, ProtocolError, RedisUnavailable

__all__ = ["ClientBase", "EvictionPolicyWarning", "NewJob"]


class EvictionPolicyWarning(RuntimeWarning):
    """Redis may evict keys (``maxmemory-policy`` is not ``noeviction``): jobs can be lost."""


CONNECTION_ERRORS = (rex.ConnectionError, rex.TimeoutError)


def check_client(client: Any) -> None:
    """Refuse a Redis client that decodes responses (payloads are bytes)."""
    kwargs: dict[str, Any] = {}
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kwargs = getattr(pool, "connection_kwargs", {}) or {}
    elif hasattr(client, "get_connection_kwargs"):
        kwargs = client.get_connection_kwargs() or {}
    if kwargs.get("decode_responses"):
        raise ConfigurationError(
            "quasar_redis needs a Redis client with decode_responses=False (payloads are bytes)"
        )


def warn_policy(reply: Any) -> None:
    """Warn when ``CONFIG GET maxmemory-policy`` says Redis may evict keys."""
    policy: Any = None
    if isinstance(reply, dict):
        values = list(reply.values())
        policy = values[0] if values else None
        if isinstance(policy, dict):  # cluster: one reply per node
            policy = next(iter(policy.values()), None)
    if isinstance(policy, bytes):
        policy = policy.decode()
    if policy and policy != "noeviction":
        warnings.warn(
            f"Redis maxmemory-policy is {policy!r}, not 'noeviction': Redis may evict job keys "
            "and silently lose jobs and leases",
            EvictionPolicyWarning,
            stacklevel=3,
        )


def is_noscript(exc: BaseException) -> bool:
    return isinstance(exc, rex.NoScriptError) or (
        isinstance(exc, rex.ResponseError) and str(exc).startswith("NOSCRIPT")
    )


def functions_unusable(exc: BaseException) -> bool:
    """Redis before 7 (no FCALL / FUNCTION), or a user not allowed to use them."""
    text = str(exc).lower()
    return isinstance(exc, rex.NoPermissionError) or (
        isinstance(exc, rex.ResponseError)
        and (text.startswith(("unknown command", "err unknown command", "noperm")))
    )


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster | AsyncRedisCluster)


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
    """Decide how to recover from the errors of calls sent once (see ``ClientBase``)."""
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


def map_error(exc: BaseException) -> BaseException:
    """Our exception for a redis-py one raised by a script call."""
    if isinstance(exc, CONNECTION_ERRORS):
        return RedisUnavailable(str(exc) or type(exc).__name__)
    if isinstance(exc, rex.ResponseError):
        return ProtocolError(f"script error: {exc}")
    return exc


def needs_command_name(pool: Any) -> bool:
    """Whether ``pool.get_connection`` needs the command's name (redis-py before 5.3)."""
    params = inspect.signature(pool.get_connection).parameters
    return (
        "command_name" in params and params["command_name"].default is params["command_name"].empty
    )


class ClientBase:
    """State the two clients share; every method of theirs builds its call with ``calls``."""

    def __init__(
        self,
        redis: Any,
        namespace: str = "default",
        *,
        limits: Limits | None = None,
        tag: str = "",
        key_prefix: str = "quasar",
        check_eviction_policy: bool = True,
        events: bool = True,
        functions: bool = True,
    ) -> None:
        check_client(redis)
        self.redis = redis
        # Redis Functions (one library, FCALL) where the server has them; scripts (EVALSHA)
        # on Redis Cluster clients (redis-py would ask the server for an FCALL's keys on every
        # call), on Redis 6.2, where functions are refused, or when ``functions=False``.
        self.functions = functions and not is_cluster(redis)
        self.library: Library = library()
        self.keys = KeySpace(namespace, tag, key_prefix)
        self.calls = CallBuilder(self.keys, limits)
        self._policy_checked = not check_eviction_policy
        self._script_keys: tuple[str, ...] = (
            (self.keys.root, self.keys.events) if events else (self.keys.root,)
        )

    @property
    def namespace(self) -> str:
        return self.keys.namespace

    def _command(self, call: Call[Any]) -> tuple[Any, ...]:
        """The command sending ``call``: FCALL of its function, or EVALSHA of its script."""
        keys = self._script_keys
        if self.functions:
            return ("FCALL", call.script.function, len(keys), *keys, *call.args)
        return ("EVALSHA", call.script.sha, len(keys), *keys, *call.args)

    def _applied(self, plan: Recovery) -> None:
        if plan.use_scripts:
            self.functions = False

    def _library_refused(self, exc: BaseException) -> None:
        """FUNCTION LOAD failed: scripts from now on, or nothing to do, or a real error."""
        unusable = library_load_error(exc)
        if unusable is None:
            raise exc
        self.functions = not unusable


# How many times a call is sent at most: first, after loading the library, after falling back to
# scripts and loading them.
SENDS = 3


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


def parse_all(calls: Sequence[Call[Any]], replies: Sequence[Any]) -> list[Any]:
    """Results of a pipeline, in order."""
    results = []
    for i, call in enumerate(calls):
        if call.early is not None:
            results.append(call.early)
            continue
        reply = replies[i]
        if isinstance(reply, Exception):
            raise map_error(reply) from reply
        results.append(call.parse(reply))
    return results
