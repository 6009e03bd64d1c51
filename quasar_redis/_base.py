"""What the sync and asyncio clients share: set-up checks, error mapping, NOSCRIPT detection."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import redis.exceptions as rex

from ._keys import KeySpace
from ._protocol import Call, Limits, NewJob, Protocol
from ._scripts import Script
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


def map_error(exc: BaseException) -> BaseException:
    """Our exception for a redis-py one raised by a script call."""
    if isinstance(exc, CONNECTION_ERRORS):
        return RedisUnavailable(str(exc) or type(exc).__name__)
    if isinstance(exc, rex.ResponseError):
        return ProtocolError(f"script error: {exc}")
    return exc


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
    ) -> None:
        check_client(redis)
        self.redis = redis
        self.keys = KeySpace(namespace, tag, key_prefix)
        self.calls = Protocol(self.keys, limits)
        self._policy_checked = not check_eviction_policy
        self._script_keys: tuple[str, ...] = (
            (self.keys.root, self.keys.events) if events else (self.keys.root,)
        )

    @property
    def namespace(self) -> str:
        return self.keys.namespace

    def _sha_args(self, call: Call[Any]) -> tuple[Any, ...]:
        return (call.script.sha, len(self._script_keys), *self._script_keys, *call.args)


def noscript_calls(calls: Sequence[Call[Any]], replies: Sequence[Any]) -> list[int]:
    """Positions of the pipelined calls that came back NOSCRIPT."""
    return [i for i, reply in enumerate(replies) if is_noscript(reply)]


def scripts_of(calls: Sequence[Call[Any]], positions: Sequence[int]) -> list[Script]:
    return list({calls[i].script.sha: calls[i].script for i in positions}.values())


def parse_all(
    calls: Sequence[Call[Any]], replies: Sequence[Any], again: dict[int, Any]
) -> list[Any]:
    """Results of a pipeline, in order: ``again`` holds replies of calls sent a second time."""
    results = []
    for i, call in enumerate(calls):
        if call.early is not None:
            results.append(call.early)
            continue
        reply = again.get(i, replies[i])
        if isinstance(reply, Exception):
            raise map_error(reply) from reply
        results.append(call.parse(reply))
    return results
