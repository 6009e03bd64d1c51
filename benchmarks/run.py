#!/usr/bin/env python3
"""The benchmark: quasar_redis and its peers on one throwaway Redis server, in one command.

    python3 benchmarks/run.py [--quick] [--runs 3] [--systems quasar,bullmq,...]
                              [--out benchmarks/results] [--write-docs]

Each system runs in its own virtualenv under ``benchmarks/.venvs/`` (made here with pip from
PyPI; quasar_redis is installed from this checkout with ``pip install -e ".[bench]"``). A
``redis-server`` is started on a free loopback port (``--save "" --appendonly no``) and stopped
by its pid at the end; nothing else is touched. Every run measures the ceiling (plain scripted
writes) and then each system once, systems taking turns; the figures are the median of the runs
with their min-max. Results go to ``OUT/latest.json`` and, as markdown tables, to stdout;
``--write-docs`` also rewrites the README's results block and ``docs/performance.md`` with its
chart. This script needs only the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402 - after the path is set
from benchmarks.sizes import FULL, QUICK, Sizes  # noqa: E402

SYSTEMS = ("quasar", "bullmq", "rq", "arq", "saq", "dramatiq", "huey")
VENVS = ROOT / "benchmarks" / ".venvs"
#: what each system's virtualenv gets from PyPI (hiredis everywhere, as quasar_redis has it)
REQUIREMENTS: dict[str, list[str]] = {
    "quasar": ["-e", f"{ROOT}[bench]"],
    "bullmq": ["bullmq", "hiredis"],
    "rq": ["rq", "hiredis"],
    "arq": ["arq"],  # depends on redis[hiredis] itself
    # saq 0.26 imports typing_extensions without declaring it
    "saq": ["saq[redis,hiredis]", "typing_extensions"],
    "dramatiq": ["dramatiq[redis]", "hiredis"],
    "huey": ["huey", "redis[hiredis]"],
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- virtualenvs -------------------------------------------------------------------------------


def ensure_venv(system: str) -> Path:
    """The python of the system's virtualenv, made (or remade) when its requirements changed."""
    venv = VENVS / system
    python = venv / "bin" / "python"
    marker = venv / ".bench-requirements"
    wanted = json.dumps(REQUIREMENTS[system])
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    log(f"making {venv} ({' '.join(REQUIREMENTS[system])})")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS[system]],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"pip install {' '.join(REQUIREMENTS[system])} failed:\n{tail}")
    marker.write_text(wanted)
    return python


def pythons_for(systems: Sequence[str], current: bool) -> tuple[dict[str, Path], dict[str, str]]:
    """The interpreter of each system, and why a system has none."""
    pythons: dict[str, Path] = {}
    failed: dict[str, str] = {}
    for system in systems:
        if current:
            pythons[system] = Path(sys.executable)
            continue
        try:
            pythons[system] = ensure_venv(system)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            failed[system] = str(exc)
            log(f"{system}: cannot be installed: {exc}")
    return pythons, failed


# --- the Redis server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def run_id(port: int) -> str:
    """The server's run_id (INFO server): the harness flushes only a server with this id."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"INFO server\r\n")
        data = b""
        while b"\r\n" not in data or len(data) < int(data[1 : data.index(b"\r\n")]) + 4:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("run_id:"):
            return line.split(":", 1)[1].strip()
    raise SystemExit(f"cannot read the run_id of the server on port {port}")


def die_with_parent() -> None:
    """In the child: be killed when this runner dies (Linux), so no server outlives a run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class RedisServer:
    """A throwaway redis-server on a free loopback port, stopped by its pid."""

    def __init__(self, log_dir: Path) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise SystemExit("redis-server is not on PATH")
        self.port = free_port()
        self.args = ["--port", str(self.port), "--bind", "127.0.0.1"]
        self.args += ["--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"]
        self.log = (log_dir / "redis-server.log").open("ab")
        self.proc = subprocess.Popen(
            [exe, *self.args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=log_dir,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - the runner starts no thread
        )
        deadline = time.monotonic() + 10
        while not answers(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"redis-server did not start (see {log_dir}/redis-server.log)")
            time.sleep(0.05)
        self.run_id = run_id(self.port)
        self.version = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --- runs ----------------------------------------------------------------------------------------


@dataclass
class Collected:
    """Every run's figures of one system (or of the ceiling), and what went wrong."""

    runs: list[dict[str, float | None]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def python_path() -> str:
    """The checkout on the path of every harness process (after any PYTHONPATH of the caller)."""
    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)


def harness(
    python: Path,
    system: str,
    command: str,
    server: RedisServer,
    sizes: Sizes,
    log_dir: Path,
    claim_cost: bool = False,
) -> dict[str, Any]:
    out = log_dir / f"{system}-{command}.json"
    argv = [str(python), "-m", "benchmarks.harness", system, command, "--redis-url", server.url]
    argv += ["--run-id", server.run_id, "--sizes", sizes.to_json()]
    argv += ["--out", str(out), "--log-dir", str(log_dir)]
    if claim_cost:
        argv.append("--claim-cost")
    env = dict(os.environ, PYTHONPATH=python_path())
    with (log_dir / f"{system}-{command}.log").open("ab") as err:
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env=env,
            stdout=err,
            stderr=err,
            stdin=subprocess.DEVNULL,
            timeout=1800,
            check=False,
            preexec_fn=die_with_parent,
        )
    if done.returncode != 0:
        text = (log_dir / f"{system}-{command}.log").read_text(errors="replace")
        tail = "\n".join(text.strip().splitlines()[-8:])
        raise RuntimeError(f"exit code {done.returncode}: {tail}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def run_one(
    collected: Collected,
    python: Path,
    system: str,
    command: str,
    server: RedisServer,
    sizes: Sizes,
    log_dir: Path,
    claim_cost: bool = False,
) -> None:
    start = time.monotonic()
    try:
        result = harness(python, system, command, server, sizes, log_dir, claim_cost)
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
        collected.errors.append(str(exc))
        log(f"  {system}: FAILED ({exc})")
        return
    collected.runs.append(result["figures"])
    collected.details.update(result["details"])
    log(f"  {system}: {time.monotonic() - start:.1f} s")


def summarize(collected: Collected) -> dict[str, Any]:
    """Median, min and max of each figure over the runs that produced it."""
    names: list[str] = []
    for run in collected.runs:
        names += [k for k in run if k not in names]
    figures: dict[str, Any] = {}
    for name in names:
        values = [r[name] for r in collected.runs if r.get(name) is not None]
        figures[name] = (
            {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
                "runs": values,
            }
            if values
            else None
        )
    return {"figures": figures, "details": collected.details, "errors": collected.errors}


# --- the machine ---------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def memory_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                kib = int(line.split()[1])
                return f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def git_commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    commit = done.stdout.strip() or "unknown"
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "quasar_redis", "lua"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{commit} (with uncommitted changes in quasar_redis/ or lua/)" if dirty else commit


def redis_version(text: str) -> str:
    """``Redis 7.0.15`` from ``redis-server --version``."""
    match = re.search(r"v=(\S+)", text)
    return f"Redis {match.group(1)}" if match else text


def machine(server: RedisServer, load_before: float) -> dict[str, Any]:
    return {
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "memory": memory_total(),
        "kernel": os.uname().release,
        "redis_server": redis_version(server.version),
        "redis_args": " ".join(shlex.quote(a) if a else '""' for a in server.args[2:]),
        "commit": git_commit(),
    }


# --- main ----------------------------------------------------------------------------------------


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python3 benchmarks/run.py", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--quick", action="store_true", help="a few hundred jobs, 1 run (about a minute)"
    )
    p.add_argument("--runs", type=int, help="runs per figure (default 3; 1 with --quick)")
    p.add_argument(
        "--systems",
        help=f"comma-separated, of {','.join(SYSTEMS)} (default: all; quasar alone with --quick)",
    )
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument(
        "--write-docs",
        action="store_true",
        help="rewrite README.md's results block and docs/performance.md (+ chart)",
    )
    p.add_argument(
        "--current-python",
        action="store_true",
        help="run every system with this interpreter instead of its own virtualenv",
    )
    return p.parse_args(argv)


def chosen_systems(args: argparse.Namespace) -> list[str]:
    if args.systems:
        names = [s.strip() for s in args.systems.split(",") if s.strip()]
        unknown = [s for s in names if s not in SYSTEMS]
        if unknown:
            raise SystemExit(f"unknown systems: {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
        return [s for s in SYSTEMS if s in names]
    return ["quasar"] if args.quick else list(SYSTEMS)


def measure_all(
    args: argparse.Namespace,
    systems: list[str],
    pythons: dict[str, Path],
    server: RedisServer,
    log_dir: Path,
) -> tuple[Collected, dict[str, Collected]]:
    sizes = QUICK if args.quick else FULL
    runs = args.runs or (1 if args.quick else 3)
    ceiling = Collected()
    collected = {s: Collected() for s in systems}
    for run in range(runs):
        log(f"run {run + 1} of {runs}")
        run_one(ceiling, pythons["quasar"], "ceiling", "ceiling", server, sizes, log_dir)
        for system in systems:
            if system in pythons:
                claim_cost = system == "quasar" and run == 0
                run_one(
                    collected[system],
                    pythons[system],
                    system,
                    "measure",
                    server,
                    sizes,
                    log_dir,
                    claim_cost,
                )
    return ceiling, collected


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    systems = chosen_systems(args)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    out_dir = Path(args.out).resolve()
    log_dir = out_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    pythons, failed = pythons_for(sorted({*systems, "quasar"}), args.current_python)
    if "quasar" not in pythons:
        raise SystemExit("quasar_redis cannot be installed; the ceiling needs its virtualenv")
    server = RedisServer(log_dir)
    try:
        ceiling, collected = measure_all(args, systems, pythons, server, log_dir)
        info = machine(server, load_before)
    finally:
        server.stop()
    for system, reason in failed.items():
        if system in collected:
            collected[system].errors.append(f"not installed: {reason}")
    results = {
        "command": "python3 benchmarks/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "sizes": asdict(QUICK if args.quick else FULL),
        "quick": args.quick,
        "runs": args.runs or (1 if args.quick else 3),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "seconds": time.monotonic() - started,
        "machine": info,
        "ceiling": summarize(ceiling),
        "systems": {s: summarize(collected[s]) for s in systems},
        "not_installed": failed,
    }
    results_file = out_dir / "latest.json"
    results_file.write_text(json.dumps(results, indent=2))
    print(report.markdown(results))
    if args.write_docs:
        report.write_docs(results, pythons["quasar"], results_file)
    log(f"done in {results['seconds']:.0f} s; results in {out_dir / 'latest.json'}")
    quasar_failed = "quasar" in systems and not collected["quasar"].runs
    return 1 if quasar_failed or not ceiling.runs else 0


if __name__ == "__main__":
    sys.exit(main())
