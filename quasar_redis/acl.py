"""Least-privilege Redis users: the ACL rules of each role, for one namespace or several.

A role is the operations (scripts) its users call and every Redis command they run, inside
those scripts and from the client itself; ``rules`` turns roles into ``ACL SETUSER`` rules whose
keys are those of the namespace (``~<key root>*``) and whose commands are those listed, nothing
more (``-@all``, no pub/sub channels). docs/security.md explains each role; ``quasar acl
setuser`` prints the command. A role lists its operations; the commands they run are read from
their scripts (``Script.uses``), so a new script needs its name in a role and nothing else here.
The commands of each role are also written out in docs/security.md, to be read and reviewed:
tests/test_acl.py checks that table against these roles, so a script that starts running a new
command changes what its roles grant only with that table.

How the scripts reach Redis decides the rest (``paths``):

- ``functions`` (Redis 7+): ``+fcall``. Loading the library (``FUNCTION LOAD``) is an admin's:
  a library is server-wide, and whoever may load one may replace another's. An admin loads it
  once per version of quasar_redis (``quasar acl load``, or ``load_scripts()`` on a client);
  Redis keeps it with the data.
- ``scripts`` (Redis 6.2, Redis Cluster clients, ``functions=False``): ``+evalsha`` and
  ``+script|load``. A script runs with its caller's permissions, so loading one grants nothing;
  Redis forgets scripts on a restart and the client loads them again on ``NOSCRIPT``.
- ``both`` (the default): either, as the server allows. A server without functions refuses
  ``+fcall`` in ``ACL SETUSER``: ``scripts_instead`` says to send the rules of ``scripts`` then.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ._keys import KeySpace
from ._partitions import check_partitions
from ._scripts import scripts
from .errors import ConfigurationError

Paths = Literal["functions", "scripts", "both"]

PATHS: dict[str, tuple[str, ...]] = {
    "functions": ("FCALL",),
    "scripts": ("EVALSHA", "SCRIPT|LOAD"),
    "both": ("FCALL", "EVALSHA", "SCRIPT|LOAD"),
}

#: What a Redis Cluster client (``redis.cluster.RedisCluster``) sends itself: the slot map at
#: start and after a move (CLUSTER SLOTS / SHARDS), the commands' key positions (COMMAND), and
#: ASKING while a slot migrates.
CLUSTER = ("ASKING", "CLUSTER|SHARDS", "CLUSTER|SLOTS", "COMMAND")


@dataclass(frozen=True, slots=True)
class Role:
    """What the users of one role do, and the Redis commands it takes.

    ``operations``: the scripts (``lua/<name>.lua``) they call; ``direct``: the commands the
    client sends itself."""

    name: str
    summary: str
    operations: tuple[str, ...]
    direct: tuple[str, ...]

    @property
    def in_scripts(self) -> tuple[str, ...]:
        """Every command the role's scripts may run, sorted (read from their sources)."""
        found = scripts()
        return tuple(sorted({c for op in self.operations for c in found[op].uses}))

    @property
    def commands(self) -> tuple[str, ...]:
        """Every Redis command the role runs, sorted."""
        return tuple(sorted(set(self.in_scripts) | set(self.direct)))


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "producer",
            "enqueues jobs (enqueue, enqueue_many, the task API, a schedule's trigger), changes "
            "those waiting to run (change) and reads them back, awaiting their results; opens, "
            "fills and closes batches and reads them",
            _words("enqueue change get_job fire_schedule open_batch close_batch batch"),
            # durable mode: WAIT behind each write; ASKING before a call sent to a slot's
            # importing node during a migration
            _words("ASKING PING WAIT XREAD XREVRANGE"),
        ),
        Role(
            "worker",
            "runs a Worker: claims jobs, keeps their leases, reports outcomes, promotes due "
            "jobs, recovers expired leases, prunes finished jobs, announces itself in the "
            "worker registry",
            _words(
                "claim claim_job heartbeat report_progress complete fail permanent_fail release "
                "report_many report_and_claim expire sweep_expired promote_due prune get_job "
                "announce retire resume_cascades dependencies batch batch_results"
            ),
            # idle workers wait on their queues' wake lists (BLPOP), wake each other (RPUSH),
            # and add what they counted to the dashboard's rolling store (HINCRBY, EXPIRE)
            # and end their own wait early at shutdown (CLIENT ID, CLIENT UNBLOCK); durable
            # mode as the producer's
            _words("ASKING BLPOP CLIENT|ID CLIENT|UNBLOCK EXPIRE HINCRBY PING RPUSH TIME WAIT"),
        ),
        Role(
            "scheduler",
            "declares and fires periodic schedules (docs/schedules.md) and declares the app's "
            "queue limits (docs/flow-control.md): give it, besides worker, to the workers of an "
            "app with schedules or limits (firing a tick enqueues a job)",
            _words("declare_schedule fire_schedule set_limits"),
            _words("ASKING PING WAIT"),
        ),
        Role(
            "operator",
            "inspects (get_job, dependencies, counts, list_jobs, queues, workers, schedules, flow, "
            "events), "
            "changes waiting jobs, cancels, retries, expires, sweeps, promotes, prunes, pauses and "
            "resumes queues, sets their limits; pauses, resumes and removes schedules; does not "
            "enqueue (so not trigger a schedule)",
            _words(
                "get_job counts list_jobs change cancel resume_cascades retry expire "
                "sweep_expired promote_due prune purge pause resume queues workers schedules "
                "change_schedule set_limits flow dependencies batch batch_results"
            ),
            # the dashboard's audit of each action it takes: an entry of the event stream (XADD)
            _words("ASKING EXISTS HGETALL PING SCARD SMEMBERS SSCAN WAIT XADD XREAD XREVRANGE"),
        ),
        Role(
            "reader",
            "reads only (get_job, dependencies, counts, list_jobs, queues, schedules, flow, "
            "batches, events): dashboards and monitoring; not workers(), which drops lapsed "
            "entries of the registry (a write)",
            _words(
                "get_job counts list_jobs queues schedules flow dependencies batch batch_results"
            ),
            _words("EXISTS HGETALL PING SCARD SMEMBERS SSCAN XREAD XREVRANGE"),
        ),
    )
}


def role(name: str) -> Role:
    """The role ``name``; ConfigurationError naming the roles there are for any other."""
    found = ROLES.get(name)
    if found is None:
        raise ConfigurationError(f"unknown role {name!r}: one of {', '.join(ROLES)}")
    return found


def key_pattern(namespace: str, *, tag: str = "", key_prefix: str = "quasar") -> str:
    """The ACL key pattern of a namespace: every key it has, and no key of another."""
    return f"~{KeySpace(namespace, tag, key_prefix).root}*"


def partition_patterns(
    namespace: str, partitions: int, *, tag: str = "", key_prefix: str = "quasar"
) -> list[str]:
    """The ACL key patterns of a namespace of ``partitions`` partitions: its own root (its
    record of partitions, its worker registry) and each partition's (docs/scaling.md)."""
    keys = KeySpace(namespace, tag, key_prefix)
    return [key_pattern(namespace, tag=tag, key_prefix=key_prefix)] + [
        f"~{keys.part(i).root}*" for i in range(partitions)
    ]


def _patterns(namespace: str, partitions: int | None, tag: str, key_prefix: str) -> list[str]:
    if partitions is None or partitions == 1:  # (one partition: the record is under its root)
        return [key_pattern(namespace, tag=tag, key_prefix=key_prefix)]
    return partition_patterns(namespace, partitions, tag=tag, key_prefix=key_prefix)


def rules(
    roles: Iterable[str],
    namespaces: Iterable[str],
    *,
    tag: str = "",
    key_prefix: str = "quasar",
    paths: Paths = "both",
    cluster: bool = False,
    partitions: int | None = None,
) -> list[str]:
    """``ACL SETUSER`` rules (after the user name) giving the union of ``roles`` over the keys
    of ``namespaces``, and nothing else: no other key, command or channel. ``cluster``: also
    what a Redis Cluster client needs (``CLUSTER``); set the user on every node.
    ``partitions``: the namespaces' number of partitions: each partition's keys, and ``GET`` to
    read the record of them (which an admin writes: the user may not)."""
    chosen = [role(name) for name in roles]
    spaces = list(namespaces)
    if not chosen or not spaces:
        raise ConfigurationError("rules need at least one role and one namespace")
    if paths not in PATHS:
        raise ConfigurationError(f"paths must be one of {', '.join(PATHS)}: got {paths!r}")
    count = check_partitions(partitions)
    extra = set(PATHS[paths]) | set(CLUSTER if cluster else ()) | ({"GET"} if count else set())
    commands = sorted({c for r in chosen for c in r.commands} | extra)
    keys = [pattern for ns in spaces for pattern in _patterns(ns, count, tag, key_prefix)]
    return ["resetkeys", *keys, "resetchannels", "-@all", *(f"+{c.lower()}" for c in commands)]


def setuser(
    user: str,
    roles: Sequence[str],
    namespaces: Sequence[str],
    *,
    password: str | None = None,
    tag: str = "",
    key_prefix: str = "quasar",
    paths: Paths = "both",
    cluster: bool = False,
    partitions: int | None = None,
) -> list[str]:
    """The whole ``ACL SETUSER`` command (its words) for a new user of ``roles``: ``reset``
    first, so that nothing it held before remains; the password stored as its SHA-256 only
    (none given: add one, ``>password``, before the user can log in)."""
    if not user or any(ch.isspace() for ch in user):
        raise ConfigurationError(f"a user name is one word: got {user!r}")
    secret = [] if password is None else ["#" + hashlib.sha256(password.encode()).hexdigest()]
    found = rules(
        roles,
        namespaces,
        tag=tag,
        key_prefix=key_prefix,
        paths=paths,
        cluster=cluster,
        partitions=partitions,
    )
    return ["ACL", "SETUSER", user, "reset", "on", *secret, *found]


def scripts_instead(refusal: BaseException, paths: Paths) -> bool:
    """Whether ``ACL SETUSER`` refused the rules of ``paths`` for naming FCALL, which a server
    without functions (Redis before 7) does not know: then the rules of ``scripts`` are what it
    takes for ``both``; for ``functions`` there are none (``ConfigurationError``)."""
    text = str(refusal).lower()
    if "'+fcall'" not in text or "unknown command" not in text:
        return False
    if paths == "functions":
        raise ConfigurationError(
            "this Redis has no functions (FCALL: Redis 7+ and Valkey): use --paths scripts"
        )
    return True
