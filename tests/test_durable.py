"""Durable mode on a standalone primary: every write waits for replicas (WAIT, sent in the same
round trip), reads do not, and a write too few replicas acknowledged is ``NotReplicated``.

The pair is a primary and a replica of the test's own (``servers.py``); a write is checked on the
replica right after the call returns, with no waiting: that is what durable mode promises.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import redis
import redis.exceptions as rex
from click.testing import CliRunner

from quasar_redis import (
    App,
    AsyncQuasar,
    BatchApplied,
    ConfigurationError,
    DuplicateJob,
    Durable,
    JobApplied,
    JobRefused,
    NewJob,
    NotReplicated,
    Quasar,
    RedisUnavailable,
    Succeeded,
)
from quasar_redis._pinned import Redirect, Refresh, Send, joined, pinning, redirect, routes
from quasar_redis.cli import main
from quasar_redis.cli._worker import durable_option

from .helpers import applied, claimed, wait_for
from .servers import RedisServer, server_in

LEASE = 60_000


@pytest.mark.parametrize(
    ("replicas", "timeout_ms"),
    [(-1, 100), (1, 0), (1, -5), ("1", 100), (1, 1.5), (True, 100), (1, None)],
)
def test_bad_durable_settings_are_refused_when_made(replicas: Any, timeout_ms: Any) -> None:
    with pytest.raises(ConfigurationError, match="Durable"):
        Durable(replicas, timeout_ms)


def test_a_durable_option_that_is_not_a_durable_is_refused() -> None:
    client = redis.Redis(host="127.0.0.1", port=1)  # (never connected: refused before)
    with pytest.raises(ConfigurationError, match="durable must be a Durable"):
        Quasar(client, "ns", durable=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="durable must be a Durable"):
        App("redis://127.0.0.1:1/0", namespace="ns", durable={"replicas": 1})  # type: ignore[arg-type]
    client.close()


def _in_sync(primary: redis.Redis) -> bool:
    info = primary.info("replication")
    replica = info.get("slave0")
    return isinstance(replica, dict) and replica.get("state") == "online"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica, the replica online."""
    base = tmp_path_factory.mktemp("pair")
    with server_in(base / "primary", durable=False) as primary:
        primary.start()
        config = ("--replicaof", "127.0.0.1", str(primary.port))
        with server_in(base / "replica", durable=False, config=config) as replica:
            replica.start()
            client = redis.Redis(port=primary.port)
            wait_for(lambda: _in_sync(client), 30, "the replica online")
            client.close()
            yield primary, replica


def waits(client: redis.Redis) -> int:
    """How many WAIT commands the server has run."""
    stats = client.info("commandstats").get("cmdstat_wait")
    return int(stats["calls"]) if stats else 0


def test_writes_reach_the_replica_before_they_return_and_reads_do_not_wait(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    raw, on_replica = redis.Redis(port=primary.port), redis.Redis(port=replica.port)
    q = Quasar(raw, "durable-sync", durable=Durable(replicas=1, timeout_ms=10_000))
    applied(q.enqueue("stage", id="first"))  # (loads the scripts: a WAIT per try)
    before = waits(raw)
    job = applied(q.enqueue("stage", b"x", id="a"))
    assert waits(raw) == before + 1
    assert on_replica.exists(q.keys.job(job.id))  # (no waiting: the reply came after WAIT)
    q.get_job("a")
    q.counts("default")
    assert waits(raw) == before + 1  # reads do not wait
    claim = claimed(q.claim_job("a", "w", LEASE))
    result = q.complete(claim.token, "w", result="done")
    assert isinstance(result, JobApplied)
    assert isinstance(result.job.state, Succeeded)
    seen = Quasar(on_replica, "durable-sync").get_job("a")
    assert seen is not None
    assert seen.job.state == result.job.state
    batch = q.enqueue_many([NewJob("stage", id="b"), NewJob("stage", id="c")])
    assert isinstance(batch, BatchApplied)
    assert on_replica.exists(q.keys.job("b"), q.keys.job("c")) == 2
    raw.close()
    on_replica.close()


def test_the_asyncio_client_waits_too(pair: tuple[RedisServer, RedisServer]) -> None:
    primary, replica = pair
    on_replica = redis.Redis(port=replica.port)

    async def flow() -> None:
        raw = redis.asyncio.Redis(port=primary.port)
        q = AsyncQuasar(raw, "durable-async", durable=Durable(replicas=1, timeout_ms=10_000))
        results = await asyncio.gather(*(q.enqueue("stage", id=f"j{i}") for i in range(20)))
        assert all(isinstance(r, JobApplied) for r in results)
        assert on_replica.exists(*(q.keys.job(f"j{i}") for i in range(20))) == 20
        claim = claimed(await q.claim("default", "w", LEASE))
        await q.complete(claim.token, "w", result="ok")
        seen = Quasar(on_replica, "durable-async").get_job(claim.job.id)
        assert seen is not None
        assert isinstance(seen.job.state, Succeeded)
        await raw.aclose()
        await raw.connection_pool.disconnect()

    asyncio.run(flow())
    on_replica.close()


def test_a_resent_call_on_a_new_connection_waits_for_the_first_deliverys_writes(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    """WAIT counts the writes of its own connection (Valkey, newer Redis). A call answered from
    what an earlier delivery wrote, on a connection that never wrote it, must still wait for
    those writes: with the replica frozen, the first delivery is not replicated, and neither is
    a claim or an enqueue sent again, nor an enqueue refused because its job exists."""
    primary, replica = pair
    assert replica.proc is not None
    durable = Durable(replicas=1, timeout_ms=300)
    first = redis.Redis(port=primary.port)
    q = Quasar(first, "durable-resent", durable=durable)
    applied(q.enqueue("stage", id="gap"))
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicated) as claimed_once:
            q.claim("default", "w", LEASE)
        with pytest.raises(NotReplicated) as enqueued_once:
            q.enqueue("stage", id="later")
        record = q.keys.call(claimed_once.value.calls[0].call_id)
        left = first.pttl(record)
        for caught in (claimed_once.value, enqueued_once.value, None):
            fresh = redis.Redis(port=primary.port)  # (a connection that wrote nothing)
            again = Quasar(fresh, "durable-resent", durable=durable)
            with pytest.raises(NotReplicated) as resent:  # (not a reply trusted too early)
                if caught is None:
                    again.enqueue("stage", id="later")  # (a new call: refused, the job exists)
                else:
                    again.execute(caught.calls[0])
            assert resent.value.acknowledged == 0
            if caught is None:
                assert resent.value.result == JobRefused(DuplicateJob("later"))
            else:
                assert resent.value.result == caught.result
            fresh.close()
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    on_replica = redis.Redis(port=replica.port)
    wait_for(lambda: on_replica.exists(record) == 1, 30, "the replica to catch up")
    assert 0 < first.pttl(record) < left - 300  # (its expiry kept, not renewed, by the re-send)
    first.close()
    on_replica.close()


@pytest.fixture
def alone(tmp_path: Path) -> Iterator[redis.Redis]:
    """A primary without replicas: no write can ever be acknowledged by one."""
    with server_in(tmp_path / "alone", durable=False) as server:
        server.start()
        client = redis.Redis(port=server.port)
        yield client
        client.close()


def test_a_write_no_replica_acknowledged_is_not_replicated_and_safe_to_send_again(
    alone: redis.Redis,
) -> None:
    q = Quasar(alone, "durable-alone", durable=Durable(replicas=1, timeout_ms=20))
    with pytest.raises(NotReplicated) as caught:
        q.enqueue("stage", id="a")
    error = caught.value
    assert isinstance(error, RedisUnavailable)  # (the worker sends such calls again)
    assert (error.acknowledged, error.wanted) == (0, 1)
    assert "0 of 1 replicas" in str(error)
    assert isinstance(error.result, JobApplied)  # applied on the primary
    with pytest.raises(NotReplicated) as again:
        q.execute(error.calls[0])  # the same call id: the first reply, nothing more written
    assert again.value.result == error.result
    assert q.counts("default").available == 1  # reads answer without waiting
    with pytest.raises(NotReplicated) as many:
        q.enqueue_many([NewJob("stage", id="b")])
    assert isinstance(many.value.result, BatchApplied)


def test_zero_replicas_asks_nothing_of_replicas(alone: redis.Redis) -> None:
    q = Quasar(alone, "durable-zero", durable=Durable(replicas=0, timeout_ms=20))
    assert isinstance(q.enqueue("stage", id="a"), JobApplied)


@pytest.mark.parametrize("value", ["x", "-1", "1:0", "1:abc", "1.5", ""])
def test_the_worker_refuses_a_bad_durable_option_as_a_usage_error(value: str) -> None:
    ran = CliRunner().invoke(main, ["worker", "nowhere:app", "--durable", value])
    assert ran.exit_code == 2, ran.output
    assert "is not REPLICAS[:TIMEOUT_MS]" in ran.output


def test_the_worker_durable_option_reads_replicas_and_timeout() -> None:
    command = main.commands["worker"]
    option = next(p for p in command.params if p.name == "durable")
    ctx = click.Context(command)
    assert durable_option(ctx, option, "2:250") == Durable(2, 250)
    assert durable_option(ctx, option, "1") == Durable(1, 1000)
    assert durable_option(ctx, option, None) is None


def test_pinned_commands_read_the_slot_map_again_on_moved_and_ask_once_on_ask() -> None:
    """redis-py's MovedError is an AskError: a MOVED (a failover, a finished migration) must
    read the slot map again, so that scripts loaded after it reach the new primary; only an ASK
    (a migration under way) sends the commands to the node it names, after ASKING."""
    commands = [("EVALSHA", "0" * 40, 0), ("WAIT", 1, 500)]
    moved = rex.MovedError("1234 127.0.0.1:7001")
    asked = rex.AskError("1234 127.0.0.1:7002")
    assert redirect([moved, rex.ResponseError("x")]) == Redirect()
    assert redirect([asked, rex.ResponseError("x")]) == Redirect(ask=("127.0.0.1", 7002))
    assert redirect([[b"Applied"], 1]) is None

    flow = pinning(None, commands)
    assert next(flow) == Send(list(commands), None)
    assert flow.send([moved, rex.ResponseError("x")]) == Refresh(0.25)
    assert flow.send(None) == Send(list(commands), None)
    ask = ("127.0.0.1", 7002)
    assert flow.send([asked, rex.ResponseError("x")]) == Send([("ASKING",), *commands], ask)
    with pytest.raises(StopIteration) as done:
        flow.send([True, [b"Applied"], 1])
    assert done.value.value == [[b"Applied"], 1]


def test_durable_commands_go_by_their_partitions_root_and_the_fewest_wait_holds() -> None:
    """On a cluster each script goes to the primary of its first key's slot (its partition's
    root), with a WAIT of its own there; a command without keys goes by the namespace's root."""
    sha = "0" * 40
    commands = [
        ("EVALSHA", sha, 2, "quasar:{ns/1}:", "quasar:{ns/1}:events", "a"),
        None,
        ("EVALSHA", sha, 1, "quasar:{ns/0}:", "b"),
        ("EVALSHA", sha, 0, "c"),
        ("FCALL", "enqueue", 1, "quasar:{ns/1}:", "d"),
    ]
    parts = routes(commands, "quasar:{ns}:")
    assert parts == [("quasar:{ns/1}:", [0, 4]), ("quasar:{ns/0}:", [2]), ("quasar:{ns}:", [3])]
    assert routes([None], "quasar:{ns}:") == [("quasar:{ns}:", [])]
    replies = [["a", "d", 2], ["b", 1], [rex.ResponseError("c"), 2]]
    got = joined(len(commands), parts, replies)
    assert got[:2] == ["a", None] and got[2] == "b" and got[4:] == ["d", 1]
    assert isinstance(got[3], rex.ResponseError)
