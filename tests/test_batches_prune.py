"""Done batches pruned (docs/workflows.md, "Batches"; lua/prune.lua): a batch closed with every
member ended enters ``batches_done`` by the time it became done; prune deletes those older than
its max age (hash, member list, index entry), never one done within the re-send window, at most
``limit`` a call; an operator retry takes a done batch out of the index and it comes back when
done again; a member retried after its batch was pruned moves alone (no partial batch hash).
On both backends, through both clients."""

from __future__ import annotations

import pytest

from quasar_redis import CorruptDataError, InvalidArgument, NewJob, Quasar

from .helpers import T0, applied, claimed

LEASE = 60_000
HOUR = 3_600_000
WINDOW = 60_000  # the re-send window (CALL_TTL_MS)


def made(q: Quasar, batch_id: str, n: int, *, close: bool = True) -> list[str]:
    jobs = [NewJob("work", i, id=f"{batch_id}-m{i}") for i in range(n)]
    opened = q.open_batch(batch_id, jobs=jobs, close=close, now=T0)
    assert opened.created, opened  # type: ignore[union-attr]
    return [f"{batch_id}-m{i}" for i in range(n)]


def run(q: Quasar, job_id: str, outcome: str = "complete", now: int = T0 + 1) -> None:
    token = claimed(q.claim_job(job_id, "w", LEASE, now=now)).token
    if outcome == "complete":
        applied(q.complete(token, "w", result=1, now=now))
    else:
        applied(q.permanent_fail(token, "w", "broken", kind="ValueError", now=now))


def done_index(q: Quasar) -> dict[str, float]:
    return {k.decode(): s for k, s in q.redis.zrange(q.keys.batches_done, 0, -1, withscores=True)}


def gone(q: Quasar, batch_id: str) -> bool:
    return q.batch(batch_id) is None and not q.redis.exists(
        q.keys.batch(batch_id), q.keys.members(batch_id)
    )


def test_a_done_batch_enters_the_index_when_its_last_member_ends(q: Quasar) -> None:
    ids = made(q, "b", 2)
    run(q, ids[0])
    assert done_index(q) == {}
    run(q, ids[1], "fail", now=T0 + 5)
    assert done_index(q) == {"b": T0 + 5}
    empty = made(q, "e", 0)
    assert empty == [] and done_index(q)["e"] == T0  # an empty batch: done at its close


def test_a_done_batch_older_than_max_age_is_pruned_and_younger_or_open_ones_kept(
    q: Quasar,
) -> None:
    old = made(q, "old", 3)
    for job_id in old:
        run(q, job_id)
    young = made(q, "young", 1)
    run(q, young[0], now=T0 + HOUR)
    made(q, "open", 0, close=False)
    pending = made(q, "pending", 2)
    run(q, pending[0])
    # old's members and pending's ended one, then old
    assert q.prune(max_age_ms=HOUR, now=T0 + HOUR + 2) == 3 + 1 + 1
    assert gone(q, "old")
    assert done_index(q) == {"young": T0 + HOUR}
    assert q.batch("young") is not None and q.batch("open") is not None
    assert q.batch("pending") is not None
    # the members pruned with it: a member's batch is gone, its own reading copes
    assert q.get_job(old[0]) is None
    member = q.get_job(young[0])
    assert member is not None and member.job.batch == "young"


def test_no_age_limit_keeps_batches_and_the_resend_window_too(q: Quasar) -> None:
    ids = made(q, "b", 1)
    run(q, ids[0])
    assert q.prune(max_count=0, now=T0 + 10 * HOUR) == 1  # the member goes, the batch stays
    assert q.batch("b") is not None and "b" in done_index(q)
    assert q.prune(max_age_ms=0, now=T0 + WINDOW) == 0  # done within the window: kept
    assert q.batch("b") is not None
    assert q.prune(max_age_ms=0, now=T0 + 1 + WINDOW + 1) == 1
    assert gone(q, "b") and done_index(q) == {}


def test_at_most_limit_batches_a_call_oldest_first(q: Quasar) -> None:
    for i in range(5):
        made(q, f"b{i}", 0)  # each done at its close, T0
        q.redis.zadd(q.keys.batches_done, {f"b{i}": T0 + i})
    assert q.prune(max_age_ms=0, limit=2, now=T0 + HOUR) == 2
    assert gone(q, "b0") and gone(q, "b1") and q.batch("b2") is not None
    assert list(done_index(q)) == ["b2", "b3", "b4"]
    assert q.prune(max_age_ms=0, limit=2, now=T0 + HOUR) == 2
    assert q.prune(max_age_ms=0, limit=2, now=T0 + HOUR) == 1
    assert done_index(q) == {}


def test_a_long_member_list_goes_in_one_call(q: Quasar) -> None:
    made(q, "big", 0, close=False)
    q.redis.rpush(q.keys.members("big"), *[f"x{i}" for i in range(5000)])
    q.redis.hset(q.keys.batch("big"), "n", 0)  # (members whose jobs are gone)
    assert q.close_batch("big", now=T0) is True
    assert q.prune(max_age_ms=HOUR, limit=1, now=T0 + 2 * HOUR) == 1
    assert gone(q, "big")


def test_an_operator_retry_takes_a_done_batch_out_and_it_comes_back_when_done(
    q: Quasar,
) -> None:
    ids = made(q, "b", 2)
    run(q, ids[0])
    run(q, ids[1], "fail", now=T0 + 2)
    assert done_index(q) == {"b": T0 + 2}
    applied(q.retry(ids[1], now=T0 + 3))
    assert done_index(q) == {}
    assert q.prune(max_age_ms=0, now=T0 + 2 * HOUR) == 1  # ids[0] alone: the batch is not done
    assert q.batch("b") is not None
    run(q, ids[1], now=T0 + 2 * HOUR + 1)
    assert done_index(q) == {"b": T0 + 2 * HOUR + 1}
    b = q.batch("b")
    assert b is not None and (b.succeeded, b.failed, b.pending) == (2, 0, 0)


def test_a_retry_after_its_batch_was_pruned_makes_no_partial_batch(q: Quasar) -> None:
    ids = made(q, "b", 1)
    run(q, ids[0], "fail")
    # a blocked job depends on the failed member: prune keeps the member, not its batch
    applied(q.enqueue("after", dependencies=[ids[0]], id="after", now=T0))
    assert q.prune(max_age_ms=0, now=T0 + HOUR) == 1
    assert gone(q, "b") and q.get_job(ids[0]) is not None
    applied(q.retry(ids[0], now=T0 + HOUR + 1))
    run(q, ids[0], now=T0 + HOUR + 2)
    got = q.get_job(ids[0])
    assert got is not None and got.job.batch == "b"
    assert gone(q, "b") and done_index(q) == {}


def test_a_damaged_index_is_refused_and_nothing_changes(q: Quasar) -> None:
    ids = made(q, "b", 1)
    run(q, ids[0])
    q.redis.delete(q.keys.batches_done)
    q.redis.set(q.keys.batches_done, "x")
    with pytest.raises(CorruptDataError, match="batches_done"):
        q.prune(max_age_ms=0, now=T0 + HOUR)
    assert q.batch("b") is not None and q.get_job(ids[0]) is not None


def test_a_bad_max_age_is_refused(q: Quasar) -> None:
    made(q, "b", 0)
    with pytest.raises(InvalidArgument, match="max_age"):
        q.prune(max_age_ms=-1, now=T0 + HOUR)
    assert q.batch("b") is not None
