#!/usr/bin/env python3
"""Enqueue-to-start latency at light load, taken apart job by job.

    python benchmarks/latency.py [--jobs 1000] [--interval-ms 5] [--runs 3]

Run it with the project's Python. It starts its own ``redis-server`` on a free loopback port (as
``run.py`` does) and one worker process (``Worker``, concurrency 10, prefetch auto: the
benchmark's latency variant), lets the worker go idle, then enqueues one job every
``--interval-ms`` through a task, as ``run.py``'s latency figure does. Each job's latency is cut
at three instants, all read from one clock (``time.time()``; producer and worker share the host):

- **enqueue**: from just before ``task.enqueue`` to its return in the producer;
- **claim**: from there to the moment the worker's claim that leased the job returned (an idle
  worker's wait and the claim riding it, ``AsyncQuasar.wait_and_claim``, or a claim sent while
  busy); negative when the worker had the job before the producer had its reply;
- **start**: from the claim's return to the task's first line.

It prints, per run, p50 / p99 / max of the whole and of each part, and the parts of the slowest
1% of jobs: what a p99 is made of.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import nearest_rank  # noqa: E402 - after the path is set
from benchmarks.run import RedisServer  # noqa: E402
from quasar_redis import App, aio  # noqa: E402
from quasar_redis.worker import Worker  # noqa: E402

NAMESPACE = "latency"
QUEUE = "latency"


def worker_main(url: str, out: str) -> None:
    """The worker process: runs the task, notes when each job's claim returned and when it
    started, and writes both out when it stops."""
    claimed: dict[str, float] = {}
    started: dict[str, float] = {}
    plain_wait = aio.AsyncQuasar.wait_and_claim

    async def timed_wait(
        self: Any, queues: Any, timeout: float, call: Any, on_blocked: Any, on_answer: Any = None
    ) -> Any:
        def answered(result: Any) -> None:  # (the worker starts the jobs of its answer here)
            now = time.time()
            for job_id in leased(result):
                claimed[job_id] = now
            if on_answer is not None:
                on_answer(result)

        return await plain_wait(self, queues, timeout, call, on_blocked, answered)

    plain_execute = aio.AsyncQuasar.execute

    async def timed_execute(self: Any, call: Any) -> Any:  # a claim that did not wait
        result = await plain_execute(self, call)
        now = time.time()
        for job_id in leased(result):
            claimed.setdefault(job_id, now)
        return result

    aio.AsyncQuasar.wait_and_claim = timed_wait  # type: ignore[method-assign]
    aio.AsyncQuasar.execute = timed_execute  # type: ignore[method-assign]
    app = App(url, namespace=NAMESPACE)

    @app.task(name="probe", queue=QUEUE)
    async def probe(i: int) -> None:
        started[str(i)] = time.time()

    @app.on_shutdown
    def write_out(*_: Any) -> None:
        Path(out).write_text(json.dumps({"claimed": claimed, "started": started}))

    Worker(app, [QUEUE], concurrency=10).run()


def leased(result: Any) -> list[str]:
    """The ids of the jobs a claim's result leased: a claim of many or of one, or one carried
    with outcomes (``report_and_claim``); nothing for any other result."""
    if isinstance(result, tuple | list):
        return [job_id for part in result for job_id in leased(part)]
    claims = getattr(result, "claims", None)
    if claims is not None:
        return [c.job.id for c in claims]
    job = getattr(result, "job", None)
    if job is not None and hasattr(result, "token"):  # a Claim
        return [job.id]
    inner = getattr(result, "claim", None)
    return [] if inner is None else leased(inner)


def percentile(values: list[float], q: float) -> float:
    return sorted(values)[nearest_rank(len(values), q) - 1]


def one_run(url: str, jobs: int, interval: float, folder: Path) -> dict[str, Any]:
    out = folder / "worker.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = f"from benchmarks.latency import worker_main; worker_main({url!r}, {str(out)!r})"
    worker = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    app = App(url, namespace=NAMESPACE)

    @app.task(name="probe", queue=QUEUE)
    async def probe(i: int) -> None:
        raise NotImplementedError  # (the producer's declaration; the worker runs its own)

    sent: dict[str, tuple[float, float, str]] = {}
    try:
        probe.enqueue(-1).result(timeout=60)  # the worker is up and has run a job
        time.sleep(0.5)  # idle: the worker waits for work now
        begin = time.perf_counter()
        for i in range(jobs):
            pause = begin + i * interval - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            t0 = time.time()
            handle = probe.enqueue(i)
            sent[str(i)] = (t0, time.time(), handle.id)
        probe.enqueue(jobs).result(timeout=60)  # (one worker, FIFO: every job before it ran)
    finally:
        worker.terminate()
        worker.wait(60)
        app.close()
    seen = json.loads(out.read_text())
    rows = []
    for key, (t0, t1, job_id) in sent.items():
        at, start = seen["claimed"].get(job_id), seen["started"].get(key)
        if at is not None and start is not None:
            rows.append((start - t0, t1 - t0, at - t1, start - at))
    return {"rows": rows, "jobs": jobs}


def report(run: dict[str, Any]) -> str:
    rows = run["rows"]
    names = ("whole", "enqueue", "claim", "start")
    lines = [f"{len(rows)} of {run['jobs']} jobs timed (ms):", "| part | p50 | p99 | max |"]
    lines.append("|---|---|---|---|")
    for k, name in enumerate(names):
        values = [r[k] * 1000 for r in rows]
        lines.append(
            f"| {name} | {percentile(values, 0.5):.3f} | {percentile(values, 0.99):.3f} "
            f"| {max(values):.3f} |"
        )
    slow = sorted(rows, key=lambda r: r[0])[-max(1, len(rows) // 100) :]
    parts = [statistics.mean(r[k] for r in slow) * 1000 for k in range(4)]
    lines.append(
        f"the slowest 1% ({len(slow)} jobs), mean ms: whole {parts[0]:.3f} = enqueue "
        f"{parts[1]:.3f} + claim {parts[2]:.3f} + start {parts[3]:.3f}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="quasar-latency-"))
    server = RedisServer(folder)
    try:
        for n in range(options.runs):
            print(f"run {n + 1} of {options.runs}")
            print(report(one_run(server.url, options.jobs, options.interval_ms / 1000, folder)))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
