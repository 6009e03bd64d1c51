#!/usr/bin/env python3
"""What a hash per job costs at its barest, beside quasar_redis's own calls, on one Redis.

    python benchmarks/floors.py [--jobs 20000] [--memory-jobs N] [--runs 3]

Run it with the project's Python (it imports quasar_redis and redis-py). It starts its own
``redis-server`` on a free loopback port, as ``run.py`` does, and stops it at the end.

docs/performance-targets.md sets targets that a hash per job and sorted-set indexes may not reach
whatever the code around them does. This measures, in the same run, quasar's calls and *bare*
scripts over the same layout (the same job hash fields, the same ``ready`` members) that do only
the writes, with none of the contract's checks, call records or events:

- **single enqueue**: ``Quasar.enqueue`` one job a call, against a script doing the job's
  ``HSET`` and ``ZADD`` one call a job, a script doing every command of the single enqueue's
  contract (the clock, the duplicate check, the sequence, the queue set, the hash, the ready
  entry, the paused check and wake-up, the event) and nothing else, and the benchmark's ceiling
  (one ``HSET`` of the payload and one ``ZADD``); then quasar's, the bare contract's and the
  ceiling's again, each call awaited before the next (``AsyncQuasar.enqueue``, and the scripts by
  ``redis.asyncio``: the benchmark's asyncio ceiling);
- **bulk enqueue**: ``enqueue_many`` of 1,000 jobs a call, against one script call per 1,000
  doing each job's ``HSET`` and ``ZADD``;
- **processing**: ``claim_many`` of 500 and ``report_many`` of their 500 completions, against a
  bare claim (``ZRANGE``, each job's ``HGETALL`` and lease ``HSET``, one ``ZREM`` and one
  ``ZADD``) and a bare completion (``HMGET`` of state and nonce, ``HSET``, one ``ZREM`` and one
  ``ZADD``);
- **memory per waiting job** (``used_memory`` delta / jobs, over ``--memory-jobs`` jobs, by
  default ``--jobs``): quasar's ``enqueue_many``, the same hash and ``ready`` entry written bare,
  and a hash without its ``st``, ``sq`` and ``q`` fields (its listpack within the 160-byte
  allocation). The hash tables' growth weighs on it: at 20,000 jobs about 20 bytes a job more
  than at 1,000,000.

Redis's time is ``INFO commandstats``' microseconds for the script commands, per job, and its CPU
(``used_cpu_sys`` + ``used_cpu_user``: the commands with reading and answering them, as the
benchmark's "Redis CPU" figures count it); the median of ``--runs`` runs is printed, with
min-max, as one markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import redis.asyncio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import probe, report  # noqa: E402 - after the path is set
from benchmarks.harness import MINIMAL_SCRIPT, Server, cpu_us  # noqa: E402
from benchmarks.run import RedisServer  # noqa: E402
from benchmarks.systems.quasar import AT, BARE_ENQUEUE, bare_job  # noqa: E402
from quasar_redis import NewJob, Quasar  # noqa: E402
from quasar_redis import _types as t  # noqa: E402
from quasar_redis._call_codec import payload_of  # noqa: E402
from quasar_redis.aio import AsyncQuasar  # noqa: E402

QUEUE = "bench"
ROOT_KEY = "quasar:{floor}:"
# What a timed part gives: jobs/s, Redis µs a job inside its commands, Redis CPU µs a job.
Figures = tuple[float, float, float]

# One job's whole contract at its barest: the commands of quasar's single enqueue, in its order
# (the clock, the duplicate check, the sequence, the queue set, the hash, the ready entry, the
# paused check and the wake-up, the event), with none of its checks, undo or reply.
# KEYS: the namespace's prefix, its event stream; ARGV: id, payload, member prefix.
CONTRACT_ENQUEUE = """
local t = redis.call('TIME')
local now = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))
local prefix, id = KEYS[1], ARGV[1]
local k = prefix .. 'job:' .. id
if redis.call('EXISTS', k) == 1 then return 0 end
local seq = redis.call('INCRBY', prefix .. 'seq', 1)
redis.call('SADD', prefix .. 'queues', 'bench')
redis.call('HSET', k, 's', 'noop', 'q', 'bench', 'st', 'W', 'at', now, 'sq', seq,
  'p', string.sub(ARGV[2], 1, 64), 'p2', string.sub(ARGV[2], 65))
redis.call('ZADD', prefix .. 'q:bench:ready', 0, ARGV[3] .. id)
if redis.call('SISMEMBER', prefix .. 'paused', 'bench') == 0 then
  if redis.call('RPUSH', prefix .. 'q:bench:wake', '1') > 32 then
    redis.call('LTRIM', prefix .. 'q:bench:wake', -16, -1)
  end
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', 10000, '*', 'job', id, 'ev', 'available',
  'q', 'bench', 'a', '0')
return 1
"""

# As BARE_ENQUEUE, less st, sq and q: the hash that would fit the 160-byte allocation.
SLIM_ENQUEUE = """
for i = 1, #ARGV - 1, 4 do
  local id, p = ARGV[i], ARGV[i + 1]
  redis.call('HSET', KEYS[1] .. id, 's', 'noop', 'at', ARGV[#ARGV],
    'p', string.sub(p, 1, 64), 'p2', string.sub(p, 65))
  redis.call('ZADD', KEYS[2], 0, ARGV[i + 2] .. id)
end
return 1
"""

# Lease up to ARGV[1] jobs: ids (11-byte member prefix cut off) and each job's fields.
BARE_CLAIM = """
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #members == 0 then return {} end
local out, ids, add = {}, {}, {}
for i, m in ipairs(members) do
  local id = string.sub(m, 12)
  local k = KEYS[3] .. id
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGETALL', k)
  redis.call('HSET', k, 'st', 'L', 'a', 1, 'f', 1, 'w', ARGV[2], 'x', ARGV[3],
    'n', ARGV[4] .. i, 'att', ARGV[3])
  add[#add + 1] = ARGV[3]
  add[#add + 1] = id
end
redis.call('ZREM', KEYS[1], unpack(members))
redis.call('ZADD', KEYS[2], unpack(add))
return out
"""

# Complete jobs (ARGV: id, nonce pairs) still leased with that nonce.
BARE_COMPLETE = """
local done, add = {}, {}
for i = 1, #ARGV - 1, 2 do
  local k = KEYS[3] .. ARGV[i]
  local h = redis.call('HMGET', k, 'st', 'n')
  if h[1] == 'L' and h[2] == ARGV[i + 1] then
    redis.call('HSET', k, 'st', 'S', 'fin', ARGV[#ARGV])
    done[#done + 1] = ARGV[i]
    add[#add + 1] = ARGV[#ARGV]
    add[#add + 1] = ARGV[i]
  end
end
if #done > 0 then
  redis.call('ZREM', KEYS[1], unpack(done))
  redis.call('ZADD', KEYS[2], unpack(add))
end
return #done
"""


class Floors:
    def __init__(self, server: Server, jobs: int, memory_jobs: int | None = None) -> None:
        self.server = server
        self.r = r = server.redis
        self.jobs = jobs
        self.memory_jobs = memory_jobs or jobs
        self.quasar = Quasar(r, "floor")
        self.datas = [probe.make(i) for i in range(max(jobs, self.memory_jobs))]
        self.scripts = {
            name: r.register_script(text)
            for name, text in (
                ("enqueue", BARE_ENQUEUE),
                ("contract", CONTRACT_ENQUEUE),
                ("slim", SLIM_ENQUEUE),
                ("claim", BARE_CLAIM),
                ("complete", BARE_COMPLETE),
                ("ceiling", MINIMAL_SCRIPT),
            )
        }

    # helpers ------------------------------------------------------------------------------------

    def fresh(self) -> None:
        """An empty server (our own), its scripts and quasar's function library loaded."""
        self.server.flush()
        for script in self.scripts.values():
            self.r.script_load(script.script)
        self.quasar.enqueue("noop", None, queue="warm")  # (loads the library if missing)
        self.server.flush()  # (neither scripts nor function libraries go with it)

    def job(self, i: int) -> NewJob:
        return NewJob("noop", payload_of([self.datas[i]], {}), queue=QUEUE)

    def bare_args(self, lo: int, hi: int) -> list[object]:
        args: list[object] = []
        for i in range(lo, hi):
            args += bare_job(self.datas[i], i + 1)
        return [*args, AT]

    def single_call(self, which: str, i: int) -> tuple[list[str], list[object]]:
        """The keys and arguments of the ``i``-th single call of the bare script ``which``: the
        contract (one job's whole contract) or the ceiling (one hash and one index entry)."""
        if which == "contract":
            job_id, payload, member = self.bare_args(i, i + 1)[:3]
            return [ROOT_KEY, ROOT_KEY + "events"], [job_id, payload, member]
        return [f"job:{i}", "ready"], ["x" * probe.PAYLOAD_BYTES, i]

    def keys(self) -> list[str]:
        return [ROOT_KEY + "job:", ROOT_KEY + "q:bench:ready", ROOT_KEY + "q:bench:leased"]

    def timed(self, fn: Callable[[], int]) -> Figures:
        """(jobs/s, Redis µs a job inside the commands, Redis CPU µs a job) of ``fn``, which
        returns how many jobs it handled."""
        before = self.server.snapshot()
        start = time.perf_counter()
        n = fn()
        seconds = time.perf_counter() - start
        after = self.server.snapshot()
        inside = (after.script_usec - before.script_usec) / n
        return n / seconds, inside, cpu_us(before, after, n)

    def timed_async(self, fn: Callable[[], Awaitable[int]]) -> Figures:
        """``timed`` of a coroutine function, run on an event loop of its own."""
        holder: list[int] = []

        def run() -> int:
            holder.append(asyncio.run(fn()))
            return holder[0]

        return self.timed(run)

    # the figures --------------------------------------------------------------------------------

    def single(self) -> dict[str, Figures]:
        n = min(self.jobs, 3000)
        out = {}
        self.fresh()

        def quasar() -> int:
            for i in range(n):
                self.quasar.enqueue("noop", payload_of([self.datas[i]], {}), queue=QUEUE)
            return n

        out["single: quasar enqueue"] = self.timed(quasar)
        self.fresh()
        script = self.scripts["enqueue"]
        k = self.keys()

        def bare() -> int:
            for i in range(n):
                script(keys=k[:2], args=self.bare_args(i, i + 1))
            return n

        out["single: bare HSET + ZADD script"] = self.timed(bare)
        for name, which in (
            ("single: bare contract script", "contract"),
            ("single: the ceiling's script", "ceiling"),
        ):
            self.fresh()
            out[name] = self.timed(partial(self.scripted, which, n))
        out.update(self.single_async(n))
        return out

    def scripted(self, which: str, n: int) -> int:
        """``n`` single calls of the bare script ``which``, one after the other."""
        script = self.scripts[which]
        for i in range(n):
            keys, args = self.single_call(which, i)
            script(keys=keys, args=args)
        return n

    def single_async(self, n: int) -> dict[str, Figures]:
        """The single enqueue's rows again, each call awaited before the next: quasar's asyncio
        client, and the bare scripts by redis.asyncio (the benchmark's asyncio ceiling)."""
        out = {}
        url = self.server.url

        async def quasar() -> int:
            client = AsyncQuasar(redis.asyncio.Redis.from_url(url), "floor")
            for i in range(n):
                await client.enqueue("noop", payload_of([self.datas[i]], {}), queue=QUEUE)
            await client.redis.aclose()
            return n

        async def scripted(which: str) -> int:
            r = redis.asyncio.Redis.from_url(url)
            script = r.register_script(self.scripts[which].script)
            for i in range(n):
                keys, args = self.single_call(which, i)
                await script(keys=keys, args=args)
            await r.aclose()
            return n

        for name, fn in (
            ("single, asyncio: quasar enqueue", quasar),
            ("single, asyncio: bare contract script", lambda: scripted("contract")),
            ("single, asyncio: the ceiling's script", lambda: scripted("ceiling")),
        ):
            self.fresh()
            out[name] = self.timed_async(fn)
        return out

    def bulk(self) -> dict[str, Figures]:
        out = {}
        self.fresh()

        def quasar() -> int:
            for lo in range(0, self.jobs, 1000):
                hi = min(self.jobs, lo + 1000)
                result = self.quasar.enqueue_many([self.job(i) for i in range(lo, hi)])
                assert isinstance(result, t.BatchApplied), result
            return self.jobs

        out["bulk: quasar enqueue_many"] = self.timed(quasar)
        self.fresh()
        script, k = self.scripts["enqueue"], self.keys()

        def bare() -> int:
            for lo in range(0, self.jobs, 1000):
                script(keys=k[:2], args=self.bare_args(lo, min(self.jobs, lo + 1000)))
            return self.jobs

        out["bulk: bare script"] = self.timed(bare)
        return out

    def processing(self) -> dict[str, Figures]:
        out = {}
        self.fresh()
        self.fill_quasar(self.jobs)

        def quasar() -> int:
            done = 0
            while True:
                claimed = self.quasar.claim_many(QUEUE, "w1", 60_000, 500)
                if not isinstance(claimed, t.ClaimsApplied):
                    return done
                outcomes = [t.Complete(c.token) for c in claimed.claims]
                results = self.quasar.report_many("w1", outcomes)
                done += sum(isinstance(x, t.OutcomeApplied) for x in results)

        out["processing: quasar claim + report"] = self.timed(quasar)
        self.fresh()
        self.fill_bare("enqueue", self.jobs)
        k = self.keys()
        claim, complete = self.scripts["claim"], self.scripts["complete"]
        done_key = ROOT_KEY + "q:bench:succeeded"

        def bare() -> int:
            done, call = 0, 0
            while True:
                call += 1
                got = claim(keys=[k[1], k[2], k[0]], args=[500, "w1", AT, f"c{call}."])
                if not got:
                    return done
                args: list[object] = []
                for i, job_id in enumerate(got[0::2], 1):
                    args += [job_id, f"c{call}.{i}"]
                done += complete(keys=[k[2], done_key, k[0]], args=[*args, AT])

        out["processing: bare claim + complete"] = self.timed(bare)
        return out

    def memory(self) -> dict[str, Figures]:
        out, n = {}, self.memory_jobs
        for name, fill in (
            ("memory: quasar enqueue_many", lambda: self.fill_quasar(n)),
            ("memory: bare hash + ready entry", lambda: self.fill_bare("enqueue", n)),
            ("memory: bare, no st/sq/q (listpack <= 160 B)", lambda: self.fill_bare("slim", n)),
        ):
            self.fresh()
            before = self.server.snapshot().used_memory
            fill()
            out[name] = ((self.server.snapshot().used_memory - before) / n, 0.0, 0.0)
        return out

    def fill_quasar(self, n: int) -> None:
        for lo in range(0, n, 1000):
            self.quasar.enqueue_many([self.job(i) for i in range(lo, min(n, lo + 1000))])

    def fill_bare(self, which: str, n: int) -> None:
        script, k = self.scripts[which], self.keys()
        for lo in range(0, n, 1000):
            script(keys=k[:2], args=self.bare_args(lo, min(n, lo + 1000)))


def cell(values: list[float]) -> str:
    """The median with its min-max, as the benchmark's tables give them."""
    stat = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return report.cell({**stat, "runs": values})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--memory-jobs", type=int, default=None, help="default: --jobs")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    runs: dict[str, list[Figures]] = {}
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(Path(folder))
        try:
            floors = Floors(Server(server.url, server.run_id), args.jobs, args.memory_jobs)
            for run in range(args.runs):
                print(f"run {run + 1} of {args.runs}", file=sys.stderr)
                for part in (floors.single, floors.bulk, floors.processing, floors.memory):
                    for name, figures in part().items():
                        runs.setdefault(name, []).append(figures)
            floors.r.close()
        finally:
            server.stop()
    memory = args.memory_jobs or args.jobs
    print(f"{args.jobs} jobs (memory: {memory}), {args.runs} runs, {server.version}\n")
    rows = [
        [
            name,
            cell([f[0] for f in figures]),
            "" if name.startswith("memory") else cell([f[1] for f in figures]),
            "" if name.startswith("memory") else cell([f[2] for f in figures]),
        ]
        for name, figures in runs.items()
    ]
    head = ["what", "jobs/s (or bytes a job)", "Redis µs a job", "Redis CPU µs a job"]
    print(report.table(head, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
