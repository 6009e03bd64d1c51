"""Least-privilege Redis users (docs/security.md): the roles follow the scripts, each role does its
whole job and nothing more, and a missing permission is a ``PermissionDenied`` naming it that
changes nothing.

The users live on a redis-server of the test session's own (``private_server``): ``ACL
SETUSER`` is server-wide, never run on a shared server.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from quasar_redis import (
    App,
    BatchApplied,
    CancelApplied,
    Cancelled,
    ClaimRefused,
    Complete,
    Failed,
    JobFailedError,
    NewJob,
    NothingClaimable,
    Quasar,
    Succeeded,
    Task,
    Worker,
    current_job,
)
from quasar_redis._calls import WorkerEntry
from quasar_redis._schedules import Schedule
from quasar_redis._scripts import READS, WRITES, _code, commands, library, lua_dir, names, scripts
from quasar_redis._sending import functions_unusable, map_error
from quasar_redis.acl import ROLES, key_pattern, rules, scripts_instead, setuser
from quasar_redis.cli import main
from quasar_redis.errors import ConfigurationError, PermissionDenied

from .clients import clients, kind
from .helpers import SERVER_VERSION, applied, claimed, has_functions, wait_for
from .servers import RedisServer
from .users import Users

__all__ = ["kind"]  # (the fixture: the tests taking it run through both clients)

Make = Callable[..., Quasar]


# --- the roles follow the scripts ----------------------------------------------------------------


def test_each_role_grants_exactly_what_its_operations_run() -> None:
    # (the commands are read from the scripts; docs/security.md's table is the reviewed copy)
    for role in ROLES.values():
        assert set(role.operations) <= set(names()), role.name
        needed = {c for op in role.operations for c in scripts()[op].uses}
        assert set(role.commands) == needed | set(role.direct), role.name


def test_every_operation_belongs_to_a_role() -> None:
    assert {op for role in ROLES.values() for op in role.operations} == set(names())


def test_the_scan_finds_every_command_the_lua_sources_name(private_server: RedisServer) -> None:
    # Independent of the scan: every string literal of the sources that names a Redis command.
    admin: Any = redis.Redis.from_url(private_server.url)
    known = {str(c).upper() for c in admin.command()}  # (COMMAND LIST: Redis 7+)
    admin.close()
    named = set()
    for path in Path(str(lua_dir())).rglob("*.lua"):
        named |= set(re.findall(r'"([A-Z_]+)"', _code(path.read_text()))) & known
    scanned = {c for s in scripts().values() for c in commands(s.source)[0]}
    assert named <= scanned
    assert scanned <= READS | WRITES  # every command is known as a read or a write
    for script in scripts().values():
        assert commands(script.source)[1] == [], script.name  # every wrapper call is followed


def test_the_scan_follows_calls_and_wrappers_and_flags_what_it_cannot() -> None:
    source = (
        "local function run(ctx, cmd, k)\n  return redis.call(cmd, k)\nend\n"
        'local function main(ctx)\n  redis.call("FLUSHALL")\n  redis.pcall("GET", "k")\n'
        '  run(ctx, "HDEL", key_of(ctx, "x"))\n  run(ctx, chosen, "y")\n'
        '  -- redis.call("DEBUG")\nend\n'
    )
    found, unknown = commands(source)
    assert found == {"FLUSHALL", "GET", "HDEL"}
    assert unknown == ['run(ctx, chosen, "y")']


def test_a_script_lists_reads_only_where_it_may_not_write() -> None:
    for name in ("get_job", "counts", "list_jobs"):
        assert set(scripts()[name].uses) <= READS, name
    assert "XADD" in scripts()["enqueue"].uses


def test_rules_name_the_namespace_keys_and_the_roles_commands_only() -> None:
    words = rules(["reader"], ["orders"])
    assert words[:4] == ["resetkeys", "~quasar:{orders}:*", "resetchannels", "-@all"]
    assert "+hset" not in words and "+zcount" in words and "+fcall" in words
    assert key_pattern("orders", tag="shop", key_prefix="app") == "~app:{shop}/orders:*"
    both = rules(["producer", "worker"], ["a", "b"], paths="functions")
    assert "~quasar:{a}:*" in both and "~quasar:{b}:*" in both
    assert "+fcall" in both and "+evalsha" not in both and "+blpop" in both and "+sadd" in both
    assert "+fcall" not in rules(["producer"], ["a"], paths="scripts")


@pytest.mark.parametrize(
    "call",
    [
        lambda: rules(["admin"], ["a"]),
        lambda: rules([], ["a"]),
        lambda: rules(["reader"], []),
        lambda: rules(["reader"], ["a{b}"]),
        lambda: rules(["reader"], ["a"], paths="all"),  # type: ignore[arg-type]
        lambda: setuser("two words", ["reader"], ["a"]),
    ],
)
def test_bad_rules_are_refused(call: Callable[[], Any]) -> None:
    with pytest.raises(ConfigurationError):
        call()


def test_setuser_stores_a_hash_of_the_password_never_the_password() -> None:
    words = setuser("u", ["reader"], ["a"], password="s3cret")
    assert words[:5] == ["ACL", "SETUSER", "u", "reset", "on"]
    assert not any("s3cret" in w for w in words)
    assert any(w.startswith("#") and len(w) == 65 for w in words)


def test_a_noperm_gives_up_functions_only_when_it_refuses_them() -> None:
    refused = redis.exceptions.NoPermissionError
    assert functions_unusable(refused("this user has no permissions to run the 'fcall' command"))
    assert functions_unusable(
        refused("User u has no permissions to run the 'function|load' command")
    )
    assert not functions_unusable(refused("this Redis user may not run XADD (grant +xadd)"))
    assert not functions_unusable(refused("this user has no permissions to run the 'xadd' command"))
    denied = map_error(refused("User u has no permissions to run the 'function|load' command"))
    assert isinstance(denied, PermissionDenied) and denied.permission == "+function|load"
    assert "quasar acl load" in str(denied)
    inside = map_error(
        redis.exceptions.ResponseError(
            "The user executing the script can't run this command or subcommand script: x"
        )
    )
    assert isinstance(inside, PermissionDenied) and "quasar acl setuser" in str(inside)
    valkey = map_error(
        redis.exceptions.ResponseError(
            "ACL failure in script: User u has no permissions to run the 'get' command script: x"
        )
    )
    assert isinstance(valkey, PermissionDenied) and valkey.permission == "+get"


def test_rules_naming_fcall_on_a_server_without_functions_become_those_of_scripts() -> None:
    # Redis 6.2's refusal of an ACL SETUSER naming FCALL, which it does not know.
    unknown = redis.exceptions.ResponseError(
        "Error in ACL SETUSER modifier '+fcall': Unknown command or category name in ACL"
    )
    assert scripts_instead(unknown, "both")
    with pytest.raises(ConfigurationError, match="--paths scripts"):
        scripts_instead(unknown, "functions")
    other = redis.exceptions.ResponseError(
        "Error in ACL SETUSER modifier '+xadd': Unknown command or category name in ACL"
    )
    assert not scripts_instead(other, "both")


def test_quasar_acl_prints_roles_and_setuser() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["acl", "roles"])
    assert out.exit_code == 0 and all(f"{name}:" in out.output for name in ROLES)
    out = runner.invoke(main, ["acl", "setuser", "w", "worker", "--namespace", "orders"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("ACL SETUSER w reset on resetkeys '~quasar:{orders}:*'")
    bad = runner.invoke(main, ["acl", "setuser", "w", "boss", "--namespace", "orders"])
    assert bad.exit_code == 2 and "unknown role 'boss'" in bad.output


# --- users on a server of our own ----------------------------------------------------------------


@pytest.fixture
def users(private_server: RedisServer, namespace: str) -> Iterator[Users]:
    made = Users(private_server, namespace)
    Quasar(made.admin, namespace).load_scripts()  # what an admin does once per version
    try:
        yield made
    finally:
        made.close()


def snapshot(admin: redis.Redis, namespace: str) -> dict[bytes, Any]:
    """Every key of the namespace with its serialized value."""
    return {k: admin.dump(k) for k in sorted(admin.scan_iter(match=f"quasar:{{{namespace}}}:*"))}


#: Whether the server checks every command a call may run before its first write
#: (``redis.acl_check_cmd``: Redis 7+ and Valkey). Redis 6.2 refuses a command where the script
#: runs it, without naming it, and what the script wrote before stays (docs/security.md).
CHECKED = SERVER_VERSION >= (7,)


def refused(call: Callable[[], Any], permission: str | None = None) -> PermissionDenied:
    with pytest.raises(PermissionDenied) as denied:
        call()
    if permission is not None:
        assert denied.value.permission == (permission if CHECKED else None), denied.value
    return denied.value


def test_a_producer_enqueues_reads_back_and_does_nothing_else(users: Users, kind: str) -> None:
    admin = Quasar(users.admin, users.namespace)
    with clients(kind, users.make(["producer"])) as make:
        p = make(users.namespace)
        applied(p.enqueue("build", {"n": 1}, id="a"))
        batch = p.enqueue_many([NewJob("build", id="b", dependencies=("a",)), NewJob("s", id="c")])
        assert isinstance(batch, BatchApplied) and [j.id for j in batch.jobs] == ["b", "c"]
        assert p.get_job("a") is not None
        before = snapshot(users.admin, users.namespace)
        refused(lambda: p.claim("default", "w", 10_000), "+del")
        refused(lambda: p.cancel("a"), "+del")
        refused(lambda: p.counts("default"), "+zcount")
        assert snapshot(users.admin, users.namespace) == before
        # (a refused command inside a call keeps the functions; Redis 6.2 has none: scripts)
        assert p.functions == has_functions(users.admin)
    assert admin.counts("default").available == 2


def test_an_operator_inspects_cancels_retries_prunes_and_sweeps(users: Users, kind: str) -> None:
    admin = Quasar(users.admin, users.namespace)
    applied(admin.enqueue("s", id="a"))
    applied(admin.enqueue("s", id="b"))
    applied(admin.enqueue("s", id="later", delay_ms=3_600_000))
    token = claimed(admin.claim_job("a", "w", 10_000)).token
    applied(admin.permanent_fail(token, "w", "broken"))
    expiring = claimed(admin.claim_job("b", "w", 100)).token
    with clients(kind, users.make(["operator"])) as make:
        o = make(users.namespace)
        info = o.get_job("a")
        assert info is not None and isinstance(info.job.state, Failed)
        assert o.counts("default").discarded == 1
        assert [j.id for j in o.list_jobs("default", "discarded")] == ["a"]
        applied(o.retry("a"))
        swept = o.sweep_expired(now=expiring.expires_at + 1)
        assert list(swept.expired) == ["b"]
        later = int(time.time() * 1000) + 7_200_000
        assert o.promote_due(now=later) == 1
        cancelled = o.cancel("later", now=later)
        assert isinstance(cancelled, CancelApplied) and isinstance(cancelled.job.state, Cancelled)
        assert o.prune(max_count=0, now=later + 120_000) == 1
        assert o.pause("default") is True
        assert [(i.name, i.paused) for i in o.queues()] == [("default", True)]
        assert o.resume("default") is True
        assert o.workers() == []
        before = snapshot(users.admin, users.namespace)
        refused(lambda: o.enqueue("s", id="new"), "+incrby")
        refused(lambda: o.enqueue_many([NewJob("s", id="new")]), "+incrby")
        assert snapshot(users.admin, users.namespace) == before
        assert o.functions == has_functions(users.admin)  # (6.2: scripts)


def test_a_reader_reads_and_may_change_nothing(users: Users, kind: str) -> None:
    admin = Quasar(users.admin, users.namespace)
    applied(admin.enqueue("s", id="a"))
    with clients(kind, users.make(["reader"])) as make:
        r = make(users.namespace)
        assert r.get_job("a") is not None and r.counts("default").available == 1
        assert [j.id for j in r.list_jobs("default", "available")] == ["a"]
        assert [i.name for i in r.queues()] == ["default"]
        before = snapshot(users.admin, users.namespace)
        for call in (
            lambda: r.cancel("a"),
            lambda: r.enqueue("s", id="b"),
            lambda: r.claim("default", "w", 10_000),
            lambda: r.prune(max_count=0),
            r.promote_due,
            lambda: r.pause("default"),
            r.workers,
        ):
            refused(call)
        assert snapshot(users.admin, users.namespace) == before


def _declare(made: App) -> dict[str, Task[..., Any]]:
    """The tasks of the worker test, on ``made``: one succeeds, one fails once, one outlives its
    lease several times over (renewed), one always fails."""

    def ok(n: int) -> int:
        return n * 2

    def flaky() -> int:
        if current_job().attempt < 2:
            raise ValueError("first attempt fails")
        return current_job().attempt

    def slow() -> str:
        time.sleep(1.0)  # several renewals (heartbeats) of a 300 ms lease
        return "done"

    def broken() -> None:
        raise ValueError("always")

    return {
        f.__name__: made.task(f, name=f.__name__, max_attempts=2) for f in (ok, flaky, slow, broken)
    }


def test_a_worker_user_runs_a_real_worker(users: Users) -> None:
    producer = App(users.url_of(users.make(["producer"])), namespace=users.namespace)
    worker_app = App(users.url_of(users.make(["worker"])), namespace=users.namespace)
    _declare(worker_app)
    tasks = _declare(producer)
    try:
        handles = {
            "ok": tasks["ok"].enqueue(21),
            "flaky": tasks["flaky"].enqueue(),
            "slow": tasks["slow"].enqueue(),
            "broken": tasks["broken"].enqueue(),
        }
        admin = Quasar(users.admin, users.namespace)
        with Worker(worker_app, lease_ms=300, maintenance_interval=0.1, idle_wait=1.0) as w:
            wait_for(lambda: [x.id for x in admin.workers()] == [w.worker_id], 30, "announced")
            assert handles["ok"].result(timeout=30) == 42
            assert handles["flaky"].result(timeout=30) == 2
            assert handles["slow"].result(timeout=30) == "done"
            with pytest.raises(JobFailedError):
                handles["broken"].result(timeout=30)
        assert (w.stats.completed, w.stats.retried, w.stats.failed, w.stats.lost) == (3, 2, 1, 0)
        assert admin.workers() == []  # retired as it stopped
        info = admin.get_job(handles["slow"].id)
        assert info is not None and isinstance(info.job.state, Succeeded)
        assert info.job.attempt == 1  # the lease was renewed, never lost
    finally:
        for made in (producer, worker_app):
            made.client.redis.close()


def test_schedules_need_the_scheduler_role_beside_worker(
    users: Users, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker user alone runs its jobs but fires no schedule, and says so once; with the
    scheduler role too, its schedules fire."""
    admin = Quasar(users.admin, users.namespace)
    for roles, fires in ((["worker"], False), (["worker", "scheduler"], True)):
        made = App(users.url_of(users.make(roles)), namespace=users.namespace)
        made.schedule(made.task(lambda: None, name="beat"), every=0.05)
        ok = made.task(lambda: 1, name="ok")
        try:
            handle = App(users.url_of(users.make(["producer"])), namespace=users.namespace)
            job = handle.enqueue_many([ok.job()])[0]
            with Worker(made, maintenance_interval=0.1, idle_wait=0.2):
                assert job.result(timeout=30) == 1
                if fires:
                    wait_for(lambda: admin.schedules() or None, 30, "the schedule declared")
                    wait_for(lambda: admin.schedules()[0].last_job, 30, "a tick fired")
            refusals = [r for r in caplog.records if "may not fire periodic" in r.getMessage()]
            assert len(refusals) == 1  # the first worker's, said once (and no more by the second)
            assert bool(admin.schedules()) == fires
            handle.client.redis.close()
        finally:
            made.client.redis.close()


# --- one permission missing ----------------------------------------------------------------------

Scenario = Callable[[Quasar], Callable[[Quasar], Any]]


def _leased(a: Quasar, lease_ms: int = 60_000) -> Any:
    applied(a.enqueue("s", id="j"))
    return claimed(a.claim_job("j", "w", lease_ms)).token


def _failed(a: Quasar) -> None:
    applied(a.permanent_fail(_leased(a), "w", "broken"))


def _on(prepare: Callable[[Quasar], Any], then: Callable[[Quasar, Any], Any]) -> Scenario:
    def scenario(a: Quasar) -> Callable[[Quasar], Any]:
        got = prepare(a)
        return lambda u: then(u, got)

    return scenario


ENTRY = WorkerEntry("w1", "host", 1, ("default",), 1, (), "0")
LAPSED = WorkerEntry("w2", "host", 2, ("default",), 1, (), "0")
SCHEDULE = Schedule.of("sched", "s", every=60)
FAR = 4_000_000_000_000  # a "now" long after every lease and delay of the scenarios

#: For every operation: the state an admin makes, then the call the user makes, which applies.
SCENARIOS: dict[str, Scenario] = {
    "enqueue": _on(lambda a: None, lambda u, _: u.enqueue("s", id="n", dependencies=["d"])),
    # (a job with a deadline: the general way of the claim, not the plain one, which checks only
    # the commands it runs)
    "claim": _on(
        lambda a: a.enqueue("s", id="j", expires_in_ms=3_600_000),
        lambda u, _: u.claim("default", "w", 60_000),
    ),
    "claim_job": _on(lambda a: a.enqueue("s", id="j"), lambda u, _: u.claim_job("j", "w", 9_000)),
    "complete": _on(_leased, lambda u, tok: u.complete(tok, "w", result=1)),
    "fail": _on(_leased, lambda u, tok: u.fail(tok, "w", "boom")),
    "permanent_fail": _on(_leased, lambda u, tok: u.permanent_fail(tok, "w", "boom")),
    "heartbeat": _on(_leased, lambda u, tok: u.heartbeat(tok, "w", 60_000)),
    "report_progress": _on(_leased, lambda u, tok: u.report_progress(tok, "w", 50.0, "half")),
    "release": _on(_leased, lambda u, tok: u.release(tok, "w")),
    "report_many": _on(_leased, lambda u, tok: u.report_many("w", [Complete(tok)])),
    "report_and_claim": _on(
        _leased, lambda u, tok: u.report_and_claim("w", [Complete(tok)], "default", 9_000, 1)
    ),
    "expire": _on(lambda a: _leased(a, 100), lambda u, tok: u.expire("j", 1, now=FAR)),
    "sweep_expired": _on(lambda a: _leased(a, 100), lambda u, _: u.sweep_expired(now=FAR)),
    "promote_due": _on(
        lambda a: a.enqueue("s", id="j", delay_ms=60_000), lambda u, _: u.promote_due(now=FAR)
    ),
    "cancel": _on(lambda a: a.enqueue("s", id="j"), lambda u, _: u.cancel("j")),
    "retry": _on(_failed, lambda u, _: u.retry("j")),
    "change": _on(lambda a: a.enqueue("s", id="j"), lambda u, _: u.change("j", payload=2)),
    "resume_cascades": _on(lambda a: None, lambda u, _: u.resume_cascades(now=FAR)),
    "purge": _on(
        lambda a: (a.enqueue("s", id="j", now=1), a.cancel("j", now=1)),
        lambda u, _: u.purge("default", "cancelled", ["j"], now=FAR),
    ),
    "prune": _on(_failed, lambda u, _: u.prune(max_count=0, now=FAR)),
    "get_job": _on(lambda a: a.enqueue("s", id="j"), lambda u, _: u.get_job("j")),
    "dependencies": _on(
        lambda a: (a.enqueue("s", id="d"), a.enqueue("s", id="j", dependencies=["d"])),
        lambda u, _: u.dependencies("d"),
    ),
    "counts": _on(lambda a: a.enqueue("s", id="j"), lambda u, _: u.counts("default")),
    "list_jobs": _on(
        lambda a: a.enqueue("s", id="j"), lambda u, _: u.list_jobs("default", "available")
    ),
    "pause": _on(lambda a: a.enqueue("s", id="j"), lambda u, _: u.pause("default")),
    "resume": _on(
        lambda a: (a.enqueue("s", id="j"), a.pause("default")), lambda u, _: u.resume("default")
    ),
    "queues": _on(lambda a: a.enqueue("s", id="j"), lambda u, _: u.queues()),
    "announce": _on(lambda a: None, lambda u, _: u.execute(u.calls.announce(ENTRY, 60_000))),
    "retire": _on(
        lambda a: a.execute(a.calls.announce(ENTRY, 60_000)),
        lambda u, _: u.execute(u.calls.retire(ENTRY.id)),
    ),
    "declare_schedule": _on(lambda a: None, lambda u, _: u.declare_schedule(SCHEDULE, now=1)),
    "fire_schedule": _on(
        lambda a: a.declare_schedule(SCHEDULE, now=1),
        lambda u, _: u.fire_schedule(SCHEDULE, 60_000, now=60_001),
    ),
    "schedules": _on(lambda a: a.declare_schedule(SCHEDULE, now=1), lambda u, _: u.schedules()),
    "change_schedule": _on(
        lambda a: a.declare_schedule(SCHEDULE, now=1), lambda u, _: u.pause_schedule("sched")
    ),
    "set_limits": _on(
        lambda a: a.enqueue("s", id="j", group="g"),
        lambda u, _: u.set_limits("default", rate="5/s", group_concurrency=1),
    ),
    "flow": _on(
        lambda a: (a.enqueue("s", id="j", group="g"), a.set_limits("default", group_rate="1/s")),
        lambda u, _: u.flow("default"),
    ),
    "open_batch": _on(lambda a: None, lambda u, _: u.open_batch("b", on_complete=NewJob("cb"))),
    "close_batch": _on(
        lambda a: (
            a.open_batch("b", on_complete=NewJob("cb")),
            a.enqueue("s", id="j", batch="b"),
            a.cancel("j"),
        ),
        lambda u, _: u.close_batch("b"),
    ),
    "batch": _on(lambda a: a.open_batch("b"), lambda u, _: u.batch("b")),
    "batch_results": _on(
        lambda a: (a.open_batch("b"), a.enqueue("s", id="j", batch="b")),
        lambda u, _: u.batch_results("b"),
    ),
    "workers": _on(  # one live, one lapsed long ago (dropped: a write)
        lambda a: a.execute_many(
            [a.calls.announce(ENTRY, 60_000), a.calls.announce(LAPSED, 1_000, now=1)]
        ),
        lambda u, _: u.workers(),
    ),
}

# (not workers, which drops the entry that lapsed)
READING = (
    "get_job",
    "counts",
    "list_jobs",
    "queues",
    "schedules",
    "flow",
    "dependencies",
    "batch",
    "batch_results",
)
CASES = [(op, cmd) for op in names() for cmd in scripts()[op].uses]


def test_every_operation_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(names())


@pytest.mark.parametrize(("op", "cmd"), CASES, ids=[f"{op}-{cmd}" for op, cmd in CASES])
def test_a_user_missing_one_command_is_refused_and_nothing_changes(
    users: Users, op: str, cmd: str
) -> None:
    client_kind = ("sync", "async")[CASES.index((op, cmd)) % 2]  # both clients, alternately
    admin = Quasar(users.admin, users.namespace)
    if op == "enqueue":
        applied(admin.enqueue("s", id="d"))  # (a dependency: the enqueue reads a job)
    call = SCENARIOS[op](admin)
    user = users.make(list(ROLES), without=(f"+{cmd.lower()}",))
    with clients(client_kind, user) as make:
        u = make(users.namespace)
        before = snapshot(users.admin, users.namespace)
        if not CHECKED:  # Redis 6.2: refused where the call runs the command (if it does),
            with contextlib.suppress(PermissionDenied):  # never a script error
                call(u)
            return
        denied = refused(lambda: call(u), f"+{cmd.lower()}")
        assert cmd in str(denied)
        assert snapshot(users.admin, users.namespace) == before
        assert u.functions  # a refusal inside a function is no reason to give functions up
        users.grant(user, f"+{cmd.lower()}")
        result = call(u)  # the same call applies once the permission is there
        assert "Refused" not in type(result).__name__, result
        # (a cascade step with no work left, as here, writes nothing)
        assert snapshot(users.admin, users.namespace) != before or op in {
            *READING,
            "resume_cascades",
        }


# --- reads a script cannot make ------------------------------------------------------------------


def _keys_but(namespace: str, left_out: str) -> list[str]:
    """Key patterns of every kind of key of ``namespace`` but ``left_out`` (a misconfigured
    user: the check each call makes first, on the namespace's root, passes)."""
    root = f"quasar:{{{namespace}}}:"
    kinds = ["job:*", "dependents:*", "call:*", "q:*", "queues", "seq", "events"]
    return [f"~{root}"] + [f"~{root}{k}" for k in kinds if k != left_out]


def _claimed_once(users: Users) -> tuple[Quasar, Any]:
    """An admin client, and a claim it sent (of "a"; "b" is claimable too): to send again."""
    admin = Quasar(users.admin, users.namespace)
    applied(admin.enqueue("s", id="a"))
    applied(admin.enqueue("s", id="b"))
    first = admin.calls.claim("default", "w", 60_000)
    assert claimed(admin.execute(first)).job.id == "a"
    return admin, first


def test_a_resent_call_whose_record_cannot_be_read_is_refused_not_applied_twice(
    users: Users, kind: str
) -> None:
    admin, first = _claimed_once(users)
    blind = users.make(["worker"], keys=_keys_but(users.namespace, "call:*"))
    no_get = users.make(["worker"], without=("+get",))
    for user in (blind, no_get):
        with clients(kind, user) as make:
            u = make(users.namespace)
            before = snapshot(users.admin, users.namespace)
            refused(functools.partial(u.execute, first))  # re-sent: must not lease "b" as well
            assert snapshot(users.admin, users.namespace) == before
    assert admin.counts("default").executing == 1
    assert claimed(admin.execute(first)).job.id == "a"  # (and the record still answers)


def test_a_job_the_user_may_not_read_is_a_permission_error_not_a_wrong_type(
    users: Users, kind: str
) -> None:
    applied(Quasar(users.admin, users.namespace).enqueue("s", id="a"))
    with clients(kind, users.make(["reader"], keys=_keys_but(users.namespace, "job:*"))) as make:
        denied = refused(lambda: make(users.namespace).get_job("a"))
    assert "hash" not in str(denied) and "access" in str(denied)


# --- loading the scripts -------------------------------------------------------------------------


def test_a_user_that_may_not_load_the_library_is_told_to_ask_an_admin(
    users: Users, kind: str
) -> None:
    if not has_functions(users.admin):  # Redis 6.2: no library, and no user of functions alone
        with pytest.raises(ConfigurationError, match="--paths scripts"):
            users.make(["producer"], paths="functions")
        return
    users.admin.function_delete(library().name)  # a new version, or a restart without persistence
    producer = users.make(["producer"], paths="functions")
    with clients(kind, producer) as make:
        p = make(users.namespace)
        denied = refused(lambda: p.enqueue("s", id="a"), "+function|load")
        assert "quasar acl load" in str(denied)
        assert p.functions  # still: the library is an admin's to load
        assert snapshot(users.admin, users.namespace) == {}
        out = CliRunner().invoke(main, ["acl", "load", "--redis-url", users.url])
        assert out.exit_code == 0 and library().name in out.output, out.output
        applied(p.enqueue("s", id="a"))
        assert p.functions


def test_a_user_of_scripts_loads_them_itself(users: Users, kind: str) -> None:
    users.admin.script_flush()
    with clients(kind, users.make(["producer"], paths="scripts")) as make:
        p = make(users.namespace)
        applied(p.enqueue("s", id="a"))  # FCALL refused: scripts, loaded on NOSCRIPT
        assert not p.functions


def test_quasar_acl_load_as_a_user_that_may_not_is_one_line_and_exit_1(users: Users) -> None:
    url = users.url_of(users.make(["producer"]))
    out = CliRunner().invoke(main, ["acl", "load", "--redis-url", url])
    if not has_functions(users.admin):  # Redis 6.2: scripts alone, which any user may load
        assert out.exit_code == 0 and f"loaded {len(scripts())} scripts" in out.output, out.output
        return
    assert out.exit_code == 1 and "PermissionDenied" in out.output and "function|load" in out.output


def test_quasar_acl_setuser_apply_makes_a_user_that_works(users: Users) -> None:
    env = {"QUASAR_TEST_PASSWORD": "pw-" + uuid.uuid4().hex}
    name = f"u-{uuid.uuid4().hex[:8]}"
    users.names.append(name)
    args = ["acl", "setuser", name, "reader", "--namespace", users.namespace, "--apply"]
    args += ["--password-env", "QUASAR_TEST_PASSWORD", "--redis-url", users.url]
    out = CliRunner().invoke(main, args, env=env)
    assert out.exit_code == 0, out.output
    client = redis.Redis.from_url(users.url, username=name, password=env["QUASAR_TEST_PASSWORD"])
    try:
        assert Quasar(client, users.namespace).counts("default").available == 0
        with pytest.raises(PermissionDenied):
            Quasar(client, users.namespace).enqueue("s")
    finally:
        client.close()


def _unchecked(client: Any, q: Quasar, call: Any) -> Any:
    """``call`` sent as its script with no permission check up front, as on Redis 6.2 (where
    ``redis.acl_check_cmd`` is missing): each command is refused where the script runs it."""
    source = re.sub(
        r"run_call\(KEYS, ARGV, main, \{[^}]*\}\)",
        "run_call(KEYS, ARGV, main, {})",
        call.script.source,
    )
    keys = (q.keys.root, q.keys.events)
    try:
        return call.parse(client.eval(source, len(keys), *keys, *call.args))
    except redis.RedisError as exc:
        raise map_error(exc) from exc


def test_without_the_check_up_front_a_refused_read_is_named_and_nothing_changes(
    users: Users,
) -> None:
    admin, first = _claimed_once(users)
    before = snapshot(users.admin, users.namespace)
    no_get = users.make(["worker"], without=("+get",))
    users.grant(no_get, "+eval")
    denied = refused(lambda: _unchecked(no_get, admin, first))  # re-sent: no second lease
    assert "may not run a command, or use a key, that a script needs" in str(denied)
    assert denied.permission in (None, "+get")  # (Valkey names the command: Redis does not)
    no_hgetall = users.make(["reader"], without=("+hgetall",))
    users.grant(no_hgetall, "+eval")
    denied = refused(lambda: _unchecked(no_hgetall, admin, admin.calls.get_job("a", None)))
    assert "hash" not in str(denied)
    applied(admin.fail(claimed(admin.claim_job("b", "w", 60_000)).token, "w", "boom"))
    no_lrange = users.make(["reader"], without=("+lrange",))  # (b's failure history)
    users.grant(no_lrange, "+eval")
    refused(lambda: _unchecked(no_lrange, admin, admin.calls.get_job("b", None)))
    before = snapshot(users.admin, users.namespace)
    no_sismember = users.make(["worker"], without=("+sismember",))
    users.grant(no_sismember, "+eval")
    claim = admin.calls.claim("default", "w", 60_000)
    denied = refused(lambda: _unchecked(no_sismember, admin, claim))
    assert "expected a set" not in str(denied)
    assert snapshot(users.admin, users.namespace) == before


#: The commands a plain enqueue runs, in order (docs/redis-layout.md), and those it checks before
#: its first write: the commands that take its writes back.
_PLAIN = ("time", "exists", "incrby", "sadd", "hset", "zadd", "sismember", "rpush", "xadd")
_PLAIN_CHECKED = ("hdel", "ltrim", "set", "srem", "zrem")


@pytest.mark.parametrize("command", _PLAIN + _PLAIN_CHECKED)
def test_a_plain_enqueue_refused_a_command_on_its_way_takes_back_what_it_wrote(
    users: Users, kind: str, command: str
) -> None:
    # A plain enqueue checks only the commands of its undo up front; Redis refuses any other where
    # the call runs it, after the writes before it, which the call then takes back. The refusal
    # names the command (Redis 7+) as the check up front would, and nothing changes, on Redis
    # 6.2 as well.
    admin = Quasar(users.admin, users.namespace)
    applied(admin.enqueue("s", id="before"))  # (the namespace's keys exist: taken back to this)
    with clients(kind, users.make(["producer"], without=(f"+{command}",))) as make:
        p = make(users.namespace)
        before = snapshot(users.admin, users.namespace)
        if command in _PLAIN_CHECKED and not CHECKED:
            applied(p.enqueue("s", id="new"))  # (Redis 6.2: a command never run is not refused)
            return
        refused(lambda: p.enqueue("s", id="new"), f"+{command}")
        assert snapshot(users.admin, users.namespace) == before
        refused(lambda: p.enqueue("s", queue="other", priority=5), f"+{command}")
        assert snapshot(users.admin, users.namespace) == before
        if command in ("sismember", "rpush"):  # (a job due later wakes no one: never run)
            applied(p.enqueue("s", id="later", delay_ms=60_000))
        else:
            refused(lambda: p.enqueue("s", id="later", delay_ms=60_000), f"+{command}")
            assert snapshot(users.admin, users.namespace) == before
    assert admin.get_job("new") is None


#: The commands a plain claim runs (docs/redis-layout.md): its reads, then its writes.
_PLAIN_CLAIM = (
    *("time", "get", "sismember", "exists", "zrange", "hgetall"),
    *("xadd", "zrem", "hset", "zadd", "set"),
)


@pytest.mark.parametrize("command", _PLAIN_CLAIM)
def test_a_plain_claim_refused_a_command_it_runs_is_refused_whole(
    users: Users, kind: str, command: str
) -> None:
    # A plain claim checks the commands it writes with, each with its key, before its first write,
    # and reads with redis.pcall: a command refused either way sends the call the general way,
    # which refuses it whole, naming the command. On Redis 6.2, refused where it runs.
    admin = Quasar(users.admin, users.namespace)
    applied(admin.enqueue("s", id="j"))
    with clients(kind, users.make(["worker"], without=(f"+{command}",))) as make:
        w = make(users.namespace)
        before = snapshot(users.admin, users.namespace)
        if not CHECKED:
            with contextlib.suppress(PermissionDenied):
                w.claim("default", "w", 60_000)
            return
        refused(lambda: w.claim("default", "w", 60_000), f"+{command}")
        assert snapshot(users.admin, users.namespace) == before


def test_a_plain_claim_needs_no_command_it_does_not_run(users: Users, kind: str) -> None:
    # What the general way of a claim may run but a plain claim does not (expiring run-out leases,
    # promoting due jobs) is no reason to refuse it; a claim that needs one goes the general way
    # and is refused there.
    admin = Quasar(users.admin, users.namespace)
    applied(admin.enqueue("s", id="j"))
    applied(admin.enqueue("s", id="later", expires_in_ms=3_600_000))
    with clients(kind, users.make(["worker"], without=("+del", "+zrangebyscore"))) as make:
        w = make(users.namespace)
        assert claimed(w.claim("default", "w", 60_000)).job.id == "j"
        # ... nor to a claim of a queue with nothing in it (its reads alone: nothing to lease)
        assert w.claim("idle", "w", 60_000) == ClaimRefused(NothingClaimable(None))
        before = snapshot(users.admin, users.namespace)
        if CHECKED:
            refused(lambda: w.claim("default", "w", 60_000), "+del")  # (a deadline: general)
            assert snapshot(users.admin, users.namespace) == before


def test_a_worker_may_not_enqueue_count_or_list(users: Users, kind: str) -> None:
    applied(Quasar(users.admin, users.namespace).enqueue("s", id="a"))
    with clients(kind, users.make(["worker"])) as make:
        w = make(users.namespace)
        before = snapshot(users.admin, users.namespace)
        refused(lambda: w.enqueue("s", id="b"), "+incrby")
        refused(lambda: w.counts("default"), "+zcount")
        refused(lambda: w.list_jobs("default", "available"), "+hget")
        assert snapshot(users.admin, users.namespace) == before


def test_load_scripts_loads_the_library_and_every_script(users: Users, kind: str) -> None:
    functions = has_functions(users.admin)  # (Redis 6.2: the scripts alone)
    if functions:
        users.admin.function_delete(library().name)
    users.admin.script_flush()
    with clients(kind, users.admin) as make:
        make(users.namespace).load_scripts()
        make(users.namespace).load_scripts()  # again: harmless
    assert not functions or users.admin.function_list(library=library().name)
    assert all(users.admin.script_exists(*(s.sha for s in scripts().values())))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["acl", "load"], "needs --redis-url"),
        (["acl", "setuser", "u", "reader", "--namespace", "a", "--apply"], "needs --redis-url"),
        (["acl", "setuser", "u", "reader", "--namespace", "a{b}"], "namespace"),
        (["acl", "setuser", "u", "reader", "--namespace", "a", "--paths", "all"], "'all'"),
        (
            ["acl", "setuser", "u", "reader", "--namespace", "a", "--password-env", "NOPE_X"],
            "NOPE_X",
        ),
    ],
)
def test_quasar_acl_mistakes_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    out = CliRunner().invoke(
        main, args, env=dict.fromkeys(("QUASAR_REDIS_URL", "REDIS_URL", "QUASAR_NAMESPACE"))
    )
    assert out.exit_code == 2 and says in out.output, out.output


def test_the_roles_table_of_the_docs_is_the_roles_data() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \|.*\| `([^`]+)` \|$", text, re.MULTILINE)
    documented = {name: tuple(cmds.replace("\\|", "|").split()) for name, cmds in rows}
    assert documented == {r.name: tuple(c.lower() for c in r.commands) for r in ROLES.values()}


def test_the_setuser_example_of_the_docs_is_what_quasar_acl_setuser_prints() -> None:
    # docs/security.md, "Creating the users": the command as given there, with the password
    # "secret"; the doc shortens the hash of the password to its first four digits.
    text = (Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()
    example = re.search(r"^```console\n\$ quasar (acl setuser .*)\n(.*)\n```$", text, re.MULTILINE)
    assert example, "docs/security.md has no quasar acl setuser example"
    out = CliRunner().invoke(main, example[1].split(), env={"WORKER_PASSWORD": "secret"})
    assert out.exit_code == 0, out.output
    printed = re.sub(r"'#([0-9a-f]{4})[0-9a-f]{60}'", "'#\\1…'", out.stdout.strip())
    assert example[2] == printed, f"docs/security.md should show:\n{printed}"


# What the package sends outside the scripts: redis-py methods called on a redis-py client, and
# commands spelled out. The demo and the example clean up their throwaway namespaces (SCAN, DEL)
# as whatever user runs them, and moving a namespace's keys (quasar migrate-keys) is an admin's;
# the rest is a role's, loading, or optional where refused.
OPTIONAL_DIRECT = {"CONFIG|GET"}  # the eviction-policy check: skipped where refused
LOADING = {"FUNCTION|LOAD", "SCRIPT|LOAD", "FCALL", "EVALSHA"}
# A partitioned namespace's record: GET by a client given partitions (rules(partitions=) grant
# it), SET NX by the first one (the scripts' roles have SET; a reader's namespace is an admin's)
RECORD = {"GET", "SET"}
NOT_A_ROLES = ("demo.py", "example.py", "_demo_jobs.py", "acl.py", "_migrate.py")  # (acl.py: data)
NOT_COMMANDS = {"DEBUG", "INFO"}  # (the command line's log levels)
CONTAINERS = ("CLIENT", "CONFIG", "FUNCTION", "SCRIPT", "CLUSTER", "ACL")
_CALLED = re.compile(r"\b(?:redis|client|conn|connection)\.([a-z_]+)\(|Ask\(\s*\"([a-z_]+)\"")
_SPELLED = re.compile(r'\(\s*"([A-Z]{3,})"(?:\s*,\s*"([A-Z]+)")?')


def _command_of(name: str) -> str:
    """``config_get`` -> CONFIG|GET, ``CLIENT ID`` -> CLIENT|ID, ``xread`` -> XREAD."""
    first, _, rest = name.upper().replace(" ", "_").partition("_")
    return f"{first}|{rest}" if first in CONTAINERS and rest else name.upper()


def _direct_commands(known: set[str]) -> dict[str, set[str]]:
    """Each Redis command (of ``known``) the package sends itself, with the files sending it."""
    package = Path(__file__).resolve().parent.parent / "quasar_redis"
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        if path.name in NOT_A_ROLES:
            continue
        text = path.read_text()
        names = {a or b for a, b in _CALLED.findall(text) if hasattr(redis.Redis, a or b)}
        names |= {f"{a} {b}" if a in CONTAINERS else a for a, b in _SPELLED.findall(text)}
        for command in map(_command_of, names):
            if command.split("|")[0] in known and command not in NOT_COMMANDS:
                found.setdefault(command, set()).add(path.name)
    return found


def test_every_command_the_package_sends_itself_is_a_roles(private_server: RedisServer) -> None:
    admin: Any = redis.Redis.from_url(private_server.url)
    known = {str(c).upper() for c in admin.command()}  # (COMMAND LIST: Redis 7+)
    admin.close()
    sent = _direct_commands(known)
    granted = {c for role in ROLES.values() for c in role.direct} | OPTIONAL_DIRECT | LOADING
    granted |= RECORD
    assert {c: files for c, files in sent.items() if c not in granted} == {}
    assert {"BLPOP", "CLIENT|ID", "CLIENT|UNBLOCK", "PING", "XREAD", "XREVRANGE"} <= set(sent)


def test_what_each_role_can_run_beyond_its_own_is_what_the_docs_say() -> None:
    # (docs/security.md, "What a role cannot stop": Redis grants commands, not scripts)
    beyond = {
        role.name: {
            name
            for name, script in scripts().items()
            if set(script.uses) <= set(role.in_scripts) and name not in role.operations
        }
        for role in ROLES.values()
    }
    lease_calls = {"claim_job", "complete", "fail", "permanent_fail", "heartbeat"}
    lease_calls.add("report_progress")
    assert beyond == {
        "producer": {
            *("claim_job", "heartbeat", "report_progress", "release", "retry", "pause"),
            *("declare_schedule", "batch_results"),
        },
        "worker": {
            *("cancel", "change", "retry", "pause", "purge", "change_schedule"),
            *("schedules", "workers"),
        },
        "scheduler": {
            *("change", "claim_job", "enqueue", "heartbeat", "release", "retry", "pause"),
            *("change_schedule", "schedules", "open_batch", "close_batch", "batch"),
            "report_progress",
        },
        "operator": lease_calls
        | {"release", "report_many", "retire", "declare_schedule", "close_batch"},
        "reader": set(),
    }
