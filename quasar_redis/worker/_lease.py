"""A lease the worker holds, its states, and an outcome on its way with it.

Each lease is in one state (``LeaseState``); ``LEASE_CHANGES`` lists what each event makes of each
state, and ``Lease.apply`` refuses an event the table does not list for the state (``PhaseError``:
a bug in the worker). The lease keeper (``_lease_keeper``) makes every change under its lock.

An outcome travels as an ``Outgoing``: its lease, what builds it from the lease's newest token,
and the handle its result goes back with (``_reporting``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _types as t
from .._calls import Call
from ..errors import QuasarError

if TYPE_CHECKING:
    from ._progress import ProgressBox

#: Builds an outcome from the newest token of its lease.
Build = Callable[[t.LeaseToken], t.Outcome]


class PhaseError(QuasarError):
    """A held job or its lease was asked for a change its table does not allow: a worker bug."""


class LeaseState(enum.Enum):
    """Where a held lease is, as the lease keeper sees it."""

    HELD = "held"  # renewed by heartbeats
    BEATING = "beating"  # a heartbeat of it is in flight (its token may change)
    FINISHING = "finishing"  # its outcome went out with a claim: no heartbeat until its answer
    # its outcome was queued while a heartbeat was in flight: it goes out after, with the new token
    BEATING_FINISHING = "beating, finishing"
    # its outcome is the keeper's to send: renewed between the tries of its report (a finished
    # job's lease outlives an outage its outcome waits through, as a running job's does)
    REPORTING = "reporting"
    LOST = "lost"  # a heartbeat was refused: no more heartbeats, its outcome never counts

    __hash__ = object.__hash__  # (see JobPhase)


class LeaseEvent(enum.Enum):
    """What happens to a lease."""

    BEAT = "beat"  # a heartbeat is sent
    BEAT_ENDED = "beat ended"  # its answer is in (a renewal, or Redis unreachable)
    REFUSED = "refused"  # the heartbeat was refused: the lease is lost
    FINISH = "finish"  # its outcome is queued for the keeper
    CARRY = "carry"  # its outcome is taken into a claim

    __hash__ = object.__hash__


# The members by name (see JobPhase).
HELD = LeaseState.HELD
BEATING = LeaseState.BEATING
FINISHING = LeaseState.FINISHING
BEATING_FINISHING = LeaseState.BEATING_FINISHING
REPORTING = LeaseState.REPORTING
LOST = LeaseState.LOST
BEAT = LeaseEvent.BEAT
BEAT_ENDED = LeaseEvent.BEAT_ENDED
REFUSED = LeaseEvent.REFUSED
FINISH = LeaseEvent.FINISH
CARRY = LeaseEvent.CARRY
#: What each event makes of each state; ``Lease.apply`` refuses the pairs not listed.
LEASE_CHANGES: dict[LeaseState, dict[LeaseEvent, LeaseState]] = {
    HELD: {BEAT: BEATING, FINISH: REPORTING, CARRY: FINISHING},
    BEATING: {BEAT_ENDED: HELD, REFUSED: LOST, FINISH: BEATING_FINISHING},
    BEATING_FINISHING: {BEAT_ENDED: REPORTING, REFUSED: LOST},
    # to the keeper: the claim that carried it was refused before it ran, or lost its reply and
    # the worker stops
    FINISHING: {FINISH: REPORTING},
    # (renewed by the keeper's report of it, which ends its holding)
    REPORTING: {},
    # the worker has not heard yet (its outcome is then refused); the refused beat ends
    LOST: {FINISH: LOST, CARRY: LOST, BEAT_ENDED: LOST},
}
#: A renewal or an outcome that could not reach Redis is tried again after RETRY_S at most...
RETRY_S = 0.2
#: ... and never later than half the time its lease has left, down to LAST_TRY_S: so a try comes
#: before the lease ends, however the outage falls.
LAST_TRY_S = 0.02


class Lease:
    """A job this worker holds: its newest token and what to do if the lease is lost.

    ``on_lost`` is called, from the keeper's thread, with the lease and the refusal.
    """

    __slots__ = (
        "beat",
        "claim",
        "lease_ms",
        "on_lost",
        "renewed_at",
        "retry_at",
        "state",
        "token",
    )

    def __init__(
        self, claim: t.Claim, lease_ms: int, on_lost: Callable[[Lease, t.JobError], None]
    ) -> None:
        self.claim = claim
        self.lease_ms = lease_ms
        self.on_lost = on_lost
        self.token: t.LeaseToken = claim.token
        self.renewed_at = 0.0  # monotonic time of the claim or last heartbeat
        self.retry_at = 0.0  # when a renewal is due sooner than a third in (0.0: not sooner)
        self.state = HELD
        # a heartbeat sent whose answer was lost, and when it was first sent: sent again as it is
        # (same call id), since Redis may have renewed the lease and made the token stale
        self.beat: tuple[Call[t.ClaimResult], float] | None = None

    @property
    def job_id(self) -> str:
        return self.claim.job.id

    def progress(self) -> ProgressBox | None:
        """Its job's progress on its way to Redis (a held job's: ``HeldJob``), if any."""
        return None

    @property
    def lost(self) -> bool:
        return self.state is LOST

    @property
    def finishing(self) -> bool:
        """Its outcome is queued or sent (and it was not lost)."""
        state = self.state
        return state is FINISHING or state is BEATING_FINISHING or state is REPORTING

    def apply(self, event: LeaseEvent) -> None:
        """Apply ``event`` (under the keeper's lock); PhaseError if ``LEASE_CHANGES`` has no
        change for it in this state."""
        state = LEASE_CHANGES[self.state].get(event)
        if state is None:
            raise PhaseError(f"lease of job {self.job_id}: no change for {event} in {self.state}")
        self.state = state


class Outgoing(NamedTuple):
    """One outcome on its way to Redis, with the next claim or through the lease keeper."""

    lease: Lease
    build: Build  # the outcome from the lease's newest token
    handle: Any  # what its result goes back with (the held job, in a worker)


def end_of(lease: Lease) -> float:
    """When the lease runs out, by the worker's clock (from the last renewal sent)."""
    return lease.renewed_at + lease.lease_ms / 1000


def due_of(lease: Lease) -> float:
    """When the lease should be renewed: a third of the way through it, or sooner to try again
    a renewal that could not reach Redis."""
    return lease.retry_at or lease.renewed_at + lease.lease_ms / 3000


def retry_wait(lease: Lease, now: float) -> float:
    """How long to wait before trying again a call of ``lease`` (a renewal, an outcome) that
    could not reach Redis: RETRY_S, but at most half the time the lease has left, down to
    LAST_TRY_S, so that tries come closer together as its end nears (RETRY_S once it is past)."""
    left = end_of(lease) - now
    if left <= 0:
        return RETRY_S
    return min(RETRY_S, max(LAST_TRY_S, left / 2))
