"""The call builder of a partitioned namespace (``_partition_ops`` routes and spreads the
calls, ``_partitions`` has the rules): enqueues go to the partition each job's id, flow key or
dependencies name, grouped into a call per partition; a claim by queue takes the partitions in
turn, one call after the other, until it has leased what it asked for; a lease holder's calls
go to their job's partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from . import _types as t
from ._batch import BatchOpenRefused, BatchOpenResult
from ._call_base import Call, NewJob, new_call_id
from ._calls import CallBuilder
from ._dedup import OnDuplicate
from ._enqueue_calls import Prepared
from ._partition_ops import Flow, PartitionOps, by_job, early, spread
from ._partitions import in_order, made_in, merge_batches, partition_of, placement
from ._replies import first_claim
from .errors import QuasarError


def _job_of(token: t.LeaseToken) -> str:
    return token.job_id


class PartitionedCalls(PartitionOps):
    """Builds every call of a namespace of ``count`` partitions."""

    def _any(self) -> int:
        """The partition of a job that may go anywhere: each in turn, so that they spread."""
        where, self._next = self._next, (self._next + 1) % self.count
        return where

    # enqueue ----------------------------------------------------------------------------------

    def _place(self, jobs: Sequence[NewJob]) -> tuple[dict[int, list[int]], dict[int, t.JobError]]:
        """Each job's partition, by its id, flow key or dependencies. The jobs that may go
        anywhere go together, so that a batch costs a call as on one partition: to the
        partition most of the others go to, or, in a batch of only such jobs, to the next
        partition in turn (the batches spread evenly)."""
        places: dict[int, list[int]] = {}
        refused: dict[int, t.JobError] = {}
        free: list[int] = []
        for index, job in enumerate(jobs):
            where = placement(job, self.count)
            if where is None:
                free.append(index)
            elif isinstance(where, int):
                places.setdefault(where, []).append(index)
            else:
                refused[index] = where
        if free:
            where = max(places, key=lambda k: len(places[k])) if places else self._any()
            places[where] = sorted(places.get(where, []) + free)
        return places, refused

    def enqueue(self, job: NewJob, now: int | None = None) -> Call[t.JobResult]:
        where = placement(job, self.count)
        if where is None:
            where = self._any()
        if not isinstance(where, int):
            return early(self.parts[0].enqueue(job, now), t.JobRefused(where))
        return self._at(where, lambda b: b.enqueue(job, now))

    def prepared(self, prepared: Prepared, payload: bytes) -> Call[t.JobResult]:
        """Where ``enqueue`` would send the job: its flow key's or batch's partition, else each
        partition in turn."""
        where = placement(prepared.job, self.count)
        if where is None:
            where = self._any()
        if not isinstance(where, int):
            return self.enqueue(prepared.new(payload))  # (answered without Redis)
        return self._at(where, lambda b: b.prepared(prepared, payload))

    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now: int | None = None,
        *,
        ids_only: bool = False,
        on_duplicate: OnDuplicate = "refuse",
    ) -> Call[t.BatchResult]:
        """All of ``jobs`` or none of them within each partition: a part another partition
        refused is not undone (docs/scaling.md)."""
        error = self._batch_size_error(jobs)
        places, refused = self._place(jobs)
        first = self.parts[0].enqueue_many(jobs[:1], now)
        if error is not None or refused:
            index = min(refused) if refused else 0
            return early(first, t.BatchRefused(index, error or refused[index]))
        calls, where = self._grouped(
            places,
            lambda b, at: b.enqueue_many(
                [jobs[i] for i in at], now, ids_only=ids_only, on_duplicate=on_duplicate
            ),
        )
        if len(calls) == 1:
            return calls[0]
        for call, at in zip(calls, where, strict=True):  # what Python refuses: nothing is sent
            if isinstance(call.early, t.BatchRefused):
                return early(first, t.BatchRefused(at[call.early.index], call.early.error))

        def run(client: Any) -> Flow[t.BatchResult]:
            results = yield from client._sending_many(calls)
            return merge_batches(results, where, len(jobs))

        return spread(first, run)

    def enqueue_each(self, jobs: Sequence[NewJob], now: int | None = None) -> Call[list[Any]]:
        error = self._batch_size_error(jobs)
        first = self.parts[0].enqueue_each(jobs[:1], now)
        if error is not None:
            return early(first, [t.JobRefused(error)])
        places, refused = self._place(jobs)
        calls, where = self._grouped(
            places, lambda b, at: b.enqueue_each([jobs[i] for i in at], now)
        )
        refusals = [t.JobRefused(e) for e in refused.values()]
        calls.append(early(first, refusals))
        where.append(list(refused))

        def run(client: Any) -> Flow[list[Any]]:
            results = yield from client._sending_many(calls)
            return in_order(results, where, len(jobs))

        return spread(first, run)

    # claims -----------------------------------------------------------------------------------

    def claim_many(
        self,
        queue: str,
        worker_id: str,
        lease_ms: int,
        limit: int,
        now: int | None = None,
        *,
        call_id: str | None = None,
    ) -> Call[t.ClaimsResult]:
        """Up to ``limit`` jobs from the partitions in turn, from one after the last claim's
        first: a call per partition until ``limit`` are leased, each with an id of its own
        (``call_id`` is the first partition's)."""
        start, self._start = self._start, (self._start + 1) % self.count
        probe = self.parts[start].claim_many(queue, worker_id, lease_ms, limit, now)
        if probe.early is not None:
            return probe
        ids = [new_call_id() for _ in range(self.count)]  # (a call sent again sends these)
        ids[start] = call_id or ids[start]

        def run(client: Any) -> Flow[t.ClaimsResult]:
            claims: list[t.Claim] = []
            next_at: list[int] = []
            for i in range(self.count):
                k = (start + i) % self.count
                left = limit - len(claims)
                call = self.parts[k].claim_many(
                    queue, worker_id, lease_ms, left, now, call_id=ids[k]
                )
                result: t.ClaimsResult = yield from client._sending(call.on(self.part_keys[k]))
                if isinstance(result, t.ClaimsApplied):
                    claims.extend(result.claims)
                elif isinstance(result.error, t.NothingClaimable):
                    if result.error.next_at is not None:
                        next_at.append(result.error.next_at)
                elif not claims:
                    return result
                if len(claims) >= limit:
                    break
            if claims:
                return t.ClaimsApplied(tuple(claims))
            return t.ClaimRefused(t.NothingClaimable(min(next_at) if next_at else None))

        return spread(probe, run)

    def claim(
        self, queue: str, worker_id: str, lease_ms: int, *, now: int | None = None
    ) -> Call[t.ClaimResult]:
        many = self.claim_many(queue, worker_id, lease_ms, 1, now)
        run = many.spread
        if run is None:  # (refused before anything is sent)
            assert many.early is not None
            return early(many, first_claim(many.early))

        def one(client: Any) -> Flow[t.ClaimResult]:
            return first_claim((yield from run(client)))

        return spread(many, one)

    claim_job = by_job(CallBuilder.claim_job, lambda job_id: job_id)

    # batches: in the partition their id names (docs/workflows.md, "Batches") ------------------

    close_batch = by_job(CallBuilder.close_batch, lambda batch_id: batch_id)
    batch = by_job(CallBuilder.batch, lambda batch_id: batch_id)
    batch_results = by_job(CallBuilder.batch_results, lambda batch_id: batch_id)

    def open_batch(
        self,
        batch_id: str,
        on_success: NewJob | None = None,
        on_failure: NewJob | None = None,
        on_complete: NewJob | None = None,
        now: int | None = None,
        *,
        jobs: Sequence[NewJob] = (),
        close: bool = False,
    ) -> Call[BatchOpenResult]:
        """In the partition the id starts with (``<k>~``): refused without one; its members
        there too (a member with an id or a dependency of another partition is refused
        ``CrossPartition``, before anything is sent)."""
        where = partition_of(batch_id, self.count)
        part = self.parts[where]
        call = part.open_batch(
            batch_id, on_success, on_failure, on_complete, now, jobs=jobs, close=close
        )
        for index, job in enumerate(jobs):
            member = job if job.batch is not None else replace(job, batch=batch_id)
            placed = placement(member, self.count)
            if not isinstance(placed, int | None):
                return early(call, BatchOpenRefused(placed, index))
        if not made_in(batch_id, self.count):
            problem = (
                f"on a namespace of {self.count} partitions a batch id starts with its "
                f"partition: '<0-{self.count - 1}>~'"
            )
            return early(call, BatchOpenRefused(t.InvalidJob(problem)))
        return call.on(self.part_keys[where])

    # a lease holder's calls, by its token -----------------------------------------------------

    complete = by_job(CallBuilder.complete, _job_of)
    fail = by_job(CallBuilder.fail, _job_of)
    permanent_fail = by_job(CallBuilder.permanent_fail, _job_of)
    heartbeat = by_job(CallBuilder.heartbeat, _job_of)
    report_progress = by_job(CallBuilder.report_progress, _job_of)
    release = by_job(CallBuilder.release, _job_of)

    def report_many(
        self, worker_id: str, outcomes: Sequence[t.Outcome], now: int | None = None
    ) -> Call[list[t.OutcomeResult | QuasarError]]:
        """A report per partition of the outcomes' jobs, in one pipeline; results in order."""
        whole = self.parts[0].report_many(worker_id, outcomes, now)
        if whole.early is not None:  # (nothing sent: none, too many, or one unencodable)
            return whole
        places: dict[int, list[int]] = {}
        for index, outcome in enumerate(outcomes):
            places.setdefault(partition_of(outcome.token.job_id, self.count), []).append(index)
        calls, where = self._grouped(
            places, lambda b, at: b.report_many(worker_id, [outcomes[i] for i in at], now)
        )

        def run(client: Any) -> Flow[list[t.OutcomeResult | QuasarError]]:
            return in_order((yield from client._sending_many(calls)), where, len(outcomes))

        return spread(whole, run)

    def report_and_claim(
        self,
        worker_id: str,
        outcomes: Sequence[t.Outcome],
        queue: str,
        lease_ms: int,
        limit: int,
        now: int | None = None,
    ) -> Call[t.ReportedAndClaimed]:
        """The report (as ``report_many``), then the claim (as ``claim_many``): each part on its
        partitions, one after the other."""
        whole = self.parts[0].report_and_claim(worker_id, outcomes, queue, lease_ms, limit, now)
        if whole.early is not None:
            return whole
        report = self.report_many(worker_id, outcomes, now) if outcomes else None
        claim = self.claim_many(queue, worker_id, lease_ms, limit, now)

        def run(client: Any) -> Flow[t.ReportedAndClaimed]:
            reported = () if report is None else (yield from client._sending(report))
            claimed = yield from client._sending(claim)
            return t.ReportedAndClaimed(tuple(reported), claimed)

        return spread(whole, run)
