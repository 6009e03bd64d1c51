"""quasar_redis: a task's ``enqueue`` and ``aenqueue``, ``enqueue_many``, ``Worker``."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import redis
import redis.asyncio

from benchmarks import probe
from benchmarks.harness import MINIMAL_SCRIPT, ceiling_args, cpu_us
from benchmarks.systems.base import QUEUE, System
from quasar_redis import (
    App,
    BatchApplied,
    ClaimApplied,
    NewJob,
    Quasar,
)
from quasar_redis._call_codec import payload_of
from quasar_redis._codec import encode
from quasar_redis.worker import Worker

if TYPE_CHECKING:
    from benchmarks.harness import Harness

NAMESPACE = "bench"
STAGE = "noop"
CONCURRENCY = {"default": 10, "tuned": 50}
PREFETCH: dict[str, int | Literal["auto"]] = {"default": "auto", "tuned": 50}
FILL_CHUNK = 1000
AT = "1796076590723"  # an available_at of 2026, as the bare scripts write it
PAIR_BLOCK = 100  # the calls of one turn when the enqueue and the ceiling's call take turns

# The bare single write: the job as enqueue writes it for the benchmark's job (stage, queue,
# state, available_at, enqueue sequence, the payload in chunks of 64 bytes) and its ready entry
# (an 11-byte prefix, then the id), with nothing else. ARGV: id, payload, member prefix and
# sequence per job, then available_at. floors.py runs it in batches too.
BARE_ENQUEUE = """
for i = 1, #ARGV - 1, 4 do
  local id, p = ARGV[i], ARGV[i + 1]
  redis.call('HSET', KEYS[1] .. id, 's', 'noop', 'q', 'bench', 'st', 'W', 'at', ARGV[#ARGV],
    'sq', ARGV[i + 3], 'p', string.sub(p, 1, 64), 'p2', string.sub(p, 65))
  redis.call('ZADD', KEYS[2], 0, ARGV[i + 2] .. id)
end
return 1
"""


def job(data: str) -> NewJob:
    return NewJob(STAGE, payload_of([data], {}), queue=QUEUE)


def bare_job(data: str, seq: int) -> list[object]:
    """BARE_ENQUEUE's arguments for one job: a 16-character id, the payload as enqueue encodes
    it, the ready member's 11-byte prefix, the sequence."""
    return [os.urandom(8).hex(), encode(payload_of([data], {})), os.urandom(11), seq]


class QuasarSystem(System):
    name = "quasar"
    distribution = "quasar_redis"
    sync_api = True
    async_api = True
    bulk_api = True
    variants: ClassVar[dict[str, str]] = {
        "default": f"Worker, concurrency {CONCURRENCY['default']}, prefetch auto (the defaults)",
        "tuned": f"Worker, concurrency {CONCURRENCY['tuned']}, prefetch {PREFETCH['tuned']}",
    }
    notes: ClassVar[list[str]] = [
        "bulk: enqueue_many, 1,000 jobs a call (its limit)",
        "the task is an async function (run on the worker's event loop)",
        "its calls go to its Redis function library (FCALL), loaded once",
    ]

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.client = Quasar(redis.Redis.from_url(url), NAMESPACE)
        # one at a time, as an application enqueues: through a task of an App
        self.app = App(url, namespace=NAMESPACE)

        @self.app.task(name=STAGE, queue=QUEUE)
        async def noop(data: str) -> None:
            raise NotImplementedError  # (the producer's declaration; workers run their own)

        self.task = noop

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        await self.app.aclose()
        self.app.close()
        self.client.redis.close()

    def enqueue_sync(self, data: str) -> None:
        self.task.enqueue(data)  # (a refusal raises)

    async def enqueue_async(self, data: str) -> None:
        await self.task.aenqueue(data)

    def bulk(self, datas: Sequence[str]) -> None:
        result = self.client.enqueue_many([job(d) for d in datas])
        if not isinstance(result, BatchApplied):
            raise RuntimeError(f"enqueue_many refused: {result}")

    def finished(self, redis: Any, n: int) -> bool:
        return self.client.counts(QUEUE).completed >= n

    @staticmethod
    def run_worker(url: str, variant: str) -> None:
        app = App(url, namespace=NAMESPACE)

        @app.task(name=STAGE, queue=QUEUE)
        async def noop(data: str) -> None:
            probe.record(data)

        Worker(app, [QUEUE], concurrency=CONCURRENCY[variant], prefetch=PREFETCH[variant]).run()

    # the floor of one enqueue: its own writes, bare ----------------------------------------------

    def bare_write(self, harness: Harness, datas: Sequence[str]) -> dict[str, float | None]:
        """The bare single write of floors.py, one job a call, after the one-at-a-time enqueue
        of the same jobs on the same server: Redis CPU µs a call and memory bytes a job."""
        script = self.client.redis.register_script(BARE_ENQUEUE)
        root = f"quasar:{{{NAMESPACE}}}:"
        keys = [root + "job:", root + f"q:{QUEUE}:ready"]
        calls = [[*bare_job(d, i + 1), AT] for i, d in enumerate(datas)]
        script(keys=keys, args=calls[0])  # (loaded)
        harness.server.flush()
        before = harness.server.snapshot()
        for args in calls:
            script(keys=keys, args=args)
        after = harness.server.snapshot()
        n = len(calls)
        harness.server.flush()
        return {
            "bare_write_redis_cpu_us_per_call": cpu_us(before, after, n),
            "bare_write_memory_bytes_per_job": (after.used_memory - before.used_memory) / n,
        }

    # the ceiling's one call at a time, taking turns with the enqueue ------------------------------

    async def paired_ceiling(
        self, harness: Harness, datas: Sequence[str]
    ) -> dict[str, float | None]:
        """The one-at-a-time enqueue (``task.enqueue``, then ``await task.aenqueue``) and the
        ceiling's one call at a time (redis-py's EVALSHA, then redis.asyncio's), taking turns in
        blocks of PAIR_BLOCK calls on the same server, in the order ABBA: whatever else the
        machine runs meanwhile weighs on both alike. Each side's calls a second over its own
        blocks; the ratio is quasar's ÷ the ceiling's."""
        server = harness.server
        sync_r = redis.Redis.from_url(server.url)
        async_r = redis.asyncio.Redis.from_url(server.url)
        try:
            sha = sync_r.script_load(MINIMAL_SCRIPT)

            async def sync_ceiling(i: int) -> None:
                sync_r.evalsha(sha, *ceiling_args(i))

            async def sync_quasar(i: int) -> None:
                self.enqueue_sync(datas[i])

            async def async_ceiling(i: int) -> None:
                await async_r.evalsha(sha, *ceiling_args(i))

            async def async_quasar(i: int) -> None:
                await self.enqueue_async(datas[i])

            out: dict[str, float | None] = {}
            for name, mine, theirs in (
                ("sync", sync_quasar, sync_ceiling),
                ("async", async_quasar, async_ceiling),
            ):
                await mine(0)  # (warm: connections open, scripts loaded)
                await theirs(0)
                server.flush()
                n, quasar_s, ceiling_s = await in_turns(mine, theirs, len(datas))
                server.flush()
                out[f"paired_{name}_enqueue_per_s"] = n / quasar_s
                out[f"paired_{name}_ceiling_per_s"] = n / ceiling_s
                out[f"paired_{name}_ratio"] = ceiling_s / quasar_s
            return out
        finally:
            sync_r.close()
            await async_r.aclose()

    # claim cost: O(log N) in the number of waiting jobs -----------------------------------------

    async def claim_cost(self, harness: Harness) -> dict[str, float | None]:
        sizes = harness.sizes
        out: dict[str, float | None] = {}
        for label, waiting in (("small", sizes.claim_small), ("large", sizes.claim_large)):
            harness.server.flush()
            base = harness.server.snapshot().used_memory
            extra = sizes.claims * (sizes.claim_reps + 1)
            seconds = self.fill_fast(waiting + extra)
            after = harness.server.snapshot().used_memory
            client, server = self.time_claims(harness, sizes.claims, sizes.claim_reps)
            out[f"claim_{label}_us"] = client
            out[f"claim_{label}_server_us"] = server
            out[f"claim_{label}_fill_s"] = seconds
            out[f"claim_{label}_memory_bytes_per_job"] = (after - base) / (waiting + extra)
            harness.out.details[f"claim_{label}_waiting"] = waiting
        harness.server.flush()
        return out

    def fill_fast(self, n: int) -> float:
        """Enqueue ``n`` jobs with ``enqueue_many`` (1,000 a call, 10 calls a pipeline)."""
        start = time.perf_counter()
        calls = []
        for base in range(0, n, FILL_CHUNK):
            batch = [job(probe.make(i)) for i in range(base, min(n, base + FILL_CHUNK))]
            calls.append(self.client.calls.enqueue_many(batch))
            if len(calls) == 10 or base + FILL_CHUNK >= n:
                for result in self.client.execute_many(calls):
                    if not isinstance(result, BatchApplied):
                        raise RuntimeError(f"enqueue_many refused: {result}")
                calls = []
        return time.perf_counter() - start

    def time_claims(self, harness: Harness, claims: int, reps: int) -> tuple[float, float]:
        """Median over ``reps`` rounds of µs per ``claim`` call: at the client, inside Redis.

        A first round, not counted, warms the client's code paths and the server's caches.
        """
        client_us, server_us = [], []
        for rep in range(reps + 1):
            before = harness.server.snapshot()
            start = time.perf_counter()
            for _ in range(claims):
                result = self.client.claim(QUEUE, "bench-claimer", 600_000)
                if not isinstance(result, ClaimApplied):
                    raise RuntimeError(f"claim refused: {result}")
            if rep == 0:
                continue
            client_us.append((time.perf_counter() - start) / claims * 1e6)
            after = harness.server.snapshot()
            calls = after.script_calls - before.script_calls
            server_us.append((after.script_usec - before.script_usec) / max(calls, 1))
        return statistics.median(client_us), statistics.median(server_us)


async def in_turns(
    a: Callable[[int], Awaitable[None]], b: Callable[[int], Awaitable[None]], n: int
) -> tuple[int, float, float]:
    """(calls of each, a's seconds, b's seconds): ``a`` and ``b`` each called with 0 .. n-1 (n
    rounded down to whole turns), in blocks of PAIR_BLOCK calls, two blocks a turn, a then b in
    even turns and b then a in odd ones."""
    n -= n % (2 * PAIR_BLOCK)
    if n == 0:
        raise ValueError(f"taking turns needs at least {2 * PAIR_BLOCK} calls of each")
    spent = [0.0, 0.0]
    for turn, base in enumerate(range(0, n, PAIR_BLOCK)):
        for side in (0, 1) if turn % 2 == 0 else (1, 0):
            one = (a, b)[side]
            start = time.perf_counter()
            for i in range(base, base + PAIR_BLOCK):
                await one(i)
            spent[side] += time.perf_counter() - start
    return n, spent[0], spent[1]


SYSTEM = QuasarSystem
