"""Task functions that workers import by name (rq stores the function's import path)."""

from __future__ import annotations

from benchmarks import probe


def noop(data: str) -> None:
    probe.record(data)
