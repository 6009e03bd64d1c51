"""Pause and resume of a queue, and the list of queues, on both backends and both clients.

A paused queue leases nothing: a claim by queue, a claim of many, a claim by id and the claim of
a report-and-claim are refused ``QueuePaused`` (writing nothing); enqueue, counts, lists and the
outcomes of jobs already leased go on. Its idle workers get no wake-up token while it is paused,
and get them back when it resumes.
"""

from __future__ import annotations

from typing import Any

import pytest

from quasar_redis import (
    ClaimApplied,
    ClaimRefused,
    ClaimsApplied,
    Complete,
    CorruptKeyError,
    InvalidArgument,
    OutcomeApplied,
    Quasar,
    QueueCounts,
    QueueInfo,
    QueuePaused,
    ReportedAndClaimed,
    Waiting,
)
from quasar_redis._types import QUEUE_EVENTS
from quasar_redis._views import counts_of
from quasar_redis.cli._events import format_event

from .helpers import T0, applied, claimed, snapshot


def enqueue(q: Quasar, queue: str = "default", **options: Any) -> str:
    return applied(q.enqueue("s", None, queue=queue, **options)).id


def wake_tokens(q: Quasar, queue: str = "default") -> int:
    return int(q.redis.llen(q.keys.wake(queue)))


def test_pause_and_resume_are_idempotent(q: Quasar) -> None:
    enqueue(q)
    assert q.pause("default") is True
    assert q.pause("default") is False
    assert q.queues()[0].paused
    assert q.resume("default") is True
    assert q.resume("default") is False
    assert not q.queues()[0].paused


def test_a_pause_and_a_resume_that_change_the_queue_are_events_of_no_job(q: Quasar) -> None:
    enqueue(q, queue="mail")
    q.pause("mail")
    q.pause("mail")  # changes nothing: no event
    q.resume("mail")
    q.resume("mail")
    entries = q.redis.xrange(q.keys.events)
    assert [fields for _, fields in entries][1:] == [
        {b"ev": b"paused", b"q": b"mail"},
        {b"ev": b"resumed", b"q": b"mail"},
    ]
    lines = [line.split(" ", 1)[1] for entry in entries[1:] for line in format_event(*entry)]
    assert lines == ["event=paused queue=mail", "event=resumed queue=mail"]
    assert {"paused", "resumed"} == QUEUE_EVENTS


def test_a_pause_checks_the_stream_before_it_writes(q: Quasar) -> None:
    enqueue(q)
    q.redis.delete(q.keys.events)
    q.redis.set(q.keys.events, "not a stream")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError):
        q.pause("default")
    assert snapshot(q) == before


def test_a_paused_queue_leases_nothing_and_writes_nothing(q: Quasar) -> None:
    job_id = enqueue(q)
    later = enqueue(q, available_at=T0)  # due: a claim would promote it
    q.pause("default")
    before = snapshot(q)
    assert q.claim("default", "w", 1000) == ClaimRefused(QueuePaused("default"))
    assert q.claim_many("default", "w", 1000, 10) == ClaimRefused(QueuePaused("default"))
    assert q.claim_job(job_id, "w", 1000) == ClaimRefused(QueuePaused("default"))
    assert q.claim_job(later, "w", 1000) == ClaimRefused(QueuePaused("default"))
    assert snapshot(q) == before
    info = q.get_job(job_id)
    assert info is not None and info.job.state == Waiting(info.job.inserted_at)
    q.resume("default")
    got = q.claim_many("default", "w", 1000, 10)
    assert isinstance(got, ClaimsApplied)
    assert {c.job.id for c in got.claims} == {job_id, later}


def test_claim_job_keeps_the_refusals_checked_before_the_pause(q: Quasar) -> None:
    job_id = enqueue(q, delay_ms=3_600_000)
    q.pause("default")
    refused = q.claim_job(job_id, "w", 1000)
    assert isinstance(refused, ClaimRefused) and type(refused.error).__name__ == "NotAvailable"
    assert isinstance(q.claim_job("nope", "w", 1000), ClaimRefused)


def test_report_and_claim_applies_its_outcomes_and_refuses_its_claim(q: Quasar) -> None:
    first = enqueue(q)
    enqueue(q)
    token = claimed(q.claim("default", "w", 1000)).token
    q.pause("default")
    got = q.report_and_claim("w", [Complete(token)], "default", 1000, 10)
    assert got == ReportedAndClaimed(
        (OutcomeApplied(first, "Succeeded"),), ClaimRefused(QueuePaused("default"))
    )
    assert q.counts("default").available == 1


def test_a_leased_job_of_a_paused_queue_still_heartbeats_and_completes(q: Quasar) -> None:
    enqueue(q)
    token = claimed(q.claim("default", "w", 1000)).token
    q.pause("default")
    beat = q.heartbeat(token, "w", 5000)
    assert isinstance(beat, ClaimApplied)
    assert type(q.complete(beat.claim.token, "w")).__name__ == "JobApplied"


def test_enqueue_counts_and_lists_go_on_while_paused_and_other_queues_lease(q: Quasar) -> None:
    enqueue(q)
    enqueue(q, queue="other")
    q.pause("default")
    tokens = wake_tokens(q)
    ids = [enqueue(q) for _ in range(3)]
    assert wake_tokens(q) == tokens  # its workers are not woken for nothing
    assert q.counts("default").available == 4
    assert set(ids) <= {j.id for j in q.list_jobs("default", "available")}
    assert isinstance(q.claim("other", "w", 1000), ClaimApplied)
    assert q.resume("default") is True
    assert wake_tokens(q) == tokens + 4  # one per claimable job (at most 16)


def test_resume_wakes_for_due_delayed_jobs_too(q: Quasar) -> None:
    enqueue(q, available_at=T0)
    enqueue(q, delay_ms=3_600_000)
    q.pause("default")
    q.redis.delete(q.keys.wake("default"))
    q.resume("default")
    assert wake_tokens(q) == 1


def test_queues_lists_every_queue_with_its_counts_sorted(q: Quasar) -> None:
    assert q.queues() == []
    for queue in ("b", "a", "c"):
        enqueue(q, queue=queue)
    enqueue(q, queue="a", delay_ms=3_600_000)
    q.pause("c")
    got = q.queues()
    assert [i.name for i in got] == ["a", "b", "c"]
    assert [i.paused for i in got] == [False, False, True]
    for info in got:
        assert isinstance(info, QueueInfo) and isinstance(info.counts, QueueCounts)
        counts = q.counts(info.name)
        assert info.counts.by_status() == counts.by_status()
    assert got[0].counts.scheduled == 1 and got[0].counts.available == 1


def test_queues_leaves_out_a_name_written_by_hand(q: Quasar) -> None:
    enqueue(q, queue="a")
    q.redis.sadd(q.keys.queues, "not a name")
    assert [i.name for i in q.queues()] == ["a"]


@pytest.mark.parametrize("name", ["", "a b", "x{y}", "é", "q" * 65, 5, None])
def test_malformed_queue_names_are_refused_and_change_nothing(q: Quasar, name: Any) -> None:
    enqueue(q)
    before = snapshot(q)
    with pytest.raises(InvalidArgument, match="queue"):
        q.pause(name)
    with pytest.raises(InvalidArgument, match="queue"):
        q.resume(name)
    assert snapshot(q) == before


def test_a_queue_with_no_job_yet_can_be_paused_ahead_of_its_jobs(q: Quasar) -> None:
    assert q.resume("next", now=T0) is False  # (not paused: nothing to do)
    assert q.queues(now=T0) == []
    assert q.pause("next", now=T0) is True
    assert [(i.name, i.paused, sum(counts_of(i.counts).values())) for i in q.queues(now=T0)] == [
        ("next", True, 0)
    ]
    applied(q.enqueue("s", id="j", queue="next", now=T0))
    assert q.claim("next", "w", 1000, now=T0) == ClaimRefused(QueuePaused("next"))
    assert q.resume("next", now=T0) is True
    assert claimed(q.claim("next", "w", 1000, now=T0)).job.id == "j"


def test_a_resent_pause_gets_the_first_answer(q: Quasar) -> None:
    enqueue(q)
    call = q.calls.pause("default")
    assert q.execute(call) is True
    assert q.execute(call) is True  # the same call again: its first answer
    assert q.pause("default") is False
    again = q.calls.resume("default")
    assert q.execute(again) is True
    assert q.execute(again) is True


def test_a_paused_set_of_another_type_is_reported(q: Quasar) -> None:
    job_id = enqueue(q)
    q.redis.set(q.keys.paused, "x")
    before = snapshot(q)
    with pytest.raises(CorruptKeyError, match="paused"):
        q.claim("default", "w", 1000)
    with pytest.raises(CorruptKeyError, match="paused"):
        q.claim_job(job_id, "w", 1000)
    with pytest.raises(CorruptKeyError, match="paused"):
        q.pause("default")
    with pytest.raises(CorruptKeyError, match="paused"):
        q.queues()
    assert snapshot(q) == before
    assert applied(q.enqueue("s", None)).id  # enqueue does not read it to write


def test_now_is_checked(q: Quasar) -> None:
    enqueue(q)
    with pytest.raises(InvalidArgument, match="now"):
        q.pause("default", now=-1)
    with pytest.raises(InvalidArgument, match="now"):
        q.queues(now=-1)
