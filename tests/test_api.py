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
    ConfigurationError,
    DuplicateJob,
    EvictionPolicyWarning,
    InvalidJob,
    JobApplied,
    JobRefused,
    Quasar,
    StaleLease,
    Unique,
)
from quasar_redis._base import warn_policy
from quasar_redis._replies import APPLIED, FAULTS, REFUSALS
from quasar_redis._schema import ENQUEUE_ITEM
from quasar_redis._scripts import lua_dir, names, scripts

from .clients import clients, kind
from .helpers import T0, applied, claimed

__all__ = ["kind"]  # (the fixture: some tests below run through both clients)

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
    for path in LUA.rglob("*.lua"):
        text = path.read_text()
        tags |= set(re.findall(r'(?:refuse|applied)\("([A-Za-z]+)"', text))
        tags |= set(re.findall(r'\{"([A-Z][A-Za-z]+)"', text))
    return tags


def test_every_reply_tag_in_lua_is_known_to_python_and_back() -> None:
    in_lua = lua_tags()
    in_python = set(REFUSALS) | set(FAULTS) | set(APPLIED)
    assert in_lua == in_python


def test_every_script_has_a_header_and_is_loaded() -> None:
    assert names() == tuple(sorted(p.stem for p in LUA.glob("*.lua")))
    assert tuple(scripts()) == names()
    for name in names():
        head = (LUA / f"{name}.lua").read_text().splitlines()[0]
        assert head.startswith(f"-- {name}") or name == "retry", head
    assert lua_dir() in (LUA, Path(quasar_redis.__file__).parent / "lua")


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


#: What one client has and the other has not: closing, and the asyncio worker's waits.
SYNC_ONLY = {"close"}
ASYNC_ONLY = {"aclose", "wait_and_claim", "wait_for_work", "wake", "unblock", "server_time_ms"}


def test_sync_and_async_clients_have_the_same_methods_and_signatures() -> None:
    sync, aio = public_methods(Quasar), public_methods(AsyncQuasar)
    assert sync.keys() - SYNC_ONLY == aio.keys() - ASYNC_ONLY
    assert sync.keys() >= SYNC_ONLY and aio.keys() >= ASYNC_ONLY
    for name, signature in sync.items():
        if name in SYNC_ONLY:
            continue
        assert signature == aio[name], name
        member = getattr(AsyncQuasar, name)
        assert inspect.iscoroutinefunction(member), name
    assert all(inspect.iscoroutinefunction(getattr(AsyncQuasar, n)) for n in ASYNC_ONLY)
    assert len(sync) >= 20


def test_each_shell_reads_as_a_method_of_its_client() -> None:
    # The calls are written once (quasar_redis._operations); each client's method has its
    # name, docs and signature, returning the call's result.
    for cls in (Quasar, AsyncQuasar):
        method = cls.complete
        assert method.__qualname__ == f"{cls.__name__}.complete"
        assert method.__module__ == cls.__module__
        assert method.__doc__ and method.__doc__.startswith("Mark the leased job Succeeded")
        assert str(inspect.signature(method)).endswith("-> 't.JobResult'")


def test_from_url_takes_the_options_of_the_constructor() -> None:
    from quasar_redis._base import ClientOptions

    def keyword_only(function: Any) -> set[str]:
        params = inspect.signature(function).parameters.values()
        return {p.name for p in params if p.kind is p.KEYWORD_ONLY}

    assert keyword_only(Quasar) == set(ClientOptions.__annotations__)
    assert keyword_only(AsyncQuasar) == {"coalesce"}
    assert keyword_only(AsyncQuasar.from_url) == {"coalesce"}


@pytest.mark.own_server
def test_noscript_after_script_flush_is_recovered(q: Quasar, kind: str) -> None:
    with clients(kind, q.redis) as make:
        noscript_recovered(make(q.namespace, functions=q.functions))


def noscript_recovered(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    q.redis.script_flush()
    applied(q.enqueue("s", id="b", now=T0))
    q.redis.script_flush()
    results = q.execute_many(
        [q.calls.enqueue(quasar_redis.NewJob("s", id="c"), T0), q.calls.counts("default", T0)]
    )
    assert isinstance(results[0], JobApplied)
    assert results[1].available == 3


def test_execute_many_runs_calls_in_order_in_one_pipeline(q: Quasar, kind: str) -> None:
    with clients(kind, q.redis) as make:
        in_order_in_one_pipeline(make(q.namespace, functions=q.functions))


def in_order_in_one_pipeline(q: Quasar) -> None:
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


@pytest.mark.own_server
def test_async_client_runs_the_same_flow(redis_client: Any, backend: str, namespace: str) -> None:
    import asyncio

    import fakeredis
    import redis.asyncio

    from .helpers import url_of

    async def flow() -> None:
        if backend == "fake":
            client: Any = fakeredis.FakeAsyncRedis(
                server=redis_client.connection_pool.connection_kwargs["server"]
            )
        else:
            client = redis.asyncio.Redis.from_url(url_of(redis_client))
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


def _async_client(redis_client: Any, backend: str) -> Any:
    import fakeredis
    import redis.asyncio

    from .helpers import url_of

    if backend == "fake":
        server = redis_client.connection_pool.connection_kwargs["server"]
        return fakeredis.FakeAsyncRedis(server=server)
    return redis.asyncio.Redis.from_url(url_of(redis_client))


def _run_async(redis_client: Any, backend: str, namespace: str, flow: Any) -> None:
    """Runs ``flow(aq, sent)`` on an asyncio client of the backend's server; ``sent`` lists the
    number of jobs of each enqueue call it sends."""
    import asyncio

    async def run() -> None:
        client = _async_client(redis_client, backend)
        aq = AsyncQuasar(client, namespace)
        try:
            await flow(aq, _jobs_per_call(aq))
        finally:
            await client.aclose()

    asyncio.run(run())


def _jobs_per_call(aq: AsyncQuasar) -> list[int]:
    """Records the number of jobs of each enqueue call ``aq`` sends (``ENQUEUE_ITEM``'s
    arguments a job)."""
    sent: list[int] = []
    execute = aq.execute

    async def counting(call: Any) -> Any:
        sent.append((len(call.args) - 7) // len(ENQUEUE_ITEM))
        return await execute(call)

    aq.execute = counting  # type: ignore[method-assign]
    return sent


def test_async_enqueues_made_together_are_coalesced(
    redis_client: Any, backend: str, namespace: str
) -> None:
    import asyncio

    async def flow(aq: AsyncQuasar, sent: list[int]) -> None:
        results = await asyncio.gather(
            *(aq.enqueue("s", {"i": i}, id=f"j{i}") for i in range(50)),
            aq.enqueue("s", id="j0"),
            aq.enqueue("", id="bad"),
        )
        assert sent == [52]  # one script call for 52 enqueues (an id twice: not split)
        assert all(isinstance(r, JobApplied) for r in results[:50])
        assert results[50] == JobRefused(DuplicateJob("j0"))
        assert results[51] == JobRefused(InvalidJob("stage must not be empty"))
        counts = await aq.counts("default")
        assert counts.available == 50

    _run_async(redis_client, backend, namespace, flow)


def test_an_async_enqueue_alone_in_its_turn_goes_at_once(
    redis_client: Any, backend: str, namespace: str
) -> None:
    # Nothing else to run in its turn: no other enqueue could join it, so it goes as it is made,
    # the batch of one it would have been (mode "each"), one command, no flush, nothing pending.
    # With anything else ready to run in the turn, it waits for the batch as before.
    import asyncio

    async def flow(aq: AsyncQuasar, sent: list[int]) -> None:
        applied(await aq.enqueue("warm"))  # (the library loaded, the server's policy read)
        sent.clear()
        commands: list[Any] = []
        send, start_flush = aq._send, aq._start_flush

        async def counting(command: Any) -> Any:
            commands.append((command, len(aq._pending) + len(aq._flushes)))
            return await send(command)

        flushes: list[int] = []

        def flushing() -> None:
            flushes.append(len(aq._pending))
            start_flush()

        aq._send = counting
        aq._start_flush = flushing  # type: ignore[method-assign]
        job = applied(await aq.enqueue("s", {"n": 1}, id="alone"))
        assert job.id == "alone" and job.payload == {"n": 1}
        assert await aq.enqueue("s", id="alone") == JobRefused(DuplicateJob("alone"))
        assert sent == [1, 1] and flushes == [] and len(commands) == 2
        assert all(c[c[2] + 8] == "each" and not waiting for c, waiting in commands)  # (ARGV[6])
        asyncio.get_running_loop().call_soon(lambda: None)
        applied(await aq.enqueue("s"))
        assert sent == [1, 1, 1] and flushes == [1] and commands[2][1] == 1  # (its flush)
        aq._lone = 1  # (as while one is in flight: a large batch made then goes whole)
        await asyncio.gather(*(aq.enqueue("t", i) for i in range(20)))
        assert sent == [1, 1, 1, 20]

    _run_async(redis_client, backend, namespace, flow)


def test_a_large_coalesced_batch_goes_as_two_calls_when_nothing_is_in_flight(
    redis_client: Any, backend: str, namespace: str
) -> None:
    # Two calls in flight let Redis run one while this process reads the other's reply. Each
    # caller still gets its own job; a second batch made while they are in flight goes whole.
    import asyncio

    async def flow(aq: AsyncQuasar, sent: list[int]) -> None:
        first = [aq.enqueue("s", {"i": i}) for i in range(40)]
        results = await asyncio.gather(*first, *(aq.enqueue("t", i) for i in range(20)))
        assert sent == [30, 30]
        jobs = [r.job for r in results if isinstance(r, JobApplied)]
        assert [j.payload for j in jobs[:40]] == [{"i": i} for i in range(40)]
        assert [j.payload for j in jobs[40:]] == list(range(20))
        assert len({j.id for j in jobs}) == 60

        sent.clear()

        async def later() -> list[Any]:
            await asyncio.sleep(0)  # the next turn: the two calls above are in flight
            return await asyncio.gather(*(aq.enqueue("u", i) for i in range(20)))

        split, whole = await asyncio.gather(
            asyncio.gather(*(aq.enqueue("t", i) for i in range(20))), later()
        )
        assert sent == [10, 10, 20]
        assert all(isinstance(r, JobApplied) for r in [*split, *whole])
        assert (await aq.counts("default")).available == 100

    _run_async(redis_client, backend, namespace, flow)


def test_a_coalesced_batch_whose_jobs_name_each_other_goes_whole(
    redis_client: Any, backend: str, namespace: str
) -> None:
    # A job depending on another job of the same batch needs that job applied first: one call,
    # in order. So does an id given twice (the first caller gets the job, the second a refusal).
    import asyncio

    async def flow(aq: AsyncQuasar, sent: list[int]) -> None:
        parent = [aq.enqueue("s", id="parent")]
        rest = [aq.enqueue("s", i) for i in range(30)]
        child = [aq.enqueue("s", id="child", dependencies=["parent"])]
        results = await asyncio.gather(*parent, *rest, *child)
        assert sent == [32]
        assert all(isinstance(r, JobApplied) for r in results)
        assert isinstance(results[-1], JobApplied)
        assert results[-1].job.pending_dependencies == 1
        info = await aq.get_job("child")  # (had the halves gone apart, MissingDependency)
        assert info is not None and info.job.pending_dependencies == 1

    _run_async(redis_client, backend, namespace, flow)


def test_halves_split_only_batches_whose_jobs_are_independent() -> None:
    from quasar_redis._calls import NewJob
    from quasar_redis._coalescing import SPLIT_MIN, _halves

    def batch(*jobs: NewJob) -> list[Any]:
        return [(job, None) for job in jobs]

    plain = batch(*(NewJob("s") for _ in range(SPLIT_MIN)))
    assert [len(p) for p in _halves(plain)] == [SPLIT_MIN // 2, SPLIT_MIN // 2]
    assert _halves(plain[:-1]) == (plain[:-1],)  # too small to be worth two calls
    odd = batch(*(NewJob("s") for _ in range(SPLIT_MIN + 1)))
    assert [len(p) for p in _halves(odd)] == [SPLIT_MIN // 2 + 1, SPLIT_MIN // 2]
    named = batch(*(NewJob("s", id=f"n{i}") for i in range(SPLIT_MIN)))
    assert len(_halves(named)) == 2  # ids of their own, naming nothing of the batch
    twice = batch(*named_jobs(SPLIT_MIN - 1), NewJob("s", id="n0"))
    assert _halves(twice) == (twice,)
    job = JobApplied  # (any value of another type: a dependency the enqueue itself refuses)
    odd_dep = batch(*named_jobs(SPLIT_MIN - 1), NewJob("s", dependencies=[job]))  # type: ignore[list-item]
    assert len(_halves(odd_dep)) == 2
    on_id = batch(*named_jobs(SPLIT_MIN - 1), NewJob("s", dependencies=["x", "n3"]))
    assert _halves(on_id) == (on_id,)
    outside = batch(*named_jobs(SPLIT_MIN - 1), NewJob("s", dependencies=["elsewhere"]))
    assert len(_halves(outside)) == 2
    keyed = batch(*named_jobs(SPLIT_MIN - 1), NewJob("s", dedup=Unique("k")))
    assert _halves(keyed) == (keyed,)  # (a dedup key: which job comes first decides)


def named_jobs(n: int) -> list[Any]:
    from quasar_redis._calls import NewJob

    return [NewJob("s", id=f"n{i}") for i in range(n)]


def test_halves_see_a_dependency_given_as_a_job(
    redis_client: Any, backend: str, namespace: str
) -> None:
    from quasar_redis._calls import NewJob
    from quasar_redis._coalescing import SPLIT_MIN, _halves

    q = Quasar(redis_client, namespace)
    made = q.enqueue("s", id="n2", now=T0)
    assert isinstance(made, JobApplied)
    jobs = [(job, None) for job in named_jobs(SPLIT_MIN - 1)]
    batch: list[Any] = [*jobs, (NewJob("s", dependencies=[made.job]), None)]
    assert _halves(batch) == (batch,)


def test_scripts_carry_only_the_definitions_they_reach() -> None:
    from quasar_redis._scripts import _Files, scripts

    counts = scripts()["counts"].source
    assert "local function complete_job" not in counts
    assert "local function check_queue" in counts
    assert "local function complete_job" in scripts()["report_many"].source
    core = "local function fmt() end\nlocal function unused() end\n"
    body = "-- uses: core\nlocal fmt = Core.fmt\nlocal function main() return fmt() end\n"
    shaken = _Files({"core": core}, {"s": body}).script("s")
    assert shaken.endswith("local function main() return fmt() end\n")
    assert "local function fmt" in shaken
    assert "unused" not in shaken and "Core" not in shaken  # (flat: the alias goes)


def test_an_edge_two_scripts_apply_is_defined_once_in_the_library() -> None:
    from quasar_redis._scripts import library, scripts

    shared, _, blocks = library().source.partition("local function register")
    assert shared.count("local function complete_job") == 1
    assert "local function complete_job" not in blocks  # nor again in complete.lua's block
    assert "local function complete_job" in scripts()["complete"].source
    assert "local function take_some" in scripts()["report_and_claim"].source


def local_names(lua: str) -> int:
    """How many names the ``local`` statements at the start of a line declare."""
    declared = re.findall(r"^local\s+(?:function\s+)?(\w+(?:\s*,\s*\w+)*)", lua, re.M)
    return sum(len(d.split(",")) for d in declared)


def test_the_library_stays_well_under_the_200_locals_lua_allows() -> None:
    from quasar_redis._scripts import library, scripts

    # The library's top level holds one table per file that others use and the registration;
    # each file's definitions are locals of a function of their own, as each script's are.
    source = library().source
    opening = re.compile(r"^local \w+ = \(function\(\)$", re.M)
    top = len(opening.findall(source)) + source.count("\nlocal function register")
    files = source.split("\n-- ===== ")[1:]
    largest = max(local_names(f) - len(opening.findall(f)) for f in files)
    print(f"library: {top} top-level names, at most {largest} in one file's function")
    assert top <= 120, top  # room for many more files
    assert largest <= 120, largest
    # A script sent alone (EVALSHA) is flat: what it reaches, and its own, in one chunk.
    flat = max(local_names(s.source) for s in scripts().values())
    print(f"scripts: at most {flat} top-level names")
    assert flat <= 180, flat  # 20 to spare below Lua's limit of 200


def test_definitions_that_cannot_be_assembled_are_refused() -> None:
    from quasar_redis._scripts import _Files

    one = {"one": "local f = 1\n"}
    with pytest.raises(ConfigurationError, match=r"f is defined in one\.lua and two\.lua"):
        _Files({**one, "two": "local f = 2\n"}, {})
    with pytest.raises(ConfigurationError, match=r"use each other: one -> two -> one"):
        cycle = {"one": "-- uses: two\nlocal f = Two.g\n", "two": "-- uses: one\nlocal g = One.f\n"}
        _Files(cycle, {})
    with pytest.raises(ConfigurationError, match=r"s\.lua uses nowhere, which is no Lua file"):
        _Files(one, {"s": "-- uses: one, nowhere\nlocal f = One.f\n"})
    with pytest.raises(ConfigurationError, match=r"s\.lua uses One\.f but not one"):
        _Files(one, {"s": "local function main() return One.f end\n"})
    with pytest.raises(ConfigurationError, match=r"s\.lua declares one but does not use it"):
        _Files(one, {"s": "-- uses: one\nlocal function main() end\n"})
    with pytest.raises(ConfigurationError, match=r"s\.lua uses One\.g: no such definition"):
        _Files(one, {"s": "-- uses: one\nlocal g = One.g\n"})
    with pytest.raises(ConfigurationError, match=r"s\.lua: h = One\.f is renamed"):
        _Files(one, {"s": "-- uses: one\nlocal h = One.f\n"})


def lua_code(path: Path) -> str:
    """A Lua file without its comments and strings."""
    return re.sub(r"""--[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", " ", path.read_text())


def test_each_lua_file_declares_exactly_the_files_it_uses() -> None:
    files = {p.stem: p for p in [*LUA.glob("*.lua"), *LUA.glob("include/*.lua")]}
    tables = {"".join(w.capitalize() for w in name.split("_")): name for name in files}
    for name, path in files.items():
        line = re.search(r"^-- uses:(.*)$", path.read_text(), re.M)
        declared = set(re.findall(r"\w+", line.group(1))) if line else set()
        named = re.findall(r"\b([A-Z][a-z]\w*)\.\w", lua_code(path))
        used = {tables[t] for t in named if t in tables}
        assert declared == used, name


def test_no_lua_function_takes_more_than_six_parameters() -> None:
    for path in [*LUA.glob("*.lua"), *LUA.glob("include/*.lua")]:
        for name, params in re.findall(r"function\s*([\w.:]*)\s*\(([^)]*)\)", lua_code(path)):
            count = len([p for p in params.split(",") if p.strip()])
            assert count <= 6, f"{path.name}: {name or 'function'} takes {count} (pass a table)"
