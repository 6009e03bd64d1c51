"""Reporting: every outcome's way from the runner to Redis, and its result's way back.

An outcome the runner hands over (``put``) rides the next claim while a claim loop is about to
send one (``carrying``) and no heartbeat of its lease is in flight: the claim then carries the
lease's newest token, and no heartbeat of it starts until the claim's answer. Otherwise (the
worker is idle, backing off, full or stopping; a heartbeat is in flight; more than CARRY_MAX wait
at once) it goes through the lease keeper's thread, which sends it after the heartbeat, with the
new token, and tries it again while Redis has a passing fault. Either way its result comes back
the one way, ``deliver``, on the event loop, a batch at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import _types as t
from ._lease import Outgoing, retry_wait
from ._lease_keeper import LeaseKeeper
from ._transient import passes

# The most outcomes a claim carries. A small batch costs mostly its round trip and its call's
# fixed cost, which one call for both saves; a larger one goes through the lease keeper on its own
# connection, so that Redis reports it while the worker starts the jobs of the claim sent beside
# it (measured on 2 cores: carried, +8-30% jobs/s at concurrency 10; at 200, carrying all of them
# lost that overlap, -10%).
CARRY_MAX = 64

#: Gets the results of one batch, as ``(handle, result)`` pairs, on the event loop.
Deliver = Callable[[list[tuple[Any, Any]]], None]


class Reporter:
    """Decides, for each outcome, whether it rides the next claim or goes through the lease
    keeper, and hands every result back through ``deliver`` (the runner's, once it is made).

    The outcomes queued in one turn of the loop with no claim loop ``carrying`` go to the keeper
    as one batch. The keeper's results come back through this reporter too (``from_keeper``)."""

    __slots__ = ("carrying", "deliver", "keeper", "loop", "waiting")

    def __init__(self, keeper: LeaseKeeper, loop: asyncio.AbstractEventLoop) -> None:
        self.keeper = keeper
        self.loop = loop
        self.waiting: list[Outgoing] = []
        self.carrying = 0  # claim loops that will send a claim soon (and take what waits)
        self.deliver: Deliver = _nowhere
        keeper.dispatch = self.from_keeper

    # the way out --------------------------------------------------------------------------------

    def put(self, item: Outgoing) -> None:
        """An outcome to report: it waits for the next claim, or, with none about to go out,
        goes to the keeper after this turn of the loop."""
        waiting = self.waiting
        waiting.append(item)
        if not self.carrying and len(waiting) == 1:  # no claim to carry it: the keeper
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand every outcome waiting to the lease keeper."""
        if self.waiting:
            items, self.waiting = self.waiting, []
            self.keeper.send(items)

    def take(self) -> tuple[list[Outgoing], list[t.Outcome]]:
        """The outcomes a claim going out now carries, and what they are built into (from their
        leases' newest tokens). Those whose lease has a heartbeat in flight, or all of them when
        more than CARRY_MAX wait, go to the keeper instead."""
        if len(self.waiting) > CARRY_MAX:
            self.flush()
        if not self.waiting:
            return [], []
        items, self.waiting = self.waiting, []
        taken: list[Outgoing] = []
        outcomes: list[t.Outcome] = []
        beating: list[Outgoing] = []
        for item, token in zip(items, self.keeper.tokens_to_carry(items), strict=True):
            if token is None:
                beating.append(item)
            else:
                taken.append(item)
                outcomes.append(item.build(token))
        if beating:
            self.keeper.send(beating)
        return taken, outcomes

    def to_keeper(self, items: list[Outgoing]) -> None:
        """Outcomes that a claim carried but whose first answer will not come (a claim refused
        before it ran, or lost at a stop) go to the keeper, as a new report (one applied the
        first time is refused as stale, which changes nothing)."""
        if items:
            self.keeper.send(items)

    def claim_loops(self, count: int) -> None:
        """``count`` claim loops carry outcomes from now on."""
        self.carrying = count

    def pause_carrying(self) -> None:
        """A claim loop sends no claim for now: outcomes go to the keeper unless another loop
        carries them."""
        self.carrying -= 1
        self.flush()

    def resume_carrying(self) -> None:
        self.carrying += 1

    def stop_carrying(self) -> None:
        """No claim goes out any more (the worker stops): every outcome goes to the keeper."""
        self.carrying = 0
        self.flush()

    def retry_in(self, backoff: float, carried: list[Outgoing]) -> float:
        """``backoff``, or sooner if the leases of ``carried`` (outcomes of a claim to send
        again) need it (``retry_wait``), so that it goes out before they end."""
        now = time.monotonic()
        return min([backoff] + [retry_wait(item.lease, now) for item in carried])

    # the way back -------------------------------------------------------------------------------

    def settle(self, carried: list[Outgoing], results: Sequence[Any]) -> None:
        """The results of the outcomes a claim carried: to their jobs, as the keeper's are."""
        if carried:
            self.keeper.forget(carried)
            self.deliver([(item.handle, r) for item, r in zip(carried, results, strict=True)])

    def unsent(self, carried: list[Outgoing], exc: BaseException) -> None:
        """A claim carrying ``carried`` failed with ``exc`` (not for want of Redis): refused
        before it ran, by an error that can pass, its outcomes go to the keeper, which sends them
        again; any other error is their result."""
        if passes(exc):
            self.to_keeper(carried)
        else:
            self.settle(carried, [exc] * len(carried))

    def from_keeper(self, pairs: list[tuple[Any, Any]]) -> None:
        """The keeper's results of one batch, from its thread: delivered on the event loop (one
        wake-up of the loop a batch)."""
        self.loop.call_soon_threadsafe(self.deliver, pairs)

    async def close(self) -> None:
        """The keeper sends what it holds and stops; its last results are delivered."""
        await asyncio.to_thread(self.keeper.stop)
        await asyncio.sleep(0)


def _nowhere(pairs: list[tuple[Any, Any]]) -> None:
    raise RuntimeError(f"{len(pairs)} results with nowhere to go: the reporter has no deliver")
