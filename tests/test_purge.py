"""purge: an operator deletes finished jobs of one queue, by id, a batch at a time."""

from __future__ import annotations

import pytest

from quasar_redis import InvalidArgument, Quasar, Status

from .helpers import T0, applied, snapshot
from .test_operator import finish

LATER = T0 + 120_000  # past the 60 s re-send window of every job finished at T0 + a little


def ids(q: Quasar, queue: str, status: Status) -> list[str]:
    return [j.id for j in q.page_jobs(queue, status, limit=1000, now=LATER).jobs]


def test_purge_deletes_only_jobs_of_that_queue_status_and_age(q: Quasar) -> None:
    for i in range(4):
        applied(q.enqueue("s", id=f"ok{i}", queue="mail", now=T0))
        finish(q, f"ok{i}", T0 + i * 1000)
    applied(q.enqueue("s", id="bad", queue="mail", max_attempts=1, now=T0))
    finish(q, "bad", T0, fail=True)
    applied(q.enqueue("s", id="other", queue="sms", now=T0))
    finish(q, "other", T0)
    applied(q.enqueue("s", id="live", queue="mail", now=T0))
    every = ["ok0", "ok1", "ok2", "ok3", "bad", "other", "live", "nobody"]
    # finished before T0 + 2000: ok0 and ok1; the others are of another status, queue or none
    assert q.purge("mail", Status.COMPLETED, every, finished_before=T0 + 2000, now=LATER) == 2
    assert ids(q, "mail", Status.COMPLETED) == ["ok2", "ok3"]
    assert q.redis.exists(q.keys.job("ok0"), q.keys.job("ok1")) == 0
    assert q.purge("mail", "completed", every, now=LATER) == 2  # no age limit
    assert q.purge("mail", "discarded", every, now=LATER) == 1
    assert ids(q, "sms", Status.COMPLETED) == ["other"]
    assert q.get_job("live") is not None
    assert q.purge("mail", "discarded", every, now=LATER) == 0  # again: nothing left


def test_purge_keeps_what_a_resend_or_a_blocked_job_needs(q: Quasar) -> None:
    applied(q.enqueue("s", id="a", max_attempts=1, now=T0))
    applied(q.enqueue("s", id="b", dependencies=["a"], now=T0))
    applied(q.enqueue("s", id="x", max_attempts=1, now=T0))
    finish(q, "a", T0, fail=True)
    finish(q, "x", T0 + 50_000, fail=True)
    # x finished within the last 60 s; a is what the blocked b waits on
    assert q.purge("default", "discarded", ["a", "x"], now=T0 + 60_010) == 0
    assert q.purge("default", "discarded", ["a", "x"], now=T0 + 110_010) == 1
    assert q.get_job("a") is not None and q.get_job("x") is None


@pytest.mark.parametrize(
    ("queue", "status", "job_ids", "said"),
    [
        ("bad queue", "completed", ["a"], "queue must be"),
        ("q", "available", ["a"], "status must be completed, discarded, cancelled or expired"),
        ("q", "completed", [], "give 1 to 1000 job ids"),
        ("q", "completed", [f"j{i}" for i in range(1001)], "give 1 to 1000 job ids"),
    ],
)
def test_purge_refuses_bad_input_and_changes_nothing(
    q: Quasar, queue: str, status: str, job_ids: list[str], said: str
) -> None:
    applied(q.enqueue("s", id="a", queue="q", now=T0))
    finish(q, "a", T0)
    before = snapshot(q)
    with pytest.raises(InvalidArgument, match=said):
        q.purge(queue, status, job_ids, now=LATER)
    assert snapshot(q) == before
