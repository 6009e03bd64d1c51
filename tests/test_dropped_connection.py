"""A reply lost to a broken connection is never misreported (real Redis, through tests/proxy.py).

The proxy forwards one call (FCALL, or EVALSHA: every test runs with both), lets Redis run it,
swallows the reply and cuts the connection; redis-py, configured to retry, reconnects and re-sends
the same bytes (same call id). Each test checks that the script ran twice on the server (two
identical calls forwarded), that the client
got the reply the first delivery produced (the swallowed reply, decoded by the same parser), and
that the namespace is the same after the re-send as it was between the two deliveries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from quasar_redis import (
    AsyncQuasar,
    BatchApplied,
    CancelApplied,
    Claim,
    ClaimApplied,
    ClaimRefused,
    ClaimsApplied,
    Complete,
    Failed,
    JobApplied,
    JobRefused,
    LeaseHeld,
    NewJob,
    OutcomeApplied,
    Quasar,
    ReportedAndClaimed,
    RetryWaiting,
    StaleLease,
    Succeeded,
)
from quasar_redis._calls import Call
from quasar_redis._scripts import library, scripts

from .helpers import applied, claimed, has_functions, snapshot
from .proxy import HOST, Proxy, has

T = TypeVar("T")
LEASE = 60_000
RETRY_ON: list[type[Exception]] = [redis.ConnectionError, redis.TimeoutError]


class Recording(Quasar):
    """A Quasar that remembers the calls it built, to decode a swallowed reply the same way."""

    def __init__(self, client: Any, namespace: str, functions: bool = True) -> None:
        super().__init__(client, namespace, functions=functions)
        self.made: list[Call[Any]] = []

    def execute(self, call: Call[T]) -> T:
        self.made.append(call)
        return super().execute(call)


class AsyncRecording(AsyncQuasar):
    def __init__(self, client: Any, namespace: str, functions: bool = True) -> None:
        super().__init__(client, namespace, functions=functions)
        self.made: list[Call[Any]] = []

    async def execute(self, call: Call[T]) -> T:
        self.made.append(call)
        return await super().execute(call)


@dataclass
class Lost(Generic[T]):
    """One call whose first reply was lost: what it said, what the re-send said, the keys."""

    first: T
    second: T
    between: dict[str, Any]
    after: dict[str, Any]


@dataclass
class Rig:
    proxy: Proxy
    q: Recording
    direct: Quasar  # the same namespace, straight to Redis (set-up and inspection)

    @property
    def command(self) -> bytes:
        return b"FCALL" if self.q.functions else b"EVALSHA"

    def arm(self, before_resend: Callable[[], object] | None = None) -> dict[str, Any]:
        """Cut the connection after the next call; returns where the snapshot between goes."""
        # Nothing to load inside the test (no NOSCRIPT or missing-function round trip).
        for script in scripts().values():
            self.direct.redis.script_load(script.source)
        if has_functions(self.direct.redis):  # (Redis 6.2: scripts alone)
            self.direct.redis.function_load(library().source, replace=True)
        self.proxy.reset()
        self.q.made.clear()
        between: dict[str, Any] = {}

        def look() -> None:
            between.update(snapshot(self.direct))
            if before_resend is not None:
                before_resend()

        self.proxy.cut_after_next(has(self.command), before_resend=look)
        return between

    def lost(
        self, action: Callable[[], T], before_resend: Callable[[], object] | None = None
    ) -> Lost[T]:
        """Run ``action`` (one client call) with its first reply lost."""
        between = self.arm(before_resend)
        second = action()
        check_delivered_twice(self.proxy, self.command)
        assert len(self.q.made) == 1, "the client must build one call and re-send it as is"
        first: T = self.q.made[0].parse(self.proxy.dropped[0])
        return Lost(first, second, between, snapshot(self.direct))

    def other_worker_claims(self) -> None:
        claimed(self.direct.claim("default", "other", LEASE))


def check_delivered_twice(proxy: Proxy, command: bytes) -> None:
    sent = proxy.forwarded(command)
    assert not proxy.armed, "the proxy never cut the connection: nothing was re-sent"
    assert len(proxy.dropped) == 1, proxy.dropped
    assert not isinstance(proxy.dropped[0], Exception), f"first delivery failed: {proxy.dropped}"
    assert len(sent) == 2, f"{command!r} must reach Redis twice, reached it {len(sent)} times"
    assert sent[0] == sent[1], "the re-send must carry the same call (same call id)"
    assert not proxy.errors, proxy.errors


@pytest.fixture(params=["functions", "scripts"])
def rig(
    request: pytest.FixtureRequest, proxy: Proxy, upstream: redis.Redis, namespace: str
) -> Iterator[Rig]:
    retrying = redis.Redis(
        host=HOST,
        port=proxy.port,
        db=int(upstream.connection_pool.connection_kwargs.get("db", 0)),
        retry=Retry(NoBackoff(), 3),
        retry_on_error=RETRY_ON,
        socket_timeout=10,
    )
    try:
        functions = request.param == "functions"
        q = Recording(retrying, namespace, functions)
        if functions and not has_functions(upstream):
            q.counts("default")  # Redis 6.2: the first call finds no FCALL, scripts from then on
        yield Rig(proxy, q, Quasar(upstream, namespace))
    finally:
        retrying.close()


def same_reply_nothing_more(lost: Lost[Any]) -> None:
    assert lost.second == lost.first, "the re-sent call must get the reply the first one got"
    assert lost.after == lost.between, "the re-sent call must change nothing more"


# --- enqueue --------------------------------------------------------------------------------------


def test_resent_enqueue_is_applied_not_duplicate(rig: Rig) -> None:
    lost = rig.lost(lambda: rig.q.enqueue("s", {"n": 1}, id="j"))
    assert isinstance(lost.first, JobApplied)
    same_reply_nothing_more(lost)
    assert rig.direct.redis.get(rig.direct.keys.seq) == b"1"
    assert rig.direct.counts("default").available == 1


def test_resent_enqueue_with_generated_id(rig: Rig) -> None:
    lost = rig.lost(lambda: rig.q.enqueue("s"))
    assert isinstance(lost.first, JobApplied)
    same_reply_nothing_more(lost)
    assert rig.direct.counts("default").available == 1


def test_resent_bulk_enqueue_is_batch_applied(rig: Rig) -> None:
    jobs = [NewJob("s", id="a"), NewJob("s", id="b", dependencies=["a"]), NewJob("s", id="c")]
    lost = rig.lost(lambda: rig.q.enqueue_many(jobs))
    assert isinstance(lost.first, BatchApplied)
    assert [j.id for j in lost.first.jobs] == ["a", "b", "c"]
    same_reply_nothing_more(lost)
    assert rig.direct.redis.get(rig.direct.keys.seq) == b"3"


# --- claims ---------------------------------------------------------------------------------------


def test_resent_claim_by_queue_leases_no_second_job(rig: Rig) -> None:
    rig.direct.enqueue_many([NewJob("s", id="a"), NewJob("s", id="b")])
    lost = rig.lost(lambda: rig.q.claim("default", "w", LEASE))
    assert isinstance(lost.first, ClaimApplied)
    assert lost.first.claim.job.id == "a"
    same_reply_nothing_more(lost)
    counts = rig.direct.counts("default")
    assert (counts.executing, counts.available) == (1, 1)


def test_resent_claim_many_returns_the_same_jobs(rig: Rig) -> None:
    rig.direct.enqueue_many([NewJob("s", id=f"j{i}") for i in range(5)])
    lost = rig.lost(lambda: rig.q.claim_many("default", "w", LEASE, 3))
    assert isinstance(lost.first, ClaimsApplied)
    assert [c.job.id for c in lost.first.claims] == ["j0", "j1", "j2"]
    same_reply_nothing_more(lost)
    counts = rig.direct.counts("default")
    assert (counts.executing, counts.available) == (3, 2)
    for i in range(3):
        info = rig.direct.get_job(f"j{i}")
        assert info is not None
        assert (info.job.attempt, info.job.fencing_version) == (1, 1)


def test_resent_report_and_claim_gets_its_first_answers(rig: Rig) -> None:
    rig.direct.enqueue_many([NewJob("s", id=f"j{i}") for i in range(5)])
    held = rig.direct.claim_many("default", "w", LEASE, 2)
    assert isinstance(held, ClaimsApplied)
    outcomes = [Complete(c.token, {"n": i}) for i, c in enumerate(held.claims)]
    lost = rig.lost(lambda: rig.q.report_and_claim("w", outcomes, "default", LEASE, 2))
    assert isinstance(lost.first, ReportedAndClaimed)
    assert lost.first.outcomes == (
        OutcomeApplied("j0", "Succeeded"),
        OutcomeApplied("j1", "Succeeded"),
    )
    assert isinstance(lost.first.claim, ClaimsApplied)
    assert [c.job.id for c in lost.first.claim.claims] == ["j2", "j3"]
    same_reply_nothing_more(lost)
    counts = rig.direct.counts("default")
    assert (counts.completed, counts.executing, counts.available) == (2, 2, 1)


def test_resent_claim_job_returns_the_same_claim(rig: Rig) -> None:
    applied(rig.direct.enqueue("s", id="j"))
    lost = rig.lost(lambda: rig.q.claim_job("j", "w", LEASE))
    assert isinstance(lost.first, ClaimApplied)
    same_reply_nothing_more(lost)
    assert lost.second.claim.token.nonce == lost.first.claim.token.nonce  # type: ignore[union-attr]
    assert rig.q.claim_job("j", "w", LEASE) == ClaimRefused(
        LeaseHeld(lost.first.claim.token.expires_at)
    )


# --- the lease holder's calls ---------------------------------------------------------------------


def leased(rig: Rig, job_id: str = "j", **job: Any) -> Claim:
    applied(rig.direct.enqueue("s", id=job_id, **job))
    return claimed(rig.direct.claim_job(job_id, "w", LEASE))


def test_resent_complete_is_applied_not_stale_lease(rig: Rig) -> None:
    rig.direct.enqueue_many(
        [NewJob("s", id="a"), NewJob("s", id="b"), NewJob("s", id="c", dependencies=["a", "b"])]
    )
    lease = claimed(rig.direct.claim_job("a", "w", LEASE))
    lost = rig.lost(lambda: rig.q.complete(lease.token, "w", result={"ok": 1}))
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.first.job.state, Succeeded)
    same_reply_nothing_more(lost)
    info = rig.direct.get_job("c")
    assert info is not None
    assert info.job.pending_dependencies == 1, "the dependent must be released once, not twice"
    assert info.waiting_on == "b"


def test_resent_fail_is_applied(rig: Rig) -> None:
    lease = leased(rig)
    lost = rig.lost(lambda: rig.q.fail(lease.token, "w", "boom", retry_delay_ms=5_000))
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.first.job.state, RetryWaiting)
    same_reply_nothing_more(lost)


def test_resent_fail_of_the_last_attempt_is_applied(rig: Rig) -> None:
    lease = leased(rig, max_attempts=1)
    lost = rig.lost(lambda: rig.q.fail(lease.token, "w", "boom"))
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.first.job.state, Failed)
    same_reply_nothing_more(lost)


def test_resent_permanent_fail_is_applied(rig: Rig) -> None:
    lease = leased(rig)
    lost = rig.lost(lambda: rig.q.permanent_fail(lease.token, "w", "broken"))
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.first.job.state, Failed)
    same_reply_nothing_more(lost)


def test_resent_heartbeat_returns_the_same_new_token(rig: Rig) -> None:
    lease = leased(rig)
    lost = rig.lost(lambda: rig.q.heartbeat(lease.token, "w", LEASE * 2))
    assert isinstance(lost.first, ClaimApplied)
    assert lost.first.claim.token.expires_at > lease.token.expires_at
    same_reply_nothing_more(lost)
    applied(rig.q.complete(lost.first.claim.token, "w"))


# --- operator calls -------------------------------------------------------------------------------


def test_resent_cancel_is_applied_with_the_same_cascade(rig: Rig) -> None:
    rig.direct.enqueue_many([NewJob("s", id="a"), NewJob("s", id="b", dependencies=["a"])])
    lost = rig.lost(lambda: rig.q.cancel("a", reason="enough"))
    assert isinstance(lost.first, CancelApplied)
    assert lost.first.cascaded == ("b",)
    assert lost.second == lost.first, (
        "a re-sent cancel must get the reply the first one got: first cascaded "
        f"{lost.first.cascaded}, re-send cascaded {getattr(lost.second, 'cascaded', None)}"
    )
    same_reply_nothing_more(lost)


def test_resent_cancel_of_a_leased_job(rig: Rig) -> None:
    lease = leased(rig)
    lost = rig.lost(lambda: rig.q.cancel("j", expected_fence=1))
    assert isinstance(lost.first, CancelApplied)
    same_reply_nothing_more(lost)
    assert rig.q.complete(lease.token, "w") == JobRefused(StaleLease())


def test_resent_operator_retry_adds_one_attempt_once(rig: Rig) -> None:
    lease = leased(rig, max_attempts=1)
    gone = applied(rig.direct.permanent_fail(lease.token, "w", "broken"))
    lost = rig.lost(lambda: rig.q.retry("j", expected_fence=gone.fencing_version))
    assert isinstance(lost.first, JobApplied)
    assert lost.first.job.max_attempts == 2
    same_reply_nothing_more(lost)


def test_resent_expire_is_applied(rig: Rig) -> None:
    applied(rig.direct.enqueue("s", id="j", now=1_000))
    lease = claimed(rig.direct.claim_job("j", "w", 100, now=1_000))
    fence = lease.token.fencing_version
    lost = rig.lost(lambda: rig.q.expire("j", fence, now=2_000))
    assert isinstance(lost.first, JobApplied)
    assert lost.first.job.state == RetryWaiting("worker lease expired", 2_000)
    same_reply_nothing_more(lost)


def test_resent_sweep_expires_nothing_twice(rig: Rig) -> None:
    rig.direct.enqueue_many([NewJob("s", id=f"j{i}") for i in range(3)], now=1_000)
    for i in range(3):
        claimed(rig.direct.claim_job(f"j{i}", "w", 100, now=1_000))
    lost = rig.lost(lambda: rig.q.sweep_expired(now=2_000))
    assert sorted(lost.first.expired) == ["j0", "j1", "j2"]
    assert lost.after == lost.between, "the re-sent sweep must change nothing more"
    for i in range(3):
        info = rig.direct.get_job(f"j{i}", now=2_000)
        assert info is not None
        assert (info.job.attempt, type(info.job.state)) == (1, RetryWaiting)


# --- new calls with old tokens ----------------------------------------------------------------


def test_new_call_with_an_old_token_is_still_stale(rig: Rig) -> None:
    lease = leased(rig)
    lost = rig.lost(lambda: rig.q.complete(lease.token, "w"))
    assert isinstance(lost.second, JobApplied)
    assert rig.q.complete(lease.token, "w") == JobRefused(StaleLease())  # a new call id
    assert rig.q.fail(lease.token, "w", "late") == JobRefused(StaleLease())
    assert rig.q.heartbeat(lease.token, "w", LEASE) == ClaimRefused(StaleLease())


def test_new_heartbeat_with_the_token_before_a_resent_heartbeat_is_stale(rig: Rig) -> None:
    lease = leased(rig)
    lost = rig.lost(lambda: rig.q.heartbeat(lease.token, "w", LEASE * 2))
    assert isinstance(lost.second, ClaimApplied)
    assert rig.q.heartbeat(lease.token, "w", LEASE) == ClaimRefused(StaleLease())
    assert rig.q.complete(lease.token, "w") == JobRefused(StaleLease())


# --- a re-send that arrives after another client moved the job ------------------------------------


def test_resent_enqueue_after_a_worker_claimed_the_job(rig: Rig) -> None:
    lost = rig.lost(lambda: rig.q.enqueue("s", id="j"), before_resend=rig.other_worker_claims)
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.second, JobApplied), (
        f"a re-sent enqueue was answered {lost.second} because a worker claimed the job between "
        "the first delivery and the re-send"
    )


def test_resent_fail_after_another_worker_claimed_the_retry(rig: Rig) -> None:
    lease = leased(rig)
    lost = rig.lost(
        lambda: rig.q.fail(lease.token, "w", "boom"), before_resend=rig.other_worker_claims
    )
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.second, JobApplied), (
        f"a re-sent fail was answered {lost.second} because another worker claimed the retry "
        "between the first delivery and the re-send"
    )


def test_resent_expire_after_another_worker_claimed_the_retry(rig: Rig) -> None:
    applied(rig.direct.enqueue("s", id="j", now=1_000))
    claimed(rig.direct.claim_job("j", "w", 100, now=1_000))
    lost = rig.lost(
        lambda: rig.q.expire("j", 1, now=2_000),
        before_resend=lambda: claimed(rig.direct.claim_job("j", "other", LEASE, now=2_000)),
    )
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.second, JobApplied), (
        f"a re-sent expire was answered {lost.second} because another worker claimed the job "
        "between the first delivery and the re-send"
    )


def test_resent_operator_retry_after_a_worker_claimed_the_job(rig: Rig) -> None:
    lease = leased(rig, max_attempts=1)
    applied(rig.direct.permanent_fail(lease.token, "w", "broken"))
    lost = rig.lost(lambda: rig.q.retry("j"), before_resend=rig.other_worker_claims)
    assert isinstance(lost.first, JobApplied)
    assert isinstance(lost.second, JobApplied), (
        f"a re-sent operator retry was answered {lost.second} because a worker claimed the job "
        "between the first delivery and the re-send"
    )


# --- asyncio --------------------------------------------------------------------------------------


async def async_lost(rig: Rig, q: AsyncRecording, action: Callable[[], Awaitable[T]]) -> Lost[T]:
    between = rig.arm()
    q.made.clear()
    second = await action()
    check_delivered_twice(rig.proxy, rig.command)
    assert len(q.made) == 1, "the client must build one call and re-send it as is"
    first: T = q.made[0].parse(rig.proxy.dropped[0])
    return Lost(first, second, between, snapshot(rig.direct))


def async_client(rig: Rig) -> redis.asyncio.Redis:
    """An asyncio client through the proxy, retrying as the sync one does."""
    return redis.asyncio.Redis(
        host=HOST,
        port=rig.proxy.port,
        db=int(rig.direct.redis.connection_pool.connection_kwargs.get("db", 0)),
        retry=AsyncRetry(NoBackoff(), 3),
        retry_on_error=RETRY_ON,
        socket_timeout=10,
    )


async def async_claim_and_complete(rig: Rig) -> tuple[Lost[Any], Lost[Any]]:
    client = async_client(rig)
    try:
        q = AsyncRecording(client, rig.q.namespace, rig.q.functions)
        claim = await async_lost(rig, q, lambda: q.claim("default", "w", LEASE))
        token = claimed(claim.second).token
        done = await async_lost(rig, q, lambda: q.complete(token, "w", result="done"))
        return claim, done
    finally:
        await client.aclose()


def test_async_client_resent_claim_and_complete(rig: Rig) -> None:
    applied(rig.direct.enqueue("s", id="j"))
    claim_lost, complete_lost = asyncio.run(async_claim_and_complete(rig))
    assert isinstance(claim_lost.first, ClaimApplied)
    same_reply_nothing_more(claim_lost)
    assert isinstance(complete_lost.first, JobApplied)
    same_reply_nothing_more(complete_lost)
    info = rig.direct.get_job("j")
    assert info is not None
    assert info.job.state == complete_lost.first.job.state
    assert info.job.result == "done"


async def async_coalesced_enqueue(rig: Rig) -> Lost[Any]:
    client = async_client(rig)
    try:
        q = AsyncRecording(client, rig.q.namespace, rig.q.functions)
        # A plain asyncio client: commands go packed by hiredis on the pool's connections, with
        # the client's retry policy (what is under test here, with the reply lost).
        assert q._packed is not None

        async def three() -> list[Any]:
            return list(
                await asyncio.gather(*[q.enqueue("s", {"n": i}, id=f"c{i}") for i in range(3)])
            )

        return await async_lost(rig, q, three)  # (the three go as one call)
    finally:
        await client.aclose()


def test_async_coalesced_enqueue_resent_by_the_client_retry(rig: Rig) -> None:
    lost = asyncio.run(async_coalesced_enqueue(rig))
    same_reply_nothing_more(lost)
    assert all(isinstance(r, JobApplied) for r in lost.second)
    for i in range(3):
        info = rig.direct.get_job(f"c{i}")
        assert info is not None and info.job.payload == {"n": i}
