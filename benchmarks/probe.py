"""The no-op job every system runs, and the shared-memory counter it bumps.

Every job's payload is the same 100-character string: its index, the producer's ``time.time()``
just before the enqueue call (0 outside the latency test), then padding. The task body is
``record(data)``: it counts the job in a small file mapped into memory (``BENCH_SHM``) and, for a
latency job, stores ``time.time() - enqueued`` in the job's slot. The harness reads the same file:
no Redis command and no sleep is spent on counting, and the workers of every system (threads,
asyncio tasks, forked children) share the counter.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import threading
import time

PAYLOAD_BYTES = 100
SLOTS = 4096  # latency slots (jobs of the latency test are numbered 0..SLOTS-1)
SIZE = 8 + 8 * SLOTS
ENV = "BENCH_SHM"

_lock = threading.Lock()
_maps: list[mmap.mmap] = []  # the counter file, mapped once per process


def make(index: int, enqueued: float = 0.0) -> str:
    """The 100-character payload of job ``index``; ``enqueued`` only for latency jobs."""
    head = f"{index:08d} {enqueued:017.6f} "
    return head + "x" * (PAYLOAD_BYTES - len(head))


def create(path: str) -> None:
    """A fresh counter file (zero count, empty latency slots)."""
    with open(path, "wb") as f:
        f.write(struct.pack("q", 0) + struct.pack("d", math.nan) * SLOTS)


def _mapped() -> mmap.mmap:
    if not _maps:
        with open(os.environ[ENV], "r+b") as f:
            _maps.append(mmap.mmap(f.fileno(), SIZE))
    return _maps[0]


def record(data: str) -> None:
    """The task body of every system: count the job, and store its latency if it has one."""
    now = time.time()
    m = _mapped()
    index, enqueued = int(data[:8]), float(data[9:26])
    with _lock:
        struct.pack_into("q", m, 0, struct.unpack_from("q", m, 0)[0] + 1)
        if enqueued > 0 and 0 <= index < SLOTS:
            struct.pack_into("d", m, 8 + 8 * index, now - enqueued)


class Reader:
    """The harness's view of the counter file."""

    def __init__(self, path: str) -> None:
        self.path = path
        create(path)
        with open(path, "r+b") as f:
            self.map = mmap.mmap(f.fileno(), SIZE)

    def reset(self) -> None:
        self.map[:] = struct.pack("q", 0) + struct.pack("d", math.nan) * SLOTS

    def count(self) -> int:
        return int(struct.unpack_from("q", self.map, 0)[0])

    def latencies(self, n: int) -> list[float]:
        values = struct.unpack_from(f"{n}d", self.map, 8)
        return [v for v in values if not math.isnan(v)]

    def close(self) -> None:
        self.map.close()
        os.unlink(self.path)
