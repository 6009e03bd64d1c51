"""What groups and limits cost Redis: CPU per job of claim + complete, in one run.

Starts a ``redis-server`` of its own on loopback (no persistence), then alternates layouts
``--rounds`` times, each in a new namespace, so that a drift of the machine falls on all:

- **plain**: a queue with neither groups nor limits (the path every queue took before flow
  control);
- **groups**: every job in one of ``--groups`` groups (10,000 by default), no limit;
- **limited**: the same groups, each with a concurrency cap and a rate it never reaches, and a
  queue-wide cap and rate it never reaches: every check runs, none holds a job back.

``--callgrind`` counts instead the CPU instructions Redis spends inside the scripts
(``benchmarks/lua_cost.py``'s server under callgrind): exact, and blind to a busy machine,
where the microseconds of ``INFO commandstats`` are not.

``--base DIR`` adds **base**: the plain layout run by the checkout at ``DIR`` (its
``quasar_redis`` and ``lua/``, in a process of its own): the A/B pair of a queue without groups
or limits, before and after.

Each round enqueues ``--jobs`` jobs (``enqueue_many``, 1,000 a call), resets ``INFO
commandstats`` (``CONFIG RESETSTAT``), then claims (``claim_many`` of ``--batch``) and completes
(``report_many``) them all from this process; Redis's CPU per job is the microseconds of every
command run during that phase (the scripts' own commands are counted inside the ``FCALL``) over
the jobs. Prints one JSON object: each layout's median over rounds, and the ratios groups /
plain, limited / plain and plain / base. ``python -m benchmarks.flow --base /tmp/base``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OWN = {"info", "config", "ping", "client", "hello", "function", "script"}
SCRIPT_CALLS = {"fcall", "fcall_ro", "evalsha", "eval"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scripts_usec(client: Any) -> tuple[float, int, dict[str, int]]:
    """Microseconds and calls of the script calls since the last reset (a script's own
    commands are counted inside it, and listed again on their own: those are the breakdown)."""
    usec, calls, inner = 0.0, 0, {}
    for name, stats in client.info("commandstats").items():
        command = name.removeprefix("cmdstat_").split("|")[0]
        if command in SCRIPT_CALLS:
            usec += float(stats["usec"])
            calls += int(stats["calls"])
        elif command not in OWN:
            inner[command] = int(stats["calls"])
    return usec, calls, inner


def fill(q: Any, layout: str, jobs: int, groups: int) -> None:
    """``jobs`` waiting jobs of ``layout`` (in ``groups`` groups unless plain), 1,000 a call;
    "limited" sets every limit, none of which the run reaches."""
    from quasar_redis import NewJob  # noqa: PLC0415

    grouped = layout in ("groups", "limited")
    for start in range(0, jobs, 1000):
        q.enqueue_many(
            [
                NewJob("t", i, group=f"g{i % groups}" if grouped else None)
                for i in range(start, min(start + 1000, jobs))
            ],
            ids_only=True,
        )
    if layout == "limited":
        from quasar_redis import Rate  # noqa: PLC0415

        q.set_limits(
            "default",
            rate=Rate(1_000_000, 1.0),
            concurrency=100_000,
            group_rate=Rate(1_000, 1.0),
            group_concurrency=1_000,
        )


def one_layout(url: str, layout: str, jobs: int, groups: int, batch: int) -> dict[str, float]:
    """One round of ``layout`` with the ``quasar_redis`` on the path: Redis µs per job."""
    # (imported here: a base checkout's quasar_redis, imported in its own process, has no Rate)
    import redis  # noqa: PLC0415

    from quasar_redis import Complete, Quasar  # noqa: PLC0415

    client = redis.Redis.from_url(url)
    q = Quasar(client, namespace="b" + uuid.uuid4().hex[:10])
    fill(q, layout, jobs, groups)
    client.config_resetstat()
    began, done = time.perf_counter(), 0
    while done < jobs:
        claimed: Any = q.claim_many("default", "w", 600_000, batch)
        claims = getattr(claimed, "claims", ())
        if not claims:
            raise RuntimeError(f"{layout}: nothing claimable after {done} of {jobs}: {claimed}")
        q.report_many("w", [Complete(c.token) for c in claims])
        done += len(claims)
    wall = time.perf_counter() - began
    usec, calls, inner = scripts_usec(client)
    for key in client.scan_iter(match=f"{q.keys.root}*", count=1000):
        client.delete(key)
    per_job = {name: round(n / jobs, 2) for name, n in sorted(inner.items())}
    return {"usec_per_job": usec / jobs, "calls": calls, "jobs_per_s": jobs / wall} | {
        "commands_per_job": sum(inner.values()) / jobs,
        **{f"per_job {name}": n for name, n in per_job.items()},
    }


def instructions(layout: str, jobs: int, groups: int, batch: int) -> float:
    """Instructions inside the scripts per job of claim + complete for ``layout``, counted by
    callgrind on a server of its own (this checkout's quasar_redis)."""
    import redis  # noqa: PLC0415
    from lua_cost import Measured  # noqa: PLC0415

    from quasar_redis import Complete, Quasar  # noqa: PLC0415

    measured = Measured(Path(tempfile.mkdtemp(prefix="flow-cost-")))
    try:
        client = redis.Redis(port=measured.port, socket_timeout=300)
        for _ in range(600):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        q = Quasar(client, namespace="cost")
        fill(q, layout, jobs, groups)

        def run() -> None:
            done, now = 0, 2_000_000_000_000
            while done < jobs:
                now += 1  # (a rate of 1,000 a second per group: one more start each ms)
                claimed: Any = q.claim_many("default", "w", 600_000, batch, now=now)
                claims = claimed.claims
                q.report_many("w", [Complete(c.token) for c in claims], now=now)
                done += len(claims)

        return measured.per_call(jobs, run)
    finally:
        measured.stop()


def run_in(checkout: Path, url: str, layout: str, args: argparse.Namespace) -> dict[str, float]:
    """``one_layout`` in a process of its own whose ``quasar_redis`` is ``checkout``'s."""
    code = (
        f"import json, sys; sys.path.append({str(ROOT / 'benchmarks')!r}); "
        "from flow import one_layout; "
        f"print(json.dumps(one_layout({url!r}, {layout!r}, {args.jobs}, {args.groups}, "
        f"{args.batch})))"
    )
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, help="a checkout to run the plain layout with too")
    parser.add_argument("--callgrind", action="store_true", help="count instructions instead")
    args = parser.parse_args()
    if args.callgrind:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        counted = {
            name: instructions(name, args.jobs, args.groups, args.batch)
            for name in ("plain", "groups", "limited")
        }
        print(
            json.dumps(
                {
                    "settings": vars(args) | {"base": str(args.base)},
                    "instructions_per_job": counted,
                    "ratios": {
                        "groups / plain": counted["groups"] / counted["plain"],
                        "limited / plain": counted["limited"] / counted["plain"],
                    },
                },
                indent=2,
            )
        )
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.3)
            url = f"redis://127.0.0.1:{port}/0"
            layouts = ["plain", "groups", "limited"] + (["base"] if args.base else [])
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in layouts}
            for _ in range(args.rounds):
                for name in layouts:
                    where = args.base if name == "base" else ROOT
                    assert where is not None
                    rounds[name].append(
                        run_in(where, url, "plain" if name == "base" else name, args)
                    )
        finally:
            server.terminate()
            server.wait()
    median = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in rounds.items()
    }
    plain = median["plain"]["usec_per_job"]
    ratios = {
        "groups / plain": median["groups"]["usec_per_job"] / plain,
        "limited / plain": median["limited"]["usec_per_job"] / plain,
    }
    if "base" in median:
        ratios["plain / base"] = plain / median["base"]["usec_per_job"]
        pairs = [
            p["usec_per_job"] / b["usec_per_job"]
            for p, b in zip(rounds["plain"], rounds["base"], strict=True)
        ]
        ratios["plain / base, each round"] = pairs  # type: ignore[assignment]
    print(
        json.dumps(
            {"settings": vars(args) | {"base": str(args.base)}, "median": median, "ratios": ratios},
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
