"""quasar on Redis as deployments run it: TLS with a CA of the test's own, and a primary that
Redis Sentinel manages, failover included. The App, a ``quasar worker`` process and the
operator CLI each reach it from a URL alone (the Redis Cluster's is in test_cluster.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from quasar_redis import App, Quasar
from quasar_redis._connect import sync_client
from quasar_redis._urls import check_url, redact, target
from quasar_redis.errors import ConfigurationError

from .deployments import SERVICE, SentinelGroup, sentinel_group, tls_redis
from .helpers import wait_for
from .locked_redis import closed_port
from .test_cli_ops import quasar

QUASAR = Path(sys.executable).parent / "quasar"
TASKS = """
import os

from quasar_redis import App

app = App(namespace=os.environ["QUASAR_NAMESPACE"])  # the URL: QUASAR_REDIS_URL


@app.task(queue="work", name="add")
def add(a: int, b: int) -> int:
    return a + b
"""


def tasks_app(url: str, namespace: str) -> Any:
    app = App(url, namespace=namespace)
    return app, app.task(queue="work", name="add")(lambda a, b: a + b)


def work(folder: Path, url: str, namespace: str) -> subprocess.CompletedProcess[str]:
    """``quasar worker tasks:app --burst`` in ``folder``, its URL and namespace from the
    environment alone."""
    (folder / "tasks.py").write_text(TASKS)
    env = {**os.environ, "QUASAR_REDIS_URL": url, "QUASAR_NAMESPACE": namespace}
    env.pop("REDIS_URL", None)
    return subprocess.run(
        [str(QUASAR), "worker", "tasks:app", "-q", "work", "--burst"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.heavy
def test_tls_with_a_ca_of_its_own(tmp_path: Path) -> None:
    namespace = f"tls-{uuid.uuid4().hex[:8]}"
    with tls_redis(tmp_path) as server:
        url = server.trusted_url
        app, add = tasks_app(url, namespace)
        with app:
            handles = [add.enqueue(i, 1) for i in range(5)]
            ran = work(tmp_path, url, namespace)
            assert ran.returncode == 0, ran.stderr
            assert [h.result(timeout=10) for h in handles] == [1, 2, 3, 4, 5]
        listing = quasar("jobs", "work", "--json", url=url, namespace=namespace).json()
        assert {j["status"] for j in listing["jobs"]} == {"completed"}
        assert len(listing["jobs"]) == 5
        # A client that does not trust the test's CA is refused, in one line.
        line = quasar("jobs", "work", url=server.url(), namespace=namespace).one_error()
        assert "cannot reach Redis at rediss://127.0.0.1" in line
        assert "certificate verify failed" in line
        with Quasar.from_url(url, namespace) as q:
            assert q.counts("work").completed == 5


def promote(group: SentinelGroup) -> int:
    """A failover to the replica; the new primary's port once the sentinels name it, it takes
    writes and the old primary follows it (a write the old one took before that would be lost:
    replication is asynchronous, see docs/guarantees.md)."""
    old = group.primary_port()
    with redis.Redis(host="127.0.0.1", port=old or 0, socket_timeout=15) as primary:
        assert primary.execute_command("WAIT", 1, 10_000) == 1  # the replica has every write
    with group.sentinel(group.sentinel_ports[0]) as s:
        s.execute_command("SENTINEL", "FAILOVER", SERVICE)

    def moved() -> int | None:
        port = group.primary_port()
        if port is None or port == old or old is None:
            return None
        settled = group.role(port) == "master" and group.role(old) == "slave"
        return port if settled else None

    return wait_for(moved, 60, "the sentinels to promote the replica", 0.2)


@pytest.mark.heavy
def test_a_sentinel_managed_primary_through_a_failover(tmp_path: Path) -> None:
    namespace = f"sentinel-{uuid.uuid4().hex[:8]}"
    with sentinel_group(tmp_path) as group:
        url = group.url
        first_primary = group.primary_port()
        app, add = tasks_app(url, namespace)
        with app:
            before = [add.enqueue(i, 10) for i in range(3)]
            ran = work(tmp_path, url, namespace)
            assert ran.returncode == 0, ran.stderr
            assert [h.result(timeout=10) for h in before] == [10, 11, 12]
            assert promote(group) != first_primary
            # The same app's connections follow the new primary.
            after = wait_for(lambda: _enqueued(add), 30, "an enqueue on the new primary", 0.2)
            ran = work(tmp_path, url, namespace)
            assert ran.returncode == 0, ran.stderr
        with Quasar.from_url(url, namespace) as q:
            info = q.get_job(after.id)
            assert info is not None and info.job.result == 102
        listing = quasar("jobs", "work", "--json", url=url, namespace=namespace).json()
        assert sorted(j["status"] for j in listing["jobs"]) == ["completed"] * 4
        client = sync_client(url)
        try:
            assert client.connection_pool.get_master_address()[1] != first_primary
        finally:
            client.close()


def _enqueued(add: Any) -> Any:
    try:
        return add.enqueue(100, 2)
    except Exception:  # the old primary refuses writes until the pool follows
        time.sleep(0.1)
        return None


@pytest.mark.parametrize(
    ("url", "kind", "hosts", "service", "plain"),
    [
        ("redis://h:1/2", "server", (), "", "redis://h:1/2"),
        (
            "redis+cluster://u:pw@a:7000,b:7001?socket_timeout=5",
            "cluster",
            (("a", 7000), ("b", 7001)),
            "",
            "redis://u:pw@a:7000/0?socket_timeout=5",
        ),
        ("rediss+cluster://a", "cluster", (("a", 6379),), "", "rediss://a:6379/0"),
        (
            "redis+sentinel://:pw@s1,[::1]:26380/main/3?sentinel_password=sp&ssl_ca_certs=/c.pem",
            "sentinel",
            (("s1", 26379), ("::1", 26380)),
            "main",
            "redis://:pw@s1:26379/3?ssl_ca_certs=%2Fc.pem",
        ),
    ],
)
def test_urls_of_a_cluster_and_of_sentinels(
    url: str, kind: str, hosts: tuple[tuple[str, int], ...], service: str, plain: str
) -> None:
    found = target(check_url(url))
    assert (found.kind, found.hosts, found.service, found.url) == (kind, hosts, service, plain)


def test_the_sentinels_own_password_is_theirs_alone() -> None:
    found = target("redis+sentinel://:data@s1/main?sentinel_password=guard")
    assert found.sentinel_options == (("sentinel_password", "guard"),)
    assert "guard" not in found.url
    assert redact("redis+sentinel://:data@s1/main?sentinel_password=guard") == (
        "redis+sentinel://:***@s1/main?sentinel_password=***"
    )


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis+sentinel://s1:26379", "name the primary after the sentinels"),
        ("redis+sentinel://s1/main/zero", "database 'zero'"),
        ("redis+cluster://", "no host:port"),
        ("redis+cluster://a:99999", "'a:99999' is not host:port"),
        ("redis+cluster://a:7000/2", "a cluster has database 0 only"),
        ("redis+tcp://a", "it must start with redis://, rediss://, unix://, redis+cluster://"),
    ],
)
def test_bad_cluster_and_sentinel_urls(url: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        check_url(url)
    line = quasar("jobs", "work", url=url).one_error()
    assert said in line


def test_a_cluster_or_sentinels_out_of_reach_are_one_line() -> None:
    port = closed_port()
    line = quasar("queues", url=f"redis+cluster://:pw@127.0.0.1:{port}").one_error()
    assert line.startswith(
        f"Error: cannot reach the Redis Cluster at redis+cluster://:***@127.0.0.1:{port}:"
    )
    line = quasar("queues", url=f"redis+sentinel://127.0.0.1:{port}/main").one_error()
    assert line == (
        f"Error: no sentinel of redis+sentinel://127.0.0.1:{port}/main names a primary 'main' "
        "(the service name? sentinels down?)"
    )
    ran = quasar("example", "--redis-url", f"redis+cluster://127.0.0.1:{port}")
    assert ran.code == 1 and "Traceback" not in ran.err
    assert ran.err.startswith("Error: cannot reach the Redis Cluster")
