"""Batches (docs/workflows.md, "Batches"): open, members, close, the callbacks each enqueued
exactly once when the last member ends, the counts through every way a member ends (complete,
fail, cancel and its cascade, a deadline, an operator retry), re-sent calls, paging the members,
and bad input (a typed refusal, nothing written). On both backends, through both clients."""

from __future__ import annotations

from typing import Any

import pytest

from quasar_redis import (
    BatchApplied,
    BatchClosed,
    BatchExists,
    BatchInfo,
    BatchOpened,
    BatchOpenRefused,
    BatchRefused,
    CrossPartition,
    DuplicateJob,
    InvalidArgument,
    InvalidJob,
    JobRefused,
    MissingBatch,
    NewJob,
    Quasar,
    Unique,
)
from quasar_redis._partitions import hashed, partition_of

from .clients import clients
from .helpers import T0, applied, claimed, snapshot

LEASE = 60_000
DONE = NewJob("done", {"n": 1}, queue="cb", priority=-5, max_attempts=2)
FAILED = NewJob("failed", queue="cb")
COMPLETE = NewJob("complete", queue="cb")


def opened(q: Quasar, batch_id: str = "b", **callbacks: Any) -> None:
    if not callbacks:
        callbacks = {"on_success": DONE, "on_failure": FAILED, "on_complete": COMPLETE}
    assert q.open_batch(batch_id, now=T0, **callbacks) == BatchOpened(batch_id, True)


def members(q: Quasar, n: int, batch_id: str = "b", prefix: str = "m") -> list[str]:
    jobs = [NewJob("work", i, id=f"{prefix}{i}", batch=batch_id) for i in range(n)]
    result = q.enqueue_many(jobs, now=T0, ids_only=True)
    assert isinstance(result, BatchApplied), result
    return list(result.ids)


def run(q: Quasar, job_id: str, outcome: str = "complete", now: int = T0 + 1) -> None:
    token = claimed(q.claim_job(job_id, "w", LEASE, now=now)).token
    if outcome == "complete":
        applied(q.complete(token, "w", result={"id": job_id}, now=now))
    else:
        applied(q.permanent_fail(token, "w", "broken", kind="ValueError", now=now))


def info(q: Quasar, batch_id: str = "b") -> BatchInfo:
    found = q.batch(batch_id)
    assert found is not None
    return found


def fired(q: Quasar, batch_id: str = "b") -> dict[str, str | None]:
    return {c.kind: c.job_id for c in info(q, batch_id).callbacks}


def state(q: Quasar) -> dict[str, Any]:
    """Every key but call records (the asyncio client's coalesced enqueues record refusals)."""
    return {k: v for k, v in snapshot(q).items() if ":call:" not in k}


def callback_jobs(q: Quasar) -> list[str]:
    return sorted(k.decode().split("job:")[1] for k in q.redis.keys(f"{q.keys.root}job:*@*"))


# --- the callbacks ------------------------------------------------------------------------------


def test_every_member_succeeds_then_on_success_and_on_complete_fire_once(q: Quasar) -> None:
    opened(q)
    ids = members(q, 3)
    assert info(q).total == 3 and info(q).pending == 3 and not info(q).closed
    for job_id in ids:
        run(q, job_id)
    assert fired(q) == {"on_success": None, "on_failure": None, "on_complete": None}  # open
    assert q.close_batch("b", now=T0 + 2) is True
    b = info(q)
    assert (b.total, b.succeeded, b.pending, b.closed, b.done) == (3, 3, 0, True, True)
    assert fired(q) == {
        "on_success": "b@on_success",
        "on_failure": None,
        "on_complete": "b@on_complete",
    }
    got = q.get_job("b@on_success")
    assert got is not None
    job = got.job
    assert (job.queue, job.stage, job.payload, job.priority, job.max_attempts) == (
        "cb",
        "done",
        {"n": 1},
        -5,
        2,
    )
    assert job.callback_of == "b" and job.batch is None
    assert q.close_batch("b", now=T0 + 3) is False  # closed already: nothing more
    assert callback_jobs(q) == ["b@on_complete", "b@on_success"]


def test_the_last_member_to_end_after_the_close_fires_them(q: Quasar) -> None:
    opened(q)
    ids = members(q, 2)
    run(q, ids[0])
    assert q.close_batch("b", now=T0 + 2) is True
    assert callback_jobs(q) == []
    run(q, ids[1], "fail", now=T0 + 3)
    assert fired(q) == {
        "on_success": None,
        "on_failure": "b@on_failure",
        "on_complete": "b@on_complete",
    }
    b = info(q)
    assert (b.succeeded, b.failed) == (1, 1)


def test_an_operator_retry_of_the_failed_member_then_its_success_fires_on_success(
    q: Quasar,
) -> None:
    opened(q)
    ids = members(q, 2)
    run(q, ids[0])
    run(q, ids[1], "fail")
    q.close_batch("b", now=T0 + 2)
    assert fired(q)["on_failure"] == "b@on_failure"
    applied(q.retry(ids[1], now=T0 + 3))
    b = info(q)
    assert (b.succeeded, b.failed, b.pending) == (1, 0, 1)
    run(q, ids[1], now=T0 + 4)
    assert fired(q) == {
        "on_success": "b@on_success",
        "on_failure": "b@on_failure",
        "on_complete": "b@on_complete",
    }
    assert len(callback_jobs(q)) == 3  # on_complete and on_failure were not enqueued again


def test_an_empty_batch_fires_on_complete_and_on_success_at_its_close(q: Quasar) -> None:
    opened(q)
    assert q.close_batch("b", now=T0) is True
    assert fired(q) == {
        "on_success": "b@on_success",
        "on_failure": None,
        "on_complete": "b@on_complete",
    }


def test_a_batch_without_callbacks_counts_its_members(q: Quasar) -> None:
    assert q.open_batch("plain", now=T0) == BatchOpened("plain", True)
    ids = members(q, 2, "plain")
    run(q, ids[0])
    q.close_batch("plain")
    b = info(q, "plain")
    assert (b.total, b.succeeded, b.pending, b.callbacks) == (2, 1, 1, ())
    run(q, ids[1])
    assert info(q, "plain").done and callback_jobs(q) == []


def test_cancel_cascade_and_deadline_count_as_the_members_end(q: Quasar) -> None:
    opened(q)
    applied(q.enqueue("parent", id="parent", now=T0))
    applied(q.enqueue("work", id="child", dependencies=["parent"], batch="b", now=T0))
    applied(q.enqueue("work", id="late", batch="b", deadline=T0 + 10, now=T0))
    applied(q.enqueue("work", id="gone", batch="b", now=T0))
    q.close_batch("b", now=T0)
    q.cancel("gone", now=T0 + 1)
    q.cancel("parent", now=T0 + 1)  # its dependent, a member, is cancelled in the same call
    assert info(q).cancelled == 2 and callback_jobs(q) == []
    q.sweep_expired(now=T0 + 20)  # "late" was never started by its deadline
    b = info(q)
    assert (b.cancelled, b.expired, b.pending) == (2, 1, 0)
    assert fired(q) == {
        "on_success": None,
        "on_failure": "b@on_failure",
        "on_complete": "b@on_complete",
    }


def test_a_resent_completion_fires_nothing_twice(q: Quasar) -> None:
    opened(q)
    (job_id,) = members(q, 1)
    q.close_batch("b", now=T0)
    token = claimed(q.claim_job(job_id, "w", LEASE, now=T0 + 1)).token
    call = q.calls.complete(token, "w", "inline", 1, T0 + 2)
    first = q.execute(call)
    before = state(q)
    again = q.execute(call)  # the same call id: answered as the first delivery was
    assert type(again) is type(first)
    assert callback_jobs(q) == ["b@on_complete", "b@on_success"]
    assert state(q) == before


def test_a_resent_open_and_close_answer_as_the_first(q: Quasar) -> None:
    call = q.calls.open_batch("b", on_complete=COMPLETE, now=T0)
    assert q.execute(call) == BatchOpened("b", True)
    assert q.execute(call) == BatchOpened("b", True)
    assert q.open_batch("b", on_complete=COMPLETE) == BatchOpened("b", False)
    close = q.calls.close_batch("b")
    assert q.execute(close) is True
    assert q.execute(close) is True
    assert callback_jobs(q) == ["b@on_complete"]


def test_enqueue_many_into_a_batch_keeps_the_order_of_its_members(q: Quasar) -> None:
    opened(q)
    members(q, 5, prefix="a")
    members(q, 3, prefix="c")
    applied(q.enqueue("work", id="z", batch="b"))
    page = q.batch_results("b", start=2, count=4)
    assert [m.id for m in page.members] == ["a2", "a3", "a4", "c0"]
    assert (page.total, page.start, page.next_start) == (9, 2, 6)
    last = q.batch_results("b", start=6)
    assert [m.id for m in last.members] == ["c1", "c2", "z"] and last.next_start is None


def test_batch_results_give_each_members_status_result_and_error(q: Quasar) -> None:
    opened(q)
    ids = members(q, 3)
    run(q, ids[0])
    run(q, ids[1], "fail")
    page = q.batch_results("b")
    jobs = [m.job for m in page.members]
    assert all(j is not None for j in jobs)
    first, second, third = (j for j in jobs if j is not None)
    assert first.result == {"id": "m0"} and first.batch == "b"
    assert second.error is not None and second.error.kind == "ValueError"
    assert third.attempt == 0
    q.redis.delete(q.keys.job(ids[2]))  # gone (as pruned): its id alone
    assert q.batch_results("b").members[2].job is None


def test_a_callback_that_cannot_go_in_is_recorded_and_the_member_still_ends(q: Quasar) -> None:
    opened(q, on_success=DONE, on_complete=COMPLETE)
    applied(q.enqueue("taken", id="b@on_success"))  # a job holds the callback's id
    (job_id,) = members(q, 1)
    q.close_batch("b")
    run(q, job_id)
    got = q.get_job(job_id)
    assert got is not None and got.job.state.__class__.__name__ == "Succeeded"
    success = info(q).callback("on_success")
    assert success is not None and success.job_id is None
    assert success.refused == "DuplicateJob b@on_success" and success.fired
    assert fired(q)["on_complete"] == "b@on_complete"


# --- refusals: typed, nothing written -----------------------------------------------------------


def test_a_refused_open_writes_nothing(q: Quasar) -> None:
    opened(q)
    before = state(q)
    other = q.open_batch("b", on_success=NewJob("other"))
    assert other == BatchOpenRefused(BatchExists("b"))
    bad_queue = q.open_batch("c", on_complete=NewJob("s", queue="no space"))
    assert isinstance(bad_queue, BatchOpenRefused) and isinstance(bad_queue.error, InvalidJob)
    long_id = q.open_batch("x" * 241)
    assert isinstance(long_id, BatchOpenRefused) and isinstance(long_id.error, InvalidJob)
    with_id = q.open_batch("c", on_complete=NewJob("s", id="given"))
    assert with_id == BatchOpenRefused(
        InvalidJob("on_complete cannot give id: a callback is enqueued as it fires")
    )
    with_deps = q.open_batch("c", on_failure=NewJob("s", dependencies=["x"]))
    assert isinstance(with_deps, BatchOpenRefused)
    applied(q.enqueue("s", id="d@on_complete"))
    before = state(q)
    taken = q.open_batch("d", on_complete=NewJob("s"))
    assert taken == BatchOpenRefused(DuplicateJob("d@on_complete"))
    assert state(q) == before


def test_a_member_of_a_missing_or_closed_batch_is_refused_and_writes_nothing(q: Quasar) -> None:
    opened(q)
    members(q, 1)
    before = state(q)
    assert q.enqueue("s", batch="nope") == JobRefused(MissingBatch("nope"))
    assert q.close_batch("b") is True
    before = state(q)
    assert q.enqueue("s", id="late", batch="b") == JobRefused(BatchClosed("b"))
    many = q.enqueue_many([NewJob("s", id="x1"), NewJob("s", id="x2", batch="b")])
    assert many == BatchRefused(1, BatchClosed("b"))
    each = q.enqueue_each([NewJob("s", id="y1"), NewJob("s", id="y2", batch="b")])
    assert each[1] == JobRefused(BatchClosed("b"))
    applied(q.enqueue("s", id="y3"))  # (each job of enqueue_each goes in on its own)
    after = state(q)
    assert {k for k in after if k not in before} >= {q.keys.job("y1"), q.keys.job("y3")}
    assert q.keys.job("x1") not in after and q.keys.job("late") not in after
    assert info(q).total == 1


def test_a_member_must_be_new_and_without_a_dedup_key(q: Quasar) -> None:
    opened(q)
    applied(q.enqueue("s", id="old"))
    before = state(q)
    assert q.enqueue("s", id="old", batch="b") == JobRefused(DuplicateJob("old"))
    dedup = q.enqueue("s", batch="b", dedup=Unique("k"))
    assert dedup == JobRefused(InvalidJob("a batch member cannot have a dedup key"))
    assert state(q) == before
    skipped = q.enqueue_many(
        [NewJob("s", id="old", batch="b"), NewJob("s", id="new", batch="b")], on_duplicate="skip"
    )
    assert isinstance(skipped, BatchApplied) and skipped.deduplicated == (0,)
    assert info(q).total == 1  # the job answered by its id did not join


def test_closing_or_reading_what_is_not_a_batch(q: Quasar) -> None:
    assert q.batch("nope") is None
    with pytest.raises(InvalidArgument, match="no batch 'nope'"):
        q.close_batch("nope")
    with pytest.raises(InvalidArgument, match="no batch 'nope'"):
        q.batch_results("nope")
    q.open_batch("b")
    for count in (0, 1001):
        with pytest.raises(InvalidArgument, match="count must be between 1 and 1000"):
            q.batch_results("b", count=count)
    with pytest.raises(InvalidArgument, match="start"):
        q.batch_results("b", start=-1)
    with pytest.raises(InvalidArgument, match="batch must not be empty"):
        q.batch("")
    assert q.enqueue("s", batch="") == JobRefused(InvalidJob("batch must not be empty"))


# --- a partitioned namespace --------------------------------------------------------------------


def test_on_partitions_a_batch_its_members_and_callbacks_share_its_ids_partition(
    redis_client: Any, backend: str, namespace: str
) -> None:
    with clients("sync", redis_client) as make:
        p = make(namespace, functions=backend == "redis", partitions=3)
        refused = p.open_batch("plain", on_success=DONE)
        assert isinstance(refused, BatchOpenRefused) and "starts with its partition" in str(refused)
        assert p.open_batch("1~b", on_success=DONE) == BatchOpened("1~b", True)
        result = p.enqueue_many([NewJob("work", i, batch="1~b") for i in range(4)], ids_only=True)
        assert isinstance(result, BatchApplied)
        assert all(partition_of(i, 3) == 1 for i in result.ids)
        other = next(g for g in ("g0", "g1", "g2", "g3") if hashed(g, 3) != 1)
        crossed = p.enqueue("work", batch="1~b", group=other)
        assert isinstance(crossed, JobRefused) and isinstance(crossed.error, CrossPartition)
        p.close_batch("1~b")
        for _ in result.ids:
            claim = claimed(p.claim("default", "w", LEASE))
            applied(p.complete(claim.token, "w", result=1))
        b = p.batch("1~b")
        assert b is not None and b.succeeded == 4 and b.callback("on_success") is not None
        got = p.get_job("1~b@on_success")
        assert got is not None and got.job.callback_of == "1~b"
        assert [m.id for m in p.batch_results("1~b").members] == list(result.ids)
        whole = p.open_batch("2~c", jobs=[NewJob("work"), NewJob("work")], close=True)
        assert isinstance(whole, BatchOpened) and len(whole.job_ids) == 2
        assert all(partition_of(i, 3) == 2 for i in whole.job_ids)
        elsewhere = next(f"x{n}" for n in range(50) if partition_of(f"x{n}", 3) != 2)
        crossed_open = p.open_batch("2~d", jobs=[NewJob("work", id=elsewhere)])
        assert isinstance(crossed_open, BatchOpenRefused)
        assert isinstance(crossed_open.error, CrossPartition) and p.batch("2~d") is None


# --- a batch made whole in one call ---------------------------------------------------------------


def test_open_batch_with_its_members_and_its_close_in_one_call(q: Quasar) -> None:
    jobs = [NewJob("work", i, id=f"m{i}") for i in range(3)]
    call = q.calls.open_batch("b", on_success=DONE, now=T0, jobs=jobs, close=True)
    result = q.execute(call)
    assert result == BatchOpened("b", True, ("m0", "m1", "m2"))
    assert q.execute(call) == result  # re-sent: the same answer, nothing more
    b = info(q)
    assert (b.total, b.closed, b.pending) == (3, True, 3)
    assert [m.id for m in q.batch_results("b").members] == ["m0", "m1", "m2"]
    got = q.get_job("m1")
    assert got is not None and got.job.batch == "b"
    for job_id in ("m0", "m1", "m2"):
        run(q, job_id)
    assert fired(q)["on_success"] == "b@on_success"
    again = q.open_batch("b", on_success=DONE, jobs=[NewJob("work", id="m9")], close=True)
    assert again == BatchOpened("b", False)  # there already: nothing enqueued
    assert q.get_job("m9") is None


def test_open_batch_with_members_made_ids_and_an_empty_close(q: Quasar) -> None:
    made = q.open_batch("b", jobs=[NewJob("work"), NewJob("work")], now=T0)
    assert isinstance(made, BatchOpened) and len(made.job_ids) == 2
    assert [m.id for m in q.batch_results("b").members] == list(made.job_ids)
    assert not info(q).closed
    empty = q.open_batch("e", on_complete=COMPLETE, jobs=[], close=True, now=T0)
    assert empty == BatchOpened("e", True)
    assert fired(q, "e")["on_complete"] == "e@on_complete"


def test_open_batch_with_a_refused_member_writes_nothing(q: Quasar) -> None:
    applied(q.enqueue("s", id="taken"))
    before = state(q)
    jobs = [NewJob("work", id="new"), NewJob("work", id="taken")]
    refused = q.open_batch("b", on_success=DONE, jobs=jobs, close=True)
    assert refused == BatchOpenRefused(DuplicateJob("taken"), 1)
    other = q.open_batch("b", jobs=[NewJob("work", batch="c")])
    assert other == BatchOpenRefused(InvalidJob("a member of open_batch joins its batch"), 0)
    unsendable = q.open_batch("b", jobs=[NewJob("work"), NewJob("work", id="")])
    assert isinstance(unsendable, BatchOpenRefused) and unsendable.index == 1
    assert state(q) == before and q.batch("b") is None
