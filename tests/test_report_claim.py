"""report_claim (lua/report_and_claim.lua): a worker's outcomes and its next claim in one call."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import fakeredis
import pytest
import redis.asyncio

from quasar_redis import (
    AsyncQuasar,
    ClaimRefused,
    ClaimsApplied,
    Complete,
    CorruptKeyError,
    Fail,
    InvalidArgument,
    InvalidJob,
    JobRefused,
    LeaseToken,
    NewJob,
    NothingClaimable,
    OutcomeApplied,
    Quasar,
    ReportedAndClaimed,
    StaleLease,
    Succeeded,
)

from .helpers import REDIS_URL, T0, snapshot


def leases(q: Quasar, ids: list[str]) -> list[LeaseToken]:
    q.enqueue_many([NewJob("s", id=i) for i in ids], now=T0)
    result = q.claim_many("default", "w", 1000, len(ids), now=T0)
    assert isinstance(result, ClaimsApplied)
    return [c.token for c in result.claims]


def claimed_ids(result: ReportedAndClaimed) -> list[str]:
    assert isinstance(result.claim, ClaimsApplied), result.claim
    return [c.job.id for c in result.claim.claims]


def test_outcomes_then_a_claim_in_one_call(q: Quasar) -> None:
    tokens = leases(q, ["a", "b", "c"])
    q.enqueue_many([NewJob("s", id=f"n{i}") for i in range(4)], now=T0)
    forged = dataclasses.replace(tokens[2], nonce="forged")
    result = q.report_and_claim(
        "w",
        [Complete(tokens[0], {"ok": 1}), Fail(tokens[1], "flaky", 10, "IOError"), Complete(forged)],
        "default",
        2000,
        3,
        now=T0 + 1,
    )
    assert result.outcomes == (
        OutcomeApplied("a", "Succeeded"),
        OutcomeApplied("b", "RetryWaiting"),
        JobRefused(StaleLease()),  # a refused outcome does not stop the claim
    )
    assert claimed_ids(result) == ["n0", "n1", "n2"]
    a = q.get_job("a")
    assert (
        a is not None and a.job.state == Succeeded("inline", T0 + 1) and a.job.result == {"ok": 1}
    )
    # Each claim reads back as Redis holds it, and its token completes the job.
    assert isinstance(result.claim, ClaimsApplied)
    for claim in result.claim.claims:
        info = q.get_job(claim.job.id)
        assert info is not None and info.job == claim.job
        assert claim.token.expires_at == T0 + 1 + 2000
    done = q.report_many("w", [Complete(c.token) for c in result.claim.claims], now=T0 + 2)
    assert done == [OutcomeApplied(f"n{i}", "Succeeded") for i in range(3)]


def test_a_dependent_released_by_the_outcomes_is_claimed_by_the_same_call(q: Quasar) -> None:
    (token,) = leases(q, ["parent"])
    q.enqueue("s", id="child", dependencies=["parent"], now=T0)
    result = q.report_and_claim("w", [Complete(token)], "default", 1000, 5, now=T0 + 1)
    assert result.outcomes == (OutcomeApplied("parent", "Succeeded"),)
    assert claimed_ids(result) == ["child"]


def test_a_claim_that_finds_nothing_keeps_the_outcomes(q: Quasar) -> None:
    (token,) = leases(q, ["a"])
    q.enqueue("s", id="later", delay_ms=500, now=T0)
    result = q.report_and_claim("w", [Complete(token)], "default", 1000, 5, now=T0 + 1)
    assert result.outcomes == (OutcomeApplied("a", "Succeeded"),)
    assert result.claim == ClaimRefused(NothingClaimable(T0 + 500))


@pytest.mark.parametrize(
    ("queue", "lease_ms", "limit", "reason"),
    [
        ("bad queue", 1000, 1, "queue must be"),
        ("default", 0, 1, "lease_duration"),
        ("default", 1000, 0, "limit must be between 1 and 1000"),
        ("default", 1000, 1001, "limit must be between 1 and 1000"),
    ],
)
def test_a_malformed_call_is_refused_whole(
    q: Quasar, queue: str, lease_ms: int, limit: int, reason: str
) -> None:
    (token,) = leases(q, ["a"])
    q.enqueue("s", id="b", now=T0)
    before = snapshot(q)
    with pytest.raises(InvalidArgument, match=reason):
        q.report_and_claim("w", [Complete(token)], queue, lease_ms, limit, now=T0 + 1)
    assert snapshot(q) == before


def test_outcomes_python_cannot_send_refuse_the_call_before_redis(q: Quasar) -> None:
    (token,) = leases(q, ["a"])
    q.enqueue("s", id="b", now=T0)
    before = snapshot(q)
    result = q.report_and_claim("w", [Complete(token, {1, 2})], "default", 1000, 1, now=T0 + 1)
    (outcome,) = result.outcomes
    assert isinstance(outcome, JobRefused) and isinstance(outcome.error, InvalidJob)
    assert result.claim == ClaimRefused(outcome.error)
    empty = q.report_and_claim("w", [], "default", 1000, 1, now=T0 + 1)
    assert isinstance(empty.claim, ClaimRefused)
    assert snapshot(q) == before


def test_a_resent_call_gets_its_first_answers_and_changes_nothing_more(q: Quasar) -> None:
    tokens = leases(q, ["a", "b"])
    q.enqueue_many([NewJob("s", id=f"n{i}") for i in range(4)], now=T0)
    outcomes = [Complete(tokens[0]), Complete(tokens[1], output_ref="")]
    call = q.calls.report_and_claim("w", outcomes, "default", 1000, 2, T0 + 1)
    first = q.execute(call)
    before = snapshot(q)
    again = q.execute(call)
    assert again.outcomes == first.outcomes
    assert first.outcomes[0] == OutcomeApplied("a", "Succeeded")
    assert first.outcomes[1] == JobRefused(InvalidJob("output_ref must not be empty"))
    assert isinstance(first.claim, ClaimsApplied) and isinstance(again.claim, ClaimsApplied)
    assert [c.token for c in again.claim.claims] == [c.token for c in first.claim.claims]
    assert snapshot(q) == before


def test_a_resent_call_whose_claim_found_nothing_claims_anew_once(q: Quasar) -> None:
    (token,) = leases(q, ["a"])
    call = q.calls.report_and_claim("w", [Complete(token)], "default", 1000, 2, T0 + 1)
    first = q.execute(call)
    assert isinstance(first.claim, ClaimRefused)
    q.enqueue("s", id="new", now=T0 + 1)
    second = q.execute(call)
    assert second.outcomes == first.outcomes == (OutcomeApplied("a", "Succeeded"),)
    assert claimed_ids(second) == ["new"]
    before = snapshot(q)
    third = q.execute(call)  # the claim made by the second delivery is the one replayed now
    assert isinstance(third.claim, ClaimsApplied) and isinstance(second.claim, ClaimsApplied)
    assert [c.token for c in third.claim.claims] == [c.token for c in second.claim.claims]
    assert snapshot(q) == before


def test_a_damaged_key_on_the_claims_side_does_not_undo_the_outcomes(q: Quasar) -> None:
    (token,) = leases(q, ["a"])
    q.redis.set(q.keys.queue("other", "ready"), "oops")
    result = q.report_and_claim("w", [Complete(token)], "other", 1000, 1, now=T0 + 1)
    assert result.outcomes == (OutcomeApplied("a", "Succeeded"),)
    assert isinstance(result.claim, CorruptKeyError)
    q.redis.delete(q.keys.queue("other", "ready"))


#: What the claim side finds in queue "other", each made at T0 with nothing ready there, and what
#: it does at T0 + 1: answer NothingClaimable with that next_at (an int, or None), or lease the job
#: of that id (due by then, or its lease run out: expired, and due again at once).
_QUIET: dict[str, tuple[Any, int | str | None]] = {
    "nothing": (lambda q: None, None),
    "a job due later": (
        lambda q: q.enqueue("s", id="l", queue="other", delay_ms=500, now=T0),
        T0 + 500,
    ),
    "a lease running": (
        lambda q: (
            q.enqueue("s", id="h", queue="other", now=T0),
            q.claim_job("h", "w0", 900, now=T0),
        ),
        T0 + 900,
    ),
    "a lease running and a job due before it ends": (
        lambda q: (
            q.enqueue("s", id="h", queue="other", now=T0),
            q.claim_job("h", "w0", 900, now=T0),
            q.enqueue("s", id="l", queue="other", delay_ms=300, now=T0),
        ),
        T0 + 300,
    ),
    "a job come due": (lambda q: q.enqueue("s", id="l", queue="other", delay_ms=1, now=T0), "l"),
    "a lease run out": (
        lambda q: (
            q.enqueue("s", id="h", queue="other", max_attempts=5, now=T0),
            q.claim_job("h", "w0", 1, now=T0),
        ),
        "h",
    ),
}


@pytest.mark.parametrize("state", sorted(_QUIET))
def test_a_claim_of_a_queue_with_nothing_ready_keeps_its_maintenance(q: Quasar, state: str) -> None:
    # A claim that finds nothing ready answers from the heads of delayed and leased, unless
    # something there is due: then the claim promotes or expires it as every claim does.
    (token,) = leases(q, ["a"])
    prepare, answer = _QUIET[state]
    prepare(q)
    result = q.report_and_claim("w", [Complete(token)], "other", 1000, 5, now=T0 + 1)
    assert result.outcomes == (OutcomeApplied("a", "Succeeded"),)
    if isinstance(answer, str):
        assert claimed_ids(result) == [answer]
    else:
        assert result.claim == ClaimRefused(NothingClaimable(answer))


@pytest.mark.parametrize("index", ["ready", "delayed", "delayed_pr", "leased", "flow"])
def test_a_damaged_key_of_a_queue_with_nothing_ready_is_named(q: Quasar, index: str) -> None:
    (token,) = leases(q, ["a"])
    key = f"{q.keys.root}q:other:flow" if index == "flow" else q.keys.queue("other", index)
    q.redis.set(key, "oops")
    result = q.report_and_claim("w", [Complete(token)], "other", 1000, 1, now=T0 + 1)
    assert result.outcomes == (OutcomeApplied("a", "Succeeded"),)
    assert isinstance(result.claim, CorruptKeyError) and result.claim.key == key, result.claim
    q.redis.delete(key)


def test_the_asyncio_client_reports_and_claims(q: Quasar, backend: str) -> None:
    tokens = leases(q, ["a", "b"])
    q.enqueue("s", id="n", now=T0)

    async def run() -> ReportedAndClaimed:
        if backend == "fake":
            server = q.redis.connection_pool.connection_kwargs["server"]
            client: Any = fakeredis.FakeAsyncRedis(server=server)
        else:
            client = redis.asyncio.Redis.from_url(REDIS_URL)
        try:
            aq = AsyncQuasar(client, q.namespace, functions=q.functions)
            outcomes = [Complete(t) for t in tokens]
            return await aq.report_and_claim("w", outcomes, "default", 1000, 5, now=T0 + 1)
        finally:
            await client.aclose()

    result = asyncio.run(run())
    assert result.outcomes == (OutcomeApplied("a", "Succeeded"), OutcomeApplied("b", "Succeeded"))
    assert claimed_ids(result) == ["n"]
