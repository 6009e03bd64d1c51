"""Every Redis key name of quasar_redis, built in one place (mirrored by ``lua/include/core.lua``).

All keys of a namespace start with its root, ``<prefix>:{<namespace>}:``; the hash tag puts them
in one cluster slot, so every script touches one slot. A namespace given a ``tag`` of its own
keeps its keys under ``<prefix>:{<tag>}/<namespace>:``: in the tag's slot, and still its own.

No two namespaces share a key. A name holds none of ``: { } /``, so a root reads one way only
(the prefix up to the first ``:``, the tag up to the first ``}``, then either ``:``, which ends an
untagged root, or ``/``, the namespace and ``:``, which ends a tagged one): of two different roots
neither starts the other, and as every key is its root and a suffix, a key starts one root only.
A partition of a partitioned namespace has its own hash tag, the base tag (the namespace or
its ``tag``), ``/`` and the partition's number: ``<prefix>:{<namespace>/<i>}:`` or
``<prefix>:{<tag>/<i>}/<namespace>:``. No name holds ``/``, so no partition's tag is another
namespace's, and ``}`` ends each number: no partition's root starts another's.
A name holds none of Redis's glob characters either (``*``, ``?``, ``[``, ``]``, the backslash),
so ``<root>*`` is a faithful ACL key pattern or SCAN match: one namespace's keys, no other's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ConfigurationError

# No ': { } /' and no glob character: the isolation above rests on it, so never widen it. (\Z,
# not $, which lets a final newline through.)
NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}\Z")
#: How every key suffix begins (here and in lua/): a word of ``FAMILIES`` and ``:`` then a name
#: or id, or a word of ``SINGLES`` alone. tests/test_keys.py holds the Lua's key builders to them.
FAMILIES = (
    "batch",
    "call",
    "cascade",
    "dependents",
    "errors",
    "job",
    "members",
    "q",
    "schedule",
    "stats",
    "unique",
    "worker",
)
SINGLES = (
    "batches_done",
    "cascades",
    "events",
    "partitions",
    "paused",
    "queues",
    "schedules",
    "seq",
    "workers",
)
QUEUE_SETS = (
    "ready",
    "delayed",
    "delayed_pr",  # the same jobs by priority, for the claims (lua/promote_due.lua promote_best)
    "retrying",
    "leased",
    "blocked",
    "succeeded",
    "failed",
    "cancelled",
    "expiring",  # Succeeded jobs with a result retention, by when they may be deleted
    "expired",  # Expired jobs (never started by their deadline), by when they expired
    "deadlines",  # waiting jobs never started that have a deadline, by it
)


def check_name(value: str, what: str) -> str:
    """Return ``value`` if it is a safe name (1-64 of letters, digits, ``_ . -``), else raise."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ConfigurationError(
            f"{what} must be 1-64 characters of letters, digits, '_', '.', '-': got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Key names of one namespace (and partition tag), or of one partition of it."""

    namespace: str
    tag: str = ""
    prefix: str = "quasar"
    #: None: the namespace's one root; a number: that partition's (docs/scaling.md)
    partition: int | None = None

    def __post_init__(self) -> None:
        check_name(self.namespace, "namespace")
        check_name(self.prefix, "key prefix")
        if self.tag:
            check_name(self.tag, "tag")
        part = self.partition
        if part is not None and (type(part) is not int or part < 0):
            raise ConfigurationError(f"a partition is a number from 0: got {part!r}")

    @property
    def root(self) -> str:
        """The prefix every key of the namespace starts with; passed to scripts as KEYS[1]."""
        tagged = self.tag and self.tag != self.namespace
        base = self.tag if tagged else self.namespace
        if self.partition is not None:
            base = f"{base}/{self.partition}"
        if tagged:
            return f"{self.prefix}:{{{base}}}/{self.namespace}:"
        return f"{self.prefix}:{{{base}}}:"

    def part(self, partition: int) -> KeySpace:
        """The keys of one partition of this namespace."""
        return KeySpace(self.namespace, self.tag, self.prefix, partition)

    @property
    def partitions(self) -> str:
        """The namespace's record of its number of partitions (at the unpartitioned root)."""
        return f"{KeySpace(self.namespace, self.tag, self.prefix).root}partitions"

    def job(self, job_id: str) -> str:
        return f"{self.root}job:{job_id}"

    def errors(self, job_id: str) -> str:
        """The list of a job's last failed attempts."""
        return f"{self.root}errors:{job_id}"

    def dependents(self, job_id: str) -> str:
        return f"{self.root}dependents:{job_id}"

    def call(self, call_id: str) -> str:
        return f"{self.root}call:{call_id}"

    def queue(self, queue: str, what: str) -> str:
        if what not in QUEUE_SETS:
            raise ValueError(f"unknown queue structure {what!r}")
        return f"{self.root}q:{queue}:{what}"

    @property
    def cascades(self) -> str:
        """The roots (call ids) with cascade work left."""
        return f"{self.root}cascades"

    def cascade(self, root: str, job_id: str | None = None) -> str:
        """A cascade root's items, or with ``job_id`` that parent's dependents left to visit."""
        items = f"{self.root}cascade:{root}"
        return items if job_id is None else f"{items} {job_id}"

    @property
    def queues(self) -> str:
        return f"{self.root}queues"

    @property
    def seq(self) -> str:
        return f"{self.root}seq"

    @property
    def events(self) -> str:
        """The capped stream every state change is appended to."""
        return f"{self.root}events"

    def stats(self, bucket: int) -> str:
        """The hash of the workers' counts for one time bucket (``_rolling``), kept briefly."""
        return f"{self.root}stats:{bucket}"

    def wake(self, queue: str) -> str:
        """The list idle workers of ``queue`` block on; scripts push a token when jobs get ready."""
        return f"{self.root}q:{queue}:wake"

    @property
    def paused(self) -> str:
        """The set of the namespace's paused queues."""
        return f"{self.root}paused"

    @property
    def workers(self) -> str:
        """The worker registry: live worker ids, scored by when their entry lapses."""
        return f"{self.root}workers"

    def unique(self, key: str) -> str:
        """A dedup key's entry: the id of the job holding it (docs/deduplication.md)."""
        return f"{self.root}unique:{key}"

    def worker(self, worker_id: str) -> str:
        """A live worker's hash (it lapses unless the worker announces itself again)."""
        return f"{self.root}worker:{worker_id}"

    def schedule(self, name: str) -> str:
        """A periodic schedule's hash (docs/schedules.md)."""
        return f"{self.root}schedule:{name}"

    @property
    def schedules(self) -> str:
        """The namespace's periodic schedules by name, scored by their next tick."""
        return f"{self.root}schedules"

    def batch(self, batch_id: str) -> str:
        """A batch's hash: its counts, closed flag and callbacks (docs/workflows.md)."""
        return f"{self.root}batch:{batch_id}"

    def members(self, batch_id: str) -> str:
        """A batch's member ids, in the order they were added."""
        return f"{self.root}members:{batch_id}"

    @property
    def batches_done(self) -> str:
        """The ids of the batches done (closed, every member ended), scored by when each became
        done: what prune deletes past its max age."""
        return f"{self.root}batches_done"
