"""Every way a send can go, through both clients: each server answer scripted in turn.

A stand-in redis-py client answers each command with the next answer of a script (a value, or
an error it raises) and records what was sent, so that every recovery (a missing library, a
server refusing functions, a missing script, the limit of three sends) and every error that is
not one runs through the blocking and the asyncio client's drivers alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis.exceptions as rex

from quasar_redis import (
    AsyncQuasar,
    EvictionPolicyError,
    EvictionPolicyWarning,
    Quasar,
    QueueCounts,
)
from quasar_redis.errors import ProtocolError, RedisUnavailable

from .clients import kind

__all__ = ["kind"]  # (the fixture: each test runs through both clients)

COUNTS = [b"Counts", *[b"0"] * 9]
NOT_FOUND = rex.ResponseError("Function not found")
NOSCRIPT = rex.NoScriptError("No matching script. Please use EVAL.")
#: How Redis 7 refuses FCALL to a user without +fcall (redis-py strips the "NOPERM " prefix).
FCALL_REFUSED = "this user has no permissions to run the 'fcall' command"


class Scripted:
    """A redis-py client answering from ``answers``, in order; ``sent`` names what it was asked."""

    connection_pool = None

    def __init__(self, *answers: Any, policy: Any = b"noeviction") -> None:
        self.answers, self.policy = list(answers), policy
        self.sent: list[str] = []

    def answer(self, name: str) -> Any:
        self.sent.append(name)
        reply = self.answers.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def execute_command(self, *args: Any) -> Any:
        return self.answer(str(args[0]))

    def script_load(self, source: str) -> Any:
        return self.answer("SCRIPT LOAD")

    def config_get(self, name: str) -> Any:
        self.sent.append("CONFIG GET")
        if isinstance(self.policy, Exception):
            raise self.policy
        return {name.encode(): self.policy}

    def pipeline(self, transaction: bool) -> Batch:
        return Batch(self)


class Batch:
    """A pipeline of ``Scripted``: its answer is one list, errors in place."""

    def __init__(self, owner: Scripted) -> None:
        self.owner, self.names = owner, list[str]()

    def execute_command(self, *args: Any) -> None:
        self.names.append(str(args[0]))

    def execute(self, raise_on_error: bool) -> Any:
        assert not raise_on_error
        return self.owner.answer(f"PIPELINE {' '.join(self.names)}")


class AsyncScripted(Scripted):
    async def execute_command(self, *args: Any) -> Any:
        return self.answer(args[0] if isinstance(args[0], str) else args[0].decode())

    async def script_load(self, source: str) -> Any:
        return self.answer("SCRIPT LOAD")

    async def config_get(self, name: str) -> Any:
        return Scripted.config_get(self, name)

    def pipeline(self, transaction: bool) -> AsyncBatch:
        return AsyncBatch(self)


class AsyncBatch(Batch):
    async def execute(self, raise_on_error: bool) -> Any:
        return Batch.execute(self, raise_on_error)


def run(
    kind: str, answers: list[Any], use: Callable[[Any], Any], **options: Any
) -> tuple[Any, list[str], Any]:
    """``use(client)`` on a client of ``kind`` over ``answers``: its result (or the exception it
    raised), what reached the server, and the client."""
    if kind == "sync":
        server: Scripted = Scripted(*answers, **options)
        client: Any = Quasar(server, "ns")
    else:
        server = AsyncScripted(*answers, **options)
        client = AsyncQuasar(server, "ns", coalesce=False)

    async def use_async() -> Any:
        return await use(client)

    try:
        result = use(client) if kind == "sync" else asyncio.run(use_async())
    except Exception as exc:
        result = exc
    assert not server.answers, f"answers left unused: {server.answers}"
    return result, server.sent, client


def counts(client: Any) -> Any:
    return client.counts("default")


@pytest.mark.parametrize(
    ("answers", "sent", "functions"),
    [
        # the library missing (a restart without persistence, a flush): loaded, sent again
        ([NOT_FOUND, b"lib", COUNTS], ["FCALL", "FUNCTION", "FCALL"], True),
        # loaded meanwhile by another client
        (
            [NOT_FOUND, rex.ResponseError("Library 'quasar_x' already exists"), COUNTS],
            ["FCALL", "FUNCTION", "FCALL"],
            True,
        ),
        # FUNCTION refused (Redis 6.2): scripts from now on
        (
            [NOT_FOUND, rex.ResponseError("unknown command `FUNCTION`"), COUNTS],
            ["FCALL", "FUNCTION", "EVALSHA"],
            False,
        ),
        # FCALL refused (an ACL), then the script missing too: the third send goes through
        (
            [rex.NoPermissionError("no permissions to run 'fcall'"), NOSCRIPT, b"sha", COUNTS],
            ["FCALL", "EVALSHA", "SCRIPT LOAD", "EVALSHA"],
            False,
        ),
    ],
)
def test_what_the_server_lacks_is_loaded_and_the_call_sent_again(
    kind: str, answers: list[Any], sent: list[str], functions: bool
) -> None:
    result, went, client = run(kind, answers, counts)
    assert isinstance(result, QueueCounts), result
    assert went == ["CONFIG GET", *sent]
    assert client.functions is functions


def test_a_call_is_sent_three_times_at_most(kind: str) -> None:
    answers = [NOT_FOUND, b"lib", NOT_FOUND, b"lib", NOT_FOUND]
    result, sent, _ = run(kind, answers, counts)
    assert isinstance(result, ProtocolError) and "Function not found" in str(result)
    assert sent == ["CONFIG GET", "FCALL", "FUNCTION", "FCALL", "FUNCTION", "FCALL"]


@pytest.mark.parametrize(
    ("answers", "error", "sent"),
    [
        ([rex.ResponseError("ERR busy script")], ProtocolError, ["FCALL"]),
        ([rex.ConnectionError("gone")], RedisUnavailable, ["FCALL"]),
        ([rex.TimeoutError()], RedisUnavailable, ["FCALL"]),
        (
            [NOT_FOUND, rex.ResponseError("Error compiling function")],
            ProtocolError,
            ["FCALL", "FUNCTION"],
        ),
        (
            [NOT_FOUND, rex.ConnectionError("gone")],
            RedisUnavailable,
            ["FCALL", "FUNCTION"],
        ),
        (
            [rex.NoPermissionError(FCALL_REFUSED), NOSCRIPT, rex.ConnectionError("gone")],
            RedisUnavailable,
            ["FCALL", "EVALSHA", "SCRIPT LOAD"],
        ),
    ],
)
def test_an_error_that_no_loading_mends_is_raised_as_ours(
    kind: str, answers: list[Any], error: type[Exception], sent: list[str]
) -> None:
    result, went, _ = run(kind, answers, counts)
    assert isinstance(result, error), result
    assert isinstance(result.__cause__, rex.RedisError)
    assert went == ["CONFIG GET", *sent]


def test_a_pipeline_sends_again_only_the_calls_that_met_a_missing_library(kind: str) -> None:
    def two(client: Any) -> Any:
        return client.execute_many([client.calls.counts("a"), client.calls.counts("b")])

    answers = [[NOT_FOUND, COUNTS], b"lib", [COUNTS]]
    result, sent, _ = run(kind, answers, two)
    assert [type(r) for r in result] == [QueueCounts, QueueCounts]
    assert sent == ["CONFIG GET", "PIPELINE FCALL FCALL", "FUNCTION", "PIPELINE FCALL"]


def test_a_pipeline_raises_the_first_error_no_loading_mends(kind: str) -> None:
    def two(client: Any) -> Any:
        return client.execute_many([client.calls.counts("a"), client.calls.counts("b")])

    result, sent, _ = run(kind, [[COUNTS, rex.ResponseError("ERR x")]], two)
    assert isinstance(result, ProtocolError), result
    assert sent == ["CONFIG GET", "PIPELINE FCALL FCALL"]
    result, sent, _ = run(kind, [rex.ConnectionError("gone")], two)
    assert isinstance(result, RedisUnavailable), result


def test_the_eviction_policy_is_asked_once_and_a_refusal_says_nothing(kind: str) -> None:
    def twice(client: Any) -> Any:
        if isinstance(client, Quasar):
            return [client.counts("a"), client.counts("b")]

        async def both() -> list[Any]:
            return [await client.counts("a"), await client.counts("b")]

        return both()

    refused = rex.ResponseError("unknown command 'CONFIG'")
    _, sent, _ = run(kind, [COUNTS, COUNTS], twice, policy=refused)
    assert sent == ["CONFIG GET", "FCALL", "FCALL"]
    with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
        _, sent, _ = run(kind, [COUNTS, COUNTS], twice, policy=b"allkeys-lru")
    assert sent == ["CONFIG GET", "FCALL", "FCALL"]


def test_an_enqueue_is_refused_where_redis_may_evict_unless_allowed(kind: str) -> None:
    def enqueue(client: Any) -> Any:
        return client.enqueue("s", 1)

    result, sent, _ = run(kind, [], enqueue, policy=b"allkeys-lru")
    assert isinstance(result, EvictionPolicyError), result
    assert "'allkeys-lru'" in str(result) and "allow_eviction=True" in str(result)
    assert sent == ["CONFIG GET"]  # nothing written
    with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
        result, sent, _ = run(kind, [COUNTS], lambda c: c.counts("a"), policy=b"allkeys-lru")
    assert isinstance(result, QueueCounts) and sent == ["CONFIG GET", "FCALL"]


def test_a_call_known_without_redis_sends_nothing(kind: str) -> None:
    from quasar_redis import JobRefused, LeaseToken

    token = LeaseToken("j", 0, "w", 1, 0, "n")

    def unencodable(client: Any) -> Any:
        return client.complete(token, "w", result=object())

    result, sent, _ = run(kind, [], unencodable)
    assert isinstance(result, JobRefused)
    assert sent == []
