"""The outbox: outcomes waiting to go out, with the next claim or through the lease keeper."""

from __future__ import annotations

import asyncio

from .. import _types as t
from ._lease_keeper import Item, LeaseKeeper

# The most outcomes a claim carries. A small batch costs mostly its round trip and its call's
# fixed cost, which one call for both saves; a larger one goes through the lease keeper on its own
# connection, so that Redis reports it while the worker starts the jobs of the claim sent beside
# it (measured on 2 cores: carried, +8-30% jobs/s at concurrency 10; at 200, carrying all of them
# lost that overlap, -10%).
CARRY_MAX = 64


class Outbox:
    """Outcomes for the next claim, or for the lease keeper when no claim loop is ``carrying``
    (about to send a claim): then the outcomes queued in one turn of the loop go as one."""

    __slots__ = ("carrying", "items", "keeper", "loop")

    def __init__(self, keeper: LeaseKeeper, loop: asyncio.AbstractEventLoop) -> None:
        self.keeper = keeper
        self.loop = loop
        self.items: list[Item] = []
        self.carrying = 0  # claim loops that will send a claim soon (and take the outbox)

    def put(self, item: Item) -> None:
        items = self.items
        items.append(item)
        if not self.carrying and len(items) == 1:  # no claim to carry it: the keeper
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand every outcome waiting to the lease keeper."""
        if self.items:
            items, self.items = self.items, []
            self.keeper.report_many(items)

    def take(self) -> tuple[list[Item], list[t.Outcome]]:
        """The outcomes a claim going out now carries, with what they are built into (from their
        newest tokens: ``LeaseKeeper.carry``); more than CARRY_MAX go to the keeper instead."""
        if len(self.items) > CARRY_MAX:
            self.flush()
        elif self.items:
            items, self.items = self.items, []
            return self.keeper.carry(items)
        return [], []
