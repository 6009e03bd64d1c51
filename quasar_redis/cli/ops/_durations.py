"""Durations as people write them on a command line: ``90s``, ``15m``, ``2h30m``, ``7d``."""

from __future__ import annotations

import re

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
MAX_MS = 100 * 365 * 86_400_000  # a century: more is a slip


def parse_duration(text: str) -> int:
    """Milliseconds in ``text``: one or more of a number and a unit (ms, s, m, h, d, w), as in
    ``90s``, ``1h30m``, ``7d``; ValueError, saying what is accepted, for anything else."""
    spaced = text.strip().lower()
    parts = _PART.findall(spaced)
    if not parts or "".join(n + u for n, u in parts) != spaced.replace(" ", ""):
        raise ValueError(
            f"{text!r} is not a duration: a number and a unit (ms, s, m, h, d, w), "
            "such as 90s, 15m, 1h30m or 7d"
        )
    total = round(sum(float(n) * UNITS_MS[u] for n, u in parts))
    if total > MAX_MS:
        raise ValueError(f"{text!r} is longer than a century")
    return total
