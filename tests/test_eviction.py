"""A Redis that may evict keys (``maxmemory-policy`` other than ``noeviction``) loses jobs
silently, so producers refuse to enqueue on one and a worker refuses to serve, unless told to
accept it (``allow_eviction``). On a server of the test's own: the policy is the whole server's."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from quasar_redis import (
    App,
    BatchApplied,
    ConfigurationError,
    Connector,
    EvictionPolicyError,
    EvictionPolicyWarning,
    JobApplied,
    NewJob,
    Quasar,
    QueueCounts,
    RedisUnavailable,
    Worker,
)
from quasar_redis.cli import main

from .clients import clients, kind
from .consistency import check
from .helpers import NO_URL, REDIS_URL, delete_namespace, real_redis, wait_for
from .servers import server_in

__all__ = ["kind"]  # (the fixture)
# Every client of an evicting server that is not refused warns once (EvictionPolicyWarning,
# checked below).
pytestmark = pytest.mark.filterwarnings("ignore::quasar_redis.EvictionPolicyWarning")

TASKS = """
from quasar_redis import App

app = App(namespace="evicting")


@app.task(name="hello")
def hello() -> str:
    return "hi"
"""


@pytest.fixture
def evicting(tmp_path: Path) -> Iterator[str]:
    """The URL of a server whose maxmemory-policy is allkeys-lru."""
    with server_in(tmp_path / "redis", durable=False) as server:
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            client.config_set("maxmemory-policy", "allkeys-lru")
            yield server.url
        finally:
            client.close()


def test_both_clients_read_the_policy(evicting: str, kind: str) -> None:
    for url, policy in ((evicting, "allkeys-lru"), (REDIS_URL, None)):
        client = real_redis(url)
        try:
            with clients(kind, client) as make:
                q: Quasar = make("p")
                expected = policy or client.config_get("maxmemory-policy")["maxmemory-policy"]
                assert q.eviction_policy() == expected
        finally:
            client.close()


def test_a_worker_refuses_a_redis_that_may_evict(evicting: str, namespace: str) -> None:
    with App(evicting, namespace=namespace) as app:
        refused = r"maxmemory-policy 'allkeys-lru'.*noeviction"
        with pytest.raises(ConfigurationError, match=refused), Worker(app, idle_wait=0.2):
            pass  # (the block never begins)
        with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):  # a producer: warned once
            assert app.client.counts("default").executing == 0


def test_a_worker_told_to_accept_eviction_serves(evicting: str, namespace: str) -> None:
    with (
        App(evicting, namespace=namespace) as app,
        App(evicting, namespace=namespace, allow_eviction=True) as producer,
    ):
        app.task(lambda: "hi", name="hello")
        hello = producer.task(lambda: "hi", name="hello")
        with Worker(app, idle_wait=0.2, allow_eviction=True):
            assert hello.enqueue().result(timeout=10) == "hi"


REFUSED = r"^Redis maxmemory-policy is 'allkeys-lru'.*allow_eviction=True[^\n]*$"


def namespace_keys(url: str, namespace: str) -> list[Any]:
    admin = redis.Redis.from_url(url)
    try:
        return list(admin.scan_iter(match=f"quasar:{{{namespace}}}:*"))
    finally:
        admin.close()


def test_producers_are_refused_and_nothing_is_written(
    evicting: str, namespace: str, kind: str
) -> None:
    client = real_redis(evicting)
    try:
        with clients(kind, client) as make:
            q: Quasar = make(namespace)
            sends = (
                lambda: q.enqueue("s", 1),
                lambda: q.enqueue_job(NewJob("s", 1, id="one")),
                lambda: q.enqueue_many([NewJob("s", n) for n in range(3)]),
                lambda: q.enqueue_each([NewJob("s", n) for n in range(3)]),
            )
            for send in sends:
                with pytest.raises(EvictionPolicyError, match=REFUSED):
                    send()
            with pytest.warns(EvictionPolicyWarning):  # the other calls go on, warned once
                assert q.counts("default").available == 0
    finally:
        client.close()
    assert namespace_keys(evicting, namespace) == []


def test_the_task_api_is_refused_and_nothing_is_written(evicting: str, namespace: str) -> None:
    with App(evicting, namespace=namespace) as app:
        hello = app.task(lambda: "hi", name="hello")
        with pytest.raises(EvictionPolicyError, match=REFUSED):
            hello.enqueue()
        with pytest.raises(EvictionPolicyError, match=REFUSED):
            app.enqueue_many([hello.job(), hello.job()])

        async def in_a_loop() -> None:
            try:
                with pytest.raises(EvictionPolicyError, match=REFUSED):
                    await hello.aenqueue()
            finally:
                await app.aclose()

        asyncio.run(in_a_loop())
    assert namespace_keys(evicting, namespace) == []


def test_producers_allowed_explicitly_enqueue(evicting: str, namespace: str, kind: str) -> None:
    client = real_redis(evicting)
    try:
        with clients(kind, client) as make:
            q: Quasar = make(namespace, allow_eviction=True)
            with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
                assert isinstance(q.enqueue("s", 1), JobApplied)
            assert isinstance(q.enqueue_many([NewJob("s", 2)]), BatchApplied)
        with App(evicting, namespace=namespace, allow_eviction=True) as app:
            assert app.task(lambda: "hi", name="hello").enqueue().info() is not None
    finally:
        delete_namespace(client, namespace)
        client.close()


def config_gets(admin: redis.Redis) -> int:
    found = admin.info("commandstats")  # (per subcommand since Redis 7; on 6.2 CONFIG's all)
    stats = found.get("cmdstat_config|get") or found.get("cmdstat_config", {})
    return int(stats.get("calls", 0))


def counts_or_none(q: Quasar) -> QueueCounts | None:
    """The default queue's counts, or None where the call met a connection closed under it."""
    try:
        return q.counts("default")
    except RedisUnavailable:
        return None


def kill_clients_but(admin: redis.Redis) -> None:
    """Close every connection to the server but ``admin``'s (their clients reconnect)."""
    mine = admin.client_id()
    for found in admin.client_list():
        if int(found["id"]) != mine:
            admin.client_kill_filter(_id=found["id"])


@pytest.mark.parametrize("how", ["client kill", "restart"])
def test_a_policy_changed_after_the_check_is_seen_after_a_reconnect(
    tmp_path: Path, namespace: str, kind: str, how: str
) -> None:
    with server_in(tmp_path / "redis", durable=False) as server:
        server.start()
        admin = redis.Redis.from_url(server.url)
        client = redis.Redis.from_url(server.url)
        try:
            with clients(kind, client) as make:
                q: Quasar = make(namespace)
                asked = config_gets(admin)
                for n in range(20):
                    assert isinstance(q.enqueue("s", n), JobApplied)
                assert config_gets(admin) == asked + 1  # asked once, not once per enqueue
                admin.config_set("maxmemory-policy", "allkeys-lru")
                if how == "restart":
                    server.kill()
                    server.config = ("--maxmemory-policy", "allkeys-lru")
                    server.start()
                    admin.close()
                    admin = redis.Redis.from_url(server.url)
                else:
                    kill_clients_but(admin)
                # The call that reconnects is on its way as its connection connects: the policy
                # is asked before the next one. (redis-py 5's asyncio client sends no call again
                # on a closed connection: there the first call fails, and the next reconnects.)
                counts = wait_for(lambda: counts_or_none(q), 10, "a call on a new connection")
                assert counts.available == (20 if how == "client kill" else 0)
                with pytest.raises(EvictionPolicyError, match=REFUSED):
                    q.enqueue("s", "refused", id="refused")
                assert not admin.exists(q.keys.job("refused"))
                admin.config_set("maxmemory-policy", "noeviction")
                assert isinstance(q.enqueue("s", "again", id="again"), JobApplied)
        finally:
            admin.close()
            client.close()


def test_the_embedded_server_is_never_refused(namespace: str) -> None:
    with App(connector=Connector("memory://"), namespace=namespace) as app:
        hello = app.task(lambda: "hi", name="hello")
        assert hello.enqueue().info() is not None
        assert app.client.eviction_policy() is None


def test_quasar_worker_refuses_in_one_line_and_accepts_when_told(
    evicting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "evicting_tasks.py").write_text(TASKS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    env = {**NO_URL, "QUASAR_REDIS_URL": evicting}
    try:
        refused = CliRunner().invoke(main, ["worker", "evicting_tasks:app", "--burst"], env=env)
        assert refused.exit_code == 1, refused.output
        errors = [line for line in refused.output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and "--allow-eviction" in errors[0], refused.output
        accepted = CliRunner().invoke(
            main, ["worker", "evicting_tasks:app", "--burst", "--allow-eviction"], env=env
        )
        assert accepted.exit_code == 0, accepted.output
    finally:
        sys.modules.pop("evicting_tasks", None)


def test_what_an_evicting_redis_loses(evicting: str, namespace: str) -> None:
    """Why a worker refuses such a Redis: with memory short, Redis evicts job hashes and index
    entries alike, so acknowledged jobs vanish and the indexes name jobs that are gone."""
    admin = redis.Redis.from_url(evicting)
    q = Quasar(redis.Redis.from_url(evicting), namespace, allow_eviction=True)
    try:
        q.counts("default")  # (the library loaded before the limit)
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", used + 1_000_000)
        ids: list[str] = []
        for batch in range(10):
            jobs = [NewJob("s", "x" * 200, id=f"j{batch}-{n}") for n in range(500)]
            result = q.enqueue_many(jobs, ids_only=True)
            assert isinstance(result, BatchApplied), result
            ids += result.ids
        evicted = int(admin.info("stats")["evicted_keys"])
        # The damage is done; lift the limit so that reading it back (replies count towards
        # used memory) evicts nothing more.
        admin.config_set("maxmemory", 0)
        kept = [
            j
            for j, info in zip(ids, q.execute_many([q.calls.get_job(j) for j in ids]), strict=True)
            if info
        ]
        report = check(admin, namespace)
    finally:
        admin.config_set("maxmemory", 0)
        delete_namespace(admin, namespace)
        admin.close()
        q.redis.close()
    assert evicted > 0
    assert 0 < len(kept) < len(ids), "every acknowledged job survived, or none did"
    assert not report.ok, report
    print(f"allkeys-lru: {len(ids) - len(kept)} of {len(ids)} acknowledged jobs evicted; {report}")
