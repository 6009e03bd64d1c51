#!/usr/bin/env python3
"""An idle consumer's pick-up of a job, step by step, from the floor of a leased queue to
quasar's worker: where enqueue-to-start time goes on top of what a lease costs at its barest.

    python benchmarks/pickup.py [--jobs 1000] [--interval-ms 5] [--rounds 3]

Run it with the project's Python. It starts its own ``redis-server`` on a free loopback port (as
``run.py`` does). Each round, the ways below take turns; each enqueues ``--jobs`` jobs one every
``--interval-ms`` to a consumer process left idle, and times each job from just before its
enqueue to the first line of its function (one clock: ``time.time()``; producer and consumer
share the host). Each way adds one part of quasar's path to the one before it:

- ``floor``: ``floors.py``'s contract enqueue (every command of quasar's single enqueue, bare) and
  its bare claim (``ZRANGE``, ``HGETALL``, the lease's ``HSET``, ``ZREM``, ``ZADD``); the consumer a
  loop on a blocking socket that writes the wake list's ``BLPOP`` and the claim at once, as the
  worker does, decodes the payload and calls the function;
- ``enqueue``: the producer is quasar's (``task.enqueue`` of an ``App``), the consumer the floor's;
- ``claim``: the consumer sends quasar's own claim (``claim_many``, the plain claim in Redis) and
  turns its reply into the typed claim (``call.parse``), still on a blocking socket;
- ``asyncio``: the same on an asyncio event loop, read through redis-py's asyncio connection
  (``read_response``, as the worker's waits read until they took their connection over);
- ``protocol``: the same on an asyncio event loop, read by an ``asyncio.Protocol`` feeding
  ``hiredis`` (as the worker's waits read now: ``quasar_redis/_wait_line.py``);
- ``worker``: quasar's ``Worker`` (concurrency 10), as the benchmark's latency figure runs it.

It prints, per way, the median over the rounds of each round's p50 and p99 (nearest rank).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import hiredis  # noqa: E402 - after the path is set
import msgpack  # noqa: E402
import redis  # noqa: E402
import redis.asyncio  # noqa: E402

from benchmarks.floors import BARE_CLAIM, CONTRACT_ENQUEUE  # noqa: E402
from benchmarks.latency import percentile  # noqa: E402
from benchmarks.run import RedisServer  # noqa: E402
from quasar_redis import App, Quasar  # noqa: E402
from quasar_redis._call_codec import args_of, payload_of  # noqa: E402
from quasar_redis._codec import encode  # noqa: E402
from quasar_redis.worker import Worker  # noqa: E402

WAYS = ("floor", "enqueue", "claim", "asyncio", "protocol", "worker")
NAMESPACE, QUEUE, STAGE = "floor", "bench", "noop"  # (the names CONTRACT_ENQUEUE writes)
ROOT_KEY = f"quasar:{{{NAMESPACE}}}:"
WAKE = ROOT_KEY + f"q:{QUEUE}:wake"
LEASE_MS = 60_000


# --- the consumer process ----------------------------------------------------------------------


def consume(url: str, way: str, out: str) -> None:
    """Run the consumer of ``way`` until SIGTERM, then write when each job started."""
    started: dict[str, float] = {}

    def run(i: int) -> None:
        started[str(i)] = time.time()

    if way == "worker":
        app = App(url, namespace=NAMESPACE)

        @app.task(name=STAGE, queue=QUEUE)
        async def noop(i: int) -> None:
            run(i)

        @app.on_shutdown
        def write_out(*_: Any) -> None:
            Path(out).write_text(json.dumps(started))

        Worker(app, [QUEUE], concurrency=10).run()
        return
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    q = Quasar(redis.Redis.from_url(url), NAMESPACE)
    q.counts(QUEUE)  # (the function library loaded)
    if way in ("floor", "enqueue"):
        _bare_loop(q, stop, run)
    elif way == "claim":
        _blocking_loop(q, stop, run)
    else:
        asyncio.run(_async_loop(url, q, way, stop, run))
    Path(out).write_text(json.dumps(started))


def _bare_loop(q: Quasar, stop: list[int], run: Callable[[int], None]) -> None:
    sha = q.redis.script_load(BARE_CLAIM)
    conn: Any = q.redis.connection_pool.make_connection()
    conn.connect()
    keys = (ROOT_KEY + f"q:{QUEUE}:ready", ROOT_KEY + f"q:{QUEUE}:leased", ROOT_KEY + "job:")
    n = 0
    while not stop:
        n += 1
        x = str(int(time.time() * 1000) + LEASE_MS)
        claim: Any = ("EVALSHA", sha, "3", *keys, "10", "w1", x, f"n{n}.")
        conn.send_packed_command([_packed(("BLPOP", WAKE, "1"), claim)])
        conn.read_response()
        out = conn.read_response()
        for k in range(0, len(out), 2):
            fields = dict(zip(out[k + 1][::2], out[k + 1][1::2], strict=True))
            args, _ = args_of(msgpack.unpackb(fields[b"p"] + fields.get(b"p2", b"")))
            run(*args)


def _blocking_loop(q: Quasar, stop: list[int], run: Callable[[int], None]) -> None:
    conn: Any = q.redis.connection_pool.make_connection()
    conn.connect()
    while not stop:
        call = q.calls.claim_many(QUEUE, "w1", LEASE_MS, 10)
        conn.send_packed_command([_packed(("BLPOP", WAKE, "1"), q._command(call))])
        conn.read_response()
        _run_claimed(call.parse(conn.read_response()), run)


def _packed(*commands: Any) -> bytes:
    """The commands in one write, as the worker's wait writes its BLPOP and its claim."""
    return b"".join(hiredis.pack_command(c) for c in commands)


def _run_claimed(result: Any, run: Callable[[int], None]) -> None:
    for claim in getattr(result, "claims", ()):
        args, _ = args_of(claim.job.payload)
        run(*args)


class _Replies(asyncio.Protocol):
    """Bytes in, replies out: hiredis fed by the transport, a future per reply awaited."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.replies: list[Any] = []
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        reply = self.reader.gets()
        while reply is not False:
            self.replies.append(reply)
            reply = self.reader.gets()
        if self.replies and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def next(self) -> Any:
        if not self.replies:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.replies.pop(0)


async def _async_loop(
    url: str, q: Quasar, way: str, stop: list[int], run: Callable[[int], None]
) -> None:
    kwargs = redis.Redis.from_url(url).connection_pool.connection_kwargs
    loop = asyncio.get_running_loop()
    if way == "protocol":
        transport, replies = await loop.create_connection(
            _Replies, kwargs.get("host", "127.0.0.1"), kwargs.get("port", 6379)
        )
        write, read = transport.write, replies.next
    else:
        pool: Any = redis.asyncio.Redis.from_url(url, protocol=2).connection_pool
        conn = pool.make_connection()
        await conn.connect()
        write, read = conn._writer.write, conn.read_response
    while not stop:
        call = q.calls.claim_many(QUEUE, "w1", LEASE_MS, 10)
        write(_packed(("BLPOP", WAKE, "1"), q._command(call)))
        await read()
        _run_claimed(call.parse(await read()), run)


# --- the producer ------------------------------------------------------------------------------


def one_way(url: str, way: str, jobs: int, interval: float, folder: Path) -> list[float]:
    """The enqueue-to-start latencies (s) of ``jobs`` jobs through ``way``."""
    admin = redis.Redis.from_url(url)
    admin.flushall()  # (the tool's own server)
    out = folder / f"{way}.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = f"from benchmarks.pickup import consume; consume({url!r}, {way!r}, {str(out)!r})"
    consumer = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    app = App(url, namespace=NAMESPACE)

    @app.task(name=STAGE, queue=QUEUE)
    async def noop(i: int) -> None:
        raise NotImplementedError  # (the producer's declaration)

    sha = admin.script_load(CONTRACT_ENQUEUE)

    def bare(i: int) -> None:
        now, payload = int(time.time() * 1000), encode(payload_of([i], {}))
        member = now.to_bytes(6, "big") + (i + 1).to_bytes(5, "big")
        admin.evalsha(sha, 2, ROOT_KEY, ROOT_KEY + "events", os.urandom(8).hex(), payload, member)

    enqueue: Callable[[int], Any] = bare if way == "floor" else noop.enqueue
    sent: dict[str, float] = {}
    try:
        enqueue(-1)
        deadline = time.monotonic() + 60
        while admin.zcard(ROOT_KEY + f"q:{QUEUE}:ready") and time.monotonic() < deadline:
            time.sleep(0.01)  # the consumer is up and took its first job
        time.sleep(0.5)  # idle: it waits for work now
        begin = time.perf_counter()
        for i in range(jobs):
            pause = begin + i * interval - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            sent[str(i)] = time.time()
            enqueue(i)
        time.sleep(0.5)
    finally:
        consumer.terminate()
        consumer.wait(60)
        app.close()
        admin.close()
    started = json.loads(out.read_text())
    return [started[k] - t0 for k, t0 in sent.items() if k in started]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="quasar-pickup-"))
    server = RedisServer(folder)
    figures: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    try:
        for n in range(options.rounds):
            for way in WAYS:
                values = one_way(server.url, way, options.jobs, options.interval_ms / 1000, folder)
                if len(values) < options.jobs:
                    raise SystemExit(f"{way}: {len(values)} of {options.jobs} jobs started")
                p50, p99 = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000
                figures[way].append((p50, p99))
                print(f"round {n + 1}, {way}: p50 {p50:.3f} ms, p99 {p99:.3f} ms", flush=True)
    finally:
        server.stop()
    print(f"\n{options.jobs} jobs a way and round, {options.rounds} rounds, medians (ms):")
    print("| way | p50 | p99 |\n|---|---|---|")
    for way in WAYS:
        p50 = statistics.median(f[0] for f in figures[way])
        p99 = statistics.median(f[1] for f in figures[way])
        print(f"| {way} | {p50:.3f} | {p99:.3f} |")


if __name__ == "__main__":
    main()
