"""The public surface: exports, the reply vocabulary, sync/async parity, NOSCRIPT, warnings."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import quasar_redis
from quasar_redis import (
    AsyncQuasar,
    ClaimApplied,
    DuplicateJob,
    EvictionPolicyWarning,
    InvalidJob,
    JobApplied,
    JobRefused,
    Quasar,
    StaleLease,
)
from quasar_redis._base import warn_policy
from quasar_redis._protocol import APPLIED, FAULTS, REFUSALS
from quasar_redis._scripts import NAMES, lua_dir

from .helpers import T0, applied, claimed

LUA = Path(__file__).resolve().parent.parent / "lua"


def test_all_is_sorted_and_complete() -> None:
    exported = quasar_redis.__all__
    assert exported == sorted(exported)
    public = {
        n
        for n in dir(quasar_redis)
        if not n.startswith("_") and not inspect.ismodule(getattr(quasar_redis, n))
    }
    assert set(exported) - {"__version__"} == public
    for name in exported:
        assert hasattr(quasar_redis, name)


def lua_tags() -> set[str]:
    tags = set()
    for path in LUA.glob("*.lua"):
        text = path.read_text()
        tags |= set(re.findall(r'(?:refuse|applied)\("([A-Za-z]+)"', text))
        tags |= set(re.findall(r'\{"([A-Z][A-Za-z]+)"', text))
    return tags


def test_every_reply_tag_in_lua_is_known_to_python_and_back() -> None:
    in_lua = lua_tags()
    in_python = set(REFUSALS) | set(FAULTS) | set(APPLIED)
    assert in_lua == in_python


def test_every_script_has_a_header_and_is_loaded() -> None:
    files = {p.stem for p in LUA.glob("*.lua")} - {"_lib"}
    assert files == set(NAMES)
    for name in NAMES:
        head = (LUA / f"{name}.lua").read_text().splitlines()[0]
        assert head.startswith(f"-- {name}") or name == "retry", head
    assert lua_dir() in (LUA, Path(quasar_redis.__file__).parent / "lua")


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_sync_and_async_clients_have_the_same_methods_and_signatures() -> None:
    sync, aio = public_methods(Quasar), public_methods(AsyncQuasar)
    assert sync.keys() == aio.keys()
    for name, signature in sync.items():
        assert signature == aio[name], name
        member = getattr(AsyncQuasar, name)
        assert inspect.iscoroutinefunction(member), name
    assert len(sync) >= 20


def test_noscript_after_script_flush_is_recovered(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    q.redis.script_flush()
    applied(q.enqueue("s", id="b", now=T0))
    q.redis.script_flush()
    results = q.execute_many(
        [q.calls.enqueue(quasar_redis.NewJob("s", id="c"), T0), q.calls.counts("default", T0)]
    )
    assert isinstance(results[0], JobApplied)
    assert results[1].available == 3


def test_execute_many_runs_calls_in_order_in_one_pipeline(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    claim = claimed(q.claim_job("a", "w", 1000, now=T0))
    results = q.execute_many(
        [
            q.calls.complete(claim.token, "w", "inline", None, T0 + 1),
            q.calls.complete(claim.token, "w", "inline", None, T0 + 2),
            q.calls.complete(claim.token, "w", "inline", object(), T0 + 2),
        ]
    )
    assert isinstance(results[0], JobApplied)
    assert getattr(results[1], "error", None) == StaleLease()
    assert "result cannot be encoded" in str(results[2])


class PolicyClient:
    """Stands in for a Redis client whose server evicts keys."""

    def __init__(self, policy: bytes) -> None:
        self.policy = policy
        self.connection_pool = None

    def config_get(self, name: str) -> dict[bytes, bytes]:
        return {name.encode(): self.policy}

    def execute_command(self, *args: Any) -> Any:
        return ["Counts", "0", "0", "0", "0", "0", "0", "0", "0", "0"]


def test_warns_when_redis_may_evict_keys() -> None:
    q = Quasar(PolicyClient(b"allkeys-lru"), "ns")
    with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
        q.counts("default")
    q.counts("default")  # once per client
    quiet = Quasar(PolicyClient(b"noeviction"), "ns")
    quiet.counts("default")
    warn_policy({})
    warn_policy({"node": {b"maxmemory-policy": b"noeviction"}})


def test_async_client_runs_the_same_flow(redis_client: Any, backend: str, namespace: str) -> None:
    import asyncio

    import fakeredis
    import redis.asyncio

    from .conftest import REDIS_URL

    async def flow() -> None:
        if backend == "fake":
            client: Any = fakeredis.FakeAsyncRedis(
                server=redis_client.connection_pool.connection_kwargs["server"]
            )
        else:
            client = redis.asyncio.Redis.from_url(REDIS_URL)
        aq = AsyncQuasar(client, namespace)
        try:
            assert isinstance(await aq.enqueue("s", {"x": 1}, id="a", now=T0), JobApplied)
            result = await aq.claim("default", "w", 1000, now=T0)
            assert isinstance(result, ClaimApplied)
            done = await aq.complete(result.claim.token, "w", result=7, now=T0 + 1)
            assert isinstance(done, JobApplied)
            assert done.job.result == 7
            await client.script_flush()
            counts = await aq.counts("default", now=T0 + 1)
            assert counts.completed == 1
            info = await aq.get_job("a")
            assert info is not None
            assert info.job.payload == {"x": 1}
            many = await aq.execute_many([aq.calls.counts("default", T0)])
            assert many[0].completed == 1
        finally:
            await client.aclose()

    asyncio.run(flow())


def test_async_enqueues_made_together_are_coalesced(
    redis_client: Any, backend: str, namespace: str
) -> None:
    import asyncio

    import fakeredis
    import redis.asyncio

    from .conftest import REDIS_URL

    async def flow() -> None:
        if backend == "fake":
            server = redis_client.connection_pool.connection_kwargs["server"]
            client: Any = fakeredis.FakeAsyncRedis(server=server)
        else:
            client = redis.asyncio.Redis.from_url(REDIS_URL)
        aq = AsyncQuasar(client, namespace)
        sent: list[int] = []
        execute = aq.execute

        async def counting(call: Any) -> Any:
            sent.append(len(call.args))
            return await execute(call)

        aq.execute = counting  # type: ignore[method-assign]
        try:
            results = await asyncio.gather(
                *(aq.enqueue("s", {"i": i}, id=f"j{i}") for i in range(50)),
                aq.enqueue("s", id="j0"),
                aq.enqueue("", id="bad"),
            )
            assert len(sent) == 1  # one script call for 52 enqueues
            assert all(isinstance(r, JobApplied) for r in results[:50])
            assert results[50] == JobRefused(DuplicateJob("j0"))
            assert results[51] == JobRefused(InvalidJob("stage must not be empty"))
            counts = await aq.counts("default")
            assert counts.available == 50
        finally:
            await client.aclose()

    asyncio.run(flow())


def test_scripts_carry_only_the_library_parts_they_use() -> None:
    from quasar_redis._scripts import assemble, scripts

    lib = (LUA / "_lib.lua").read_text()
    counts = scripts()["counts"].source
    assert "local function do_complete" not in counts
    assert "local function check_queue" in counts
    assert "local function do_complete" in scripts()["report"].source
    body = "return fmt(1)"
    shaken = assemble(lib, body)
    assert shaken.endswith(body)
    assert "local function fmt" in shaken
    assert "local function load_job" not in shaken
