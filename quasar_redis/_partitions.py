"""Partitioned namespaces: where a job goes, and how the results of several partitions merge.

A namespace of P partitions keeps each partition's keys under a hash tag of its own
(``_keys.KeySpace.part``), so that they spread over a Redis Cluster's slots; every transition is
still one script on one partition. P is recorded in the namespace's ``partitions`` key when the
first client made with ``partitions=P`` meets it (docs/scaling.md).

Routing is a pure function of a job's id, so any client finds a job without a lookup:

- An id made by the client for partition ``k`` starts with ``k~`` (``3~9f2c04d1b7a6e580``); an id
  starting with a number below P and ``~`` is in that partition, whoever made it.
- Any other id is in partition ``crc32(id) mod P`` (zlib's CRC-32 of its UTF-8 bytes).
- A flow key puts a job in partition ``crc32(flow) mod P``, the partition of a job whose id is
  the flow key itself; its dependencies must be there too (``CrossPartition`` otherwise).
- A job's flow group is its flow key when it has none: every job of a group is in one partition,
  where the group's turns, rates, cap and holds are kept whole. A job with both names them in
  one partition (``CrossPartition``, naming the group, otherwise).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import re
import zlib
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeAlias

from . import _types as t
from ._args import Arg, int_arg
from ._call_base import NewJob, dependency_id
from ._dedup import dedup_key
from ._flow import KEEP, WINDOW_MAX_MS, FlowInfo, GroupFlow, Rate
from ._ids import id_error
from ._keys import KeySpace
from ._replies import parse_jobs
from ._schema import DEFAULTS, KEY
from .errors import ConfigurationError, InvalidArgument, PartitionMismatch

#: At most this many partitions: a partition per primary of the largest clusters, and a few more.
MAX_PARTITIONS = 1024
_MADE = re.compile(r"([0-9]{1,4})~")


def check_partitions(value: object) -> int | None:
    """``value`` if it is a number of partitions (1 to ``MAX_PARTITIONS``) or None, else raise."""
    if value is None:
        return None
    if type(value) is not int or not 1 <= value <= MAX_PARTITIONS:
        raise ConfigurationError(
            f"partitions must be a whole number from 1 to {MAX_PARTITIONS}: got {value!r}"
        )
    return value


def checking_record(
    keys: KeySpace, partitions: int | None, mapped: Callable[[BaseException], BaseException]
) -> Generator[Any, Any, None]:
    """A client's check of the namespace's record of its partitions (a flow of ``_sending``),
    writing it on a new namespace: a client of another number of partitions raises
    ``PartitionMismatch``, sending nothing more (``mapped``: a failure as the client raises it)."""
    key = keys.partitions
    reply = yield ("GET", key)
    if reply is None:
        reply = yield ("SET", key, str(partitions), "NX")
        if not isinstance(reply, Exception):
            reply = yield ("GET", key)
    if isinstance(reply, Exception):
        raise mapped(reply) from reply
    recorded = reply.decode("ascii", "replace") if isinstance(reply, bytes) else str(reply)
    if recorded != str(partitions):
        raise PartitionMismatch(
            f"namespace {keys.namespace!r} has {recorded} partitions by its record ({key});"
            f" this client was made with partitions={partitions}"
        )


def recorded(reply: Any) -> int | None:
    """The number of partitions a namespace's record holds (its GET reply), for a reader that
    takes the namespace as it is (the CLI, the dashboard); None for no record."""
    if reply is None:
        return None
    text = reply.decode("ascii", "replace") if isinstance(reply, bytes) else str(reply)
    if not text.isdigit() or not 1 <= int(text) <= MAX_PARTITIONS:
        raise PartitionMismatch(f"the namespace's record of partitions holds {text!r}")
    return int(text)


def hashed(text: str, count: int) -> int:
    """``text``'s partition of ``count`` by its CRC-32."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % count


def partition_of(job_id: object, count: int) -> int:
    """The partition of ``count`` that holds the job ``job_id`` (0 for what is no id: the call
    is refused before it is sent)."""
    if isinstance(job_id, bytes):
        job_id = job_id.decode("utf-8", "surrogateescape")
    if not isinstance(job_id, str):
        return 0
    made = _MADE.match(job_id)
    if made is not None and int(made.group(1)) < count:
        return int(made.group(1))
    return hashed(job_id, count)


def group_of(job: NewJob) -> Any:
    """``job``'s flow group, None for none (an empty group is none, as the enqueue takes it)."""
    group: Any = job.group
    return None if group is None or group in ("", b"") else group


def group_partition(group: str | bytes, count: int) -> int:
    """The partition of ``count`` that holds every job of the flow group ``group`` (and its
    flow state: its turns, rates, cap and holds): the partition of that flow key."""
    return hashed(group if isinstance(group, str) else group.decode(), count)


def _flow_target(flow: Any, group: Any, count: int) -> int | t.JobError | None:
    """The partition a job's flow key names, or without one its group's (None: neither), or
    why not: a key that is no id, a group of another partition than the flow key's."""
    for key, what in ((flow, "flow"), (group, "group")):
        bad = None if key is None else id_error(key, what)
        if bad is not None:
            return t.InvalidJob(bad)
    if flow is None:
        return None if group is None else group_partition(group, count)
    target = hashed(flow if isinstance(flow, str) else flow.decode(), count)
    if group is not None and group_partition(group, count) != target:
        name = group if isinstance(group, str) else group.decode()
        return t.CrossPartition(name, group_partition(group, count), target)
    return target


def made_in(batch_id: object, count: int) -> bool:
    """Whether ``batch_id`` starts with the partition it lives in (``<k>~``, k below
    ``count``): on a partitioned namespace a batch's callbacks (``<batch id>@<kind>``) must be
    found by their id in the batch's partition."""
    made = _MADE.match(batch_id) if isinstance(batch_id, str) else None
    return made is not None and int(made.group(1)) < count


def _batch_target(batch: Any, target: int | None, count: int) -> int | t.JobError | None:
    """The partition of a batch member: its batch's (docs/workflows.md, "Batches"), which its
    flow key or group, if given, must name too."""
    if batch is None or id_error(batch, "batch") is not None:
        return target  # (no batch, or none the call will take: refused there)
    where = partition_of(batch, count)
    if target is not None and target != where:
        return t.CrossPartition(batch if isinstance(batch, str) else batch.decode(), where, target)
    return where


def placement(job: NewJob, count: int) -> int | t.JobError | None:
    """The partition ``job`` goes to (None: any, its id made there), or why it cannot go
    anywhere: a flow key or a group that is no id (``InvalidJob``), a group of another
    partition than its flow key's, an id or a dependency of another partition than its flow
    key's (its group's, without one) or its first dependency's (``CrossPartition``). Ids that
    are no ids are left to the call to refuse. A job with none of them but a dedup key goes
    where its key hashes, so that the jobs of one key meet in one partition."""
    named = [dependency_id(d) for d in job.dependencies]
    if job.id is not None:
        named.insert(0, job.id)
    named = [n for n in named if id_error(n) is None]
    target = _flow_target(job.flow, group_of(job), count)
    if not isinstance(target, int | None):
        return target
    target = _batch_target(job.batch, target, count)
    if not isinstance(target, int | None):
        return target
    if target is None and named:
        target = partition_of(named[0], count)
    elif target is None and job.dedup is not None:
        key = dedup_key(job)
        return None if key is None else hashed(key, count)
    elif target is None:
        return None
    for name in named:
        where = partition_of(name, count)
        if where != target:
            text = name if isinstance(name, str) else name.decode()
            return t.CrossPartition(text, where, target)
    return target


# --- merging what the partitions answer ---------------------------------------------------------


def sum_counts(results: Sequence[t.QueueCounts]) -> t.QueueCounts:
    """One queue's counts over every partition (``now``: the latest partition's)."""
    first, names = results[0], [f.name for f in dataclasses.fields(t.QueueCounts)]
    totals = {n: sum(getattr(r, n) for r in results) for n in names if n != "now"}
    return dataclasses.replace(first, now=max(r.now for r in results), **totals)


def merge_queues(results: Sequence[list[t.QueueInfo]]) -> list[t.QueueInfo]:
    """Every queue of any partition, by name: counts summed, paused if paused in any."""
    by_name: dict[str, list[t.QueueInfo]] = {}
    for infos in results:
        for info in infos:
            by_name.setdefault(info.name, []).append(info)
    return [
        t.QueueInfo(name, sum_counts([i.counts for i in got]), any(i.paused for i in got))
        for name, got in sorted(by_name.items())
    ]


def merge_sweeps(results: Sequence[t.SweepReport]) -> t.SweepReport:
    return t.SweepReport(
        tuple(i for r in results for i in r.expired),
        tuple(i for r in results for i in r.damaged),
        tuple(i for r in results for i in r.past_deadline),
    )


def merge_cascades(results: Sequence[t.CascadeReport]) -> t.CascadeReport:
    return t.CascadeReport(
        tuple(i for r in results for i in r.cancelled),
        tuple(i for r in results for i in r.damaged),
        any(r.more for r in results),
    )


def merge_batches(
    results: Sequence[t.BatchResult], places: Sequence[Sequence[int]], size: int
) -> t.BatchResult:
    """The result of a batch sent to several partitions, each part's jobs at ``places`` in the
    caller's order: the first refusal (by the caller's index), or every job."""
    refusals = [
        t.BatchRefused(place[r.index], r.error)
        for r, place in zip(results, places, strict=True)
        if isinstance(r, t.BatchRefused)
    ]
    if refusals:
        return min(refusals, key=lambda r: r.index)
    jobs: list[Any] = [None] * size
    ids: list[Any] = [None] * size
    deduplicated: list[int] = []
    for result, place in zip(results, places, strict=True):
        assert isinstance(result, t.BatchApplied)
        deduplicated += [place[i] for i in result.deduplicated]
        for i, job in zip(place, result.jobs, strict=False):
            jobs[i] = job
        for i, job_id in zip(place, result.ids, strict=False):
            ids[i] = job_id
    return t.BatchApplied(
        tuple(jobs) if None not in jobs else (),
        tuple(ids) if None not in ids else (),
        tuple(sorted(deduplicated)),
    )


def in_order(
    results: Sequence[Sequence[Any]], places: Sequence[Sequence[int]], size: int
) -> list[Any]:
    """The items of each part's list of results, put back at its ``places``."""
    out: list[Any] = [None] * size
    for got, place in zip(results, places, strict=True):
        for i, item in zip(place, got, strict=True):
            out[i] = item
    return out


# --- flow control over partitions ---------------------------------------------------------------
#
# A queue's rate and cap are shared out among the partitions (each claims on its own): a
# partition's rate is the queue's limit over a window P times longer, with its share of the
# burst; its cap its share of the cap, at least 1. The queue's group defaults go to every
# partition as they are: a group lives in one (docs/scaling.md "Flow control on partitions").


def split(total: int, count: int) -> list[int]:
    """``total`` shared among ``count`` as evenly as it goes: the first ``total mod count``
    get one more."""
    return [total // count + (1 if k < total % count else 0) for k in range(count)]


def rate_shares(rate: Any, count: int) -> list[Any]:
    """Each partition's share of a queue's rate argument (a ``Rate``, its text, or what is no
    rate, given as it is to each: ``KEEP``, None, or what the call refuses). ``InvalidArgument``
    for a window that, ``count`` times longer, is past the longest (7 days)."""
    if isinstance(rate, str):
        rate = Rate.parse(rate)
    if not isinstance(rate, Rate):
        return [rate] * count
    window = rate.window_ms * count
    if window > WINDOW_MAX_MS:
        raise InvalidArgument(
            f"a rate's window must be at most 7 days / {count} on a namespace of {count}"
            f" partitions (each takes the rate over a window {count} times longer): got {rate}"
        )
    return [Rate(rate.limit, window / 1000, burst) for burst in split(rate.burst, count)]


def cap_shares(cap: Any, count: int) -> list[Any]:
    """Each partition's share of a queue's cap (at least 1 each); anything else as it is."""
    if cap is KEEP or cap is None or isinstance(cap, bool) or not isinstance(cap, int):
        return [cap] * count
    return [max(1, share) for share in split(cap, count)]


def fleet_rate(rates: Sequence[Rate | None], count: int) -> Rate | None:
    """A queue's rate over the namespace, from its partitions' shares: the limit over the
    partitions' window / P, the bursts summed (a partition's own rate, when they hold no
    shares a client of ``count`` partitions set)."""
    given = [r for r in rates if r is not None]
    if not given:
        return None
    first = given[0]
    try:
        return Rate(first.limit, first.window_ms / count / 1000, sum(r.burst for r in given))
    except InvalidArgument:
        return first


def _interleaved(lists: Sequence[Sequence[GroupFlow]]) -> list[GroupFlow]:
    """The first of each list, then the second of each, and so on."""
    rounds = itertools.zip_longest(*lists)
    return [g for row in rounds for g in row if g is not None]


def merge_flows(infos: Sequence[FlowInfo], groups: object, count: int) -> FlowInfo:
    """A queue's flow over every partition: the limits as set for the namespace, leased and
    ready jobs and groups summed, ``next_at`` the soonest (None when a partition's rate lets a
    job start now), and at most ``groups`` groups of each kind: those in turn a partition after
    the other, those waiting by the end of their wait, those full as they come."""
    most = _script_int(groups) or 0
    of = [[g for info in infos for g in info.groups if g.state == s] for s in ("wait", "full")]
    turn = _interleaved([[g for g in info.groups if g.state == "turn"] for info in infos])
    waiting = sorted(of[0], key=lambda g: g.until or 0)
    caps = [i.concurrency for i in infos if i.concurrency is not None]
    next_at = [i.next_at for i in infos]
    first = infos[0]
    return FlowInfo(
        first.queue,
        max(i.now for i in infos),
        fleet_rate([i.rate for i in infos], count),
        sum(caps) if caps else None,
        first.group_rate,
        first.group_concurrency,
        sum(i.leased for i in infos),
        sum(i.ready_ungrouped for i in infos),
        None if None in next_at else min(n for n in next_at if n is not None),
        sum(i.groups_in_turn for i in infos),
        sum(i.groups_waiting for i in infos),
        sum(i.groups_full for i in infos),
        tuple(turn[:most] + waiting[:most] + of[1][:most]),
    )


# --- pages by cursor over partitions ------------------------------------------------------------

#: How a partitioned cursor begins; its parts, one per partition, are joined by ``,``: a
#: partition's own cursor, "" before its first page, "-" once read to its end. (A partition's
#: own cursor is ``<status>:...``, lua/list_jobs.lua: never empty, "-" or holding ",".)
PAGES = "P"
_DONE = "-"


def page_positions(after: object, count: int) -> list[str | None]:
    """Each partition's cursor in ``after`` ("" for its first page, None once read to its end)."""
    if after is None:
        return [""] * count
    if not (isinstance(after, str) and after.isascii() and after.startswith(PAGES)):
        raise InvalidArgument("after must be a cursor a page of this status returned")
    parts = after[len(PAGES) :].split(",")
    if len(parts) != count:
        raise InvalidArgument("after must be a cursor a page of this status returned")
    return [None if part == _DONE else part for part in parts]


def page_cursor(positions: Sequence[str | None]) -> str | None:
    """The cursor of the next page (None: every partition read to its end)."""
    if all(at is None for at in positions):
        return None
    return PAGES + ",".join(_DONE if at is None else at for at in positions)


def page_shares(limit: int, count: int) -> list[int]:
    """``limit`` shared among ``count`` partitions as evenly as it goes (a limit out of bounds
    is left to the first partition's call to refuse)."""
    if type(limit) is not int or limit < 1:
        return [limit] + [0] * (count - 1)
    return [limit // count + (1 if k < limit % count else 0) for k in range(count)]


# --- list_jobs over partitions ------------------------------------------------------------------

#: The statuses list_jobs serves, each with the job field that scores its index
#: (lua/list_jobs.lua, lua/include/job.lua ``place``): entries go by score, then by member (the
#: job id; in ``ready``, available's first run, ``<available_at><sequence><id>`` scored by
#: priority), byte by byte.
_SCORED_BY = {
    status: KEY[field].encode()
    for field, statuses in (
        ("available_at", ("available", "scheduled", "blocked", "retryable")),
        ("expires_at", ("executing",)),
        ("finished_at", ("completed", "discarded", "cancelled", "expired")),
    )
    for status in statuses
}
_AT, _PRIORITY, _SEQUENCE = (
    KEY[name].encode() for name in ("available_at", "priority", "sequence")
)
_NO_PRIORITY = DEFAULTS[KEY["priority"]]
_OFFSET_MAX = 1000  # into available and scheduled (lua/list_jobs.lua OFFSET_MAX)
_LIMIT_MAX = 1000  # a page's jobs at the most
_INT_MAX = 1 << 50  # lua/include/core.lua MAXINT
_DECIMAL = re.compile(r"-?[0-9]+")
#: Where a job stands in its partition's order: (run of entries, score, member).
Rank: TypeAlias = tuple[int, int, bytes]


def _script_int(value: object) -> int | None:
    """``value`` as the scripts read an integer argument (``int_arg``, then
    lua/include/core.lua ``int``), or None where they refuse it."""
    text = int_arg(value)
    if len(text) > 17 or _DECIMAL.fullmatch(text) is None:
        return None
    number = int(text)
    return number if -_INT_MAX <= number <= _INT_MAX else None


def listing(status: Arg, offset: object, limit: object) -> tuple[str, int]:
    """The status of ``list_jobs(status, offset, limit)`` by name, and how many jobs it reads
    from each partition: offset + limit. Raises ``InvalidArgument`` for a status, offset or
    limit lua/list_jobs.lua refuses, as it words it and in its order (the queue and ``now`` are
    left to the scripts), and for more jobs than its one page holds (1,000)."""
    name = status.decode("utf-8", "replace") if isinstance(status, bytes) else status
    if name not in _SCORED_BY:
        raise InvalidArgument(f"unknown status '{name}'")
    start, size = _script_int(offset), _script_int(limit)
    if start is None or start < 0:
        raise InvalidArgument("offset must be a nonnegative integer")
    if start > _OFFSET_MAX and name in ("available", "scheduled"):
        raise InvalidArgument(
            f"offset must be at most {_OFFSET_MAX} for {name} (page further by cursor)"
        )
    if size is None or not 1 <= size <= _LIMIT_MAX:
        raise InvalidArgument(f"limit must be between 1 and {_LIMIT_MAX}")
    if start + size > _LIMIT_MAX:
        raise InvalidArgument(
            f"offset + limit must be at most {_LIMIT_MAX} on a partitioned namespace"
            " (page further by cursor)"
        )
    return name, start + size


def _rank(raw: Sequence[Any], status: str, due: bool) -> Rank:
    """A job's index entry, read from its fields in the reply (``{id, field, value, ...}``, a
    later field winning): ``ready``'s of an available job not ``due`` (lua/include/job.lua
    ``ready_member``), else its status's index's."""
    fields = dict(zip(raw[1::2], raw[2::2], strict=True))
    job_id: bytes = raw[0]
    if status == "available" and not due:
        at, sequence = int(fields[_AT]), int(fields[_SEQUENCE])
        member = (at % (1 << 48)).to_bytes(6, "big") + (sequence % (1 << 40)).to_bytes(5, "big")
        return (0, int(fields.get(_PRIORITY, _NO_PRIORITY)), member + job_id)
    return (int(due), int(fields[_SCORED_BY[status]]), job_id)


def ranked(status: str) -> Callable[[Any], list[tuple[Rank, t.Job]]]:
    """The parse of a partition's ``list_jobs`` reply from offset 0: its jobs, each with its
    ``Rank`` (the reply's ``first`` jobs are of the status's first run of entries)."""

    def parse(reply: Any) -> list[tuple[Rank, t.Job]]:
        jobs = parse_jobs(reply)  # (a refusal raises here)
        first = int(reply[2])
        return [
            (_rank(raw, status, i >= first), job)
            for i, (raw, job) in enumerate(zip(reply[3:], jobs, strict=True))
        ]

    return parse


def merge_listings(
    pages: Sequence[list[tuple[Rank, t.Job]]], offset: int, limit: int
) -> list[t.Job]:
    """The jobs ``offset`` to ``offset + limit`` of the partitions' first jobs merged in the
    order of one index over them all: the first ``offset + limit`` of the namespace are among
    the first ``offset + limit`` of each partition."""
    merged = heapq.merge(*pages, key=lambda item: item[0])
    return [job for _, job in itertools.islice(merged, offset, offset + limit)]
