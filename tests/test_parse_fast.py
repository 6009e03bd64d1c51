"""The fast paths of the protocol layer read exactly what the general ones do.

``parse_job`` and ``parse_token`` read the common reply (every name and text value bytes) without
the general per-field steps, and fall back to the general reading for anything else; ``builder``
makes frozen dataclasses without their ``__setattr__``. Each must give what the slow way gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from quasar_redis import _args, _fast, _general, _replies
from quasar_redis import _types as t
from quasar_redis.errors import CorruptJobError

BASE: list[Any] = [b"q", b"emails", b"s", b"send", b"at", b"1000", b"ins", b"900"]
CHUNKED = [b"p", b"x" * 64, b"p2", b"y" * 64, b"p3", b"z"]


def reply(*pairs: Any, job_id: Any = b"job-1") -> list[Any]:
    return [job_id, *BASE, *pairs]


REPLIES = {
    "waiting": reply(b"st", b"W", b"p", b"\x80"),
    "waiting, defaults stored": reply(b"st", b"W", b"rv", b"2", b"pr", b"-5", b"m", b"7"),
    "retry waiting": reply(b"st", b"R", b"em", b"boom", b"ek", b"ValueError", b"a", b"1"),
    "leased": reply(b"st", b"W", b"a", b"1", b"f", b"3", b"st", b"L", b"w", b"w1", b"x", b"5"),
    "leased, attempted": reply(
        b"st", b"L", b"w", b"w1", b"f", b"1", b"x", b"5", b"att", b"4", b"n", b"c.1"
    ),
    "succeeded": reply(b"st", b"S", b"o", b"inline", b"fin", b"7", b"res", b"\xc0"),
    "succeeded, chunked": reply(b"st", b"S", b"fin", b"7", *CHUNKED, b"res", b"a", b"res2", b"b"),
    "failed": reply(b"st", b"F", b"em", b"gave up", b"ek", b"Timeout", b"fin", b"8"),
    "cancelled": reply(b"st", b"C", b"cr", b"by hand", b"fin", b"9", b"odf", b"cancel"),
    "dependencies": reply(b"st", b"W", b"dp", b"a b  c", b"pd", b"2", b"ir", b"s3://x"),
    "no ins": [b"j", b"s", b"t", b"st", b"W", b"at", b"5"],
    "bad utf-8": reply(b"st", b"L", b"w", b"w\xff", b"f", b"1", b"x", b"5", job_id=b"\xfe"),
    "later fields win": reply(b"st", b"W", b"at", b"1", b"at", b"2"),
    "empty result": reply(b"st", b"S", b"fin", b"7", b"res", b""),
}
ODD: dict[str, list[Any]] = {
    "text names": ["j", "s", b"t", "st", b"W", "at", b"5"],
    "integer values": [b"j", b"s", b"t", b"st", b"L", b"w", b"w", b"f", 2, b"x", 9, b"at", 1],
    "text job id": ["j", b"s", b"t", b"st", b"W", b"at", b"5"],
}
BROKEN = {
    "no state": reply(b"a", b"1"),
    "no stage": [b"j", b"st", b"W", b"at", b"5"],
    "not a number": reply(b"st", b"W", b"a", b"one"),
    "no times": [b"j", b"s", b"t", b"st", b"W"],
    "odd length": [b"j", b"s", b"t", b"st"],
    "id only": [b"j"],
}


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_the_fast_reading_of_a_job_is_the_general_one(name: str) -> None:
    fast = _fast._job_from_reply(REPLIES[name])
    assert fast == _general.general_job(REPLIES[name])
    assert type(fast) is t.Job and type(fast.state) is type(
        _general.general_job(REPLIES[name]).state
    )
    assert _fast.parse_job(REPLIES[name]) == fast


@pytest.mark.parametrize("name", sorted(ODD))
def test_an_unusual_reply_is_read_the_general_way(name: str) -> None:
    assert _fast.parse_job(ODD[name]) == _general.general_job(ODD[name])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_reply_raises_what_the_general_reading_raises(name: str) -> None:
    with pytest.raises(Exception) as general:
        _general.general_job(BROKEN[name])
    with pytest.raises(type(general.value)) as fast:
        _fast.parse_job(BROKEN[name])
    assert str(fast.value) == str(general.value)
    if name == "no state":
        assert isinstance(fast.value, CorruptJobError)


@pytest.mark.parametrize(
    "token",
    [
        [b"j", b"0", b"w1", b"3", b"1700", b"cid.1"],
        [b"j", 0, b"w1", 3, 1700, b"cid.1"],
        ["j", "0", "w1", "3", "1700", "cid.1"],
        [b"\xff", b"0", b"w", b"1", b"2", b"n"],
    ],
)
def test_the_fast_reading_of_a_token_is_the_general_one(token: list[Any]) -> None:
    assert _fast.parse_token(token) == _general.general_token(token)


def test_a_broken_token_raises_what_the_general_reading_raises() -> None:
    for broken in ([b"j", b"x", b"w", b"1", b"2", b"n"], [b"j", b"0"]):
        with pytest.raises(Exception) as general:
            _general.general_token(broken)
        with pytest.raises(type(general.value)):
            _fast.parse_token(broken)


def test_a_built_value_is_the_value_its_class_makes() -> None:
    token = t.LeaseToken("j", 1, "w", 2, 3, "n")
    built = t.builder(t.LeaseToken)("j", 1, "w", 2, 3, "n")
    assert type(built) is t.LeaseToken
    assert built == token and hash(built) == hash(token) and repr(built) == repr(token)
    assert dataclasses.replace(built, nonce="m") == dataclasses.replace(token, nonce="m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.nonce = "m"  # type: ignore[misc]
    assert t.builder(t.AttemptLimitReached)() == t.AttemptLimitReached()


def test_a_class_that_checks_its_fields_is_built_by_itself() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("negative")

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        n: int

    assert t.builder(Checked) is Checked
    assert t.builder(Unslotted) is Unslotted


def test_a_report_reply_reads_as_before() -> None:
    reply = [
        b"Reported",
        b"1000",
        b"S",
        b"R",
        b"?",
        [b"StaleLease"],
        [b"LeaseExpired", b"77"],
    ]
    assert _replies.parse_report(["a", "b", "c", "d", "e"])(reply) == [
        t.OutcomeApplied("a", "Succeeded"),
        t.OutcomeApplied("b", "RetryWaiting"),
        t.OutcomeApplied("c", "?"),
        t.JobRefused(t.StaleLease()),
        t.JobRefused(t.LeaseExpired(77)),
    ]


def test_an_outcome_of_any_kind_is_sent_as_before() -> None:
    token = t.LeaseToken("j", 1, "w", 2, 3, "n")
    odd = t.LeaseToken(b"j", 1, "w", 2, 3, "n")  # type: ignore[arg-type]
    head = ("j", "1", "w", "2", "3", "n")
    assert _args.outcome_group(t.Complete(token)) == ("complete", *head, "inline", b"", "", "")
    assert _args.outcome_group(t.Complete(odd)) == (
        "complete",
        b"j",
        *head[1:],
        "inline",
        b"",
        "",
        "",
    )
    assert _args.outcome_group(t.Complete(token, 5)) == (
        "complete",
        *head,
        "inline",
        b"\x05",
        "",
        "",
    )
    assert _args.outcome_group(t.Release(token, 9)) == ("release", *head, "9", "", "", "")
    assert _args.outcome_group(t.Fail(token, "r", 7, "K", "tb")) == (
        "fail",
        *head,
        "r",
        "7",
        "K",
        "tb",
    )
    assert _args.outcome_group(t.PermanentFail(token, "r", "K")) == (
        "permanent_fail",
        *head,
        "r",
        "",
        "K",
        "",
    )


BEFORE_LEASE = {
    "waiting": [b"s", b"send", b"st", b"W", b"at", b"1000", b"sq", b"4", *CHUNKED],
    "retrying, defaults stored": [
        *BASE,
        b"st",
        b"R",
        b"a",
        b"2",
        b"f",
        b"2",
        b"rv",
        b"3",
        b"em",
        b"x",
        b"ek",
        b"E",
    ],
    "later fields win": [b"s", b"t", b"st", b"W", b"at", b"1", b"at", b"2", b"f", b"1", b"f", b"4"],
}


@pytest.mark.parametrize("name", sorted(BEFORE_LEASE))
@pytest.mark.parametrize("worker", ["w1", "wörker"])
def test_a_claimed_job_is_the_job_with_its_lease_applied(name: str, worker: str) -> None:
    # A claim's first delivery replies a job's fields before the lease; the client applies the
    # lease as the script does (claim.lua): the same Claim as the job read back with the lease.
    before = BEFORE_LEASE[name]
    f = dict(zip(before[::2], before[1::2], strict=True))
    attempt, fence = int(f.get(b"a", b"0")) + 1, int(f.get(b"f", b"0")) + 1
    after = [b"job-1", *before, b"st", b"L", b"a", str(attempt).encode(), b"f"]
    after += [str(fence).encode(), b"w", worker.encode(), b"x", b"6000", b"n", b"cid.2"]
    after += [b"att", b"1000"]
    want = _fast.parse_leased(after)
    assert _fast.parse_claimed(b"job-1", before, b"1000", worker, 5000, "cid.2") == want
    # The general reading (anything unusual: here text names) gives the same.
    texts = [x.decode() if i % 2 == 0 else x for i, x in enumerate(before)]
    assert _fast.parse_claimed("job-1", texts, b"1000", worker, 5000, "cid.2") == want
