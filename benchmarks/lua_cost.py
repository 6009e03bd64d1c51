"""What a script call costs Redis: CPU instructions per call, counted by callgrind.

A ``redis-server`` of its own runs under ``valgrind --tool=callgrind``, collecting only inside
``luaCallFunction`` (the script's run: its Lua and the commands it calls, not the network or the
command parsing around it). A fixed workload runs through the client of the checkout given; the
counters are zeroed before each measured phase and dumped after it, so that a phase's total over
its calls is the cost of one call. Instruction counts hardly vary from run to run, which wall-clock
timings on a shared machine do: two checkouts compare by running this once each.

    python benchmarks/lua_cost.py [--checkout DIR] [--scripts]

``--checkout``: the source tree whose ``quasar_redis`` and ``lua/`` are measured (default: this
one). ``--scripts``: EVALSHA (Redis 6.2's way) rather than the function library.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_000
LEASE_MS = 600_000
BATCH = 50
ROUNDS = 4  # calls of each batch operation
SINGLE = 100  # calls of each single-job operation


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def total(path: Path) -> int:
    """The instructions a callgrind dump file counts."""
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"no totals in {path}")


class Measured:
    """The server under callgrind, and each phase's instructions per call."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.dumps = 0
        out = folder / "callgrind.out"
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             "--toggle-collect=luaCallFunction", "redis-server", "--port", str(self.port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--logfile", str(folder / "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def per_call(self, calls: int, run: Any) -> float:
        control(self.proc.pid, "--zero")
        run()
        control(self.proc.pid, "--dump")
        self.dumps += 1
        dumps = sorted(self.folder.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
        return total(dumps[-1]) / calls

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def workload(quasar: Any, q: Any, measured: Measured) -> dict[str, float]:
    Complete, NewJob = quasar.Complete, quasar.NewJob

    def enqueue_singles() -> None:
        for i in range(SINGLE):
            q.enqueue("s", id=f"e{i}", queue="single", payload=b"x" * 100, now=T0)

    def load(queue: str, n: int) -> None:
        jobs = [NewJob("s", id=f"{queue}{i}", queue=queue, payload=b"x" * 100) for i in range(n)]
        q.enqueue_many(jobs, now=T0, ids_only=True)

    figures = {"enqueue": measured.per_call(SINGLE, enqueue_singles)}
    load("claimed", BATCH * ROUNDS)
    claims: list[Any] = []

    def claim_rounds() -> None:
        for _ in range(ROUNDS):
            claims.extend(q.claim_many("claimed", "w1", LEASE_MS, BATCH, now=T0 + 1).claims)

    figures["claim_many(50)"] = measured.per_call(ROUNDS, claim_rounds)
    assert len(claims) == BATCH * ROUNDS, len(claims)

    def complete_singles() -> None:
        for c in claims[:SINGLE]:
            q.complete(c.token, "w1", result=1, now=T0 + 2)

    figures["complete"] = measured.per_call(SINGLE, complete_singles)
    idle = idle_claims(q, Complete, measured)
    figures["claim(1 of 10)"], figures["claim(0 of 10)"], figures["complete+claim(0)"] = idle
    load("reported", BATCH * ROUNDS)
    held = q.claim_many("reported", "w1", LEASE_MS, BATCH * ROUNDS, now=T0 + 1).claims

    def report_rounds() -> None:
        for n in range(ROUNDS):
            batch = held[n * BATCH : (n + 1) * BATCH]
            q.report_many("w1", [Complete(c.token, result=1) for c in batch], now=T0 + 2)

    figures["report_many(50)"] = measured.per_call(ROUNDS, report_rounds)
    return figures


def idle_claims(q: Any, complete: Any, measured: Measured) -> tuple[float, float, float]:
    """The instructions of the claims a worker makes at light load: when one job comes (a queue
    of its own for each, one ready job in it, a claim of up to 10), when none has (the same
    queues, empty now), and as its job ends (its completion and the claim of the next, which
    finds none: report_and_claim)."""
    for i in range(SINGLE):
        q.enqueue("s", id=f"o{i}", queue=f"one{i}", payload=b"x" * 100, now=T0)
    woken: list[Any] = []

    def claim_ones() -> None:
        for i in range(SINGLE):
            woken.extend(q.claim_many(f"one{i}", "w1", LEASE_MS, 10, now=T0 + 1).claims)

    one = measured.per_call(SINGLE, claim_ones)
    assert len(woken) == SINGLE, len(woken)
    found: list[Any] = []

    def claim_none() -> None:
        for i in range(SINGLE):
            found.append(q.claim_many(f"one{i}", "w1", LEASE_MS, 10, now=T0 + 1))

    none = measured.per_call(SINGLE, claim_none)
    assert not any(hasattr(r, "claims") for r in found), found[:3]
    done: list[Any] = []

    def report_last() -> None:
        for i, c in enumerate(woken):
            outcome = complete(c.token, result=1)
            done.append(q.report_and_claim("w1", [outcome], f"one{i}", LEASE_MS, 10, now=T0 + 2))

    last = measured.per_call(SINGLE, report_last)
    assert not any(hasattr(r.claim, "claims") for r in done), done[:3]
    return one, none, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--scripts", action="store_true", help="EVALSHA, not the function library")
    options = parser.parse_args()
    sys.path.insert(0, str(options.checkout.resolve()))
    quasar = importlib.import_module("quasar_redis")  # the checkout's, first on the path

    folder = Path(tempfile.mkdtemp(prefix="lua-cost-"))
    measured = Measured(folder)
    try:
        client = redis.Redis(port=measured.port, socket_timeout=120)
        for _ in range(600):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        q = quasar.Quasar(client, "bench", functions=not options.scripts)
        q.load_scripts()
        figures = workload(quasar, q, measured)
    finally:
        measured.stop()
        shutil.rmtree(folder, ignore_errors=True)
    mode = "EVALSHA" if options.scripts else "FCALL"
    print(f"{Path(quasar.__file__).parent.parent} ({mode}): instructions per call")
    for name, value in figures.items():
        print(f"  {name:16} {value:12,.0f}")


if __name__ == "__main__":
    main()
