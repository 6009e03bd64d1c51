"""Helpers the tests share: the test Redis server, waiting on a condition, and looking at what the
scripts left in Redis."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import pytest
import redis

from quasar_redis import (
    App,
    Claim,
    ClaimApplied,
    ClaimResult,
    Job,
    JobApplied,
    JobResult,
    NewJob,
    Quasar,
)
from quasar_redis._keys import QUEUE_SETS

T = TypeVar("T")
T0 = 1_000_000  # a fixed "now" for tests that control time
REDIS_URL = os.environ.get("QUASAR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE = os.environ.get("QUASAR_REQUIRE_REDIS") == "1"
# The binary of the servers the suite starts itself (fault tests, a cluster, TLS, Sentinel): a
# name on PATH or a path, so that the same tests run on Redis 6.2, 7 or Valkey.
SERVER_BIN = os.environ.get("QUASAR_TEST_SERVER_BIN", "redis-server")


def _binary_version() -> tuple[int, ...]:
    """The version ``SERVER_BIN --version`` says (``v=6.2.14``), or (0,) without the binary."""
    found = shutil.which(SERVER_BIN)
    if found is None:
        return (0,)
    done = subprocess.run([found, "--version"], capture_output=True, timeout=30, check=False)
    said = done.stdout.decode(errors="replace").split("v=", 1)[-1].split()[0]
    return tuple(int(part) for part in said.split(".") if part.isdigit())


SERVER_VERSION = _binary_version()
NO_URL: dict[str, str | None] = {"QUASAR_REDIS_URL": None, "REDIS_URL": None}  # CliRunner env


# --- the test server and waiting -----------------------------------------------------------------


def real_redis(url: str = REDIS_URL) -> redis.Redis:
    """A client of the test server (``url``), or skip (fail under QUASAR_REQUIRE_REDIS=1). Built
    as a user builds one, ``redis.Redis.from_url(url)``: the settings a user gets."""
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        client.close()
        if REQUIRE:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but Redis at {url} does not answer: {exc}")
        pytest.skip(f"no Redis at {url} ({exc}); set QUASAR_TEST_REDIS_URL to test on one")
    return client


def server_bin() -> str:
    """The full path of ``SERVER_BIN``; the test fails without it (a test that starts a server
    has already passed the skip / fail rule of ``real_redis``)."""
    found = shutil.which(SERVER_BIN)
    if found is None:
        pytest.fail(f"{SERVER_BIN} (QUASAR_TEST_SERVER_BIN) is not on PATH nor a file")
    return found


def server_version(client: redis.Redis) -> str:
    """What a server says it is: ``valkey 9.1.2``, ``redis 7.0.15``."""
    info = client.info("server")
    name = str(info.get("server_name", "redis"))
    return f"{name} {info.get(f'{name}_version', info['redis_version'])}"


def has_functions(client: Any) -> bool:
    """Whether ``client``'s server has functions (FCALL): Redis 7+, Valkey and fakeredis, not
    Redis 6.2, where a client's calls go as scripts (EVALSHA)."""
    try:
        client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "-")
    except redis.ResponseError as exc:
        if "unknown command" in str(exc).lower():
            return False
        raise
    return True


def report_header() -> list[str]:
    """The servers a run uses, for pytest's header: the shared one and the binary of the suite's
    own."""
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2)
    try:
        shared = server_version(client)
    except redis.RedisError as exc:
        shared = f"does not answer ({exc})"
    finally:
        client.close()
    found = shutil.which(SERVER_BIN)
    own = "missing"
    if found is not None:
        done = subprocess.run([found, "--version"], capture_output=True, timeout=30, check=False)
        own = f"{found}: {done.stdout.decode(errors='replace').strip()}"
    return [f"shared server: {REDIS_URL}: {shared}", f"own servers: {own}"]


def url_of(client: redis.Redis) -> str:
    """The URL of the server ``client`` talks to."""
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def delete_namespace(client: Any, namespace: str) -> None:
    """Delete every key of ``namespace``, of its partitions (``quasar:{ns/i}:``; a name holds no
    "/"), and of the namespaces given it as their ``tag=`` (never FLUSHDB: the server may be
    shared). On a Redis Cluster client too (its SCAN and DEL cover every primary)."""
    patterns = (f"quasar:{{{namespace}}}*", f"quasar:{{{namespace}/*")
    keys = [key for match in patterns for key in client.scan_iter(match=match, count=1000)]
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])


_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A TCP port that nothing on any address holds right now and that this process has not
    given out before, drawn below the range the kernel gives outgoing connections their ports
    from: so that neither the next call nor a client's connection takes it in the second or two
    before the server it is meant for binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            outgoing_from = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        outgoing_from = 32768
    for _ in range(1000):
        port = random.randrange(10_000, max(outgoing_from, 10_001))
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port found below {outgoing_from}")


def wait_for(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    every: float = 0.01,
    describe: Callable[[], object] | None = None,
) -> T:
    """``check()``'s first truthy value, asked every ``every`` seconds; fails after ``timeout``
    seconds, saying ``what`` (and what ``describe()`` then says: the state the wait saw)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            seen = "" if describe is None else f"; found {describe()!r}"
            pytest.fail(f"timed out after {timeout}s waiting for {what}{seen}")
        time.sleep(every)


# --- what the scripts left -----------------------------------------------------------------------

# A job with every option away from its default (it depends on a job "dep", which must exist).
FULL_JOB = NewJob(
    "stage.x",
    {"k": [1, 2]},
    id="full",
    queue="mail",
    input_ref="s3://b/k",
    input_revision=7,
    dependencies=["dep"],
    priority=-5,
    max_attempts=9,
    on_dependency_failure="cancel",
)


def applied(result: JobResult) -> Job:
    assert isinstance(result, JobApplied), result
    return result.job


def claimed(result: ClaimResult) -> Claim:
    assert isinstance(result, ClaimApplied), result
    return result.claim


def where(q: Quasar, job_id: str, queue: str = "default") -> set[str]:
    """The queue structures that hold ``job_id`` (``delayed_pr`` checked to mirror ``delayed``
    and not named)."""
    found = set()
    for what in QUEUE_SETS:
        key = q.keys.queue(queue, what)
        raw = q.redis.zrange(key, 0, -1)
        if what in ("ready", "delayed_pr"):
            raw = [m[11:] for m in raw]  # after available_at and sequence (6 and 5 bytes)
        members = [m.decode() for m in raw]
        if job_id in members:
            found.add(what)
    assert ("delayed" in found) == ("delayed_pr" in found), found
    assert_delayed_mirrored(q, queue)
    return found - {"delayed_pr"}


def assert_delayed_mirrored(q: Quasar, queue: str) -> None:
    """``delayed_pr`` holds exactly the jobs of ``delayed``, each as ``ready`` would hold it."""
    by_time = q.redis.zrange(q.keys.queue(queue, "delayed"), 0, -1)
    by_priority = q.redis.zrange(q.keys.queue(queue, "delayed_pr"), 0, -1, withscores=True)
    assert sorted(m[11:] for m, _ in by_priority) == sorted(by_time)
    for member, score in by_priority:
        job = q.redis.hmget(q.keys.job(member[11:].decode()), "at", "pr")
        if job[0] is not None:
            at = int.from_bytes(member[:6], "big")
            assert (at, score) == (int(job[0]), float(job[1] or 0)), member


def snapshot(q: Quasar) -> dict[str, Any]:
    """Every key of the namespace with its type and whole value."""
    out: dict[str, Any] = {}
    for key in q.redis.scan_iter(match=f"{q.keys.root}*", count=1000):
        kind = q.redis.type(key).decode()
        if kind == "hash":
            value: Any = q.redis.hgetall(key)
        elif kind == "zset":
            value = q.redis.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(q.redis.smembers(key))
        elif kind == "string":
            value = q.redis.get(key)
        else:
            value = kind
        out[key.decode()] = (kind, value)
    return out


def comparable(q: Quasar, hide: Iterable[str] = (), *, field_order: bool = True) -> str:
    """A namespace's keys and values as text, to compare two namespaces brought to one state by
    different ways: without the namespace's name, the stream entries' ids, the id of the call
    that made a job (``ec``) and each text of ``hide`` (ids made at random). A hash keeps its
    fields in the order they were written unless ``field_order`` is false."""
    out: dict[str, Any] = {}
    for key, (kind, found) in snapshot(q).items():
        value = found
        if kind == "hash":
            fields = [(f, b"<call>" if f == b"ec" else v) for f, v in found.items()]
            value = fields if field_order else sorted(fields)
        elif kind == "stream":
            value = [fields for _, fields in q.redis.xrange(key)]
        elif kind == "list":
            value = q.redis.lrange(key, 0, -1)
        out[key.removeprefix(q.keys.root)] = (kind, value)
    items = []
    for item in out.items():
        text = repr(item)
        for part in hide:
            text = text.replace(part, "<hidden>")
        items.append(text)
    return "\n".join(sorted(items))


def raw_job(q: Quasar, job_id: str) -> dict[str, bytes]:
    return {k.decode(): v for k, v in q.redis.hgetall(q.keys.job(job_id)).items()}


@contextlib.contextmanager
def app_url(backend: str, namespace: str, query: str = "") -> Iterator[str]:
    """The URL an App of ``backend`` gets ("fake": ``memory://``; "redis": the test server,
    with ``query`` after it, or skip without one): a user's client settings, none of the tests'
    own. The namespace's keys on the real server are deleted after."""
    if backend == "fake":
        yield "memory://"
        return
    client = real_redis()
    try:
        yield f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}{query}" if query else REDIS_URL
    finally:
        delete_namespace(client, namespace)
        client.close()


@contextlib.contextmanager
def app_of(backend: str, namespace: str) -> Iterator[App]:
    """An App of ``backend`` (see ``app_url``) on ``namespace``, closed after."""
    with app_url(backend, namespace) as url:
        made = App(url, namespace=namespace)
        try:
            yield made
        finally:
            made.close()
