"""A claim by queue offers the best claimable job whatever the backlog of due jobs, within the
bounds docs/lifecycle.md states ("Best first, and its bounds"), each tested at its edge."""

from __future__ import annotations

import random

import pytest

from quasar_redis import (
    BatchApplied,
    ClaimRefused,
    ClaimsApplied,
    JobApplied,
    NewJob,
    NothingClaimable,
    Quasar,
    Status,
)

from .helpers import T0, claimed

LEASE = 60_000


def enqueue(q: Quasar, jobs: list[NewJob]) -> None:
    for start in range(0, len(jobs), 1000):
        result = q.enqueue_many(jobs[start : start + 1000], now=T0, ids_only=True)
        assert isinstance(result, BatchApplied), result


def claim_id(q: Quasar, now: int) -> str:
    return claimed(q.claim("default", "w", LEASE, now=now)).job.id


def claim_ids(q: Quasar, now: int, limit: int) -> list[str]:
    result = q.claim_many("default", "w", LEASE, limit, now=now)
    assert isinstance(result, ClaimsApplied), result
    return [c.job.id for c in result.claims]


def scheduled(job_id: str, at: int, priority: int = 0) -> NewJob:
    return NewJob("s", id=job_id, available_at=at, priority=priority)


def test_an_urgent_job_due_later_beats_a_backlog_due_earlier(q: Quasar) -> None:
    enqueue(q, [scheduled(f"p0-{i:03d}", T0 + 1) for i in range(100)])
    enqueue(q, [scheduled("urgent", T0 + 2, priority=-5)])
    assert claim_id(q, T0 + 10) == "urgent"


def test_the_urgent_job_wins_behind_a_large_backlog_too(q: Quasar) -> None:
    enqueue(q, [scheduled(f"p0-{i:04d}", T0 + 1 + i % 7) for i in range(3000)])
    enqueue(q, [scheduled("urgent", T0 + 50, priority=-1)])
    assert claim_ids(q, T0 + 100, 3) == ["urgent", "p0-0000", "p0-0007"]


def test_of_jobs_due_in_one_millisecond_the_first_enqueued_goes_first(q: Quasar) -> None:
    ids = [f"j{200 - i:03d}" for i in range(101)]  # ids sort the other way round
    enqueue(q, [scheduled(job_id, T0 + 1) for job_id in ids])
    assert [claim_id(q, T0 + 10) for _ in range(101)] == ids


def test_claims_follow_priority_then_due_time_then_enqueue_order(q: Quasar) -> None:
    """A random backlog, all come due before the first claim: every claim takes the best left."""
    rng = random.Random(7)
    jobs = []
    for i in range(400):
        priority = rng.randrange(-3, 4)  # the most urgent ones come due last
        at = T0 + (rng.randrange(40, 60) if priority == -3 else rng.randrange(1, 60))
        jobs.append(scheduled(f"r{i:03d}", at, priority))
    enqueue(q, jobs)
    rank = {job.id: (job.priority, job.available_at, i) for i, job in enumerate(jobs)}
    want = sorted(rank, key=rank.__getitem__)
    got: list[str] = []
    while len(got) < len(want):
        got += claim_ids(q, T0 + 100, rng.choice([1, 1, 3, 50]))
    assert got == want


def test_a_due_job_is_found_behind_31_priorities_with_nothing_due(q: Quasar) -> None:
    """The bound's edge: fewer than 32 more urgent priority values holding only jobs not yet
    due are read past; the urgent due job is offered before the earlier-due backlog."""
    enqueue(q, [scheduled(f"later{p}", T0 + 10_000, priority=-100 + p) for p in range(31)])
    enqueue(q, [scheduled(f"p0-{i:03d}", T0 + 1) for i in range(100)])
    enqueue(q, [scheduled("urgent", T0 + 5, priority=-5)])
    assert claim_id(q, T0 + 10) == "urgent"


def test_behind_32_priorities_with_nothing_due_the_bound_shows(q: Quasar) -> None:
    """Past the bound (32 values with nothing due, and more than 100 due jobs due earlier), the
    claim picks among what it promoted; the next claims reach the urgent job."""
    enqueue(q, [scheduled(f"later{p}", T0 + 10_000, priority=-100 + p) for p in range(32)])
    enqueue(q, [scheduled(f"p0-{i:03d}", T0 + 1) for i in range(100)])
    enqueue(q, [scheduled("urgent", T0 + 5, priority=-5)])
    assert claim_id(q, T0 + 10) == "p0-000"
    assert claim_id(q, T0 + 10) == "urgent"  # promoted by due time on the way


def test_ready_jobs_and_due_backlog_compete_on_equal_terms(q: Quasar) -> None:
    enqueue(q, [NewJob("s", id=f"now{i}", priority=1) for i in range(5)])  # due at once
    enqueue(q, [scheduled(f"p0-{i:03d}", T0 + 1) for i in range(150)])
    enqueue(q, [scheduled("p1-early", T0 - 1, priority=1)])
    assert claim_ids(q, T0 + 10, 152) == [f"p0-{i:03d}" for i in range(150)] + ["p1-early", "now0"]


def clock_stepped_back(q: Quasar, ahead: int) -> int:
    """`ahead` jobs made available at T0 (priority -1, first in line), and one due long before;
    returns a now before T0, as after a failover to a server whose clock is behind."""
    enqueue(q, [NewJob("s", id=f"ahead{i:03d}", priority=-1) for i in range(ahead)])
    result = q.enqueue("s", id="due", now=T0 - 5000)
    assert isinstance(result, JobApplied), result
    return T0 - 1000


def test_after_the_clock_steps_back_a_due_job_is_still_claimed(q: Quasar) -> None:
    now = clock_stepped_back(q, 99)  # the bound's edge: 99 entries to re-index, then the job
    assert claim_id(q, now) == "due"
    refused = q.claim("default", "w", LEASE, now=now)
    assert refused == ClaimRefused(NothingClaimable(T0))  # the others are scheduled again


def test_past_the_repair_bound_the_claim_says_claim_again_now(q: Quasar) -> None:
    now = clock_stepped_back(q, 100)
    assert q.claim("default", "w", LEASE, now=now) == ClaimRefused(NothingClaimable(now))
    assert claim_id(q, now) == "due"
    assert q.counts("default", now=now).scheduled == 100


def test_until_a_claim_re_indexes_it_counts_and_get_job_read_a_job_two_ways(q: Quasar) -> None:
    # docs/lifecycle.md: counts and the available page read `ready`, get_job the job at now
    now = clock_stepped_back(q, 1)
    counts = q.counts("default", now=now)
    assert (counts.available, counts.scheduled) == (2, 0)
    assert [j.id for j in q.list_jobs("default", "available", now=now)] == ["ahead000", "due"]
    info = q.get_job("ahead000", now=now)
    assert info is not None and info.status is Status.SCHEDULED
    assert claim_id(q, now) == "due"  # (ahead000 met first, and re-indexed)
    counts = q.counts("default", now=now)
    assert (counts.available, counts.scheduled) == (0, 1)
    assert [j.id for j in q.list_jobs("default", "scheduled", now=now)] == ["ahead000"]


def test_the_urgent_job_can_be_claimed_by_id_at_the_same_moment(q: Quasar) -> None:
    enqueue(q, [scheduled(f"p0-{i:03d}", T0 + 1) for i in range(100)])
    enqueue(q, [scheduled("urgent", T0 + 2, priority=-5)])
    assert claimed(q.claim_job("urgent", "w", LEASE, now=T0 + 10)).job.id == "urgent"
    assert claim_id(q, T0 + 10) == "p0-000"


def test_run_out_leases_beyond_the_bound_wait_for_the_next_claim(q: Quasar) -> None:
    """The leases' bound: a claim expires at most 100 run-out leases of its queue, those run out
    first; the 101st is claimable by id at once and goes first at the next claim."""
    enqueue(q, [NewJob("s", id=f"l{i:03d}") for i in range(100)])
    assert len(claim_ids(q, T0, 100)) == 100  # leased until T0 + LEASE
    enqueue(q, [NewJob("s", id="urgent", priority=-5)])
    assert claim_id(q, T0 + 1) == "urgent"  # leased until T0 + 1 + LEASE: runs out last
    later = T0 + 2 * LEASE
    assert claim_id(q, later) == "l000"  # the bound: 100 expired, the urgent one not yet
    assert claim_id(q, later) == "urgent"
    assert claim_ids(q, later, 1000) == [f"l{i:03d}" for i in range(1, 100)]


@pytest.mark.parametrize(
    ("limit", "claims"), [(2, [["first", "freed"], ["later"]]), (3, [["first", "later", "freed"]])]
)
def test_a_job_a_claim_frees_as_it_goes_follows_the_jobs_it_had_read(
    q: Quasar, limit: int, claims: list[list[str]]
) -> None:
    """The fourth bound: "gone" is past its deadline when the claim meets it, so the claim expires
    it, and "freed" (which runs whatever becomes of "gone") enters ready then. A claim of 3 had
    read "later" already and leases it first, though "freed" sorts before it; a claim of 2 had
    read only "first" and "gone", and leases "freed" in its order."""
    enqueue(
        q,
        [
            NewJob("s", id="gone", available_at=T0 + 300, deadline=T0 + 301),
            NewJob("s", id="first", priority=-1),
            NewJob(
                "s",
                id="freed",
                dependencies=["gone"],
                on_dependency_failure="run",
                available_at=T0 + 200,
            ),
            NewJob("s", id="later", available_at=T0 + 400),
        ],
    )
    assert [claim_ids(q, T0 + 500, limit) for _ in claims] == claims
    assert isinstance(q.claim("default", "w", LEASE, now=T0 + 500), ClaimRefused)
    gone = q.get_job("gone")
    assert gone is not None and gone.status is Status.EXPIRED
