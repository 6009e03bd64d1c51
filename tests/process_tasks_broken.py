"""A task module that imports in the worker but not in a process of its own (as one whose import
needs something only the worker's process has)."""

from __future__ import annotations

import multiprocessing

if multiprocessing.parent_process() is not None:
    raise RuntimeError("this module does not load in a child process")


def fine() -> int:
    return 1
