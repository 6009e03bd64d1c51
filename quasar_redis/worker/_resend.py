"""Claims sent again: a call whose reply was lost goes out again as it was (same call id)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _types as t
from .._calls import Call
from ._lease import Outgoing

CUT_SHORT_KEPT = 64


class Resends:
    """Calls whose reply was lost (Redis went away, a wait cut short), per claim loop and queue,
    with the outcomes each carries: sent again as they are. And the call ids of claims sent with
    a wait cut short, with the jobs each has started (from the late answer or the re-sent call,
    whichever came first): the newest CUT_SHORT_KEPT."""

    __slots__ = ("_calls", "_cut_short")

    def __init__(self) -> None:
        self._calls: dict[tuple[int, str], tuple[Call[Any], list[Outgoing]]] = {}
        self._cut_short: dict[str, set[str]] = {}

    def keep(self, lane: int, queue: str, call: Call[Any], carried: list[Outgoing]) -> None:
        """Send ``call`` (carrying ``carried``) again: its reply was lost."""
        self._calls[(lane, queue)] = (call, carried)

    def pop(self, lane: int, queue: str) -> tuple[Call[Any], list[Outgoing]] | None:
        """The call of this claim loop and queue to send again, if any (then forgotten)."""
        return self._calls.pop((lane, queue), None)

    def waiting(self, lane: int) -> bool:
        """Whether a call of this claim loop waits to be sent again."""
        return any(key[0] == lane for key in self._calls)

    def pending(self) -> bool:
        """Whether any call waits to be sent again."""
        return bool(self._calls)

    def carried(self) -> list[Outgoing]:
        """The outcomes the calls waiting to be sent again carry."""
        return [item for _, items in self._calls.values() for item in items]

    def drop_all(self) -> list[Outgoing]:
        """Forget every call (the worker stops); the outcomes they carried."""
        carried = self.carried()
        self._calls.clear()
        return carried

    def cut_short(self, call_id: str) -> None:
        """The claim of call ``call_id`` went with a wait that was cut short: it may be answered
        twice (late, and when sent again)."""
        self._cut_short[call_id] = set()
        while len(self._cut_short) > CUT_SHORT_KEPT:
            del self._cut_short[next(iter(self._cut_short))]

    def not_started(self, call_id: str, claims: Sequence[t.Claim]) -> Sequence[t.Claim]:
        """Of a cut-short call's claims (its late answer, or its re-sent call's), those the other
        answer has not started; without a record of the call, all of them."""
        started = self._cut_short.get(call_id)
        if started is None:
            return claims
        fresh = [c for c in claims if c.job.id not in started]
        started.update(c.job.id for c in fresh)
        return fresh
