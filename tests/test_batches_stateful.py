"""Batches against a model of their rules (docs/workflows.md, "Batches"), step by random step:
batches opened, members added one by one or many at a time, closed, and members ending every
way a job ends (completed, failed, cancelled with their dependents, expired at their deadline,
retried by an operator and ended again), with completions sent twice, and pruned (a done batch
goes whole, the ended members of the others one by one). After every step, Redis
must hold what the model says: each batch's counts are its members' statuses, its open or closed
state, and its callbacks: each enqueued (with the id ``<batch>@<kind>``, naming its batch) if and
only if its condition held at some point after the close, and never twice; the done ones, and
they alone, are in ``batches_done`` (``tests/consistency.py``'s ``batch_problems`` checks the
stored counts against the members)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from quasar_redis import (
    BatchApplied,
    BatchClosed,
    BatchExists,
    BatchOpened,
    BatchOpenRefused,
    BatchRefused,
    ClaimApplied,
    JobApplied,
    JobRefused,
    MissingBatch,
    NewJob,
    Quasar,
)

from .consistency import batch_problems
from .helpers import delete_namespace, real_redis

T0 = 1_700_000_000_000
BATCHES = ("b1", "b2")
KINDS = ("on_success", "on_failure", "on_complete")
TERMINAL = {"completed", "discarded", "cancelled", "expired"}
EXAMPLES = int(os.environ.get("QUASAR_STATEFUL_EXAMPLES", "100"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@dataclass
class ModelBatch:
    kinds: frozenset[str]
    members: list[str] = field(default_factory=list)
    closed: bool = False
    #: Each callback whose condition has held after the close: it must have been enqueued.
    due: set[str] = field(default_factory=set)
    #: The statuses of its members pruned (they ended; the batch counts them still).
    gone: list[str] = field(default_factory=list)


class BatchMachine(RuleBasedStateMachine):
    def __init__(self, opener: Callable[[], tuple[Quasar, Callable[[], None]]]) -> None:
        super().__init__()
        self.q, self.cleanup = opener()
        self.batches: dict[str, ModelBatch] = {}
        self.now = T0
        self.made = 0
        self.fired: dict[str, str] = {}  # callback job id -> the batch, as first seen
        self.pruned: set[str] = set()  # batches pruned (their ids are not opened again)

    def teardown(self) -> None:
        self.cleanup()

    # --- helpers --------------------------------------------------------------------------------

    def status(self, job_id: str) -> str:
        info = self.q.get_job(job_id, now=self.now)
        assert info is not None, job_id
        return info.status.value

    def members(self, data: st.DataObject, wanted: set[str] | None = None) -> str | None:
        ids = [m for b in self.batches.values() for m in b.members]
        if wanted is not None:
            ids = [m for m in ids if self.status(m) in wanted]
        return data.draw(st.sampled_from(ids)) if ids else None

    def statuses(self, known: ModelBatch) -> list[str]:
        return [self.status(m) for m in known.members] + known.gone

    def done(self, known: ModelBatch) -> bool:
        return known.closed and all(s in TERMINAL for s in self.statuses(known))

    def new_id(self) -> str:
        self.made += 1
        return f"m{self.made}"

    # --- rules ----------------------------------------------------------------------------------

    @initialize(kinds=st.sets(st.sampled_from(KINDS), min_size=1), n=st.integers(0, 3))
    def start(self, kinds: set[str], n: int) -> None:
        self.open("b1", kinds)
        if n:
            self.add("b1", n, deadline=False, many=True)

    @rule(batch_id=st.sampled_from(BATCHES), kinds=st.sets(st.sampled_from(KINDS)))
    def open(self, batch_id: str, kinds: set[str]) -> None:
        if batch_id in self.pruned:
            return
        callbacks = {k: NewJob(f"{batch_id}.{k}", queue="cb") for k in kinds}
        result = self.q.open_batch(
            batch_id,
            on_success=callbacks.get("on_success"),
            on_failure=callbacks.get("on_failure"),
            on_complete=callbacks.get("on_complete"),
            now=self.now,
        )
        known = self.batches.get(batch_id)
        if known is None:
            assert result == BatchOpened(batch_id, True)
            self.batches[batch_id] = ModelBatch(frozenset(kinds))
        elif known.kinds == kinds:
            assert result == BatchOpened(batch_id, False)
        else:
            assert result == BatchOpenRefused(BatchExists(batch_id))

    @rule(
        batch_id=st.sampled_from(BATCHES),
        n=st.integers(1, 3),
        deadline=st.booleans(),
        many=st.booleans(),
    )
    def add(self, batch_id: str, n: int, deadline: bool, many: bool) -> None:
        known = self.batches.get(batch_id)
        ids = [self.new_id() for _ in range(n)]
        expires = 100 if deadline else None
        jobs = [
            NewJob("work", id=i, batch=batch_id, max_attempts=1, expires_in_ms=expires) for i in ids
        ]
        if many:
            result: Any = self.q.enqueue_many(jobs, now=self.now, ids_only=True)
            refused = result.error if isinstance(result, BatchRefused) else None
        else:
            results = [self.q.enqueue_job(j, now=self.now) for j in jobs]
            errors = {r.error for r in results if isinstance(r, JobRefused)}
            assert len(errors) <= 1 and (not errors or len(errors) == 1)
            refused = next(iter(errors), None)
            if refused is None:
                assert all(isinstance(r, JobApplied) for r in results)
        if known is None:
            assert refused == MissingBatch(batch_id)
        elif known.closed:
            assert refused == BatchClosed(batch_id)
        else:
            assert refused is None, refused
            if many:
                assert isinstance(result, BatchApplied)
            known.members += ids

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        batch_id = data.draw(st.sampled_from(sorted(self.batches)))
        known = self.batches[batch_id]
        assert self.q.close_batch(batch_id, now=self.now) is (not known.closed)
        known.closed = True

    @rule(data=st.data(), how=st.sampled_from(["complete", "fail", "twice"]))
    def end(self, data: st.DataObject, how: str) -> None:
        job_id = self.members(data, {"available"})
        if job_id is None:
            return
        claim = self.q.claim_job(job_id, "w", 60_000, now=self.now)
        assert isinstance(claim, ClaimApplied), claim
        token = claim.claim.token
        if how == "fail":
            assert isinstance(self.q.permanent_fail(token, "w", "no", now=self.now), JobApplied)
            return
        call = self.q.calls.complete(token, "w", "inline", 1, self.now)
        assert isinstance(self.q.execute(call), JobApplied)
        if how == "twice":  # a re-sent completion: answered again, nothing more
            assert isinstance(self.q.execute(call), JobApplied)

    @precondition(lambda self: self.batches)
    @rule(data=st.data(), fail=st.sampled_from([False, False, True]))
    def end_all(self, data: st.DataObject, fail: bool) -> None:
        """Every available member of a batch ended, one call each (the last one fires)."""
        batch_id = data.draw(st.sampled_from(sorted(self.batches)))
        for job_id in self.batches[batch_id].members:
            if self.status(job_id) != "available":
                continue
            token = self.q.claim_job(job_id, "w", 60_000, now=self.now)
            assert isinstance(token, ClaimApplied)
            if fail:
                self.q.permanent_fail(token.claim.token, "w", "no", now=self.now)
            else:
                self.q.complete(token.claim.token, "w", now=self.now)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = self.members(data, {"available"})
        if job_id is not None:
            self.q.cancel(job_id, now=self.now)

    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        job_id = self.members(data, {"discarded"})
        if job_id is not None:
            assert isinstance(self.q.retry(job_id, now=self.now), JobApplied)
            self.q.promote_due(now=self.now)

    @rule(delta=st.sampled_from([1, 50, 150]))
    def sweep(self, delta: int) -> None:
        self.now += delta
        self.q.sweep_expired(now=self.now)
        self.q.promote_due(now=self.now)

    @rule()
    def prune(self) -> None:
        """Past the re-send window: every ended member goes, and every done batch."""
        self.sweep(150)  # (members past their deadline expire first, as a worker sweeps)
        self.batches_match_the_model()  # (the callbacks that sweep fired, noted before the prune)
        self.now += 60_001  # (then the re-send window passes)
        ended = done = 0
        for batch_id, known in list(self.batches.items()):
            if self.done(known):
                done += 1
                self.pruned.add(batch_id)
                del self.batches[batch_id]
                ended += len(known.members)
                continue
            statuses = [self.status(m) for m in known.members]
            ended += sum(s in TERMINAL for s in statuses)
            known.gone += [s for s in statuses if s in TERMINAL]
            known.members = [m for m in known.members if self.status(m) not in TERMINAL]
        assert self.q.prune(max_age_ms=0, now=self.now) == ended + done

    # --- what Redis must hold -------------------------------------------------------------------

    @invariant()
    def batches_match_the_model(self) -> None:
        for batch_id, known in self.batches.items():
            assert batch_problems(self.q.redis, self.q.keys, batch_id) == []
            info = self.q.batch(batch_id)
            assert info is not None
            statuses = self.statuses(known)
            assert info.total == len(statuses) and info.closed == known.closed
            counts = (info.succeeded, info.failed, info.cancelled, info.expired)
            assert counts == tuple(
                statuses.count(s) for s in ("completed", "discarded", "cancelled", "expired")
            )
            if known.closed and all(s in TERMINAL for s in statuses):
                succeeded = statuses.count("completed") == len(statuses)
                known.due |= {"on_complete", "on_success" if succeeded else "on_failure"}
            fired = {c.kind for c in info.callbacks if c.job_id is not None}
            assert fired == known.due & known.kinds, (fired, known.due, known.kinds)
            for kind in fired:
                job_id = f"{batch_id}@{kind}"
                got = self.q.get_job(job_id, now=self.now)
                assert got is not None and got.job.callback_of == batch_id
                assert self.fired.setdefault(job_id, batch_id) == batch_id
        index = {m.decode() for m in self.q.redis.zrange(self.q.keys.batches_done, 0, -1)}
        assert index == {b for b, known in self.batches.items() if self.done(known)}
        assert all(self.q.batch(b, now=self.now) is None for b in self.pruned)
        callbacks = self.q.list_jobs("cb", "available", limit=1000, now=self.now)
        assert sorted(j.id for j in callbacks) == sorted(self.fired)  # each once, no other


def run(opener: Callable[[], tuple[Quasar, Callable[[], None]]]) -> None:
    class Machine(BatchMachine):
        def __init__(self) -> None:
            super().__init__(opener)

    run_state_machine_as_test(Machine, settings=SETTINGS)


@pytest.mark.parametrize("backend", ["fake", "redis"])
def test_batches_match_the_model(backend: str) -> None:
    if backend == "fake":

        def fake() -> tuple[Quasar, Callable[[], None]]:
            client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
            return Quasar(client, "batches", check_eviction_policy=False), client.close

        run(fake)
        return
    client = real_redis()

    def real() -> tuple[Quasar, Callable[[], None]]:
        namespace = f"bt-{uuid.uuid4().hex[:12]}"
        return Quasar(client, namespace), lambda: delete_namespace(client, namespace)

    try:
        run(real)
    finally:
        client.close()
