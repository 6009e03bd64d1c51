"""The connections an asyncio worker's idle waits go out on, read without redis-py's stream reader.

A wait (``AsyncQuasar.wait_and_claim``) writes three commands at once and reads three replies:
the connection's client id, the ``BLPOP`` and the claim that rides it. Read through redis-py's
asyncio connection, each reply passes through an ``asyncio.StreamReader`` and several coroutine
frames before the claim can be parsed: in a worker woken from idle by each job, that reading cost
more than parsing the claim itself. A ``WaitLine`` is a connection the client's pool lends
(connected and set up by redis-py: auth, database, client name, TLS), whose transport then feeds
a ``hiredis.Reader`` directly, read as redis-py's hiredis parser reads: the replies a wait asks
for resolve one future, and the call's reply is parsed and handed on as it comes in
(``EarlyAnswer``), a turn of the event loop before that future's waiter resumes.

A line serves one wait at a time and is kept for the next (``WaitLines``): the pool counts it as
lent until it closes, and closing the pool closes it. A wait that fails, runs out of time or is
cancelled closes its line (its connection goes back to the pool, disconnected), as the pool's
way drops the connection of such a wait. Where a line cannot be had, the waits take the pool's
way (``WaitLines.take`` answers None): a pool that is not redis-py's plain one or is capped
below ``KEPT_POOL_MIN`` (a line would hold one of its few connections between waits), or a
connection this cannot read (no stream transport; RESP3 with a hiredis that cannot tell push
messages from replies).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from collections.abc import Callable
from typing import Any

import hiredis
import redis.asyncio
import redis.exceptions as rex

from ._base import may_keep
from ._calls import Call
from ._replies import work_left

_MORE = object()  # the reader's answer while a reply is not whole yet


class _Replies(asyncio.Protocol):
    """A taken-over connection's protocol: bytes in, replies out, to the wait that asked.
    A RESP3 push message (``push``: hiredis's type of them) is no reply, and is dropped. The
    connection's end reaches the protocol redis-py gave it too (``then``), so that redis-py's
    own closing of it (the pool's ``disconnect``) does not wait for ever."""

    def __init__(self, reader: Any, push: type | None, then: asyncio.BaseProtocol) -> None:
        self.reader = reader
        self.push = push
        self.then = then
        self.replies: collections.deque[Any] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.lost: BaseException | None = None
        self.heard: Callable[[Any], None] | None = None  # each reply as it comes in (a wait's)

    def data_received(self, data: bytes) -> None:
        reader, push, heard = self.reader, self.push, self.heard
        reader.feed(data)
        try:
            reply = reader.gets()
            while reply is not _MORE:
                if push is None or not isinstance(reply, push):
                    self.replies.append(reply)
                    if heard is not None:
                        heard(reply)
                reply = reader.gets()
        except rex.InvalidResponse as exc:  # (not Redis speaking: the line is done)
            self.ended(exc)
            return
        waiter = self.waiter
        if waiter is not None and self.replies and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        return False  # (the transport closes; connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended(exc or rex.ConnectionError("Connection closed by server."))
        self.then.connection_lost(exc)

    def ended(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class WaitLine:
    """One taken-over connection of the pool: writes a wait's commands, hands back its replies
    in order."""

    __slots__ = ("conn", "protocol", "transport")

    def __init__(self, conn: Any, transport: Any, protocol: _Replies) -> None:
        self.conn = conn
        self.transport = transport
        self.protocol = protocol

    @property
    def alive(self) -> bool:
        return self.protocol.lost is None and not self.transport.is_closing()

    def write(self, data: bytes) -> None:
        if not self.alive:
            raise _gone(self.protocol.lost)
        self.transport.write(data)

    async def reply(self, timeout: float | None) -> Any:
        """The next reply (a refusal as its exception, returned; one redis-py raises, raised);
        ``TimeoutError`` after ``timeout`` seconds, ``ConnectionError`` once the connection is
        gone."""
        protocol = self.protocol
        if not protocol.replies:
            if protocol.lost is not None:
                raise _gone(protocol.lost)
            waiter = protocol.waiter = asyncio.get_running_loop().create_future()
            try:
                if timeout is None:
                    await waiter
                else:
                    await asyncio.wait_for(waiter, timeout)
            except asyncio.TimeoutError:
                raise rex.TimeoutError("Timeout reading from the wait's connection") from None
            finally:
                protocol.waiter = None
            if not protocol.replies:
                raise _gone(protocol.lost)
        reply = protocol.replies.popleft()
        if isinstance(reply, rex.ConnectionError):  # (LOADING, NOAUTH: as redis-py raises them)
            raise reply
        if isinstance(reply, list) and reply and isinstance(reply[0], rex.ConnectionError):
            raise reply[0]
        return reply


def _gone(lost: BaseException | None) -> rex.ConnectionError:
    if isinstance(lost, rex.ConnectionError):
        return lost
    return rex.ConnectionError(f"Error while reading from the wait's connection: {lost}")


class WaitLines:
    """The client's idle lines, and the making of new ones from connections its pool lends."""

    __slots__ = ("idle", "named", "owner", "pool", "usable")

    def __init__(self, pool: Any, named: bool) -> None:
        self.pool = pool
        self.named = named  # (redis-py before 5.3 wants a command's name to lend a connection)
        self.idle: list[WaitLine] = []
        self.owner = os.getpid()
        self.usable = may_keep(pool, redis.asyncio.ConnectionPool)

    async def take(self) -> WaitLine | None:
        """An idle line still open, or a new one; None when the pool's way must serve."""
        if self.owner != os.getpid():  # (a forked process: the lines are its parent's)
            self.idle, self.owner = [], os.getpid()
        while self.idle:
            line = self.idle.pop()
            if line.alive:
                return line
            await self.close_line(line)
        if not self.usable:
            return None
        pool = self.pool
        conn = await (pool.get_connection("BLPOP") if self.named else pool.get_connection())
        made = take_over(conn)
        if made is None:  # (the pool's connections cannot be read this way: none will)
            self.usable = False
            await pool.release(conn)
        return made

    def give_back(self, line: WaitLine) -> None:
        self.idle.append(line)

    async def close_line(self, line: WaitLine) -> None:
        """Close ``line``; its connection goes back to the pool, disconnected."""
        line.transport.abort()
        conn = line.conn
        try:
            await conn.disconnect(nowait=True)
        finally:
            await self.pool.release(conn)

    async def close(self) -> None:
        while self.idle:
            await self.close_line(self.idle.pop())


async def wait_on(
    line: WaitLine,
    lines: WaitLines,
    packed: bytes,
    timeout: float,
    on_blocked: Callable[[int], None],
    early: EarlyAnswer | None = None,
) -> tuple[Any, Any]:
    """``AsyncQuasar.wait_and_claim``'s three commands (``packed``: CLIENT ID, the BLPOP, the
    call) on ``line``, as its pooled way sends them: the BLPOP's reply and the call's (a
    refusal returned). The line goes back to ``lines`` once all three are read, else closes.
    ``early`` hears each of the three replies in the event loop's turn it comes in, before this
    coroutine reads it."""
    clean = False
    try:
        socket_timeout: float | None = line.conn.socket_timeout
        line.protocol.heard = None if early is None else early.heard
        line.write(packed)
        said = await line.reply(socket_timeout)
        if not isinstance(said, rex.ResponseError):  # (CLIENT refused by an ACL: no early end)
            on_blocked(int(said))
        popped = await line.reply(None if socket_timeout is None else timeout + socket_timeout)
        if isinstance(popped, rex.ResponseError):
            raise popped
        reply = await line.reply(socket_timeout)
        clean = True
    finally:
        line.protocol.heard = None
        if clean:
            lines.give_back(line)
        else:
            line.transport.abort()  # (at once: no reply of this wait is read after)
            await asyncio.shield(lines.close_line(line))
    return popped, reply


async def wait_pooled(
    pool: Any, named: bool, packed: bytes, timeout: float, on_blocked: Callable[[int], None]
) -> tuple[Any, Any]:
    """``wait_on``'s way where no line can be had: on a connection ``pool`` lends for this wait
    alone (``named``: lent for a command's name), dropped unless all three replies were read."""
    conn = await (pool.get_connection("BLPOP") if named else pool.get_connection())
    clean = False
    try:
        await conn.send_packed_command(packed)
        with contextlib.suppress(rex.ResponseError):  # CLIENT refused (an ACL): no early end
            on_blocked(int(await conn.read_response()))
        socket_timeout = conn.socket_timeout
        popped = await conn.read_response(
            timeout=None if socket_timeout is None else timeout + socket_timeout
        )
        reply: Any
        try:
            reply = await conn.read_response()
        except rex.ResponseError as exc:  # (the library missing: the next call loads it)
            reply = exc
        clean = True
    finally:
        if not clean:
            await conn.disconnect(nowait=True)
        await pool.release(conn)
    return popped, reply


def take_over(conn: Any) -> WaitLine | None:
    """The connection ``conn`` (connected, set up) as a ``WaitLine``; None (nothing changed)
    for a connection this cannot read as redis-py's hiredis parser would: no stream transport,
    or RESP3 with a hiredis too old to tell push messages from replies."""
    writer, parser = getattr(conn, "_writer", None), getattr(conn, "_parser", None)
    transport = getattr(writer, "transport", None)
    parse_error: Callable[[str], Exception] | None = getattr(parser, "parse_error", None)
    resp = str(getattr(conn, "protocol", None) or 2)
    push = getattr(hiredis, "PushNotification", None) if resp == "3" else None
    if transport is None or parse_error is None or not hasattr(transport, "set_protocol"):
        return None
    if resp not in ("2", "3") or (resp == "3" and push is None):
        return None
    try:  # (as redis-py's parser reads: the clients never decode, see _base's checks)
        reader = hiredis.Reader(
            protocolError=rex.InvalidResponse, replyError=parse_error, notEnoughData=_MORE
        )
    except TypeError:  # (a hiredis without notEnoughData)
        return None
    protocol = _Replies(reader, push, transport.get_protocol())
    transport.set_protocol(protocol)
    return WaitLine(conn, transport, protocol)


class EarlyAnswer:
    """A wait's call answered as its reply comes in (``heard``, from the connection's protocol,
    before the wait's coroutine has resumed): parsed, and handed to
    ``on_answer``. Only a plain answer, after a ``BLPOP`` that did not fail; anything else (an
    error, a reply the parse raises on, work left to carry on) is left to the coroutine, which
    reads the same reply again. ``answered`` once the answer was handed on (never twice)."""

    __slots__ = ("answered", "call", "ok", "on_answer", "result", "seen")

    def __init__(self, call: Call[Any], on_answer: Callable[[Any], None]) -> None:
        self.call, self.on_answer = call, on_answer
        self.seen = 0  # replies heard: CLIENT ID, the BLPOP's, the call's
        self.ok = False  # the BLPOP's reply is no error
        self.answered = False
        self.result: Any = None

    def heard(self, reply: Any) -> None:
        self.seen += 1
        if self.seen == 2:
            self.ok = not isinstance(reply, Exception)
        if self.seen != 3 or not self.ok or isinstance(reply, Exception):
            return
        try:
            body, left = work_left(reply)
            if left:
                return
            result = self.call.parse(body)
        except Exception:  # (the coroutine parses it again, and raises or returns the error)
            return
        self.result, self.answered = result, True
        try:
            self.on_answer(result)
        except Exception as exc:  # (not into the protocol: the connection would close)
            asyncio.get_running_loop().call_exception_handler(
                {"message": "a wait's on_answer failed", "exception": exc}
            )
