"""The eviction-policy check's words: what ``CONFIG GET maxmemory-policy`` says, the warning of
a policy that may evict keys and the refusal of an enqueue under it (``_sending`` asks)."""

from __future__ import annotations

import warnings
from typing import Any

from .errors import EvictionPolicyError


class EvictionPolicyWarning(RuntimeWarning):
    """Redis may evict keys (``maxmemory-policy`` is not ``noeviction``): jobs can be lost."""


def policy_of(reply: Any) -> str | None:
    """The policy a ``CONFIG GET maxmemory-policy`` reply names (None: it names none)."""
    policy: Any = None
    if isinstance(reply, dict):
        values = list(reply.values())
        policy = values[0] if values else None
        if isinstance(policy, dict):  # cluster: one reply per node
            policy = next(iter(policy.values()), None)
    if isinstance(policy, bytes):
        policy = policy.decode()
    return policy if isinstance(policy, str) and policy else None


def evicting(reply: Any) -> str | None:
    """The policy ``CONFIG GET maxmemory-policy`` names if it may evict keys, else None."""
    policy = policy_of(reply)
    return policy if policy and policy != "noeviction" else None


def warn_policy(reply: Any) -> None:
    """Warn when ``CONFIG GET maxmemory-policy`` says Redis may evict keys."""
    policy = evicting(reply)
    if policy:
        warnings.warn(
            f"Redis maxmemory-policy is {policy!r}, not 'noeviction': Redis may evict job keys "
            "and silently lose jobs and leases",
            EvictionPolicyWarning,
            stacklevel=3,
        )


def eviction_refused(policy: str) -> EvictionPolicyError:
    return EvictionPolicyError(
        f"Redis maxmemory-policy is {policy!r}: it may evict job keys and lose acknowledged jobs "
        "(docs/guarantees.md), so nothing was enqueued; set maxmemory-policy noeviction, or "
        "accept it with allow_eviction=True (Quasar, AsyncQuasar or App)"
    )
