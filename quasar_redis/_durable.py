"""Durable mode: a write's reply is trusted only once enough replicas hold it.

Redis replicates asynchronously: a primary replies to a script call before its replicas have the
write, and a primary killed in that window loses it when a replica takes over. ``Durable`` makes
every call that writes go out with ``WAIT replicas timeout`` right behind it, in the same round
trip and on the same connection (WAIT counts the writes of its own connection), and checks WAIT's
count before handing the result over: short of ``replicas``, the call raises ``NotReplicated``.
Calls that only read (scripts flagged ``no-writes``) go out as they always do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._call_base import Call
from ._scripts import FLAGS
from .errors import ConfigurationError, NotReplicated

Command = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Durable:
    """Wait, after every write, until ``replicas`` replicas acknowledge it, at most
    ``timeout_ms`` milliseconds; fewer in time: ``NotReplicated``. Bad values (not an int,
    ``replicas`` < 0, ``timeout_ms`` < 1) are a ``ConfigurationError`` here, at construction."""

    replicas: int = 1
    timeout_ms: int = 1000

    def __post_init__(self) -> None:
        for name, value, least in (
            ("replicas", self.replicas, 0),
            ("timeout_ms", self.timeout_ms, 1),
        ):
            if type(value) is not int:  # (a bool is an int to isinstance)
                raise ConfigurationError(
                    f"Durable {name} must be an int, not {type(value).__name__} ({value!r})"
                )
            if value < least:
                raise ConfigurationError(f"Durable {name} must be at least {least}, not {value}")

    @property
    def wait(self) -> Command:
        """The WAIT command sent after the writes."""
        return ("WAIT", self.replicas, self.timeout_ms)


def check_durable(durable: Any) -> Durable | None:
    """``durable`` as a client option: a ``Durable`` or None, anything else refused."""
    if durable is None or isinstance(durable, Durable):
        return durable
    raise ConfigurationError(f"durable must be a Durable or None, not {type(durable).__name__}")


@dataclass(frozen=True, slots=True)
class Replicated:
    """A step: ``commands`` (``None`` where nothing is sent) in one round trip on one connection
    of the primary that serves them, then ``wait`` (on a cluster, a round trip and a WAIT per
    partition: ``_pinned``). The reply is the commands' replies (an error in place of a failed
    one's, as a ``Pipeline``'s) followed by WAIT's (the fewest replicas of any part)."""

    commands: list[Command | None]
    wait: Command


def writes(call: Call[Any]) -> bool:
    """Whether ``call`` may write (its script is not flagged ``no-writes``)."""
    return call.early is None and FLAGS.get(call.script.name) != "no-writes"


def split(reply: Sequence[Any]) -> tuple[list[Any], Any]:
    """A ``Replicated`` step's reply: the commands' replies, and WAIT's."""
    return list(reply[:-1]), reply[-1]


def fewest(acked: Any, more: Any) -> Any:
    """The count that holds for the writes of two round trips (an error stays an error)."""
    if acked is None or isinstance(acked, Exception):
        return more if acked is None else acked
    if isinstance(more, Exception):
        return more
    return min(int(acked), int(more))


def confirm(durable: Durable, acked: Any, result: Any, calls: Sequence[Call[Any]]) -> None:
    """Raise ``NotReplicated`` when WAIT counted fewer replicas than asked; a WAIT refused
    (an error) is raised as the caller's error mapping says."""
    if isinstance(acked, Exception):
        raise acked
    if int(acked) < durable.replicas:
        raise NotReplicated(int(acked), durable.replicas, durable.timeout_ms, result, calls)
