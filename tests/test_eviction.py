"""A Redis that may evict keys (``maxmemory-policy`` other than ``noeviction``) loses jobs
silently, so a worker refuses to serve on one unless told to accept it. On a server of the
test's own: the policy is the whole server's."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from quasar_redis import (
    App,
    BatchApplied,
    ConfigurationError,
    EvictionPolicyWarning,
    NewJob,
    Quasar,
    Worker,
)
from quasar_redis.cli import main

from .clients import clients, kind
from .consistency import check
from .helpers import NO_URL, REDIS_URL, delete_namespace, real_redis
from .servers import server_in

__all__ = ["kind"]  # (the fixture)
# Every client of an evicting server warns once (EvictionPolicyWarning, checked below); the
# workers' clients here are told to accept it.
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
    with App(evicting, namespace=namespace) as app:
        hello = app.task(lambda: "hi", name="hello")
        with Worker(app, idle_wait=0.2, allow_eviction=True):
            assert hello.enqueue().result(timeout=10) == "hi"


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
    q = Quasar(redis.Redis.from_url(evicting), namespace)
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
        kept = [
            j
            for j, info in zip(ids, q.execute_many([q.calls.get(j) for j in ids]), strict=True)
            if info
        ]
        report = check(admin, namespace)
    finally:
        admin.config_set("maxmemory", 0)
        delete_namespace(admin, namespace)
        admin.close()
        q.redis.close()
    assert evicted > 0
    assert len(kept) < len(ids), "every acknowledged job survived"
    assert not report.ok, report
    print(f"allkeys-lru: {len(ids) - len(kept)} of {len(ids)} acknowledged jobs evicted; {report}")
