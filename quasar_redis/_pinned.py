"""Commands on one connection of the primary that serves their slot, on Redis Cluster.

A durable call's script and the WAIT behind it must share a connection (WAIT counts the writes
of its own connection), which a cluster pipeline does not promise for WAIT, a command without
keys. So they go on a connection of the slot's primary: the slot of the script's first key, its
partition's root, so that the scripts of a partitioned namespace's round trip go partition by
partition (``routes``), each part with a WAIT of its own on its own primary. What the cluster
client would do for a keyed command is done here, decided once (``redirect``) for both shells:

- MOVED (the slot has another primary: a failover, a finished migration), CLUSTERDOWN (a
  cluster electing a new primary), TRYAGAIN (a multi-key call during a migration whose keys
  are on both nodes), or a broken connection: read the slot map again and send again after the
  cluster client's own retry pause, at most its retry count;
- ASK (the slot is migrating and a key is on the importing node): send again to that node at
  once, after ``ASKING``.

Sending again is safe: every transition carries a call id, and a re-sent call gets the first
one's reply. After the last try the errors are the replies, as a pipeline's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex

from ._durable import fewest

Command = tuple[Any, ...]

#: Errors of a node or the cluster that a later try can get past.
PASSING = (rex.ConnectionError, rex.TimeoutError, rex.ClusterError, rex.RedisClusterException)


@dataclass(frozen=True, slots=True)
class Redirect:
    """What the replies of a try ask for: ``ask`` a node (host, port), or ``refresh`` the map."""

    ask: tuple[str, int] | None = None


def redirect(replies: Sequence[Any]) -> Redirect | None:
    """What to do about a try's replies; None: they are the answer. (redis-py's MovedError is an
    AskError: it is asked about first, so that MOVED reads the slot map again rather than asking
    the new primary once, which would leave the map, and where scripts are loaded, stale.)"""
    for reply in replies:
        if isinstance(reply, rex.MovedError | rex.TryAgainError | rex.ClusterDownError):
            return Redirect()
        if isinstance(reply, rex.AskError):
            return Redirect(ask=(reply.host, int(reply.port)))
    return None


def _policy(rc: Any) -> tuple[int, Any]:
    """The cluster client's retry count and backoff (its own policy, as for any command)."""
    retry = getattr(rc, "retry", None)
    if retry is None:
        return 3, None
    # (redis-py 5.0's Retry has no get_retries(): its count is the attribute)
    retries = retry.get_retries() if hasattr(retry, "get_retries") else retry._retries
    return int(retries), getattr(retry, "_backoff", None)


def _pause(backoff: Any, failures: int) -> float:
    return float(backoff.compute(failures)) if backoff is not None else 0.25 * failures


def _framed(commands: Sequence[Command | None], asking: bool) -> list[Command]:
    sent = [c for c in commands if c is not None]
    return [("ASKING",), *sent] if asking else sent


def _placed(commands: Sequence[Command | None], replies: list[Any], asking: bool) -> list[Any]:
    """The replies in the places of ``commands`` (``None`` where nothing was sent)."""
    got = iter(replies[1:] if asking else replies)
    return [None if c is None else next(got) for c in commands]


@dataclass(frozen=True, slots=True)
class Send:
    """A try: ``commands`` on the node at ``ask`` (after ASKING), or on the slot's primary."""

    commands: list[Command]
    ask: tuple[str, int] | None


@dataclass(frozen=True, slots=True)
class Refresh:
    """Pause ``seconds``, then read the slot map again."""

    seconds: float


Pinning = Generator["Send | Refresh", Any, list[Any]]


def pinning(rc: Any, commands: Sequence[Command | None]) -> Pinning:
    """The tries, IO-free: yields ``Send`` (sent the replies, or the exception the try raised)
    and ``Refresh``; returns the replies in the places of ``commands``."""
    retries, backoff = _policy(rc)
    failures, ask = 0, None
    while True:
        got = yield Send(_framed(commands, ask is not None), ask)
        failure = got if isinstance(got, BaseException) else None
        replies = [] if failure is not None else _placed(commands, got, ask is not None)
        step = Redirect() if failure is not None else redirect(replies)
        if step is None:
            return replies
        if step.ask is not None and ask is None:
            ask = step.ask
            continue
        failures, ask = failures + 1, None
        if failures > retries:
            if failure is not None:
                raise failure
            return replies
        yield Refresh(_pause(backoff, failures))


def _routed_by(command: Command, key: str) -> str:
    """The key whose slot ``command`` goes to: a script's first key (its partition's root), or
    ``key`` for a command without keys."""
    if command[0] in ("EVALSHA", "FCALL") and int(command[2]) > 0:
        return str(command[3])
    return key


Routes = list[tuple[str, list[int]]]


def routes(commands: Sequence[Command | None], key: str) -> Routes:
    """The places of ``commands`` (``None``: nothing sent) by the key each is routed by, in the
    order each first comes; ``key`` with no places where nothing is sent (a WAIT alone)."""
    groups: dict[str, list[int]] = {}
    for place, command in enumerate(commands):
        if command is not None:
            groups.setdefault(_routed_by(command, key), []).append(place)
    return list(groups.items()) or [(key, [])]


def joined(size: int, parts: Routes, replies: Sequence[list[Any]]) -> list[Any]:
    """Each part's replies (its commands', then its WAIT's) in the places of the ``size``
    commands, then the WAIT count that holds for every part."""
    out: list[Any] = [None] * size
    acked: Any = None
    for (_, places), got in zip(parts, replies, strict=True):
        for place, reply in zip(places, got[:-1], strict=True):
            out[place] = reply
        acked = fewest(acked, got[-1])
    return [*out, acked]


def _node(rc: Any, key: str, ask: tuple[str, int] | None) -> Any:
    node = rc.get_node(host=ask[0], port=ask[1]) if ask else None
    return node or rc.get_node_from_key(key)


def _advance(flow: Pinning, got: Any) -> Send | Refresh | list[Any]:
    """The flow's next step, or its replies once it is done."""
    try:
        return flow.send(got)
    except StopIteration as done:
        replies: list[Any] = done.value
        return replies


def pinned(rc: Any, key: str, commands: Sequence[Command | None]) -> list[Any]:
    """Send ``commands`` on one connection of the primary serving ``key`` (sync cluster)."""
    flow = pinning(rc, commands)
    step = _advance(flow, None)
    while not isinstance(step, list):
        got: Any = None
        try:
            if isinstance(step, Refresh):
                time.sleep(step.seconds)
                rc.nodes_manager.initialize()
            else:
                pipe = rc.get_redis_connection(_node(rc, key, step.ask)).pipeline(False)
                for command in step.commands:
                    pipe.execute_command(*command)
                got = pipe.execute(raise_on_error=False)
        except PASSING as exc:
            got = exc
        step = _advance(flow, got)
    return step


def pinned_parts(rc: Any, key: str, commands: Sequence[Command | None], wait: Command) -> list[Any]:
    """``commands`` and a ``wait`` behind them on a connection of each of their slots' primaries
    (sync cluster); ``key``: where a command without keys goes. The replies in the places of
    ``commands``, then the fewest replicas any WAIT counted."""
    parts = routes(commands, key)
    got = [pinned(rc, at, [*(commands[i] for i in places), wait]) for at, places in parts]
    return joined(len(commands), parts, got)


async def apinned_parts(
    rc: Any, key: str, commands: Sequence[Command | None], wait: Command
) -> list[Any]:
    """``pinned_parts`` on an asyncio cluster client."""
    parts = routes(commands, key)
    got = [await apinned(rc, at, [*(commands[i] for i in places), wait]) for at, places in parts]
    return joined(len(commands), parts, got)


async def apinned(rc: Any, key: str, commands: Sequence[Command | None]) -> list[Any]:
    """Send ``commands`` on one connection of the primary serving ``key`` (asyncio cluster)."""
    flow = pinning(rc, commands)
    step = _advance(flow, None)
    while not isinstance(step, list):
        got: Any = None
        try:
            if isinstance(step, Refresh):
                await asyncio.sleep(step.seconds)
                await rc.nodes_manager.initialize()
            else:
                await rc.initialize()
                got = await _node_round_trip(_node(rc, key, step.ask), step.commands)
        except PASSING as exc:
            got = exc
        step = _advance(flow, got)
    return step


async def _node_round_trip(node: Any, commands: list[Command]) -> list[Any]:
    """``commands`` written at once on one connection of ``node``, each reply read in turn (an
    error reply in place)."""
    conn = node.acquire_connection()
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except rex.ResponseError as exc:
                replies.append(exc)
        return replies
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        if hasattr(node, "release"):
            node.release(conn)
        else:  # redis-py 5.0: the node's free connections are a plain deque
            node._free.append(conn)
