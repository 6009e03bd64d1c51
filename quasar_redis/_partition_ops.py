"""What the call builder of a partitioned namespace rests on: a builder per partition, calls
routed to one partition or spread over several (``_partitioned_calls`` has the whole builder),
and the calls of operators and maintenance, each routed by its job id or spread over every
partition (``_partitions`` has the rules and the merges).

A routed call is the one the partition's own builder makes, sent with that partition's KEYS
(``Call.on``). A spread call carries the flow that sends its parts (``Call.spread``), in one
pipeline when they do not depend on each other. The worker registry is the namespace's one place
outside the partitions: ``announce``, ``retire`` and ``workers`` go to the namespace's own root,
as on a namespace of one partition.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from . import _types as t
from ._call_base import Call, Limits, new_call_id
from ._calls import CallBuilder
from ._flow import KEEP, CapArg, FlowInfo, RateArg
from ._flow_calls import GROUPS_LISTED, limit_pairs
from ._keys import KeySpace
from ._operator_calls import status_arg
from ._partitions import (
    Rank,
    cap_shares,
    group_partition,
    listing,
    merge_cascades,
    merge_flows,
    merge_listings,
    merge_queues,
    merge_sweeps,
    page_cursor,
    page_positions,
    page_shares,
    partition_of,
    ranked,
    rate_shares,
    sum_counts,
)
from .errors import QuasarError

T = TypeVar("T")
R = TypeVar("R")
K = TypeVar("K")
P = ParamSpec("P")
Flow = Generator[Any, Any, T]


class PartCalls(CallBuilder):
    """The builder of one partition: its keys, and ids made for it (``k~`` and 16 hex digits)."""

    def __init__(self, keys: KeySpace, limits: Limits | None, partition: int) -> None:
        super().__init__(keys, limits)
        self._id_prefix = f"{partition}~"

    def _new_id(self) -> str:
        return self._id_prefix + new_call_id()

    def _new_ids(self) -> tuple[str, str]:
        call_id, job_id = super()._new_ids()
        return call_id, self._id_prefix + job_id


def _unsent(reply: Any) -> Any:
    raise AssertionError("a spread call is sent by its parts")


def _total(counts: list[int]) -> int:
    return sum(counts)


def spread(script_of: Call[Any], run: Callable[[Any], Flow[T]]) -> Call[T]:
    """A call sending its parts with ``run`` (given the client), named by ``script_of``'s script
    (an enqueue stays an enqueue for the eviction-policy check)."""
    return Call(script_of.script, (), _unsent, spread=run)


def early(script_of: Call[Any], result: T) -> Call[T]:
    """A call answered without Redis."""
    return Call(script_of.script, (), _unsent, result)


def _kept(parse: Callable[[Any], T]) -> Callable[[Any], T | QuasarError]:
    """``parse``, giving back the refusal it raises."""

    def parse_kept(reply: Any) -> T | QuasarError:
        try:
            return parse(reply)
        except QuasarError as exc:
            return exc

    return parse_kept


def keys_of(calls: CallBuilder, job_id: str | None = None) -> KeySpace:
    """The keys of the partition that holds ``job_id`` (its hash, its dependents, its events),
    or with None, of the first partition (whose event stream has every queue's pauses and
    resumes, as every partition's has); on a namespace of one partition, its keys."""
    if isinstance(calls, PartitionOps):
        return calls.parts[0 if job_id is None else partition_of(job_id, calls.count)].keys
    return calls.keys


def every_keys(calls: CallBuilder) -> list[KeySpace]:
    """The keys of every partition (on a namespace of one partition, its keys)."""
    return [p.keys for p in calls.parts] if isinstance(calls, PartitionOps) else [calls.keys]


def wake_lists(calls: CallBuilder, queues: Sequence[str], cluster: bool) -> list[list[str]]:
    """The wake lists an idle worker of ``queues`` waits on, as one list of keys per blocking
    wait: every partition's in one wait on a single server, one wait per partition on a Redis
    Cluster (a BLPOP takes the keys of one slot)."""
    if not isinstance(calls, PartitionOps):
        return [[calls.keys.wake(q) for q in queues]]
    per_part = [[part.keys.wake(q) for q in queues] for part in calls.parts]
    return per_part if cluster else [[key for keys in per_part for key in keys]]


def _same(job_id: Any) -> Any:
    return job_id


def by_job(
    method: Callable[Concatenate[CallBuilder, K, P], Call[T]], job_of: Callable[[K], Any]
) -> Callable[..., Call[T]]:
    """``method`` of the builder of the partition that holds the job its first argument names
    (``job_of`` reads the job id from it: a job id, a lease token), taking what ``method`` takes.
    (Typed loosely: a builder method it overrides keeps its own signature for callers.)"""

    def routed(self: PartitionOps, first: K, /, *args: P.args, **kwargs: P.kwargs) -> Call[T]:
        part = partition_of(job_of(first), self.count)
        return method(self.parts[part], first, *args, **kwargs).on(self.part_keys[part])

    routed.__name__, routed.__doc__ = method.__name__, method.__doc__
    return routed


class PartitionOps(CallBuilder):
    """Routes and spreads the calls of a namespace of ``count`` partitions; ``keys`` are the
    namespace's own (its record of partitions, its worker registry)."""

    def __init__(
        self, keys: KeySpace, limits: Limits | None, count: int, *, events: bool = True
    ) -> None:
        super().__init__(keys, limits)
        self.count = count
        self.parts = [PartCalls(keys.part(i), limits, i) for i in range(count)]
        self.part_keys = [
            (p.keys.root, p.keys.events) if events else (p.keys.root,) for p in self.parts
        ]
        self._start = 0  # the partition the next claim by queue starts at
        self._next = 0  # the partition of the next job that may go anywhere

    def _at(self, partition: int, build: Callable[[CallBuilder], Call[T]]) -> Call[T]:
        return build(self.parts[partition]).on(self.part_keys[partition])

    def _by_job(self, job_id: Any, build: Callable[[CallBuilder], Call[T]]) -> Call[T]:
        return self._at(partition_of(job_id, self.count), build)

    def _fan(
        self, build: Callable[[CallBuilder], Call[T]], merge: Callable[[list[T]], R]
    ) -> Call[R]:
        """``build``'s call on every partition, in one pipeline, the results merged."""
        calls = [self._at(i, build) for i in range(self.count)]

        def run(client: Any) -> Flow[R]:
            return merge((yield from client._sending_many(calls)))

        return spread(calls[0], run)

    def _grouped(
        self, places: dict[int, list[int]], build: Callable[[CallBuilder, list[int]], Call[T]]
    ) -> tuple[list[Call[T]], list[list[int]]]:
        """A call per partition of ``places`` (partition: the caller's indexes it takes)."""
        order = sorted(places)
        calls = [build(self.parts[k], places[k]).on(self.part_keys[k]) for k in order]
        return calls, [places[k] for k in order]

    # operators, by id ----------------------------------------------------------------------------

    expire = by_job(CallBuilder.expire, _same)
    change = by_job(CallBuilder.change, _same)
    cancel = by_job(CallBuilder.cancel, _same)
    retry = by_job(CallBuilder.retry, _same)
    get_job = by_job(CallBuilder.get_job, _same)
    dependencies = by_job(CallBuilder.dependencies, _same)

    def purge(
        self,
        queue: str,
        status: t.Status | str,
        job_ids: Sequence[str],
        finished_before: int | None,
        now: int | None = None,
    ) -> Call[int]:
        places: dict[int, list[int]] = {}
        for index, job_id in enumerate(job_ids):
            places.setdefault(partition_of(job_id, self.count), []).append(index)
        if not places:  # (none: refused as the call of one partition refuses it)
            return self._at(0, lambda b: b.purge(queue, status, job_ids, finished_before, now))
        calls, _ = self._grouped(
            places,
            lambda b, at: b.purge(queue, status, [job_ids[i] for i in at], finished_before, now),
        )

        def run(client: Any) -> Flow[int]:
            return sum((yield from client._sending_many(calls)))

        return spread(calls[0], run)

    # every partition ------------------------------------------------------------------------------

    def sweep_expired(self, limit: int, now: int | None = None) -> Call[t.SweepReport]:
        return self._fan(lambda b: b.sweep_expired(limit, now), merge_sweeps)

    def resume_cascades(self, now: int | None = None) -> Call[t.CascadeReport]:
        return self._fan(lambda b: b.resume_cascades(now), merge_cascades)

    def promote_due(self, limit: int, now: int | None = None) -> Call[int]:
        return self._fan(lambda b: b.promote_due(limit, now), _total)

    def prune(
        self, max_age_ms: int | None, max_count: int | None, limit: int, now: int | None = None
    ) -> Call[int]:
        """``max_count`` is kept per queue in each partition."""
        return self._fan(lambda b: b.prune(max_age_ms, max_count, limit, now), _total)

    def counts(self, queue: str, now: int | None = None) -> Call[t.QueueCounts]:
        return self._fan(lambda b: b.counts(queue, now), sum_counts)

    def queues(self, now: int | None = None) -> Call[list[t.QueueInfo]]:
        return self._fan(lambda b: b.queues(now), merge_queues)

    def pause(self, queue: str, now: int | None = None) -> Call[bool]:
        """Every partition's claims of ``queue`` stop; True if any partition was not paused."""
        return self._fan(lambda b: b.pause(queue, now), any)

    def resume(self, queue: str, now: int | None = None) -> Call[bool]:
        return self._fan(lambda b: b.resume(queue, now), any)

    def list_jobs(
        self, queue: str, status: t.Status | str, offset: int, limit: int, now: int | None = None
    ) -> Call[list[t.Job]]:
        """The first ``offset + limit`` jobs of every partition (at most 1,000), in one pipeline,
        merged in ``list_jobs``' order over the namespace, and the page cut from them. Input the
        script refuses raises before anything is sent (``listing``)."""
        name, size = listing(status_arg(status), offset, limit)
        parse = ranked(name)

        def build(b: CallBuilder) -> Call[list[tuple[Rank, t.Job]]]:
            call = b.list_jobs(queue, status, 0, size, now)
            return Call(call.script, call.args, parse)

        return self._fan(build, lambda pages: merge_listings(pages, offset, limit))

    def page_jobs(
        self,
        queue: str,
        status: t.Status | str,
        after: str | None,
        limit: int,
        now: int | None = None,
    ) -> Call[t.JobPage]:
        """A page of each partition whose jobs are not all read, in one pipeline, ``limit``
        shared among them; the jobs of each partition in ``list_jobs``' order, partition after
        partition. The cursor carries each partition's own (``page_cursor``)."""
        places = page_positions(after, self.count)
        alive = [k for k, at in enumerate(places) if at is not None]
        if not alive:  # (a cursor past the end: no page returns one)
            return early(self._at(0, lambda b: b.counts(queue, now)), t.JobPage((), None))
        sent = [(k, n) for k, n in zip(alive, page_shares(limit, len(alive)), strict=True) if n]
        calls = [self._page(k, queue, status, places[k], n, now) for k, n in sent]

        def run(client: Any) -> Flow[t.JobPage]:
            pages: list[t.JobPage] = yield from client._sending_many(calls)
            for (k, _), page in zip(sent, pages, strict=True):
                places[k] = page.next_cursor
            jobs = tuple(job for page in pages for job in page.jobs)
            return t.JobPage(jobs, page_cursor(places))

        return spread(calls[0], run)

    def _page(
        self, k: int, queue: str, status: t.Status | str, at: str | None, n: int, now: int | None
    ) -> Call[t.JobPage]:
        return self._at(k, lambda b: b.page_jobs(queue, status, at or None, n, now))

    # flow control --------------------------------------------------------------------------------

    def _group_at(self, group: object) -> int:
        """The partition of the flow group ``group`` (0 for what is no group: the call refuses
        it before anything is sent)."""
        if isinstance(group, str) and group:
            return group_partition(group, self.count)
        return 0

    def set_limits(
        self,
        queue: str,
        *,
        rate: RateArg = KEEP,
        concurrency: CapArg = KEEP,
        group_rate: RateArg = KEEP,
        group_concurrency: CapArg = KEEP,
        declare: bool = False,
        now: int | None = None,
    ) -> Call[int]:
        """The limits on every partition, in one pipeline: each its share of the queue's rate
        and cap (``rate_shares``, ``cap_shares``), the group defaults as they are. The queue is
        known when any partition knows it: the partitions that do not are sent the call again,
        declaring it. Values refused raise before anything is sent; a refusal of every partition
        raises as one partition's does; the server's time is the latest partition's."""
        limit_pairs(
            False,
            rate=rate,
            concurrency=concurrency,
            group_rate=group_rate,
            group_concurrency=group_concurrency,
        )
        rates, caps = rate_shares(rate, self.count), cap_shares(concurrency, self.count)

        def part(k: int, declared: bool) -> Call[int | QuasarError]:
            def build(b: CallBuilder) -> Call[int | QuasarError]:
                call = b.set_limits(
                    queue,
                    rate=rates[k],
                    concurrency=caps[k],
                    group_rate=group_rate,
                    group_concurrency=group_concurrency,
                    declare=declared,
                    now=now,
                )
                return Call(call.script, call.args, _kept(call.parse))

            return self._at(k, build)

        def run(client: Any) -> Flow[int]:
            got = yield from client._sending_many([part(k, declare) for k in range(self.count)])
            missing = [k for k, result in enumerate(got) if isinstance(result, QuasarError)]
            if missing and len(missing) < self.count:  # (known to the namespace: declared)
                again = yield from client._sending_many([part(k, True) for k in missing])
                for k, result in zip(missing, again, strict=True):
                    got[k] = result
            for result in got:
                if isinstance(result, QuasarError):
                    raise result
            latest: int = max(got)
            return latest

        return spread(part(0, declare), run)

    def set_group_limits(
        self,
        queue: str,
        group: str,
        *,
        rate: RateArg = KEEP,
        concurrency: CapArg = KEEP,
        now: int | None = None,
    ) -> Call[int]:
        """On the group's partition, where its jobs and its flow are."""
        return self._at(
            self._group_at(group),
            lambda b: b.set_group_limits(queue, group, rate=rate, concurrency=concurrency, now=now),
        )

    def flow(
        self,
        queue: str,
        *,
        groups: int = GROUPS_LISTED,
        group: str | None = None,
        now: int | None = None,
    ) -> Call[FlowInfo]:
        """Every partition's flow of ``queue`` in one pipeline, merged (``merge_flows``: the
        limits as set for the namespace); or ``group``'s, on its partition."""
        if group is not None:
            return self._at(
                self._group_at(group),
                lambda b: b.flow(queue, groups=groups, group=group, now=now),
            )
        return self._fan(
            lambda b: b.flow(queue, groups=groups, now=now),
            lambda infos: merge_flows(infos, groups, self.count),
        )
