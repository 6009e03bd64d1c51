"""``quasar migrate-keys``: a tagged namespace written under the layout of earlier versions
(``<prefix>:{<tag>}:<namespace>:``) is moved to its root and served from there; every refusal
moves nothing.

The old data is made by hand: a namespace's jobs written by the scripts, then every key renamed
to the old root, which is all that the layouts differ in (the scripts build every key from it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from quasar_redis import InvalidArgument, NewJob, Quasar, Status
from quasar_redis._calls import WorkerEntry
from quasar_redis._keys import KeySpace
from quasar_redis.cli import main
from quasar_redis.cli.ops._migrate import PAGE, migrate_keys, old_root

from .helpers import REDIS_URL, T0, applied, claimed, delete_namespace, real_redis, snapshot

LEASE_MS = 60_000


def everything(client: Any, tag: str) -> dict[str, bytes]:
    """Every key under the tag (both layouts, the tag's own namespace too), with its DUMP."""
    return {k.decode(): client.dump(k) for k in client.scan_iter(match=f"quasar:{{{tag}}}*")}


def to_old_layout(client: Any, keys: KeySpace) -> int:
    """Rename every key of ``keys`` to where earlier versions kept it; how many."""
    found = [k.decode() for k in client.scan_iter(match=f"{keys.root}*", count=1000)]
    for k in found:
        client.rename(k, old_root(keys) + k[len(keys.root) :])
    return len(found)


def written(q: Quasar) -> None:
    """A namespace's work in progress: a job leased, one blocked on it, one scheduled, one
    cancelled, a lapsed worker entry (announced long ago by the server's clock; its hash kept
    10 minutes)."""
    applied(q.enqueue("s", {"n": 1}, id="first", now=T0))
    applied(q.enqueue("s", id="then", dependencies=["first"], now=T0))
    applied(q.enqueue("s", id="later", delay_ms=LEASE_MS, now=T0))
    applied(q.enqueue("s", id="dropped", now=T0))
    q.cancel("dropped", now=T0)
    claimed(q.claim_job("first", "w", LEASE_MS, now=T0))
    q.execute(q.calls.announce(WorkerEntry("w", "h", 1, ("default",), 1, (), "1"), 600_000, T0))


def at_old_layout(client: Any, name: str, tag: str, functions: bool) -> Quasar:
    """A client of namespace ``name`` tagged ``tag``, its work in progress written and its keys
    moved to the old layout."""
    q = Quasar(client, name, tag=tag, functions=functions)
    written(q)
    to_old_layout(client, q.keys)
    return q


@pytest.fixture
def tagged(redis_client: Any, backend: str, namespace: str) -> Iterator[Quasar]:
    """A namespace tagged with the test's namespace, its keys at the old layout."""
    q = Quasar(redis_client, "orders", tag=namespace, functions=backend == "redis")
    written(q)
    yield q


def test_a_namespace_is_moved_and_served_as_it_was(tagged: Quasar, redis_client: Any) -> None:
    before = snapshot(tagged)
    moved = to_old_layout(redis_client, tagged.keys)
    assert snapshot(tagged) == {} and tagged.get_job("first") is None

    dry = migrate_keys(redis_client, tagged.keys, dry_run=True)
    assert (dry.found, dry.moved, dry.dry_run) == (moved, 0, True)
    assert snapshot(tagged) == {}
    report = migrate_keys(redis_client, tagged.keys)
    assert (report.found, report.moved, report.gone, report.left) == (moved, moved, 0, 0)
    assert report.old_root == f"quasar:{{{tagged.keys.tag}}}:orders:"
    assert report.new_root == f"quasar:{{{tagged.keys.tag}}}/orders:"
    assert snapshot(tagged) == before
    assert not list(redis_client.scan_iter(match=f"{old_root(tagged.keys)}*"))

    # served: the lease completed releases its dependent, which runs; counts agree
    info = tagged.get_job("first", now=T0)
    assert info is not None and info.job.status(T0) is Status.EXECUTING
    token = claimed(tagged.claim_job("first", "w2", LEASE_MS, now=T0 + LEASE_MS)).token
    tagged.complete(token, "w2", result="ok", now=T0 + LEASE_MS)
    assert claimed(tagged.claim("default", "w2", LEASE_MS, now=T0 + LEASE_MS)).job.id == "then"
    counts = tagged.counts("default", now=T0 + LEASE_MS)
    assert (counts.completed, counts.executing, counts.available, counts.cancelled) == (1, 1, 1, 1)
    again = migrate_keys(redis_client, tagged.keys)
    assert (again.found, again.moved) == (0, 0)


def test_more_keys_than_a_page_are_all_moved(redis_client: Any, namespace: str) -> None:
    keys = KeySpace("bulk", namespace)
    q = Quasar(redis_client, keys.namespace, tag=namespace, functions=False)
    applied(q.enqueue("s", id="j0", now=T0))
    for start in range(1, PAGE + 200, 500):
        q.enqueue_many([NewJob("s", id=f"j{i}") for i in range(start, start + 500)], now=T0)
    before = snapshot(q)
    moved = to_old_layout(redis_client, keys)
    assert moved > PAGE
    assert migrate_keys(redis_client, keys).moved == moved
    assert snapshot(q) == before


def test_an_old_name_that_may_be_its_tags_own_key_is_refused(
    redis_client: Any, backend: str, namespace: str
) -> None:
    functions = backend == "redis"
    inner = at_old_layout(redis_client, "job", namespace, functions)
    shared = Quasar(redis_client, namespace, functions=functions)
    applied(shared.enqueue("s", id="y", now=T0))
    before = everything(redis_client, namespace)
    with pytest.raises(InvalidArgument, match="cannot be told apart from those of namespace"):
        migrate_keys(redis_client, inner.keys)
    assert everything(redis_client, namespace) == before
    # with nothing in the tag's namespace, every key there is the namespace's own
    for key in before:
        if not key.startswith(old_root(inner.keys)) or key == shared.keys.job("y"):
            redis_client.delete(key)
    assert migrate_keys(redis_client, inner.keys).moved > 0
    assert inner.get_job("first", now=T0) is not None


def test_refused_while_a_worker_of_the_namespace_is_registered(
    tagged: Quasar, redis_client: Any
) -> None:
    to_old_layout(redis_client, tagged.keys)
    seconds, micros = redis_client.time()
    registry = f"{old_root(tagged.keys)}workers"  # (as a worker of an earlier version keeps it)
    redis_client.zadd(registry, {"live": int(seconds) * 1000 + int(micros) // 1000 + LEASE_MS})
    before = everything(redis_client, tagged.keys.tag)
    with pytest.raises(InvalidArgument, match="workers of namespace 'orders' are registered"):
        migrate_keys(redis_client, tagged.keys)
    assert everything(redis_client, tagged.keys.tag) == before
    redis_client.zrem(registry, "live")  # (retired)
    assert migrate_keys(redis_client, tagged.keys).moved > 0


def test_a_foreign_key_or_a_taken_name_is_refused(tagged: Quasar, redis_client: Any) -> None:
    to_old_layout(redis_client, tagged.keys)
    old = old_root(tagged.keys)
    redis_client.set(f"{old}mine", "the user's own")
    before = everything(redis_client, tagged.keys.tag)
    with pytest.raises(InvalidArgument, match=f"{old}mine is not a key of namespace 'orders'"):
        migrate_keys(redis_client, tagged.keys)
    assert everything(redis_client, tagged.keys.tag) == before
    redis_client.delete(f"{old}mine")
    redis_client.set(old.encode() + b"job\xff", "not text")  # (no suffix: "job" and no ":")
    with pytest.raises(InvalidArgument, match="is not a key of namespace 'orders'"):
        migrate_keys(redis_client, tagged.keys)
    redis_client.delete(old.encode() + b"job\xff")
    redis_client.set(tagged.keys.seq, "7")
    before = everything(redis_client, tagged.keys.tag)
    with pytest.raises(InvalidArgument, match="exists already"):
        migrate_keys(redis_client, tagged.keys)
    assert everything(redis_client, tagged.keys.tag) == before


def test_a_namespace_of_several_partitions_is_refused(
    redis_client: Any, backend: str, namespace: str
) -> None:
    functions = backend == "redis"
    old = at_old_layout(redis_client, "orders", namespace, functions)
    parted = Quasar(redis_client, "orders", tag=namespace, functions=functions, partitions=3)
    applied(parted.enqueue("s", id="new", now=T0))
    assert redis_client.get(old.keys.partitions) == b"3"
    everywhere = [f"quasar:{{{namespace}}}*", f"quasar:{{{namespace}/*"]
    before = {k: redis_client.dump(k) for m in everywhere for k in redis_client.scan_iter(match=m)}
    for dry_run in (True, False):
        with pytest.raises(InvalidArgument, match="'orders' has 3 partitions by its record"):
            migrate_keys(redis_client, old.keys, dry_run=dry_run)
    after = {k: redis_client.dump(k) for m in everywhere for k in redis_client.scan_iter(match=m)}
    assert after == before
    redis_client.set(old.keys.partitions, "1")  # (one partition: the layout of earlier versions)
    assert migrate_keys(redis_client, old.keys).moved > 0


@pytest.mark.parametrize(
    ("keys", "says"),
    [(KeySpace("orders"), "has no tag of its own"), (KeySpace("s", "s"), "has no tag of its own")],
)
def test_a_namespace_without_a_tag_has_nothing_to_move(
    redis_client: Any, keys: KeySpace, says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        migrate_keys(redis_client, keys)


# --- the command ---------------------------------------------------------------------------------


def quasar(*args: str) -> Any:
    env = {"QUASAR_REDIS_URL": REDIS_URL, "REDIS_URL": None, "QUASAR_NAMESPACE": None}
    return CliRunner().invoke(main, ["migrate-keys", *args], env=env)


@pytest.fixture
def shared_tag(namespace: str) -> Iterator[str]:
    client = real_redis()
    yield namespace
    delete_namespace(client, namespace)
    client.close()


def test_the_command_moves_a_namespace_and_says_so(shared_tag: str) -> None:
    client = real_redis()
    q = Quasar(client, "orders", tag=shared_tag)
    written(q)
    before = snapshot(q)
    moved = to_old_layout(client, q.keys)
    ran = quasar("--namespace", "orders", "--tag", shared_tag, "--dry-run")
    assert ran.exit_code == 0, ran.output
    old, new = f"quasar:{{{shared_tag}}}:orders:", f"quasar:{{{shared_tag}}}/orders:"
    assert ran.output == f"{moved} keys under {old} would move to {new}\n"
    ran = quasar("--namespace", "orders", "--tag", shared_tag, "--json")
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.output) == {
        "namespace": "orders",
        "tag": shared_tag,
        "old_root": old,
        "new_root": new,
        "found": moved,
        "moved": moved,
        "gone": 0,
        "left": 0,
        "dry_run": False,
    }
    assert snapshot(q) == before
    ran = quasar("--namespace", "orders", "--tag", shared_tag)
    assert (ran.exit_code, ran.output) == (0, f"moved 0 keys from {old} to {new}\n")
    client.close()


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--namespace", "orders", "--tag", "a}b"], 2, "Invalid value for '--tag': tag must be"),
        (["--namespace", "orders", "--tag", ""], 1, "Error: namespace 'orders' has no tag of its"),
        (["--namespace", "a b", "--tag", "t"], 2, "Error: namespace must be 1-64 characters"),
        (["--namespace", "orders"], 2, "Missing option '--tag'"),
    ],
)
def test_the_command_refuses_in_one_line(args: list[str], code: int, says: str) -> None:
    ran = quasar(*args)
    assert ran.exit_code == code and says in ran.output, ran.output
    assert "Traceback" not in ran.output and ran.output.count("\n") == 1


def test_the_command_refuses_an_ambiguous_namespace_in_one_line(shared_tag: str) -> None:
    client = real_redis()
    applied(Quasar(client, shared_tag).enqueue("s", id="y"))
    client.set(f"quasar:{{{shared_tag}}}:job:job:y", "x")  # (whose?)
    before = everything(client, shared_tag)
    ran = quasar("--namespace", "job", "--tag", shared_tag)
    assert ran.exit_code == 1 and ran.output.startswith("Error: namespace 'job' cannot be moved")
    assert everything(client, shared_tag) == before
    client.close()
