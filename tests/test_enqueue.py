"""enqueue (lua/enqueue.lua): the job's own checks, duplicates, dependencies, batches."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from quasar_redis import (
    BatchApplied,
    BatchRefused,
    DuplicateJob,
    IncompleteDependency,
    InvalidJob,
    JobRefused,
    MissingDependency,
    NewJob,
    Quasar,
    Status,
    Waiting,
)

from .helpers import (
    FULL_JOB,
    T0,
    applied,
    claimed,
    comparable,
    delete_namespace,
    raw_job,
    snapshot,
    where,
)


def test_enqueue_applies_waiting_with_attempt_and_fence_zero(q: Quasar) -> None:
    job = applied(q.enqueue("send", {"to": "a@b"}, id="j1", priority=3, now=T0))
    assert job.id == "j1"
    assert job.stage == "send"
    assert job.queue == "default"
    assert job.payload == {"to": "a@b"}
    assert job.state == Waiting(T0)
    assert (job.attempt, job.fencing_version, job.max_attempts) == (0, 0, 3)
    assert (job.input_ref, job.input_revision, job.priority) == ("inline", 0, 3)
    assert job.inserted_at == T0
    assert job.status(T0) is Status.AVAILABLE
    assert where(q, "j1") == {"ready"}
    fields = raw_job(q, "j1")
    assert fields["st"] == b"W"
    assert fields["at"] == str(T0).encode()


def test_enqueue_scheduled_by_delay_and_by_time(q: Quasar) -> None:
    job = applied(q.enqueue("s", id="d", delay_ms=500, now=T0))
    assert job.state == Waiting(T0 + 500)
    assert job.status(T0) is Status.SCHEDULED
    assert where(q, "d") == {"delayed"}
    at = applied(q.enqueue("s", id="a", available_at=T0 + 10, delay_ms=99, now=T0))
    assert at.state == Waiting(T0 + 10)  # an absolute time wins over a delay


def test_enqueue_uses_the_server_clock_by_default(q: Quasar) -> None:
    seconds, micros = q.redis.time()
    server_ms = seconds * 1000 + micros // 1000
    job = applied(q.enqueue("s", id="j"))
    assert abs(job.inserted_at - server_ms) < 5_000
    assert job.state == Waiting(job.inserted_at)


def test_enqueue_generates_an_id_when_none_is_given(q: Quasar) -> None:
    a = applied(q.enqueue("s", now=T0))
    b = applied(q.enqueue("s", now=T0))
    assert a.id != b.id
    assert len(a.id) == 16


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"id": ""}, "id must not be empty"),
        ({"stage": ""}, "stage must not be empty"),
        ({"input_ref": ""}, "input_ref must not be empty"),
        ({"input_revision": -1}, "input_revision must be nonnegative"),
        ({"max_attempts": 0}, "max_attempts must be positive"),
        ({"available_at": -1}, "available_at must be nonnegative"),
        ({"delay_ms": -5}, "delay must be nonnegative"),
    ],
)
def test_enqueue_refuses_invalid_job_fields(
    q: Quasar, overrides: dict[str, object], reason: str
) -> None:
    args: dict[str, object] = {"stage": "s", "id": "x", "now": T0}
    args.update(overrides)
    before = snapshot(q)
    result = q.enqueue(**args)  # type: ignore[arg-type]
    assert result == JobRefused(InvalidJob(reason))
    assert snapshot(q) == before


def test_enqueue_refusals_follow_the_lifecycle_order(q: Quasar) -> None:
    everything_wrong = q.enqueue(
        "", id="", input_ref="", input_revision=-1, max_attempts=0, available_at=-1, now=T0
    )
    assert everything_wrong == JobRefused(InvalidJob("id must not be empty"))
    rest = q.enqueue("", id="x", input_ref="", max_attempts=0, now=T0)
    assert rest == JobRefused(InvalidJob("stage must not be empty"))
    later = q.enqueue("s", id="x", input_revision=-1, max_attempts=0, available_at=-1, now=T0)
    assert later == JobRefused(InvalidJob("input_revision must be nonnegative"))
    last = q.enqueue("s", id="x", max_attempts=0, available_at=-1, now=T0)
    assert last == JobRefused(InvalidJob("max_attempts must be positive"))


def test_enqueue_refuses_a_duplicate_id_and_changes_nothing(q: Quasar) -> None:
    applied(q.enqueue("s", {"v": 1}, id="j", now=T0))
    before = snapshot(q)
    assert q.enqueue("other", {"v": 2}, id="j", now=T0 + 1) == JobRefused(DuplicateJob("j"))
    assert snapshot(q) == before


def test_enqueue_refuses_a_missing_dependency(q: Quasar) -> None:
    before = snapshot(q)
    result = q.enqueue("s", id="j", dependencies=["nope"], now=T0)
    assert result == JobRefused(MissingDependency("nope"))
    assert snapshot(q) == before


def test_enqueue_with_unmet_dependency_is_blocked_and_says_on_what(q: Quasar) -> None:
    dep = applied(q.enqueue("s", id="a", now=T0))
    job = applied(q.enqueue("s", id="b", dependencies=[dep], now=T0))
    assert job.dependencies == ("a",)
    assert job.pending_dependencies == 1
    assert where(q, "b") == {"blocked"}
    info = q.get_job("b", now=T0)
    assert info is not None
    assert info.waiting_on == "a"
    assert info.status is Status.BLOCKED


def test_enqueue_after_dependency_succeeded_is_claimable_at_once(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    claim = claimed(q.claim("default", "w", 1000, now=T0))
    applied(q.complete(claim.token, "w", now=T0))
    job = applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    assert job.pending_dependencies == 0
    assert where(q, "b") == {"ready"}


def test_enqueue_refuses_a_cancelled_dependency(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    q.cancel("a", now=T0)
    result = q.enqueue("s", id="b", dependencies=["a"], now=T0)
    assert result == JobRefused(IncompleteDependency("a"))
    assert q.get_job("b") is None


def test_enqueue_on_a_failed_dependency_blocks_or_is_refused_by_policy(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", max_attempts=1, now=T0))
    claim = claimed(q.claim("default", "w", 1000, now=T0))
    applied(q.permanent_fail(claim.token, "w", "boom", now=T0))
    blocked = applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    assert blocked.pending_dependencies == 1
    refused = q.enqueue("s", id="c", dependencies=["a"], on_dependency_failure="cancel", now=T0)
    assert refused == JobRefused(IncompleteDependency("a"))


def test_batch_is_applied_whole_with_internal_dependencies(q: Quasar) -> None:
    jobs = [
        NewJob("s", {"i": 0}, id="b0"),
        NewJob("s", {"i": 1}, id="b1", dependencies=["b0"]),
        NewJob("s", {"i": 2}, id="b2", dependencies=["b0", "b1"], queue="other"),
    ]
    result = q.enqueue_many(jobs, now=T0)
    assert isinstance(result, BatchApplied)
    assert [j.id for j in result.jobs] == ["b0", "b1", "b2"]
    assert [j.pending_dependencies for j in result.jobs] == [0, 1, 2]
    assert where(q, "b2", "other") == {"blocked"}


def test_batch_refusal_names_the_job_and_writes_nothing(q: Quasar) -> None:
    applied(q.enqueue("s", id="exists", now=T0))
    before = snapshot(q)
    jobs = [NewJob("s", id="n0"), NewJob("s", id="n1"), NewJob("s", id="exists")]
    assert q.enqueue_many(jobs, now=T0) == BatchRefused(2, DuplicateJob("exists"))
    twice = [NewJob("s", id="n0"), NewJob("s", id="n0")]
    assert q.enqueue_many(twice, now=T0) == BatchRefused(1, DuplicateJob("n0"))
    later_dep = [NewJob("s", id="n0", dependencies=["n1"]), NewJob("s", id="n1")]
    assert q.enqueue_many(later_dep, now=T0) == BatchRefused(0, MissingDependency("n1"))
    bad = [NewJob("s", id="n0"), NewJob("", id="n1")]
    assert q.enqueue_many(bad, now=T0) == BatchRefused(1, InvalidJob("stage must not be empty"))
    assert snapshot(q) == before


def test_compact_hash_omits_defaults_and_chunks_the_payload(q: Quasar, backend: str) -> None:
    payload = {"blob": "x" * 150}
    job = applied(q.enqueue("s", payload, id="j", now=T0))
    assert job.payload == payload
    fields = raw_job(q, "j")
    assert not {"rv", "a", "f", "pd", "dp", "ir", "odf", "pr", "m", "q", "ins"} & fields.keys()
    assert {"p", "p2", "p3"} <= fields.keys()
    assert all(len(v) <= 64 for v in fields.values())
    if backend == "redis":
        # (the compact encoding: listpack since Redis 7, ziplist on 6.2)
        assert q.redis.object("encoding", q.keys.job("j")) in (b"listpack", b"ziplist")
    info = q.get_job("j")
    assert info is not None
    assert info.job.payload == payload
    assert (info.job.input_ref, info.job.attempt, info.job.priority) == ("inline", 0, 0)


@pytest.mark.parametrize("size", [0, 63, 64, 65, 1024, 1025, 5000])
def test_payloads_and_results_of_any_size_round_trip(q: Quasar, size: int) -> None:
    blob = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    applied(q.enqueue("s", blob, id="j", now=T0))
    claim = claimed(q.claim("default", "w", 1000, now=T0))
    assert claim.job.payload == blob
    done = applied(q.complete(claim.token, "w", result=blob[::-1], now=T0 + 1))
    assert done.result == blob[::-1]
    info = q.get_job("j")
    assert info is not None
    assert (info.job.payload, info.job.result) == (blob, blob[::-1])


def test_enqueue_many_can_reply_with_ids_only(q: Quasar) -> None:
    result = q.enqueue_many([NewJob("s", id="a"), NewJob("s")], now=T0, ids_only=True)
    assert isinstance(result, BatchApplied)
    assert result.jobs == ()
    assert result.ids[0] == "a"
    assert len(result.ids) == 2
    full = q.enqueue_many([NewJob("s", id="b")], now=T0)
    assert isinstance(full, BatchApplied)
    assert full.ids == ("b",)


def test_enqueue_each_applies_every_job_on_its_own(q: Quasar) -> None:
    applied(q.enqueue("s", id="exists", now=T0))
    results = q.enqueue_each(
        [
            NewJob("s", id="a"),
            NewJob("s", id="exists"),
            NewJob("", id="bad"),
            NewJob("s", id="b", dependencies=["a"]),
            NewJob("s", id="c", dependencies=["bad"]),
            NewJob("s", id="d", payload=object()),
        ],
        now=T0,
    )
    assert [type(r).__name__ for r in results] == [
        "JobApplied",
        "JobRefused",
        "JobRefused",
        "JobApplied",
        "JobRefused",
        "JobRefused",
    ]
    assert results[1] == JobRefused(DuplicateJob("exists"))
    assert results[2] == JobRefused(InvalidJob("stage must not be empty"))
    assert results[4] == JobRefused(MissingDependency("bad"))
    assert "payload cannot be encoded" in str(results[5])
    assert applied(results[3]).pending_dependencies == 1
    assert q.get_job("bad") is None
    call = q.calls.enqueue_each([NewJob("s", id="x"), NewJob("s", id="exists")], T0)
    first = q.execute(call)
    before = snapshot(q)
    assert q.execute(call) == first  # re-sent: the same answers, nothing more written
    assert snapshot(q) == before


def test_the_job_an_enqueue_returns_is_the_job_stored(q: Quasar) -> None:
    # The reply carries only what the server decided (its clock, the dependencies pending); the
    # client builds the rest from what it sent: it must equal the job read back.
    applied(q.enqueue("s", id="dep", now=T0))
    kinds: list[NewJob] = [
        NewJob("s"),
        FULL_JOB,
        NewJob("s", b"x" * 300, delay_ms=1500),
        NewJob("s", None, available_at=T0 + 99),
    ]
    for now in (T0, None):
        got = [applied(q.enqueue_job(j, now=now)) for j in kinds[:1]]
        many = q.enqueue_many([NewJob("s", i, priority=i) for i in range(3)], now=now)
        assert isinstance(many, BatchApplied)
        got += list(many.jobs)
        got += [applied(r) for r in q.enqueue_each(kinds[2:], now=now)]
        for job in got:
            info = q.get_job(job.id)
            assert info is not None and info.job == job, job.id
    full = applied(q.enqueue_job(kinds[1], now=T0))
    assert full.pending_dependencies == 1
    info = q.get_job("full")
    assert info is not None and info.job == full


#: A single plain job of each shape the plain enqueue writes (lua/include/plain_enqueue.lua):
#: with a delay, an available_at past or later, a deadline, an id of any text, each option.
_PLAIN_SHAPES: dict[str, dict[str, Any]] = {
    "ready": {},
    "chosen id": {"id": "mine"},
    "id beyond ASCII": {"id": "naïve-日本-ü"},
    "delay": {"delay_ms": 5_000},
    "available_at past": {"available_at": T0 - 5_000},
    "available_at now": {"available_at": T0},
    "available_at later": {"available_at": T0 + 5_000, "delay_ms": 99},
    "deadline": {"deadline": T0 + 60_000},
    "expires_in, due later": {"delay_ms": 5_000, "expires_in_ms": 60_000},
    "options": {
        "queue": "other",
        "priority": -3,
        "max_attempts": 7,
        "input_ref": "s3://bucket/x",
        "input_revision": 2,
        "on_dependency_failure": "cancel",
    },
}


@pytest.mark.parametrize("shape", sorted(_PLAIN_SHAPES))
def test_a_plain_job_sent_alone_is_written_as_the_general_way_writes_it(
    q: Quasar, redis_client: Any, backend: str, namespace: str, shape: str
) -> None:
    # The plain enqueue writes a single job (q.enqueue_job, after one job of another queue);
    # the general way, a batch of the same two jobs in a namespace of its own: the same keys,
    # fields, index entries, wake-ups and events.
    job, other = NewJob("s", {"n": 1}, **_PLAIN_SHAPES[shape]), NewJob("s", id="first", queue="q2")
    general_ns = f"{namespace}-general"
    general = Quasar(redis_client, general_ns, functions=backend == "redis")
    try:
        applied(q.enqueue_job(other, now=T0))
        one = applied(q.enqueue_job(job, now=T0))
        batch = general.enqueue_many([other, job], now=T0)
        assert isinstance(batch, BatchApplied), batch
        two = batch.jobs[1]
        assert dataclasses.replace(two, id=one.id) == one
        assert comparable(q, [one.id]) == comparable(general, [two.id])
    finally:
        delete_namespace(redis_client, general_ns)
