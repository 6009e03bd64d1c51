"""The measurements, run inside one system's virtualenv.

    python -m benchmarks.harness SYSTEM measure --redis-url URL --sizes JSON --out FILE
    python -m benchmarks.harness SYSTEM worker --redis-url URL --variant default|tuned
    python -m benchmarks.harness ceiling ceiling --redis-url URL --sizes JSON --out FILE

``measure`` takes every figure of one system once and writes them as JSON; ``worker`` is the
worker process it starts (one per process figure); ``ceiling`` measures what plain scripted
writes reach on the same server. The Redis server is the benchmark's own: it is flushed between
figures (the harness refuses to flush a server on port 6379).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis
import redis.asyncio

from benchmarks import probe
from benchmarks.report import nearest_rank
from benchmarks.sizes import Sizes
from benchmarks.systems.base import System

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("quasar", "bullmq", "rq", "arq", "saq", "dramatiq", "huey")
PROTECTED_PORT = 6379
PR_SET_PDEATHSIG = 1
MINIMAL_SCRIPT = (
    "redis.call('HSET', KEYS[1], 'p', ARGV[1]) "
    "redis.call('ZADD', KEYS[2], ARGV[2], KEYS[1]) "
    "return 1"
)


# --- the server --------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """What INFO says at one moment: CPU seconds, command time, script calls, memory."""

    cpu: float
    command_usec: int
    script_calls: int  # EVALSHA and FCALL (quasar uses functions where the server has them)
    script_usec: int
    used_memory: int


class Server:
    """The benchmark's own server: flushed only while its run_id is the one the runner saw."""

    def __init__(self, url: str, run_id: str) -> None:
        self.url = url
        self.run_id = run_id
        self.redis = redis.Redis.from_url(url)
        port = urlparse(url).port or 6379
        if port == PROTECTED_PORT:
            raise SystemExit(f"refusing to benchmark on port {PROTECTED_PORT}: it may hold data")
        self.check()

    def check(self) -> None:
        found = self.redis.info("server").get("run_id")
        if found != self.run_id:
            raise SystemExit(f"{self.url} is not the benchmark's server (run_id {found})")

    def flush(self) -> None:
        """Empties the server, then waits until its memory has settled: for a moment after a
        FLUSHALL Redis still frees what the flushed data left (measured: up to 160 KB during the
        next 300 enqueues, enough to make a memory figure negative)."""
        self.check()
        self.redis.flushall()
        last, deadline = self.data_memory(), time.monotonic() + 2.0
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.data_memory()
            if now == last:
                return
            last = now

    def data_memory(self) -> int:
        """``used_memory`` less the clients' buffers: those grow and shrink with the traffic (a
        long reply, a query buffer shrunk by Redis's cron) by tens of kilobytes, which over a
        few hundred jobs outweighs what the jobs themselves take."""
        info = self.redis.info("memory")
        buffers = int(info.get("mem_clients_normal", 0)) + int(info.get("mem_clients_slaves", 0))
        return int(info["used_memory"]) - buffers

    def snapshot(self) -> Snapshot:
        cpu = self.redis.info("cpu")
        stats = self.redis.info("commandstats")
        usec = sum(int(v["usec"]) for k, v in stats.items() if k != "cmdstat_info")
        scripts = [stats.get(f"cmdstat_{c}", {"calls": 0, "usec": 0}) for c in ("evalsha", "fcall")]
        memory = self.data_memory()
        return Snapshot(
            float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            usec,
            sum(int(s["calls"]) for s in scripts),
            sum(int(s["usec"]) for s in scripts),
            memory,
        )

    def version(self) -> str:
        return str(self.redis.info("server")["redis_version"])


def cpu_us(before: Snapshot, after: Snapshot, n: int) -> float:
    return (after.cpu - before.cpu) / max(n, 1) * 1e6


def command_us(before: Snapshot, after: Snapshot, n: int) -> float:
    """Time inside commands (INFO commandstats, INFO itself left out) per job, in µs."""
    return (after.command_usec - before.command_usec) / max(n, 1)


def percentile(values: Sequence[float], q: float) -> float:
    return sorted(values)[nearest_rank(len(values), q) - 1]


# --- timed loops -------------------------------------------------------------------------------


async def timed_sequential(one: Callable[[str], Awaitable[None]], datas: Sequence[str], cap: float):
    """(jobs, seconds) of one call at a time, stopping early after ``cap`` seconds."""
    start = time.perf_counter()
    deadline = start + cap
    done = 0
    for data in datas:
        await one(data)
        done += 1
        if done % 50 == 0 and time.perf_counter() > deadline:
            break
    return done, time.perf_counter() - start


def timed_sync(one: Callable[[str], None], datas: Sequence[str], cap: float) -> tuple[int, float]:
    start = time.perf_counter()
    deadline = start + cap
    done = 0
    for data in datas:
        one(data)
        done += 1
        if done % 50 == 0 and time.perf_counter() > deadline:
            break
    return done, time.perf_counter() - start


async def timed_concurrent(
    one: Callable[[str], Awaitable[None]], datas: Sequence[str], concurrency: int, cap: float
) -> tuple[int, float]:
    """(jobs, seconds) of ``concurrency`` producers awaiting calls side by side."""
    it = iter(datas)
    done = 0
    start = time.perf_counter()
    deadline = start + cap

    async def producer() -> None:
        nonlocal done
        for data in it:
            await one(data)
            done += 1
            if time.perf_counter() > deadline:
                return

    await asyncio.gather(*(producer() for _ in range(concurrency)))
    return done, time.perf_counter() - start


async def timed_bulk(system: System, datas: Sequence[str], chunk: int, cap: float):
    start = time.perf_counter()
    deadline = start + cap
    done = 0
    for i in range(0, len(datas), chunk):
        part = datas[i : i + chunk]
        result = system.bulk(part)
        if result is not None:
            await result
        done += len(part)
        if time.perf_counter() > deadline:
            break
    return done, time.perf_counter() - start


# --- the worker process ------------------------------------------------------------------------


def die_with_parent() -> None:
    """In the child: be killed when the harness dies (Linux), so no worker outlives a run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class WorkerProcess:
    """One worker process of the system, started by the harness and stopped by its pid."""

    def __init__(self, system: str, url: str, variant: str, shm: str, log: Path) -> None:
        path = os.environ.get("PYTHONPATH") or str(ROOT)
        env = dict(os.environ, BENCH_SHM=shm, BENCH_REDIS_URL=url, PYTHONPATH=path)
        argv = [sys.executable, "-m", "benchmarks.harness", system, "worker"]
        argv += ["--redis-url", url, "--variant", variant]
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - no thread runs in the harness
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --- one system's figures ----------------------------------------------------------------------


@dataclass
class Measurement:
    system: str
    figures: dict[str, float | None] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


class Harness:
    def __init__(self, name: str, server: Server, sizes: Sizes, log_dir: Path) -> None:
        self.name = name
        self.url = server.url
        self.sizes = sizes
        self.server = server
        self.log_dir = log_dir
        module = importlib.import_module(f"benchmarks.systems.{name}")
        self.cls: type[System] = module.SYSTEM
        self.system = self.cls(self.url)
        fd, self.shm = tempfile.mkstemp(prefix=f"bench-{name}-", dir=shm_dir())
        os.close(fd)
        os.environ[probe.ENV] = self.shm
        self.counter = probe.Reader(self.shm)
        self.out = Measurement(name)

    def datas(self, n: int) -> list[str]:
        return [probe.make(i) for i in range(n)]

    async def run(self, claim_cost: bool) -> Measurement:
        await self.system.open()
        try:
            await self.enqueue_figures()
            for variant in ("default", "tuned"):
                await self.process(variant)
            await self.latency()
            if claim_cost:
                extra = getattr(self.system, "claim_cost", None)
                if extra is not None:
                    self.out.figures.update(await extra(self))
        finally:
            await self.system.close()
            self.server.flush()
            self.counter.close()
        self.out.details.update(self.describe())
        return self.out

    def describe(self) -> dict[str, Any]:
        cls = self.cls
        return {
            "version": metadata.version(cls.distribution),
            "python": platform.python_version(),
            "redis_py": metadata.version("redis"),
            "hiredis": _version_or_none("hiredis"),
            "redis_server": self.server.version(),
            "variants": cls.variants,
            "latency_variant": cls.latency_variant,
            "sequential_note": cls.sequential_note,
            "notes": cls.notes,
            "apis": {"sync": cls.sync_api, "async": cls.async_api, "bulk": cls.bulk_api},
        }

    # enqueue ------------------------------------------------------------------------------------

    async def enqueue_figures(self) -> None:
        s, sysm, f = self.sizes, self.system, self.out.figures
        self.server.flush()
        await sysm.enqueue_one(probe.make(0))  # scripts loaded, connections open
        self.server.flush()
        before = self.server.snapshot()
        if sysm.sync_api:
            n, seconds = timed_sync(sysm.enqueue_sync, self.datas(s.enqueue), s.phase_cap)
        else:
            n, seconds = await timed_sequential(
                sysm.enqueue_async, self.datas(s.enqueue), s.phase_cap
            )
        after = self.server.snapshot()
        f["enqueue_sync_per_s"] = n / seconds
        f["memory_bytes_per_job"] = (after.used_memory - before.used_memory) / n
        f["redis_cpu_us_per_enqueue"] = cpu_us(before, after, n)
        f["redis_command_us_per_enqueue"] = command_us(before, after, n)
        self.out.details["enqueue_sync_n"] = n
        bare_write = getattr(sysm, "bare_write", None)
        if bare_write is not None:  # (quasar's: its own writes of the same jobs, bare)
            self.server.flush()
            f.update(bare_write(self, self.datas(n)))
        paired = getattr(sysm, "paired_ceiling", None)
        if paired is not None:  # (quasar's: its one-at-a-time calls and the ceiling's, in turns)
            self.server.flush()
            f.update(await paired(self, self.datas(s.enqueue)))

        f["enqueue_async_one_per_s"] = None
        if sysm.async_api:
            self.server.flush()
            n, seconds = await timed_sequential(
                sysm.enqueue_async, self.datas(s.enqueue), s.phase_cap
            )
            f["enqueue_async_one_per_s"] = n / seconds
            self.out.details["enqueue_async_one_n"] = n

        f["enqueue_async_per_s"] = None
        if sysm.async_api:
            warm = self.datas(s.async_concurrency)  # every producer's connection opened, untimed
            await timed_concurrent(sysm.enqueue_async, warm, s.async_concurrency, s.phase_cap)
            self.server.flush()
            datas = self.datas(s.async_enqueue)
            n, seconds = await timed_concurrent(
                sysm.enqueue_async, datas, s.async_concurrency, s.phase_cap
            )
            f["enqueue_async_per_s"] = n / seconds
            self.out.details["enqueue_async_n"] = n

        f["enqueue_bulk_per_s"] = None
        if sysm.bulk_api:
            self.server.flush()
            n, seconds = await timed_bulk(sysm, self.datas(s.bulk), s.chunk, s.phase_cap)
            f["enqueue_bulk_per_s"] = n / seconds
            self.out.details["enqueue_bulk_n"] = n

    # processing ---------------------------------------------------------------------------------

    async def prefill(self, n: int) -> tuple[int, float]:
        """Fill the queue with up to ``n`` jobs within ``fill_cap`` seconds (in chunks)."""
        start = time.perf_counter()
        filled = 0
        step = max(self.sizes.chunk, 1000)
        while filled < n and time.perf_counter() - start < self.sizes.fill_cap:
            part = [probe.make(i) for i in range(filled, min(n, filled + step))]
            await self.system.fill(part, self.sizes.chunk)
            filled += len(part)
        return filled, time.perf_counter() - start

    def start_worker(self, variant: str) -> WorkerProcess:
        log = self.log_dir / f"worker-{self.name}-{variant}.log"
        return WorkerProcess(self.name, self.url, variant, self.shm, log)

    def wait_count(self, worker: WorkerProcess, target: int, deadline: float) -> tuple[float, int]:
        """Poll the shared counter until it reaches ``target`` or the deadline passes."""
        while True:
            now, count = time.perf_counter(), self.counter.count()
            if count >= target or now > deadline:
                return now, count
            if not worker.alive():
                raise RuntimeError(f"the {self.name} worker exited (see {worker.log.name})")
            time.sleep(0.001)

    async def process(self, variant: str) -> None:
        s, f = self.sizes, self.out.figures
        self.server.flush()
        filled, fill_seconds = await self.prefill(s.process)
        self.counter.reset()
        before = self.server.snapshot()
        worker = self.start_worker(variant)
        try:
            t0, c0 = self.wait_count(worker, 1, time.perf_counter() + 120)
            if c0 < 1:
                raise RuntimeError(f"the {self.name} worker ran no job in 120 s")
            t1, c1 = self.wait_count(worker, filled, t0 + s.process_cap)
            if c1 >= filled:
                t1 = self.wait_finished(filled)
            after = self.server.snapshot()
            done = self.counter.count()
        finally:
            worker.stop()
        f[f"process_{variant}_per_s"] = (c1 - c0) / (t1 - t0)
        f[f"redis_cpu_us_per_job_{variant}"] = cpu_us(before, after, done)
        f[f"redis_command_us_per_job_{variant}"] = command_us(before, after, done)
        self.out.details[f"process_{variant}"] = {
            "filled": filled,
            "fill_seconds": fill_seconds,
            "timed_jobs": c1 - c0,
            "seconds": t1 - t0,
            "drained": c1 >= filled,
        }

    def wait_finished(self, n: int) -> float:
        """The moment Redis shows all ``n`` jobs finished (every job has already run)."""
        deadline = time.perf_counter() + 60
        while not self.system.finished(self.server.redis, n):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{self.name}: jobs ran but Redis does not show them finished")
            time.sleep(0.002)
        return time.perf_counter()

    # latency ------------------------------------------------------------------------------------

    async def latency(self) -> None:
        s, f = self.sizes, self.out.figures
        self.server.flush()
        self.counter.reset()
        worker = self.start_worker(self.cls.latency_variant)
        try:
            await self.system.enqueue_one(probe.make(s.latency))  # a warm-up job, not timed
            self.wait_count(worker, 1, time.perf_counter() + 120)
            await asyncio.sleep(0.5)  # let the worker go idle (it waits for work now)
            start = time.perf_counter()
            for i in range(s.latency):
                pause = start + i * s.latency_interval - time.perf_counter()
                if pause > 0:
                    await asyncio.sleep(pause)
                await self.system.enqueue_one(probe.make(i, time.time()))
            self.wait_count(worker, s.latency + 1, time.perf_counter() + 60)
        finally:
            worker.stop()
        values = self.counter.latencies(s.latency)
        if len(values) < s.latency:
            raise RuntimeError(f"{self.name}: {len(values)} of {s.latency} latency jobs ran")
        f["latency_p50_ms"] = percentile(values, 0.50) * 1000
        f["latency_p99_ms"] = percentile(values, 0.99) * 1000
        self.out.details["latency_n"] = len(values)


def _version_or_none(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


# --- the ceiling ---------------------------------------------------------------------------------


#: The ceiling's value: a payload of the benchmark's size.
CEILING_PAYLOAD = "x" * probe.PAYLOAD_BYTES


def ceiling_args(i: int) -> tuple[Any, ...]:
    """MINIMAL_SCRIPT's keys and arguments for its ``i``-th call (after its sha): a fresh key a
    call, one shared index."""
    return (2, f"job:{i}", "ready", CEILING_PAYLOAD, i)


async def _async_one_at_a_time(url: str, sha: str, n: int) -> float:
    """Seconds for ``n`` EVALSHA calls of the ceiling's script by redis.asyncio, each awaited
    before the next."""
    r = redis.asyncio.Redis.from_url(url)
    try:
        await r.evalsha(sha, *ceiling_args(-1))
        start = time.perf_counter()
        for i in range(n):
            await r.evalsha(sha, *ceiling_args(i))
        return time.perf_counter() - start
    finally:
        await r.aclose()


def ceiling(server: Server, sizes: Sizes) -> Measurement:
    """Plain scripted writes on the same server: one HSET (100-byte value) and one ZADD a call."""
    url = server.url
    r = server.redis
    out = Measurement("ceiling")
    f = out.figures
    server.flush()
    sha = r.script_load(MINIMAL_SCRIPT)
    r.evalsha(sha, *ceiling_args(-1))
    server.flush()

    n = sizes.ceiling_one
    before = server.snapshot()
    start = time.perf_counter()
    for i in range(n):
        r.evalsha(sha, *ceiling_args(i))
    seconds = time.perf_counter() - start
    after = server.snapshot()
    f["ceiling_evalsha_per_s"] = n / seconds
    f["ceiling_rtt_us"] = seconds / n * 1e6
    f["ceiling_memory_bytes_per_job"] = (after.used_memory - before.used_memory) / n
    f["ceiling_redis_cpu_us_per_call"] = cpu_us(before, after, n)
    calls = after.script_calls - before.script_calls
    f["ceiling_server_us_per_call"] = (after.script_usec - before.script_usec) / max(calls, 1)
    server.flush()

    n = sizes.ceiling_one
    f["ceiling_async_evalsha_per_s"] = n / asyncio.run(_async_one_at_a_time(url, sha, n))
    server.flush()

    n = sizes.ceiling_pipelined
    start = time.perf_counter()
    for base in range(0, n, 100):
        pipe = r.pipeline(transaction=False)
        for i in range(base, min(n, base + 100)):
            pipe.evalsha(sha, *ceiling_args(i))
        pipe.execute()
    f["ceiling_pipelined_per_s"] = n / (time.perf_counter() - start)
    server.flush()

    f["ceiling_redis_benchmark_per_s"] = redis_benchmark(url, sha, CEILING_PAYLOAD, sizes)
    server.flush()
    out.details.update(
        {
            "script": MINIMAL_SCRIPT,
            "redis_server": server.version(),
            "python": platform.python_version(),
            "redis_py": metadata.version("redis"),
            "hiredis": _version_or_none("hiredis"),
            "redis_benchmark": f"-c {sizes.ceiling_clients} -n {sizes.ceiling_benchmark}",
        }
    )
    return out


def redis_benchmark(url: str, sha: str, payload: str, sizes: Sizes) -> float | None:
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return None
    parts = urlparse(url)
    argv = [exe, "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379)]
    argv += ["-n", str(sizes.ceiling_benchmark), "-c", str(sizes.ceiling_clients)]
    argv += ["-r", "100000000", "--csv"]
    argv += ["EVALSHA", sha, "2", "job:__rand_int__", "ready", payload, "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    for line in done.stdout.splitlines():
        cells = [c.strip('"') for c in line.split('","')]
        if len(cells) > 1 and cells[0].startswith("EVALSHA"):
            return float(cells[1])
    raise RuntimeError(f"cannot read redis-benchmark's output: {done.stdout!r}")


# --- command line --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness")
    parser.add_argument("system", choices=(*SYSTEMS, "ceiling"))
    parser.add_argument("command", choices=("measure", "worker", "ceiling"))
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--run-id", help="the run_id of the benchmark's server (to flush it)")
    parser.add_argument("--sizes", default="")
    parser.add_argument("--out")
    parser.add_argument("--variant", default="default")
    parser.add_argument("--log-dir", default=tempfile.gettempdir())
    parser.add_argument("--claim-cost", action="store_true")
    args = parser.parse_args(argv)
    sizes = Sizes.from_json(args.sizes)
    if args.command == "worker":
        module = importlib.import_module(f"benchmarks.systems.{args.system}")
        module.SYSTEM.run_worker(args.redis_url, args.variant)
        return
    if not args.run_id:
        parser.error("--run-id is needed: the harness flushes the server")
    server = Server(args.redis_url, args.run_id)
    if args.command == "ceiling":
        result = ceiling(server, sizes)
    else:
        harness = Harness(args.system, server, sizes, Path(args.log_dir))
        result = asyncio.run(harness.run(args.claim_cost))
    text = json.dumps(asdict(result), indent=2)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
