"""No two namespaces share a key, whatever their names, tags, prefixes, queues and job ids.

Shown three ways: every key ``KeySpace`` builds for two namespaces (Hypothesis, many examples);
every key two namespaces really write on each backend, through the scripts (Hypothesis, a few
examples), read back by SCAN with each namespace's ACL pattern; and the names that reached into
their tag's namespace under the layout of earlier versions (``job``, ``q``, ...), each beside
that namespace: its cancel, claim and counts, and an ACL user of each refused the other's keys.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quasar_redis import JobRefused, MissingJob, Quasar, Status
from quasar_redis._calls import WorkerEntry
from quasar_redis._keys import FAMILIES, QUEUE_SETS, SINGLES, KeySpace
from quasar_redis._rolling import write_commands
from quasar_redis.acl import key_pattern
from quasar_redis.cli import main
from quasar_redis.errors import ConfigurationError

from .helpers import REDIS_URL, T0, applied, claimed, delete_namespace, real_redis, snapshot

LUA = Path(__file__).resolve().parent.parent / "lua"
#: The names whose keys fell inside their tag's namespace's under the old layout.
COLLIDING = ("job", "q", "dependents", "call", "stats", "worker")
NAMES = st.one_of(
    st.sampled_from((*FAMILIES, *SINGLES, "shared", "quasar", "a", "a.b", "-")),
    st.from_regex(r"[A-Za-z0-9_.\-]{1,12}", fullmatch=True),
)
#: Job ids (text with no whitespace or control characters), those shaped like keys drawn often.
IDS = st.one_of(
    st.sampled_from(("y", "job:y", "leased", "q:job:leased", "worker:1", "a}/b:", "*", "[x]")),
    st.text(st.characters(exclude_categories=("Z", "C")), min_size=1, max_size=16),
)
LEASE_MS = 60_000


def glob_matches(pattern: str, key: str) -> bool:
    """Redis's glob match (``stringmatchlen``) of an ACL key pattern of ours: literal text and
    ``*``. ``?``, ``[``, ``]`` and the backslash, special to Redis, are never in one (names
    cannot hold them), and that is checked here rather than assumed."""
    assert pattern.startswith("~"), pattern
    glob = pattern[1:]
    assert not set(glob) & set("?[]\\"), glob
    found = re.fullmatch(".*".join(map(re.escape, glob.split("*"))), key, re.DOTALL) is not None
    assert found == fnmatch.fnmatchcase(key, glob)
    return found


def every_key(keys: KeySpace, queue: str, job_id: str) -> set[str]:
    """A key of every kind the namespace has, for ``queue`` and ``job_id``."""
    return {
        keys.job(job_id),
        keys.errors(job_id),
        keys.dependents(job_id),
        keys.call(job_id),
        keys.cascade(job_id),
        keys.cascade(job_id, job_id),
        *(keys.queue(queue, what) for what in QUEUE_SETS),
        keys.wake(queue),
        keys.stats(1_700_000_000),
        keys.worker(job_id),
        keys.unique(job_id),
        keys.batch(job_id),
        keys.members(job_id),
        keys.batches_done,
        keys.queues,
        keys.seq,
        keys.events,
        keys.paused,
        keys.workers,
        keys.cascades,
        keys.schedule(queue),
        keys.schedules,
        *((keys.partitions,) if keys.partition is None else ()),
    }


@st.composite
def two_spaces(draw: st.DrawFn, prefixes: tuple[str, ...] = ("quasar", "app")) -> Any:
    """Two namespaces with different roots, often one tagged with the other's name."""
    names = (draw(NAMES), draw(NAMES))
    tags = st.one_of(st.just(""), st.sampled_from(names), NAMES)
    spaces = [KeySpace(name, draw(tags), draw(st.sampled_from(prefixes))) for name in names]
    assume(spaces[0].root != spaces[1].root)
    return tuple(spaces)


# --- the key names -------------------------------------------------------------------------------


def test_every_key_the_lua_builds_starts_with_a_declared_word() -> None:
    built = set()
    for path in LUA.rglob("*.lua"):
        built |= set(re.findall(r'prefix \.\. "([a-z_]+)(:?)', path.read_text()))
    # (every word but events, which scripts get as KEYS[2], and stats and partitions, which
    # Python writes)
    assert {w for w, _ in built} >= {*FAMILIES, *SINGLES} - {"stats", "events", "partitions"}
    for word, colon in built:
        assert word in (FAMILIES if colon else SINGLES), (word, colon)
    keys = KeySpace("n")
    words = {k[len(keys.root) :].split(":")[0] for k in every_key(keys, "q1", "j")}
    assert words == {*FAMILIES, *SINGLES}  # (every kind built on the Python side too)


@settings(max_examples=500, deadline=None)
@given(spaces=two_spaces(), queues=st.tuples(NAMES, NAMES), ids=st.tuples(IDS, IDS))
def test_two_namespaces_never_share_a_key_nor_a_pattern(
    spaces: tuple[KeySpace, KeySpace], queues: tuple[str, str], ids: tuple[str, str]
) -> None:
    (a, b), built = spaces, {}
    for keys, queue, job_id in zip(spaces, queues, ids, strict=True):
        built[keys] = every_key(keys, queue, job_id)
    assert not built[a] & built[b]
    for mine, other in ((a, b), (b, a)):
        pattern = key_pattern(mine.namespace, tag=mine.tag, key_prefix=mine.prefix)
        assert all(glob_matches(pattern, k) for k in built[mine])
        assert not any(glob_matches(pattern, k) for k in built[other]), (pattern, other)
        # (a namespace is deleted by SCAN of its pattern: that of the other keeps its keys)
        assert not other.root.startswith(mine.root)


@settings(max_examples=500, deadline=None)
@given(
    spaces=two_spaces(),
    parts=st.tuples(*[st.one_of(st.none(), st.integers(0, 300))] * 2),
    queues=st.tuples(NAMES, NAMES),
    ids=st.tuples(IDS, IDS),
)
def test_two_partitions_never_share_a_key(
    spaces: tuple[KeySpace, KeySpace],
    parts: tuple[int | None, int | None],
    queues: tuple[str, str],
    ids: tuple[str, str],
) -> None:
    a, b = (k if p is None else k.part(p) for k, p in zip(spaces, parts, strict=True))
    assert not every_key(a, queues[0], ids[0]) & every_key(b, queues[1], ids[1])
    assert not a.root.startswith(b.root) and not b.root.startswith(a.root)
    # (and a namespace's own partitions neither)
    first, second = spaces[0].part(parts[0] or 0), spaces[0].part((parts[0] or 0) + 1)
    assert not every_key(first, queues[0], ids[0]) & every_key(second, queues[0], ids[0])


def test_a_partition_has_its_own_hash_tag() -> None:
    assert KeySpace("orders").part(3).root == "quasar:{orders/3}:"
    assert KeySpace("orders", "shop").part(0).root == "quasar:{shop/0}/orders:"
    assert KeySpace("orders", "shop").part(2).partitions == "quasar:{shop}/orders:partitions"
    with pytest.raises(ConfigurationError):
        KeySpace("orders", partition=-1)


def test_a_tagged_root_is_the_tag_a_slash_and_the_namespace() -> None:
    assert KeySpace("orders", "shop", "app").root == "app:{shop}/orders:"
    assert KeySpace("shop", "shop").root == KeySpace("shop").root == "quasar:{shop}:"
    assert key_pattern("job", tag="shared") == "~quasar:{shared}/job:*"


# --- what the scripts write, on each backend -----------------------------------------------------


def exercise(q: Quasar, queue: str, job_id: str) -> None:
    """Every kind of write a namespace makes: jobs with dependencies enqueued, claimed,
    completed, failed (its failure kept), cancelled with a dependent; a job scheduled; the
    queue paused; a worker announced; the workers' counts written; a cancel of an id shaped
    like another namespace's key."""
    ids = [f"{job_id}{n}" for n in "pcxyd"]
    p, c, x, y, d = ids
    applied(q.enqueue("s", id=p, queue=queue, now=T0))
    applied(q.enqueue("s", id=c, queue=queue, dependencies=[p], max_attempts=1, now=T0))
    applied(q.enqueue("s", id=x, queue=queue, now=T0))
    applied(q.enqueue("s", id=y, queue=queue, dependencies=[x], now=T0))
    applied(q.enqueue("s", id=d, queue=queue, delay_ms=LEASE_MS, now=T0))
    q.complete(claimed(q.claim(queue, "w", LEASE_MS, now=T0)).token, "w", result=1, now=T0)
    q.fail(claimed(q.claim_job(c, "w", LEASE_MS, now=T0)).token, "w", "boom", now=T0)
    q.cancel(x, now=T0)
    assert q.cancel(f"job:{job_id}", now=T0) == JobRefused(MissingJob(f"job:{job_id}"))
    q.pause(queue, now=T0)
    q.execute(q.calls.announce(WorkerEntry(job_id, "h", 1, (queue,), 1, (p,), "1"), LEASE_MS, T0))
    for command in write_commands(q.keys, Counter({(queue, "completed"): 1}), T0):
        q.redis.execute_command(*command)
    info = q.get_job(y, now=T0)
    assert info is not None and info.job.status(T0) is Status.CANCELLED


def scanned(client: Any, glob: str) -> dict[str, bytes]:
    """Every key matching ``glob`` (by Redis's own SCAN MATCH) with its DUMP."""
    return {k.decode(): client.dump(k) for k in client.scan_iter(match=glob, count=1000)}


@pytest.fixture
def key_base(redis_client: Any) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted after it."""
    base = f"k{uuid.uuid4().hex[:10]}"
    yield base
    for key in list(redis_client.scan_iter(match=f"{base}*", count=1000)):
        redis_client.delete(key)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_what_two_namespaces_write_is_theirs_alone(
    redis_client: Any, backend: str, key_base: str, data: st.DataObject
) -> None:
    for key in scanned(redis_client, f"{key_base}*"):  # (what an earlier example left)
        redis_client.delete(key)
    prefixes = (key_base, f"{key_base}.x")
    first, second = data.draw(two_spaces(prefixes))
    queues, ids = data.draw(st.tuples(NAMES, NAMES)), data.draw(st.tuples(IDS, IDS))
    clients = [
        Quasar(
            redis_client, k.namespace, tag=k.tag, key_prefix=k.prefix, functions=backend == "redis"
        )
        for k in (first, second)
    ]
    patterns = [
        key_pattern(k.namespace, tag=k.tag, key_prefix=k.prefix)[1:] for k in (first, second)
    ]
    exercise(clients[0], queues[0], ids[0])
    before = scanned(redis_client, patterns[0])
    exercise(clients[1], queues[1], ids[1])
    mine, theirs = scanned(redis_client, patterns[0]), scanned(redis_client, patterns[1])
    assert mine == before  # (the second wrote nothing the first's pattern covers)
    assert not mine.keys() & theirs.keys() and theirs
    assert set(scanned(redis_client, f"{key_base}*")) == mine.keys() | theirs.keys()


# --- the names that collided, beside their tag's namespace ---------------------------------------


@pytest.mark.parametrize("name", COLLIDING)
def test_a_namespace_named_like_a_key_keeps_out_of_its_tags_namespace(
    redis_client: Any, backend: str, namespace: str, name: str
) -> None:
    functions = backend == "redis"
    shared = Quasar(redis_client, namespace, functions=functions)
    inner = Quasar(redis_client, name, tag=namespace, functions=functions)
    # inner's jobs, at what the old layout made keys of shared's: its job "job:y" (inner
    # "job"), its queue "job"'s leases (inner "q"), the dependents of its job "job:x" (inner
    # "dependents"), the call record "job:y" (inner "call"), its worker "job:y" (inner "worker")
    applied(inner.enqueue("s", id="y", queue="job", now=T0))
    applied(inner.enqueue("s", id="x", queue="job", now=T0))
    applied(inner.enqueue("s", id="leased", queue="job", now=T0))
    claimed(inner.claim_job("leased", "w", LEASE_MS, now=T0))
    before = snapshot(inner)

    cancel = shared.calls.cancel("job:y", None, "cancelled", T0)
    assert shared.execute(dataclasses.replace(cancel, args=("job:y", *cancel.args[1:]))) == (
        JobRefused(MissingJob("job:y"))
    )
    applied(shared.enqueue("s", id="job:x", queue="job", now=T0))
    applied(shared.enqueue("s", id="a", queue="job", dependencies=["job:x"], now=T0))
    applied(shared.enqueue("s", id="b", queue="job", now=T0))
    assert claimed(shared.claim("job", "w", LEASE_MS, now=T0)).job.id == "job:x"
    counts = shared.counts("job", now=T0)
    assert (counts.available, counts.executing, counts.blocked) == (1, 1, 1)
    shared.execute(
        shared.calls.announce(WorkerEntry("job:y", "h", 1, ("job",), 1, (), "1"), LEASE_MS, T0)
    )
    assert [w.id for w in shared.workers(now=T0)] == ["job:y"]

    assert snapshot(inner) == before
    mine = inner.counts("job", now=T0)
    assert (mine.available, mine.executing, mine.blocked) == (2, 1, 0)
    assert inner.get_job("a") is None and inner.workers(now=T0) == []
    assert shared.get_job("y") is None and shared.get_job("leased") is None


def acl_user(admin: Any, namespace: str, tag: str = "") -> tuple[str, str]:
    """A user made by ``quasar acl setuser --apply`` for ``namespace``: (name, password)."""
    user, password = f"keys-{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    args = ["acl", "setuser", user, "producer", "worker", "operator", "--namespace", namespace]
    args += ["--tag", tag] if tag else []
    env = {"QUASAR_KEYS_PASSWORD": password, "QUASAR_REDIS_URL": REDIS_URL}
    ran = CliRunner().invoke(
        main, [*args, "--password-env", "QUASAR_KEYS_PASSWORD", "--apply"], env=env
    )
    assert ran.exit_code == 0, ran.output
    return user, password


def as_user(user: str, password: str) -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL, username=user, password=password)


@pytest.mark.parametrize("name", COLLIDING)
def test_an_acl_user_of_either_namespace_is_refused_the_others_keys(
    namespace: str, name: str
) -> None:
    admin = real_redis()
    users: list[str] = []
    try:
        shared = Quasar(admin, namespace)
        inner = Quasar(admin, name, tag=namespace)
        applied(shared.enqueue("s", id="a", queue="job"))
        applied(inner.enqueue("s", id="y", queue="job"))
        for keys, other, job_id in ((inner.keys, shared, "a"), (shared.keys, inner, "y")):
            user, password = acl_user(admin, keys.namespace, keys.tag)
            users.append(user)
            with as_user(user, password) as client:
                own = Quasar(client, keys.namespace, tag=keys.tag, check_eviction_policy=False)
                assert own.get_job("job:y") is None and own.counts("job").available == 1
                with pytest.raises(redis.exceptions.NoPermissionError):
                    client.hgetall(other.keys.job(job_id))
                for key in every_key(other.keys, "job", job_id):
                    with pytest.raises(redis.exceptions.NoPermissionError):
                        client.type(key)
    finally:
        for user in users:
            admin.acl_deluser(user)
        delete_namespace(admin, namespace)
        admin.close()
