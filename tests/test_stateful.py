"""Random sequences of every transition, against the Lua scripts and against ``tests/model.py``.

A Hypothesis ``RuleBasedStateMachine`` drives one namespace through the ``Quasar`` client (a fresh
namespace, or a fresh fakeredis server, per example) and the pure-Python model side by side, with
the clock under the test's control (``now=`` on every call): enqueue (single and batch, and a
stored id's higher input revision superseding it), claim by queue and by id, complete, fail,
permanent_fail, heartbeat, release, expire, sweep, cancel, operator retry, change, promote, prune,
list, and re-sent calls (same call id); jobs come with dedup keys (unique, throttle, debounce)
from a pool of two, and batches may skip duplicate ids. Jobs may carry a flow group, and the
queues' limits change (a queue's rate and cap, its groups' default rate and cap, a group's own,
releases that hold a group or a queue): every claim by queue is the model's to the job, turn
by turn (docs/flow-control.md), and after every step the flow keys of each queue are what the
model holds and in step with the jobs (``tests/consistency.py``'s ``flow_problems``). Every
result is compared as a typed value; after every step every job (``get_job``: the job and the
dependency it waits on) and the counts of every queue are compared too. Pools of ids, queues
and workers are small, so duplicate ids, missing dependencies, stale tokens and lost leases come
up all the time; every token ever handed out is kept, sometimes forged, and used again by random
workers.

Runs on fakeredis and on the real Redis of ``tests/helpers.py`` (skipped without one, failed
under ``QUASAR_REQUIRE_REDIS=1``). ``QUASAR_STATEFUL_EXAMPLES`` sets the number of examples.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from quasar_redis import (
    BatchApplied,
    BatchResult,
    Call,
    CancelApplied,
    Claim,
    ClaimApplied,
    ClaimRefused,
    ClaimResult,
    ClaimsApplied,
    ClaimsResult,
    Complete,
    Debounce,
    Fail,
    Failed,
    InvalidJob,
    Job,
    JobApplied,
    JobInfo,
    JobRefused,
    Leased,
    LeaseToken,
    MissingDependency,
    NewJob,
    NothingClaimable,
    Outcome,
    PermanentFail,
    Quasar,
    QueueCounts,
    Release,
    RetryWaiting,
    Status,
    SweepReport,
    Throttle,
    Unique,
    Waiting,
)
from quasar_redis._call_base import KEEP, JobChange
from quasar_redis._flow import KEEP as KEEP_LIMIT
from quasar_redis._flow import UNLIMITED, Rate
from quasar_redis._flow_calls import limit_pairs
from quasar_redis.errors import InvalidArgument

from .consistency import flow_problems
from .helpers import delete_namespace, real_redis
from .model import GROUPED, Model

IDS = ("a", "b", "c", "d", "e", "f", "g")
QUEUES = ("default", "q2")  # the default queue too: the scripts do not store default values
WORKERS = ("w1", "w2", "w3")
GROUPS = ("ga", "gb", "gc")
#: The test's clock starts ahead of the server's (in 2033): a group's rate's arrival time is
#: stored until its time by the server's clock (lua/include/flow_control.lua set_group_tat).
T_START = 2_000_000_000_000

EXAMPLES = int(os.environ.get("QUASAR_STATEFUL_EXAMPLES", "200"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# --- strategies ----------------------------------------------------------------------------------

durations = st.sampled_from([0, 1, 50, 99, 100, 101, 250, 500]) | st.integers(0, 700)
leases = st.sampled_from([1, 50, 100, 100, 250, 250, 500, 1000, 0])
job_ids = st.sampled_from(IDS)
queues = st.sampled_from(QUEUES)
workers = st.sampled_from(WORKERS)
callers = st.sampled_from(WORKERS * 4 + ("",))
dependency_counts = st.sampled_from([0, 0, 1, 1, 2])
output_refs = st.sampled_from(["out", "out", "out", ""])
#: Payloads and results: small, and around the sizes where the scripts store them in 64-byte
#: chunks (over 64 bytes of msgpack) or whole again (over 16 chunks).
blobs = (
    st.none()
    | st.integers(0, 3)
    | st.sampled_from([61, 62, 63, 126, 1021, 1022]).flatmap(
        lambda n: st.binary(min_size=n, max_size=n)
    )
)
results = blobs
fail_reasons = st.sampled_from(["boom", "boom", ""])
fatal_reasons = st.sampled_from(["fatal", "fatal", "fatal", ""])
retry_delays = st.sampled_from([0, 0, 100, 300, -1])
error_kinds = st.sampled_from(["Error", "Timeout"])

#: Ways to break an otherwise valid new job (None: leave it valid), with their refusals.
BREAKS: dict[str, dict[str, Any]] = {
    "id": {"id": ""},
    "stage": {"stage": ""},
    "input_ref": {"input_ref": ""},
    "input_revision": {"input_revision": -1},
    "max_attempts": {"max_attempts": 0},
    "available_at": {"available_at": -1},
    "delay": {"available_at": None, "delay_ms": -1},
    "group": {"group": "g x"},
}

#: Limits a rule sets (KEEP_LIMIT: left as they are; None: removed): short windows, so that the
#: clock's steps both meet and pass them.
rates = st.sampled_from(
    [KEEP_LIMIT, KEEP_LIMIT, None, Rate(1, 0.1), Rate(2, 1, 1), Rate(1, 0.5, 2)]
)
caps = st.sampled_from([KEEP_LIMIT, KEEP_LIMIT, None, 1, 2])
group_rates = st.sampled_from(
    [KEEP_LIMIT, KEEP_LIMIT, None, UNLIMITED, Rate(1, 1), Rate(3, 0.5, 1)]
)
group_caps = st.sampled_from([KEEP_LIMIT, KEEP_LIMIT, None, UNLIMITED, 1, 2])
holds = st.sampled_from([None, None, None, None, 100, 300, 0])


#: Dedup options (None most of the time), on a pool of two keys and short windows.
dedups = st.one_of(
    st.none(),
    st.none(),
    st.builds(Unique, st.sampled_from(["k1", "k2"]), st.sampled_from(["waiting", "running"])),
    st.builds(Unique, st.sampled_from(["k1", "k2"]), st.just("finished"), st.just(200)),
    st.builds(Throttle, st.sampled_from(["k1", "k2"]), st.sampled_from([100, 300])),
    st.builds(Debounce, st.sampled_from(["k1", "k2"]), st.sampled_from([100, 300])),
)


@dataclass(frozen=True)
class JobDraw:
    """A new job whose availability is relative to the clock at the time it is enqueued, and its
    deadline (``limit``: absolute or relative) ``limit_offset`` after that availability."""

    spec: NewJob
    at_offset: int | None
    limit: str | None = None
    limit_offset: int = 0

    def at(self, now: int) -> NewJob:
        spec = self.spec
        if self.at_offset is not None and spec.available_at is None:
            spec = replace(spec, available_at=max(0, now + self.at_offset))
        if spec.available_at is not None:
            start = max(now, spec.available_at)
        else:
            start = now + max(0, spec.delay_ms or 0)
        if self.limit == "deadline":
            return replace(spec, deadline=start + self.limit_offset)
        if self.limit == "expires_in":
            return replace(spec, expires_in_ms=start - now + self.limit_offset)
        return spec


@st.composite
def new_jobs(draw: st.DrawFn, valid: bool = False) -> JobDraw:
    """A new job; ``valid`` ones have no dependencies and pass every check but DuplicateJob."""
    timing = draw(st.sampled_from(["now", "delay", "at", "at"]))
    spec = NewJob(
        stage=draw(st.sampled_from(["s1", "s2"])),
        payload=draw(blobs),
        id=draw(job_ids),
        queue=draw(queues),
        input_ref=draw(st.sampled_from(["inline", "ref"])),
        input_revision=draw(st.integers(0, 2)),
        dependencies=[] if valid else draw(st.lists(job_ids, max_size=draw(dependency_counts))),
        priority=draw(st.integers(-1, 1)),
        max_attempts=draw(st.integers(1, 3)),
        delay_ms=draw(st.sampled_from([0, 100, 300])) if timing == "delay" else None,
        on_dependency_failure=draw(st.sampled_from(["block", "cancel", "run"])),
        dedup=None if valid else draw(dedups),
        group=draw(st.sampled_from([None, None, *GROUPS])),
    )
    offset = draw(st.sampled_from([-200, -1, 0, 0, 100, 300])) if timing == "at" else None
    broken = None if valid else draw(st.sampled_from([None] * 60 + list(BREAKS)))
    if broken is not None:
        spec = replace(spec, **BREAKS[broken])
    # a deadline, or none; at its availability (offset 0) it is refused
    limit = draw(st.sampled_from([None, None, "deadline", "expires_in"]))
    offsets = [1, 50, 150, 400] if valid else [0, 1, 50, 50, 150, 400]
    limit_offset = draw(st.sampled_from(offsets)) if limit else 0
    return JobDraw(spec, offset, limit, limit_offset)


@st.composite
def changes(draw: st.DrawFn, now: int) -> JobChange:
    """What a ``change`` changes: often one thing, sometimes several, sometimes a bad value."""
    timing = draw(st.sampled_from(["keep", "keep", "at", "at", "delay", "promote", "promote"]))
    payload = draw(st.just(KEEP) | blobs)
    revisions = [None] * 6 + [1, 2, 3, 5] if payload is not KEEP else [None] * 12 + [1]
    if draw(st.integers(0, 9), "a bad value") == 0:
        timing, revisions = draw(st.sampled_from(["two", timing])), [-1, 0, *revisions]
    return JobChange(
        payload=payload,
        input_revision=draw(st.sampled_from(revisions)),
        priority=draw(st.sampled_from([None, None, -1, 0, 1, 2_000_000])),
        available_at=max(0, now + draw(st.sampled_from([-100, 0, 200])))
        if timing in ("at", "two")
        else None,
        delay_ms=draw(st.sampled_from([0, 100, -1])) if timing == "delay" else None,
        promote=timing in ("promote", "two"),
    )


APPLIED = (JobApplied, CancelApplied, BatchApplied, ClaimApplied, ClaimsApplied)
OUTCOMES = ("complete", "complete", "fail", "fail", "permanent_fail", "release")
FORGERIES = ("none",) * 14 + ("revision", "fence", "expires", "nonce", "job", "worker")


def forge(token: LeaseToken, how: str, other_id: str, other_worker: str) -> LeaseToken:
    """A token with one authority-bearing field changed (or the token itself)."""
    changes: dict[str, dict[str, Any]] = {
        "none": {},
        "revision": {"input_revision": token.input_revision + 1},
        "fence": {"fencing_version": token.fencing_version - 1},
        "expires": {"expires_at": token.expires_at + 1},
        # a fence counter rolled back by a failover: everything matches but the nonce
        "nonce": {"nonce": "forged-" + token.nonce},
        "job": {"job_id": other_id},
        "worker": {"worker_id": other_worker},
    }
    return replace(token, **changes[how])


def without_nonces(result: Any) -> Any:
    """A claim result with the nonces blanked (they are random; the model cannot know them)."""
    match result:
        case ClaimApplied(claim):
            return ClaimApplied(replace(claim, token=replace(claim.token, nonce="")))
        case ClaimsApplied(claims):
            return ClaimsApplied(
                tuple(replace(c, token=replace(c.token, nonce="")) for c in claims)
            )
    return result


def claims_of(result: ClaimResult | ClaimsResult) -> tuple[Claim, ...]:
    match result:
        case ClaimApplied(claim):
            return (claim,)
        case ClaimsApplied(claims):
            return claims
    return ()


def outcome(result: Any) -> str:
    """A short label of a result, for ``--hypothesis-show-statistics``."""
    error = getattr(result, "error", None)
    if error is not None:
        return type(error).__name__
    return type(result).__name__


batches = st.lists(new_jobs(), min_size=1, max_size=3, unique_by=lambda d: d.spec.id) | st.lists(
    new_jobs(), min_size=1, max_size=3
)


# --- backends ----------------------------------------------------------------------------------

#: Opens a fresh namespace: its client, and a function that deletes it.
Opener = Callable[[], tuple[Quasar, Callable[[], None]]]


def fake_opener() -> tuple[Quasar, Callable[[], None]]:
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return Quasar(client, "stateful", check_eviction_policy=False), client.close


@contextmanager
def real_opener() -> Iterator[Opener]:
    client = real_redis()

    def opener() -> tuple[Quasar, Callable[[], None]]:
        namespace = f"st-{uuid.uuid4().hex[:12]}"
        return Quasar(client, namespace), lambda: delete_namespace(client, namespace)

    try:
        yield opener
    finally:
        client.close()


# --- the machine --------------------------------------------------------------------------------


class QuasarMachine(RuleBasedStateMachine):
    def __init__(self, opener: Opener) -> None:
        super().__init__()
        self.q, self.cleanup = opener()
        self.model = Model()
        self.now = T_START
        self.tokens: list[LeaseToken] = []
        self.nonces: set[str] = set()
        #: The last transition call and its result, for re-sending it.
        self.last: tuple[Call[Any], Any] | None = None
        #: Every call that applied a transition, its result, and the jobs it is about.
        self.applied: list[tuple[Call[Any], Any, frozenset[tuple[str, int]]]] = []
        #: The call sent last, until its result is checked against the model.
        self.unchecked: tuple[Call[Any], Any] | None = None

    def teardown(self) -> None:
        self.cleanup()

    # plumbing ---------------------------------------------------------------------------------

    def send(self, call: Call[Any]) -> Any:
        result = self.q.execute(call)
        self.last = (call, result)
        self.unchecked = (call, result)
        return result

    def incarnations(self, result: Any) -> frozenset[tuple[str, int]]:
        """The jobs an applied result is about, each as (id, seq): an id is reused after prune."""
        match result:
            case JobApplied(job) | CancelApplied(job, _):
                ids = [job.id]
            case BatchApplied(_, batch_ids):
                ids = list(batch_ids)
            case ClaimApplied(claim):
                ids = [claim.job.id]
            case ClaimsApplied(claims):
                ids = [c.job.id for c in claims]
            case _:
                raise AssertionError(result)
        return frozenset((i, self.model.jobs[i].seq) for i in ids)

    def still_here(self, jobs: frozenset[tuple[str, int]]) -> bool:
        return all(i in self.model.jobs and self.model.jobs[i].seq == seq for i, seq in jobs)

    def current(self, job: Job) -> Job:
        return self.model.jobs[job.id].to_job()

    def as_now(self, result: Any) -> Any:
        """An applied result with every job as the model holds it now (tokens unchanged)."""
        match result:
            case JobApplied(job, deduplicated):
                return JobApplied(self.current(job), deduplicated)
            case CancelApplied(job, cascaded):
                return CancelApplied(self.current(job), cascaded)
            case BatchApplied(jobs, ids, deduplicated):
                return BatchApplied(tuple(self.current(j) for j in jobs), ids, deduplicated)
            case ClaimApplied(claim):
                return ClaimApplied(replace(claim, job=self.current(claim.job)))
            case ClaimsApplied(claims):
                return ClaimsApplied(tuple(replace(c, job=self.current(c.job)) for c in claims))
        raise AssertionError(result)

    def expect(self, actual: Any, expected: Any, what: str) -> None:
        """Compare a result with the model's; an applied call sent is then kept for resending."""
        event(f"{what.partition('(')[0]}: {outcome(actual)}")
        assert actual == expected, (
            f"{what} at now={self.now}:\n impl:  {actual}\n model: {expected}"
        )
        if self.unchecked is not None:
            call, result = self.unchecked
            self.unchecked = None
            if call.early is None and isinstance(result, APPLIED):
                self.applied.append((call, result, self.incarnations(result)))

    def expect_claims(
        self, actual: ClaimResult | ClaimsResult, expected: ClaimResult | ClaimsResult, what: str
    ) -> None:
        """Compare without nonces, then check each new nonce is fresh and hand it to the model."""
        self.expect(without_nonces(actual), expected, what)
        for claim in claims_of(actual):
            nonce = claim.token.nonce
            assert nonce and nonce not in self.nonces, f"{what}: nonce {nonce!r} reused"
            self.nonces.add(nonce)
            self.model.adopt_nonce(claim.job.id, nonce)
            self.tokens.append(claim.token)

    def pick_token(self, data: st.DataObject) -> tuple[LeaseToken, str]:
        """A token ever handed out (recent ones more often), maybe forged, and a caller."""
        n = len(self.tokens)
        index = data.draw(st.integers(max(0, n - 3), n - 1) | st.integers(0, n - 1), "token")
        how = data.draw(st.sampled_from(FORGERIES), "forgery")
        token = forge(self.tokens[index], how, data.draw(job_ids), data.draw(workers))
        if data.draw(st.integers(0, 5), "the token's own worker calls") > 0:
            return token, token.worker_id
        return token, data.draw(callers, "caller")

    def pick_id(self, data: st.DataObject, state: type[Any] | None = None) -> str:
        """A job id: most often one that exists, and then often one in ``state``."""
        known = sorted(self.model.jobs)
        if not known or data.draw(st.integers(0, 4), "pick a known id") == 0:
            return data.draw(job_ids, "job_id")
        fitting = [i for i in known if isinstance(self.model.jobs[i].state, state or object)]
        prefer = data.draw(st.booleans(), "prefer the state")
        among = fitting if fitting and prefer else known
        return data.draw(st.sampled_from(among), "job_id")

    def fence_of(self, data: st.DataObject, job_id: str, allow_none: bool) -> int | None:
        job = self.model.jobs.get(job_id)
        choices: list[int | None] = [0, 1, 2]
        if job is not None:
            choices += [job.fence] * 5
        if allow_none:
            choices += [None, None]
        return data.draw(st.sampled_from(choices), "expected_fence")

    # time and enqueue ---------------------------------------------------------------------------

    @rule(delta=durations)
    def advance_time(self, delta: int) -> None:
        self.now += delta

    @rule(draw=new_jobs())
    def enqueue(self, draw: JobDraw) -> None:
        spec = draw.at(self.now)
        actual = self.send(self.q.calls.enqueue(spec, self.now))
        self.expect(actual, self.model.enqueue(spec, self.now), f"enqueue {spec}")

    @initialize(draws=st.lists(new_jobs(valid=True), max_size=5, unique_by=lambda d: d.spec.id))
    def start(self, draws: list[JobDraw]) -> None:
        if draws:
            self.enqueue_many(draws, ids_only=False)

    @rule(draws=batches, ids_only=st.booleans(), skip=st.sampled_from([False, False, True]))
    def enqueue_many(self, draws: list[JobDraw], ids_only: bool, skip: bool = False) -> None:
        specs = [d.at(self.now) for d in draws]
        on_duplicate: Any = "skip" if skip else "refuse"
        call = self.q.calls.enqueue_many(
            specs, self.now, ids_only=ids_only, on_duplicate=on_duplicate
        )
        actual: BatchResult = self.send(call)
        expected = self.model.enqueue_many(specs, self.now, ids_only, on_duplicate)
        self.expect(actual, expected, f"enqueue_many {specs}")

    @rule(draws=batches)
    def enqueue_each(self, draws: list[JobDraw]) -> None:
        specs = [d.at(self.now) for d in draws]
        actual = self.send(self.q.calls.enqueue_each(specs, self.now))
        self.expect(actual, self.model.enqueue_each(specs, self.now), f"enqueue_each {specs}")

    # claims -----------------------------------------------------------------------------------

    @rule(queue=queues, worker=callers, lease=leases, limit=st.sampled_from([None, None, 1, 2, 3]))
    def claim(self, queue: str, worker: str, lease: int, limit: int | None) -> None:
        what = f"claim({queue!r}, {worker!r}, {lease}, limit={limit})"
        actual: ClaimResult | ClaimsResult
        expected: ClaimResult | ClaimsResult
        if limit is None:
            actual = self.send(self.q.calls.claim(queue, worker, lease, now=self.now))
            expected = self.model.claim(queue, worker, lease, self.now)
        else:
            actual = self.send(self.q.calls.claim_many(queue, worker, lease, limit, self.now))
            expected = self.model.claim_many(queue, worker, lease, limit, self.now)
        if expected != ClaimRefused(InvalidJob("worker_id must not be empty")):
            held = ", ".join(sorted(self.model.held_by))
            event(f"claim by queue: {self.model.claim_path}{' held by ' + held if held else ''}")
        self.expect_claims(actual, expected, what)

    @precondition(lambda self: self.model.flows)
    @rule(data=st.data(), worker=workers, lease=leases, limit=st.sampled_from([None, 1, 3]))
    def claim_flowed(self, data: st.DataObject, worker: str, lease: int, limit: int | None) -> None:
        """A claim of a queue with a flow (limits, holds, or groups taking turns)."""
        queue = data.draw(st.sampled_from(sorted(self.model.flows)), "queue")
        self.claim(queue, worker, lease, limit)

    @rule(data=st.data(), worker=callers, lease=leases)
    def claim_job(self, data: st.DataObject, worker: str, lease: int) -> None:
        job_id = self.pick_id(data, Waiting)
        actual = self.send(self.q.calls.claim_job(job_id, worker, lease, self.now))
        expected = self.model.claim_job(job_id, worker, lease, self.now)
        self.expect_claims(actual, expected, f"claim_job({job_id!r}, {worker!r}, {lease})")

    # the lease holder's calls -----------------------------------------------------------------

    def do_complete(self, token: LeaseToken, caller: str, output_ref: str, result: Any) -> None:
        actual = self.send(self.q.calls.complete(token, caller, output_ref, result, self.now))
        expected = self.model.complete(token, caller, output_ref, result, self.now)
        self.expect(actual, expected, f"complete({token}, {caller!r}, {output_ref!r})")

    def do_fail(self, token: LeaseToken, caller: str, reason: str, delay: int, kind: str) -> None:
        trace = f"Traceback of {reason}\n"  # (kept in the failure history get_job compares)
        call = self.q.calls.fail(token, caller, reason, delay, kind, self.now, trace)
        actual = self.send(call)
        expected = self.model.fail(token, caller, reason, delay, kind, self.now, trace)
        self.expect(actual, expected, f"fail({token}, {caller!r}, {reason!r}, {delay})")

    def do_permanent_fail(self, token: LeaseToken, caller: str, reason: str) -> None:
        actual = self.send(self.q.calls.permanent_fail(token, caller, reason, "Fatal", self.now))
        expected = self.model.permanent_fail(token, caller, reason, "Fatal", self.now)
        self.expect(actual, expected, f"permanent_fail({token}, {caller!r}, {reason!r})")

    def do_heartbeat(
        self, token: LeaseToken, caller: str, lease: int, progress: tuple[str, str] | None = None
    ) -> None:
        """(A heartbeat may carry progress: the model's job is the same either way.)"""
        call = self.q.calls.heartbeat(token, caller, lease, self.now, progress=progress)
        actual = self.send(call)
        expected = self.model.heartbeat(token, caller, lease, self.now)
        self.expect(actual, expected, f"heartbeat({token}, {caller!r}, {lease})")
        self.tokens.extend(c.token for c in claims_of(actual))

    def do_release(
        self, token: LeaseToken, caller: str, delay: int, hold: int | None = None
    ) -> None:
        actual = self.send(self.q.calls.release(token, caller, delay, self.now, hold_ms=hold))
        expected = self.model.release(token, caller, delay, self.now, hold)
        self.expect(actual, expected, f"release({token}, {caller!r}, {delay}, hold={hold})")

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), output_ref=output_refs, result=results)
    def complete(self, data: st.DataObject, output_ref: str, result: Any) -> None:
        self.do_complete(*self.pick_token(data), output_ref, result)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), reason=fail_reasons, delay=retry_delays, kind=error_kinds)
    def fail(self, data: st.DataObject, reason: str, delay: int, kind: str) -> None:
        self.do_fail(*self.pick_token(data), reason, delay, kind)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), reason=fatal_reasons)
    def permanent_fail(self, data: st.DataObject, reason: str) -> None:
        self.do_permanent_fail(*self.pick_token(data), reason)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), lease=leases, progress=st.sampled_from([None, ("50.0", "half")]))
    def heartbeat(self, data: st.DataObject, lease: int, progress: tuple[str, str] | None) -> None:
        self.do_heartbeat(*self.pick_token(data), lease, progress)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), value=st.sampled_from([0, 42.5, 100]))
    def report_progress(self, data: st.DataObject, value: float) -> None:
        """Progress never changes a job: the reply's job and every job stay the model's."""
        token, caller = self.pick_token(data)
        actual = self.send(self.q.calls.report_progress(token, caller, value, None, self.now))
        expected = self.model.report_progress(token, caller, self.now)
        self.expect(actual, expected, f"report_progress({token}, {caller!r}, {value})")

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), delay=retry_delays, hold=holds)
    def release(self, data: st.DataObject, delay: int, hold: int | None) -> None:
        self.do_release(*self.pick_token(data), delay, hold)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), size=st.integers(1, 3))
    def report(self, data: st.DataObject, size: int) -> None:
        """A worker's batch of outcomes in one call, each with some token, maybe not its own."""
        picked = [self.pick_token(data) for _ in range(size)]
        caller = picked[0][1]
        outcomes = [self.outcome_for(data, token) for token, _ in picked]
        actual = self.send(self.q.calls.report_many(caller, outcomes, self.now))
        expected = self.model.report(caller, outcomes, self.now)
        self.expect(actual, expected, f"report({caller!r}, {outcomes})")

    def outcome_for(self, data: st.DataObject, token: LeaseToken) -> Outcome:
        match data.draw(st.sampled_from(OUTCOMES), "outcome"):
            case "complete":
                return Complete(token, data.draw(results), data.draw(output_refs))
            case "fail":
                reason = data.draw(fail_reasons)
                return Fail(token, reason, data.draw(retry_delays), "Error", f"at {reason}")
            case "permanent_fail":
                return PermanentFail(token, data.draw(fatal_reasons), "Fatal", "Traceback ...")
        return Release(token, data.draw(retry_delays), data.draw(holds))

    @rule(data=st.data(), worker=workers, lease=leases)
    def work(self, data: st.DataObject, worker: str, lease: int) -> None:
        """A worker's round: claim from a queue (mostly one with work), then report on the job
        with the fresh token."""
        busy = sorted({j.queue for j in self.model.jobs.values() if not j.terminal})
        if busy and data.draw(st.integers(0, 4), "pick a busy queue") > 0:
            queue = data.draw(st.sampled_from(busy), "queue")
        else:
            queue = data.draw(queues, "queue")
        self.claim(queue, worker, lease, None)
        assert self.last is not None
        claimed = claims_of(self.last[1])
        if not claimed:
            return
        token = claimed[0].token
        self.now += data.draw(st.sampled_from([0, 0, 1, 50]), "work time")
        match data.draw(st.sampled_from((*OUTCOMES, "heartbeat")), "outcome"):
            case "complete":
                self.do_complete(token, worker, "out", data.draw(results, "result"))
            case "fail":
                self.do_fail(token, worker, "boom", data.draw(retry_delays), "Error")
            case "permanent_fail":
                self.do_permanent_fail(token, worker, "fatal")
            case "release":
                delay = data.draw(retry_delays, "delay")
                self.do_release(token, worker, delay, data.draw(holds, "hold"))
            case _:
                self.do_heartbeat(token, worker, data.draw(leases, "lease"))

    # fenced calls and maintenance -------------------------------------------------------------

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        job_id = self.pick_id(data, Leased)
        fence = self.fence_of(data, job_id, allow_none=False)
        assert fence is not None
        actual = self.send(self.q.calls.expire(job_id, fence, self.now))
        self.expect(
            actual, self.model.expire(job_id, fence, self.now), f"expire({job_id}, {fence})"
        )

    @rule(data=st.data(), reason=st.sampled_from(["stop", ""]))
    def cancel(self, data: st.DataObject, reason: str) -> None:
        job_id = self.pick_id(data)
        fence = self.fence_of(data, job_id, allow_none=True)
        actual = self.send(self.q.calls.cancel(job_id, fence, reason, self.now))
        if isinstance(actual, CancelApplied):  # the cascade's order is Redis's set order
            actual = replace(actual, cascaded=tuple(sorted(actual.cascaded)))
        expected = self.model.cancel(job_id, fence, reason, self.now)
        self.expect(actual, expected, f"cancel({job_id}, {fence}, {reason!r})")

    @rule(data=st.data(), reason=st.sampled_from(["again", ""]))
    def retry(self, data: st.DataObject, reason: str) -> None:
        job_id = self.pick_id(data, Failed)
        fence = self.fence_of(data, job_id, allow_none=True)
        actual = self.send(self.q.calls.retry(job_id, fence, reason, self.now))
        expected = self.model.retry(job_id, fence, reason, self.now)
        self.expect(actual, expected, f"retry({job_id}, {fence}, {reason!r})")

    @rule(data=st.data(), draw=new_jobs(valid=True), bump=st.sampled_from([1, 1, 1, 2, 0, -1]))
    def supersede(self, data: st.DataObject, draw: JobDraw, bump: int) -> None:
        """An enqueue of a stored id (often a running or retrying one) with another revision."""
        state = data.draw(st.sampled_from([Leased, Leased, RetryWaiting, Waiting]), "state")
        job_id = self.pick_id(data, state)
        stored = self.model.jobs.get(job_id)
        revision = max(0, (stored.input_revision if stored else 0) + bump)
        spec = replace(draw.at(self.now), id=job_id, input_revision=revision)
        actual = self.send(self.q.calls.enqueue(spec, self.now))
        self.expect(actual, self.model.enqueue(spec, self.now), f"supersede {spec}")

    @rule(data=st.data())
    def change(self, data: st.DataObject) -> None:
        job_id = self.pick_id(data, data.draw(st.sampled_from([Waiting, RetryWaiting]), "state"))
        fence = self.fence_of(data, job_id, allow_none=True)
        what = data.draw(changes(self.now), "changes")
        actual = self.send(self.q.calls.change(job_id, fence, what, self.now))
        expected = self.model.change(job_id, fence, what, self.now)
        self.expect(actual, expected, f"change({job_id}, {fence}, {what})")

    @rule(limit=st.sampled_from([1, 2, 1000]))
    def sweep(self, limit: int) -> None:
        report: SweepReport = self.send(self.q.calls.sweep_expired(limit, self.now))
        event(f"sweep: {len(report.expired)} expired, {len(report.past_deadline)} past deadline")
        self.check_sweep(report, limit, self.now)

    def check_sweep(self, report: SweepReport, limit: int, now: int) -> None:
        """A sweep at ``now`` expires the leases due, up to its limit, each queue's in expiry
        order, then with the room left the jobs past their deadline, each queue's in deadline
        order; the model follows."""
        due = self.model.due_leases(now)
        total = sum(len(ids) for ids in due.values())
        assert report.damaged == (), report
        assert len(report.expired) == min(limit, total), (report, due)
        for queue, ids in due.items():  # each queue's leases go in expiry order
            mine = [i for i in report.expired if i in ids]
            assert mine == ids[: len(mine)], (queue, report, due)
        with self.model.call():  # (one call: the flow's bookkeeping runs at its end)
            for job_id in report.expired:
                self.model.expire_lease(job_id, now)
            late = self.model.due_deadlines(now)
            room = limit - len(report.expired)
            assert len(report.past_deadline) == min(room, sum(map(len, late.values()))), (
                report,
                late,
            )
            for queue, ids in late.items():
                mine = [i for i in report.past_deadline if i in ids]
                assert mine == ids[: len(mine)], (queue, report, late)
            for job_id in report.past_deadline:
                self.model.expire_unstarted(self.model.jobs[job_id], now)

    @rule(limit=st.just(1000))  # a limit above the jobs there are: which ones move is known
    def promote(self, limit: int) -> None:
        moved = self.send(self.q.calls.promote_due(limit, self.now))
        self.expect(moved, self.model.promote(self.now), "promote")

    @rule(max_age=st.sampled_from([None, 0, 100, 1000]), max_count=st.sampled_from([None, 0, 1, 2]))
    def prune(self, max_age: int | None, max_count: int | None) -> None:
        pruned = self.send(self.q.calls.prune(max_age, max_count, 1000, self.now))
        expected = self.model.prune(max_age, max_count, self.now)
        self.expect(pruned, expected, f"prune(max_age={max_age}, max_count={max_count})")

    @rule(
        queue=queues,
        status=st.sampled_from([s.value for s in Status] + ["blocked"]),
        offset=st.sampled_from([0, 0, 1]),
        limit=st.sampled_from([1, 2, 100]),
    )
    def list_jobs(self, queue: str, status: str, offset: int, limit: int) -> None:
        actual = self.q.execute(self.q.calls.list_jobs(queue, status, offset, limit, self.now))
        expected = self.model.list_jobs(queue, status, offset, limit, self.now)
        self.expect(actual, expected, f"list_jobs({queue}, {status}, {offset}, {limit})")

    @precondition(lambda self: self.last is not None)
    @rule(data=st.data())
    def resend(self, data: st.DataObject) -> None:
        """redis-py re-sends a call after a lost reply, with the same call id: the call sent
        last gets the same reply and changes nothing; an applied call, re-sent later, gets the
        same outcome and tokens with the jobs as they are now. So a lost reply never turns into a
        refusal (a re-sent completion is not StaleLease, a re-sent claim leases nothing more),
        whatever happened since, short of its jobs being pruned (a reply lost that long ago is
        not re-sent).
        """
        live = [(c, r) for c, r, jobs in self.applied if self.still_here(jobs)]
        earlier = data.draw(st.booleans(), "re-send an earlier applied call")
        if live and earlier:
            call, first = data.draw(st.sampled_from(live), "applied call")
            again = self.q.execute(call)
            self.expect(again, self.as_now(first), f"re-sent {call.script.name} (applied earlier)")
            return
        assert self.last is not None
        call, first = self.last
        again = self.q.execute(call)
        if isinstance(first, SweepReport):  # a re-sent sweep sweeps again: what is still due
            self.check_sweep(again, int(call.args[2]), int(call.args[1]))  # its limit, its now
        elif call.script.name == "set_limits":  # the same limits set again: nothing changes
            self.expect(again, first, "re-sent set_limits")
        elif isinstance(first, int):  # likewise a re-sent promote or prune
            self.expect(again, 0, f"re-sent {call.script.name}")
        elif isinstance(first, list):  # enqueue_each: its jobs as they are now (a job created
            # and then superseded by the same call is answered twice at its last revision)
            now = [self.as_now(r) if isinstance(r, JobApplied) else r for r in first]
            self.expect(again, now, f"re-sent {call.script.name}")
        else:
            self.expect(again, first, f"re-sent {call.script.name}")

    # flow control ------------------------------------------------------------------------------

    def send_limits(self, queue: str, group: str | None, declare: bool, **limits: Any) -> None:
        """A set_limits call (of a group's limits, or the queue's) and the model's; a value the
        client refuses is never sent, and changes nothing."""
        what = f"set_limits({queue!r}, {group!r}, declare={declare}, {limits})"
        try:
            if group is None:
                call = self.q.calls.set_limits(queue, declare=declare, now=self.now, **limits)
            else:
                call = self.q.calls.set_group_limits(queue, group, now=self.now, **limits)
        except InvalidArgument as exc:
            event(f"set_limits: the client refused it ({str(exc)[:30]})")
            return
        pairs = limit_pairs(group is not None, **limits)
        expected = self.model.set_limits(
            queue, group, dict(zip(pairs[::2], pairs[1::2], strict=True)), declare
        )
        try:
            actual: int | str = self.send(call)
        except InvalidArgument as exc:
            actual = str(exc)
        self.expect(actual, self.now if expected is None else expected, what)

    @initialize(
        rate=rates,
        cap=caps,
        group_rate=group_rates.filter(lambda r: r is not UNLIMITED),
        group_cap=group_caps.filter(lambda c: c is not UNLIMITED),
    )
    def limits_at_start(self, rate: Any, cap: Any, group_rate: Any, group_cap: Any) -> None:
        """The default queue's limits, declared before any job (as a worker declares them)."""
        limits = {"concurrency": cap, "group_rate": group_rate, "group_concurrency": group_cap}
        self.send_limits("default", None, True, rate=rate, **limits)

    @rule(
        queue=queues,
        rate=rates,
        cap=caps,
        group_rate=group_rates,
        group_cap=group_caps,
        declare=st.sampled_from([False, False, True]),
    )
    def set_limits(
        self, queue: str, rate: Any, cap: Any, group_rate: Any, group_cap: Any, declare: bool
    ) -> None:
        """A queue's rate and cap, and its groups' defaults (UNLIMITED, a group's override
        only, is refused here, as are the limits of a queue nothing was enqueued to)."""
        self.send_limits(
            queue,
            None,
            declare,
            rate=rate,
            concurrency=cap,
            group_rate=group_rate,
            group_concurrency=group_cap,
        )

    @rule(
        queue=queues,
        group=st.sampled_from([*GROUPS, "g x"]),
        rate=group_rates,
        cap=group_caps,
    )
    def set_group_limits(self, queue: str, group: str, rate: Any, cap: Any) -> None:
        self.send_limits(queue, group, False, rate=rate, concurrency=cap)

    @invariant()
    def flow_matches_model(self) -> None:
        """Each queue's flow keys hold what the model holds, and are in step with the jobs."""
        redis = self.q.redis
        for queue in QUEUES:
            root = f"{self.q.keys.root}q:{queue}:"
            flow = self.model.flows.get(queue)
            stored = {k.decode(): v.decode() for k, v in redis.hgetall(f"{root}flow").items()}
            assert stored == (flow.fields() if flow else {}), (queue, stored, flow)
            turns = redis.zrange(f"{root}groups", 0, -1, withscores=True)
            waits = redis.zrange(f"{root}gwait", 0, -1, withscores=True)
            owns = redis.hgetall(f"{root}glimits")
            got = (
                {g.decode(): int(s) for g, s in turns},
                {g.decode(): int(s) for g, s in waits},
                {g.decode() for g in redis.smembers(f"{root}gfull")},
                {g.decode(): v.decode() for g, v in owns.items()},
            )
            want = (
                flow.groups if flow else {},
                flow.gwait if flow else {},
                flow.gfull if flow else set(),
                {g: f"{r}|{c}" for g, (r, c) in flow.glimits.items()} if flow else {},
            )
            assert got == want, f"{queue} at now={self.now}:\n impl:  {got}\n model: {want}"
            for group in GROUPS:
                tat = redis.get(f"{root}gtat:{group}")
                assert (int(tat) if tat else None) == (flow.gtat.get(group) if flow else None)
                members = redis.zrange(f"{root}gready:{group}", 0, -1)
                ready = [j.id for j in self.model.ready_jobs(queue, group)]
                assert [m[11:].decode() for m in members] == ready, (queue, group, members)
            problems = flow_problems(redis, self.q.keys, queue, set(GROUPS))
            assert not problems, problems

    # after every step ----------------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        """Every job the model holds as ``get_job`` shows it, no other job, every queue's counts.

        (Ids the model does not hold are checked with a plain EXISTS: a script call costs about a
        millisecond on fakeredis, where this check is most of the test's time.)
        """
        held = [i for i in IDS if i in self.model.jobs]
        absent = [self.q.keys.job(i) for i in IDS if i not in self.model.jobs]
        assert not absent or self.q.redis.exists(*absent) == 0, f"a job the model lacks: {absent}"
        calls: list[Call[Any]] = [self.q.calls.get_job(i, self.now) for i in held]
        calls += [self.q.calls.counts(queue, self.now) for queue in QUEUES]
        results = self.q.execute_many(calls)
        infos: list[JobInfo | None] = results[: len(held)]
        for job_id, info in zip(held, infos, strict=True):
            if info is not None:
                self.model.reconcile(info.job)
            shown = info and replace(info, progress=None)  # (progress is none of the model's)
            self.expect(shown, self.model.get(job_id, self.now), f"job {job_id}")
        if held:  # under "run": the dependencies each job counted without their success
            pipe = self.q.redis.pipeline(transaction=False)
            for job_id in held:
                pipe.hget(self.q.keys.job(job_id), "rd")
            for job_id, rd in zip(held, pipe.execute(), strict=True):
                want = " ".join(self.model.jobs[job_id].resolved) or None
                assert (rd and rd.decode()) == want, f"rd of {job_id}: {rd!r}, model: {want!r}"
        counts: list[QueueCounts] = results[len(held) :]
        for queue, got in zip(QUEUES, counts, strict=True):
            self.expect(got, self.model.counts(queue, self.now), f"counts of {queue}")
            assert_delayed_mirrored(self.q, queue)


def assert_delayed_mirrored(q: Quasar, queue: str) -> None:
    """``delayed_pr`` holds exactly the jobs of ``delayed``, each as ``ready`` would hold it (a
    grouped job scored its priority + GROUPED)."""
    by_time = q.redis.zrange(q.keys.queue(queue, "delayed"), 0, -1)
    by_priority = q.redis.zrange(q.keys.queue(queue, "delayed_pr"), 0, -1, withscores=True)
    assert sorted(m[11:] for m, _ in by_priority) == sorted(by_time)
    for member, score in by_priority:
        job = q.redis.hmget(q.keys.job(member[11:].decode()), "at", "pr", "g")
        if job[0] is not None:
            at = int.from_bytes(member[:6], "big")
            want = float(job[1] or 0) + (GROUPED if job[2] else 0)
            assert (at, score) == (int(job[0]), want), member


def run_machine(opener: Opener) -> None:
    class Machine(QuasarMachine):
        def __init__(self) -> None:
            super().__init__(opener)

    run_state_machine_as_test(Machine, settings=SETTINGS)


# About a minute a backend alone; the suite's 300 s per test is too close where two passes share
# two cores, and a timeout inside Hypothesis is taken for a failing example it then cannot replay
# (FlakyStrategyDefinition), which hides what happened.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["fake", "redis"])
def test_transitions_match_the_model(backend: str) -> None:
    if backend == "fake":
        run_machine(fake_opener)
        return
    with real_opener() as opener:
        run_machine(opener)


def test_prune_keeps_a_succeeded_dependency_of_a_blocked_job(q: Quasar) -> None:
    """docs/lifecycle.md: a finished job that a blocked job still depends on is never pruned."""
    t0 = T_START
    q.enqueue("s", id="p", now=t0)
    q.enqueue("s", id="r", now=t0)
    q.enqueue("s", id="d", dependencies=["p", "r"], now=t0)
    claim = q.claim_job("p", "w", 100, now=t0 + 1)
    assert isinstance(claim, ClaimApplied)
    assert isinstance(q.complete(claim.claim.token, "w", now=t0 + 2), JobApplied)
    q.prune(max_age_ms=0, now=t0 + 60_100)  # d is blocked on r, and depends on p too
    blocked = q.get_job("d", now=t0 + 100)
    assert blocked is not None and blocked.waiting_on == "r"
    assert q.get_job("p", now=t0 + 100) is not None


def test_resent_enqueue_each_changes_nothing_more(q: Quasar) -> None:
    """docs/lifecycle.md: a re-sent call gets the first reply again, changing nothing more."""
    jobs = [NewJob("s", id="a", dependencies=["b"]), NewJob("s", id="b")]
    call = q.calls.enqueue_each(jobs, T_START)
    first = q.execute(call)
    assert first[0] == JobRefused(MissingDependency("b"))  # b comes later in the call
    assert q.execute(call) == first  # the re-send: a is applied this time
    assert q.get_job("a", now=T_START) is None


def test_resent_report_gets_the_first_reply(q: Quasar) -> None:
    """docs/lifecycle.md: a re-sent call gets the first reply again, changing nothing more."""
    q.enqueue("s", id="x", now=T_START)
    claim = q.claim_job("x", "w", 100, now=T_START + 1)
    assert isinstance(claim, ClaimApplied)
    token = claim.claim.token
    call = q.calls.report_many("w", [Complete(token, output_ref=""), Complete(token)], T_START + 2)
    first = q.execute(call)
    assert first[0] == JobRefused(InvalidJob("output_ref must not be empty"))
    assert q.execute(call) == first  # the re-send: StaleLease, as the second item completed x


def test_a_claim_leases_a_grouped_job_it_made_ready(q: Quasar) -> None:
    """A grouped job the claim itself promotes takes its turn in that claim: its group joins
    the turns before them (lua/claim.lua), not only at the call's end."""
    q.enqueue("s", id="x", group="ga", now=T_START)
    first = q.claim("default", "w", 100, now=T_START + 1)
    assert isinstance(first, ClaimApplied)  # x's group left the turns: no ready job left
    q.enqueue("s", id="y", group="ga", delay_ms=50, now=T_START + 2)
    second = q.claim("default", "w", 100, now=T_START + 100)
    assert isinstance(second, ClaimApplied) and second.claim.job.id == "y"


def test_a_queue_hold_holds_its_jobs_without_a_rate(q: Quasar) -> None:
    """A release with a hold of a job without a group holds its queue, rate or none, grouped
    jobs ready or not."""
    q.enqueue("s", id="x", now=T_START)
    q.enqueue("s", id="y", now=T_START)
    claim = q.claim("default", "w", 1000, now=T_START)
    assert isinstance(claim, ClaimApplied)
    released = q.release(claim.claim.token, "w", now=T_START, hold_ms=500)
    assert isinstance(released, JobApplied)
    held = q.claim("default", "w", 1000, now=T_START + 499)
    assert held == ClaimRefused(NothingClaimable(T_START + 500))
    after = q.claim("default", "w", 1000, now=T_START + 500)
    assert isinstance(after, ClaimApplied) and after.claim.job.id == "x"
