"""report (lua/report_many.lua): many lease holders' outcomes in one call, each on its own."""

from __future__ import annotations

import dataclasses

from quasar_redis import (
    Complete,
    CorruptJobError,
    Fail,
    Failed,
    InvalidJob,
    JobApplied,
    JobRefused,
    LeaseToken,
    MissingJob,
    NewJob,
    OutcomeApplied,
    PermanentFail,
    Quasar,
    Release,
    RetryWaiting,
    StaleLease,
    Succeeded,
    Waiting,
)

from .helpers import T0, snapshot


def leases(q: Quasar, n: int) -> list[LeaseToken]:
    q.enqueue_many([NewJob("s", id=f"j{i}") for i in range(n)], now=T0)
    result = q.claim_many("default", "w", 1000, n, now=T0)
    return [c.token for c in getattr(result, "claims", ())]


def test_report_applies_each_outcome_on_its_own(q: Quasar) -> None:
    tokens = leases(q, 5)
    forged = dataclasses.replace(tokens[4], nonce="forged")
    results = q.report_many(
        "w",
        [
            Complete(tokens[0], result={"ok": 1}),
            Fail(tokens[1], "flaky", retry_delay_ms=10, kind="IOError"),
            PermanentFail(tokens[2], "bad"),
            Release(tokens[3], delay_ms=5),
            Complete(forged),
            Complete(LeaseToken("ghost", 0, "w", 1, T0 + 9, "n")),
        ],
        now=T0 + 1,
    )
    assert results == [
        OutcomeApplied("j0", "Succeeded"),
        OutcomeApplied("j1", "RetryWaiting"),
        OutcomeApplied("j2", "Failed"),
        OutcomeApplied("j3", "Waiting"),
        JobRefused(StaleLease()),
        JobRefused(MissingJob("ghost")),
    ]
    states = [info.job.state for info in map(q.get_job, ["j0", "j1", "j2", "j3"]) if info]
    assert states == [
        Succeeded("inline", T0 + 1),
        RetryWaiting("flaky", T0 + 11),
        Failed("bad", T0 + 1),
        Waiting(T0 + 6),
    ]
    j0 = q.get_job("j0")
    assert j0 is not None and j0.job.result == {"ok": 1}
    assert q.complete(tokens[4], "w", now=T0 + 2).__class__ is JobApplied


def test_report_is_checked_as_the_single_calls_are(q: Quasar) -> None:
    tokens = leases(q, 2)
    before = snapshot(q)
    results = q.report_many(
        "w", [Fail(tokens[0], "x", retry_delay_ms=-1), Complete(tokens[1], output_ref="")], now=T0
    )
    assert results == [
        JobRefused(InvalidJob("retry_delay must be nonnegative")),
        JobRefused(InvalidJob("output_ref must not be empty")),
    ]
    assert q.report_many("other", [Complete(tokens[0])], now=T0) == [JobRefused(StaleLease())]
    unencodable = q.report_many("w", [Complete(tokens[0], result=object())], now=T0)
    assert "result cannot be encoded" in str(unencodable[0])
    assert q.report_many("w", [], now=T0) == [
        JobRefused(InvalidJob("a report holds 1 to 1000 outcomes"))
    ]
    changed = {k for k in snapshot(q) if k not in before or snapshot(q)[k] != before[k]}
    assert all(":call:" in k for k in changed)  # only the records of the calls


def test_resent_report_replays_what_it_applied(q: Quasar) -> None:
    tokens = leases(q, 2)
    call = q.calls.report_many(
        "w", [Complete(tokens[0]), Complete(tokens[1], output_ref="")], T0 + 1
    )
    first = q.execute(call)
    before = snapshot(q)
    again = q.execute(call)
    assert first[0] == again[0] == OutcomeApplied("j0", "Succeeded")
    assert again[1] == first[1] == JobRefused(InvalidJob("output_ref must not be empty"))
    assert snapshot(q) == before


def test_report_gives_a_damaged_jobs_exception_in_place(q: Quasar) -> None:
    tokens = leases(q, 2)
    q.redis.hset(q.keys.job("j0"), "f", "x")
    results = q.report_many("w", [Complete(tokens[0]), Complete(tokens[1])], now=T0 + 1)
    assert isinstance(results[0], CorruptJobError)
    assert results[1] == OutcomeApplied("j1", "Succeeded")
    info = q.get_job("j1")
    assert info is not None and isinstance(info.job.state, Succeeded)
