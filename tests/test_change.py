"""Supersede by input revision (an enqueue of an id with a higher revision) and ``change`` of a
waiting job: its input, priority and time, or promoted (docs/lifecycle.md, "Supersede" and
"change")."""

from __future__ import annotations

import re
from typing import Any

import pytest

from quasar_redis import (
    App,
    BatchApplied,
    BatchRefused,
    ClaimsApplied,
    DuplicateJob,
    FenceChanged,
    InvalidJob,
    JobApplied,
    JobRefused,
    LeaseHeld,
    MissingJob,
    NewJob,
    Quasar,
    RetryWaiting,
    StaleLease,
    StaleRevision,
    Status,
    Succeeded,
    Task,
    TerminalJob,
    Waiting,
)
from quasar_redis._call_base import JobChange

from .helpers import T0, applied, claimed, raw_job, snapshot, where


def events(q: Quasar) -> list[tuple[str, str]]:
    """The (job ids, ev) of every entry of the namespace's event stream, oldest first."""
    entries = q.redis.xrange(q.keys.events)
    return [(f[b"job"].decode(), f[b"ev"].decode()) for _, f in entries]


# --- supersede: an enqueue of an id with a higher input revision --------------------------------


def test_a_higher_revision_replaces_a_waiting_jobs_input_and_keeps_its_place(q: Quasar) -> None:
    applied(q.enqueue("s", {"v": 1}, id="j", delay_ms=5_000, now=T0))
    before = where(q, "j")
    job = applied(q.enqueue("s", {"v": 2}, id="j", input_revision=1, now=T0 + 10))
    assert (job.payload, job.input_revision, job.state) == ({"v": 2}, 1, Waiting(T0 + 5_000))
    assert where(q, "j") == before == {"delayed"}
    stored = q.get_job("j", now=T0 + 10)
    assert stored is not None and stored.job == job
    assert events(q)[-1] == ("j", "scheduled")


def test_a_stale_holders_calls_are_refused_and_the_new_revision_runs(q: Quasar) -> None:
    applied(q.enqueue("s", "old", id="j", max_attempts=1, now=T0))
    old = claimed(q.claim_job("j", "w1", 10_000, now=T0))
    job = applied(q.enqueue("s", "new", id="j", input_revision=1, now=T0 + 10))
    # a new revision is new work: Waiting, due now, its attempts afresh, the lease dropped
    assert (job.state, job.attempt, job.input_revision) == (Waiting(T0 + 10), 0, 1)
    assert job.fencing_version == old.job.fencing_version
    assert where(q, "j") == {"ready"}
    assert events(q)[-1] == ("j", "available")
    assert q.heartbeat(old.token, "w1", 10_000, now=T0 + 20).error == StaleLease()  # type: ignore[union-attr]
    new = claimed(q.claim("default", "w2", 10_000, now=T0 + 30))
    assert (new.job.payload, new.token.input_revision, new.job.attempt) == ("new", 1, 1)
    assert q.complete(old.token, "w1", result="old", now=T0 + 40) == JobRefused(StaleLease())
    done = applied(q.complete(new.token, "w2", result="new", now=T0 + 50))
    assert done.state == Succeeded("inline", T0 + 50) and done.result == "new"
    assert q.fail(old.token, "w1", "late", now=T0 + 60) == JobRefused(StaleLease())


def test_a_resent_claim_hands_out_the_token_it_did_after_a_supersede(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    applied(q.enqueue("s", id="k", now=T0))
    by_id = q.calls.claim_job("k", "w", 100, T0)
    by_queue = q.calls.claim_many("default", "w", 100, 1, T0)
    first = q.execute(by_queue)
    assert isinstance(first, ClaimsApplied)
    tokens = [claimed(q.execute(by_id)).token, first.claims[0].token]
    beat = q.calls.heartbeat(tokens[1], "w", 500, T0 + 1)
    tokens.append(claimed(q.execute(beat)).token)
    for job_id in ("j", "k"):
        applied(q.enqueue("s", id=job_id, input_revision=1, now=T0 + 2))
    again = q.execute(by_queue)
    assert isinstance(again, ClaimsApplied) and again.claims[0].token == tokens[1]
    assert claimed(q.execute(by_id)).token == tokens[0]
    assert claimed(q.execute(beat)).token == tokens[2]
    assert {t.input_revision for t in tokens} == {0}


def test_a_retry_waiting_job_of_a_new_revision_is_due_now_with_its_attempts_afresh(
    q: Quasar,
) -> None:
    applied(q.enqueue("s", 1, id="j", now=T0))
    claim = claimed(q.claim_job("j", "w", 100, now=T0))
    failed = applied(q.fail(claim.token, "w", "boom", retry_delay_ms=60_000, now=T0 + 1))
    assert failed.state == RetryWaiting("boom", T0 + 60_001)
    job = applied(q.enqueue("s", 2, id="j", input_revision=3, now=T0 + 2))
    assert (job.state, job.attempt, job.input_revision) == (Waiting(T0 + 2), 0, 3)
    assert where(q, "j") == {"ready"}


def test_a_lower_revision_is_refused_and_the_same_revision_stays_a_duplicate(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="j", input_revision=5, now=T0))
    before = snapshot(q)
    assert q.enqueue("s", 0, id="j", input_revision=4, now=T0) == JobRefused(StaleRevision("j", 5))
    assert q.enqueue("s", 0, id="j", input_revision=5, now=T0) == JobRefused(DuplicateJob("j"))
    assert snapshot(q) == before
    # (in "each" mode a refusal is kept in the call's record, for a re-sent call)
    assert q.enqueue_each([NewJob("s", id="j", input_revision=1)], now=T0) == [
        JobRefused(StaleRevision("j", 5))
    ]


def test_a_finished_job_is_not_superseded(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="j", now=T0))
    claim = claimed(q.claim_job("j", "w", 100, now=T0))
    applied(q.complete(claim.token, "w", result=1, now=T0 + 1))
    before = snapshot(q)
    assert q.enqueue("s", 2, id="j", input_revision=1, now=T0 + 2) == JobRefused(DuplicateJob("j"))
    assert snapshot(q) == before


def test_a_long_payload_replaced_by_a_short_one_leaves_none_of_its_chunks(q: Quasar) -> None:
    applied(q.enqueue("s", "x" * 500, id="j", now=T0))
    job = applied(q.enqueue("s", "y", id="j", input_revision=1, now=T0))
    assert job.payload == "y"
    assert not [k for k in raw_job(q, "j") if re.fullmatch(r"p\d+", k)]
    longer = applied(q.enqueue("s", "z" * 300, id="j", input_revision=2, now=T0))
    assert longer.payload == "z" * 300
    stored = q.get_job("j", now=T0)
    assert stored is not None and stored.job.payload == "z" * 300


def test_a_batch_supersedes_beside_new_jobs_and_a_resent_batch_revises_once(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="a", now=T0))
    call = q.calls.enqueue_many(
        [NewJob("s", 2, id="a", input_revision=1), NewJob("s", 3, id="b")], T0 + 1
    )
    first = q.execute(call)
    assert isinstance(first, BatchApplied)
    assert [(j.id, j.payload, j.input_revision) for j in first.jobs] == [("a", 2, 1), ("b", 3, 0)]
    before = snapshot(q)
    again = q.execute(call)
    assert isinstance(again, BatchApplied) and [j.id for j in again.jobs] == ["a", "b"]
    assert snapshot(q) == before
    ids = q.enqueue_many([NewJob("s", 4, id="a", input_revision=2)], ids_only=True, now=T0 + 2)
    assert ids == BatchApplied((), ("a",))
    stored = q.get_job("a", now=T0 + 2)
    assert stored is not None and (stored.job.payload, stored.job.input_revision) == (4, 2)


def test_a_batch_skipping_duplicates_still_supersedes_and_a_resent_one_revises_once(
    q: Quasar,
) -> None:
    """Skipping duplicates skips what would be DuplicateJob only: a higher revision still
    supersedes, a lower one still refuses the batch."""
    applied(q.enqueue("s", 1, id="a", now=T0))
    applied(q.enqueue("s", 1, id="d", now=T0))
    jobs = [NewJob("s", 2, id="a", input_revision=1), NewJob("s", 9, id="d"), NewJob("s", id="n")]
    call = q.calls.enqueue_many(jobs, T0 + 1, on_duplicate="skip")
    first = q.execute(call)
    assert isinstance(first, BatchApplied) and first.deduplicated == (1,)
    assert [(j.id, j.payload, j.input_revision) for j in first.jobs] == [
        ("a", 2, 1),  # superseded
        ("d", 1, 0),  # skipped: the job that exists, unchanged
        ("n", None, 0),
    ]
    before = snapshot(q)
    again = q.execute(call)  # re-sent: the same answers, nothing revised twice
    assert isinstance(again, BatchApplied) and again.deduplicated == (1,)
    assert [(j.id, j.input_revision) for j in again.jobs] == [("a", 1), ("d", 0), ("n", 0)]
    assert snapshot(q) == before
    stale = [NewJob("s", 0, id="a", input_revision=0), NewJob("s", id="m")]
    assert q.enqueue_many(stale, now=T0 + 2, on_duplicate="skip") == BatchRefused(
        0, StaleRevision("a", 1)
    )
    assert snapshot(q) == before


def test_a_resent_supersede_is_applied_after_a_later_revision(q: Quasar) -> None:
    for job_id in ("a", "b"):
        applied(q.enqueue("s", 0, id=job_id, now=T0))
    one = q.calls.enqueue(NewJob("s", 1, id="a", input_revision=1), T0 + 1)
    each = q.calls.enqueue_each([NewJob("s", 1, id="b", input_revision=1)], T0 + 1)
    assert isinstance(q.execute(one), JobApplied)
    assert isinstance(q.execute(each)[0], JobApplied)
    for job_id in ("a", "b"):
        applied(q.enqueue("s", 9, id=job_id, input_revision=9, now=T0 + 2))
    before = snapshot(q)
    again = [q.execute(one), q.execute(each)[0]]
    jobs = [applied(result) for result in again]  # not StaleRevision: applied, as they are now
    assert [(j.id, j.payload, j.input_revision) for j in jobs] == [("a", 9, 9), ("b", 9, 9)]
    assert snapshot(q) == before


def test_each_mode_revises_a_job_it_applied_earlier_in_the_call(q: Quasar) -> None:
    specs = [NewJob("s", i, id="a", input_revision=i) for i in range(3)]
    results = q.enqueue_each([*specs, NewJob("s", id="a", input_revision=1)], now=T0)
    assert [r.job.payload for r in results[:3]] == [0, 1, 2]  # type: ignore[union-attr]
    assert results[3] == JobRefused(StaleRevision("a", 2))
    batch = q.enqueue_many([NewJob("s", id="b"), NewJob("s", id="b", input_revision=1)], now=T0)
    assert batch == BatchRefused(1, DuplicateJob("b"))  # all or nothing: one job per id


def test_enqueue_each_supersedes_and_a_resent_call_revises_once(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="a", now=T0))
    applied(q.enqueue("s", 1, id="b", input_revision=2, now=T0))
    call = q.calls.enqueue_each(
        [NewJob("s", 2, id="a", input_revision=1), NewJob("s", id="b", input_revision=1)], T0
    )
    first = q.execute(call)
    assert isinstance(first[0], JobApplied) and first[0].job.payload == 2
    assert first[1] == JobRefused(StaleRevision("b", 2))
    before = snapshot(q)
    assert q.execute(call)[1] == first[1]
    assert snapshot(q) == before


# --- change -------------------------------------------------------------------------------------


def test_change_the_input_of_a_waiting_job(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="j", now=T0))
    job = applied(q.change("j", payload=2, now=T0 + 1))
    assert (job.payload, job.input_revision, job.state) == (2, 1, Waiting(T0))
    job = applied(q.change("j", payload=None, input_revision=7, now=T0 + 2))
    assert (job.payload, job.input_revision) == (None, 7)
    before = snapshot(q)
    assert q.change("j", payload=3, input_revision=7) == JobRefused(StaleRevision("j", 7))
    assert snapshot(q) == before


def test_change_priority_moves_the_job_in_the_claim_order(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", now=T0))
    applied(q.enqueue("s", id="b", now=T0))
    job = applied(q.change("b", priority=-5, now=T0 + 1))
    assert job.priority == -5 and job.state == Waiting(T0)
    assert claimed(q.claim("default", "w", 100, now=T0 + 2)).job.id == "b"
    assert events(q)[-2] == ("b", "available")


def test_reschedule_and_promote(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    job = applied(q.change("j", delay_ms=60_000, now=T0 + 1))
    assert job.state == Waiting(T0 + 60_001) and where(q, "j") == {"delayed"}
    assert q.claim("default", "w", 100, now=T0 + 2).error.next_at == T0 + 60_001  # type: ignore[union-attr]
    job = applied(q.change("j", available_at=T0 + 30_000, now=T0 + 2))
    assert job.state == Waiting(T0 + 30_000)
    job = applied(q.change("j", promote=True, now=T0 + 3))
    assert job.state == Waiting(T0 + 3) and where(q, "j") == {"ready"}
    assert job.inserted_at == T0
    assert events(q)[-1] == ("j", "available")
    # promoting a due job keeps its place
    assert applied(q.change("j", promote=True, now=T0 + 9)).state == Waiting(T0 + 3)
    assert claimed(q.claim("default", "w", 100, now=T0 + 10)).job.id == "j"


def test_change_a_retry_waiting_job_keeps_it_retryable(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    claim = claimed(q.claim_job("j", "w", 100, now=T0))
    applied(q.fail(claim.token, "w", "boom", retry_delay_ms=60_000, now=T0 + 1))
    job = applied(q.change("j", promote=True, priority=3, now=T0 + 2))
    assert (job.state, job.priority, job.attempt) == (RetryWaiting("boom", T0 + 2), 3, 1)
    assert where(q, "j") == {"retrying", "ready"}


def test_change_refuses_a_running_a_finished_and_a_missing_job(q: Quasar) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    claim = claimed(q.claim_job("j", "w", 100, now=T0))
    before = snapshot(q)
    assert q.change("j", priority=1, now=T0) == JobRefused(LeaseHeld(T0 + 100))
    assert q.change("j", payload=2, now=T0 + 500) == JobRefused(LeaseHeld(T0 + 100))
    assert snapshot(q) == before
    applied(q.complete(claim.token, "w", now=T0 + 1))
    before = snapshot(q)
    assert q.change("j", promote=True, now=T0 + 2) == JobRefused(TerminalJob())
    assert q.change("ghost", promote=True) == JobRefused(MissingJob("ghost"))
    assert snapshot(q) == before


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, "nothing to change"),
        ({"input_revision": 3}, "input_revision needs a payload"),
        ({"delay_ms": 1, "promote": True}, "give one of available_at, delay and promote"),
        ({"available_at": 1, "delay_ms": 1}, "give one of available_at, delay and promote"),
        ({"priority": 10**7}, "priority must be between -1000000 and 1000000"),
        ({"priority": "high"}, "priority must be an integer"),
        ({"delay_ms": -1}, "delay must be nonnegative"),
        ({"available_at": -1}, "available_at must be nonnegative"),
        ({"available_at": 2**50}, "available_at must be before"),
        ({"delay_ms": "soon"}, "delay must be an integer"),
        ({"payload": 1, "input_revision": -1}, "input_revision must be nonnegative"),
        ({"promote": "yes"}, "promote must be true or false"),
        ({"payload": object()}, "payload "),
        ({"payload": "x" * 2_000_000}, "payload is "),
    ],
)
def test_change_refuses_bad_input_and_changes_nothing(
    q: Quasar, changes: dict[str, object], reason: str
) -> None:
    applied(q.enqueue("s", id="j", now=T0))
    before = snapshot(q)
    result = q.change("j", now=T0, **changes)  # type: ignore[arg-type]
    assert isinstance(result, JobRefused) and isinstance(result.error, InvalidJob)
    assert result.error.reason.startswith(reason)
    assert q.change("bad id", promote=True) == JobRefused(InvalidJob(result_of_bad_id()))
    assert snapshot(q) == before


def result_of_bad_id() -> str:
    from quasar_redis._ids import id_error

    reason = id_error("bad id", "job_id")
    assert reason is not None
    return reason


def test_the_variants_of_change_each_change_one_thing(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="j", now=T0))
    job = applied(q.update_input("j", 2, now=T0 + 1))
    assert (job.payload, job.input_revision) == (2, 1)
    assert applied(q.update_input("j", 3, input_revision=5, now=T0 + 1)).input_revision == 5
    assert applied(q.change_priority("j", 7, now=T0 + 1)).priority == 7
    assert applied(q.reschedule("j", delay_ms=100, now=T0 + 2)).state == Waiting(T0 + 102)
    assert applied(q.reschedule("j", available_at=T0 + 50, now=T0 + 2)).state == Waiting(T0 + 50)
    assert applied(q.promote("j", now=T0 + 3)).state == Waiting(T0 + 3)
    job = applied(q.promote("j", expected_fence=0, now=T0 + 4))
    assert (job.state, job.payload, job.priority) == (Waiting(T0 + 3), 3, 7)
    assert q.reschedule("j", now=T0) == JobRefused(InvalidJob("nothing to change"))
    assert q.promote("j", expected_fence=1) == JobRefused(FenceChanged())


def test_change_with_a_fence_and_a_resent_change(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="j", now=T0))
    assert q.change("j", promote=True, expected_fence=1, now=T0) == JobRefused(FenceChanged())
    call = q.calls.change("j", 0, JobChange(payload=2), now=T0 + 1)
    first = q.execute(call)
    assert isinstance(first, JobApplied) and first.job.input_revision == 1
    before = snapshot(q)
    again = q.execute(call)
    assert isinstance(again, JobApplied) and again.job.input_revision == 1  # not bumped twice
    assert snapshot(q) == before


# --- the task API -------------------------------------------------------------------------------


def report(month: int) -> int:
    return month * 10


def test_a_task_handle_promotes_its_job_and_a_newer_input_runs(app: App) -> None:
    task: Task[..., Any] = app.task(report, name="report")
    handle = task.options(delay=3600, id="r").enqueue(1)
    assert app.drain(timeout=10) == 0  # scheduled in an hour
    job = applied(handle.promote())
    assert job.status(job.state.available_at) is Status.AVAILABLE  # type: ignore[union-attr]
    again = task.options(id="r", input_revision=1).enqueue(2)  # a newer input supersedes it
    assert again.id == "r"
    assert app.drain(timeout=10) == 1
    assert handle.result(timeout=10) == 20
