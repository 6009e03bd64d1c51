"""The benchmark in its quick form, so that it cannot rot: quasar alone, a few hundred jobs.

``benchmarks/run.py`` starts its own redis-server on a free loopback port (and flushes only that
one). The test asserts only that every figure came out as a positive number: no timing is checked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRE = os.environ.get("QUASAR_REQUIRE_REDIS") == "1"

QUASAR_FIGURES = (
    "enqueue_sync_per_s",
    "enqueue_async_one_per_s",
    "enqueue_async_per_s",
    "enqueue_bulk_per_s",
    "process_default_per_s",
    "process_tuned_per_s",
    "latency_p50_ms",
    "latency_p99_ms",
    "memory_bytes_per_job",
    "redis_cpu_us_per_enqueue",
    "bare_write_redis_cpu_us_per_call",
    "bare_write_memory_bytes_per_job",
    "paired_sync_enqueue_per_s",
    "paired_sync_ceiling_per_s",
    "paired_sync_ratio",
    "paired_async_enqueue_per_s",
    "paired_async_ceiling_per_s",
    "paired_async_ratio",
    "redis_cpu_us_per_job_default",
    "redis_cpu_us_per_job_tuned",
    "claim_small_us",
    "claim_small_server_us",
    "claim_small_fill_s",
    "claim_small_memory_bytes_per_job",
    "claim_large_us",
    "claim_large_server_us",
    "claim_large_fill_s",
    "claim_large_memory_bytes_per_job",
)
CEILING_FIGURES = (
    "ceiling_evalsha_per_s",
    "ceiling_async_evalsha_per_s",
    "ceiling_rtt_us",
    "ceiling_memory_bytes_per_job",
    "ceiling_redis_cpu_us_per_call",
    "ceiling_server_us_per_call",
    "ceiling_pipelined_per_s",
    "ceiling_redis_benchmark_per_s",
)


def positive(figures: dict[str, Any], name: str) -> bool:
    stat = figures.get(name)
    return isinstance(stat, dict) and isinstance(stat["median"], float | int) and stat["median"] > 0


def test_quick_benchmark_produces_every_figure(tmp_path: Path) -> None:
    missing = [exe for exe in ("redis-server", "redis-benchmark") if shutil.which(exe) is None]
    if missing:
        if REQUIRE:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but {', '.join(missing)} not on PATH")
        pytest.skip(f"{', '.join(missing)} not on PATH")
    argv = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--systems", "quasar"]
    argv += ["--current-python", "--out", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]

    results = json.loads((tmp_path / "latest.json").read_text())
    quasar = results["systems"]["quasar"]
    assert quasar["errors"] == []
    assert results["ceiling"]["errors"] == []
    absent = [n for n in QUASAR_FIGURES if not positive(quasar["figures"], n)]
    absent += [n for n in CEILING_FIGURES if not positive(results["ceiling"]["figures"], n)]
    assert absent == [], f"figures missing or not positive: {absent}"
    assert "| **quasar** |" in done.stdout  # the markdown tables were printed


def run_script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/<name>.py`` with ``args`` (it starts a server of its own), run to its end."""
    if shutil.which("redis-server") is None:
        if REQUIRE:
            pytest.fail("QUASAR_REQUIRE_REDIS=1 but redis-server not on PATH")
        pytest.skip("redis-server not on PATH")
    argv = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_latency_cuts_every_job_into_its_parts() -> None:
    # benchmarks/latency.py: its own server and worker process; each job's latency is cut into
    # the parts measured (enqueue, claim, start), whatever the machine's speed.
    done = run_script("latency", "--jobs", "60", "--runs", "1")
    assert "60 of 60 jobs timed" in done.stdout, done.stdout
    lines = done.stdout.splitlines()
    parts = [line.split("|")[1].strip() for line in lines if line.startswith("| ")]
    assert parts == ["part", "whole", "enqueue", "claim", "start"], done.stdout
    assert "the slowest 1% (1 jobs)" in done.stdout, done.stdout


def test_pickup_times_every_way_from_the_floor_to_the_worker() -> None:
    # benchmarks/pickup.py: its own server and a consumer process per way; every job of every
    # way started, and each way has its row of p50 and p99.
    done = run_script("pickup", "--jobs", "40", "--rounds", "1")
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in done.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| way")
    }
    assert list(rows) == ["floor", "enqueue", "claim", "asyncio", "protocol", "worker"], done
    for way, (p50, p99) in rows.items():
        assert 0 < float(p50) <= float(p99), (way, p50, p99)


FLOOR_ROWS = (
    "single: quasar enqueue",
    "single: bare HSET + ZADD script",
    "single: bare contract script",
    "single: the ceiling's script",
    "single, asyncio: quasar enqueue",
    "single, asyncio: bare contract script",
    "single, asyncio: the ceiling's script",
    "bulk: quasar enqueue_many",
    "bulk: bare script",
    "processing: quasar claim + report",
    "processing: bare claim + complete",
    "memory: quasar enqueue_many",
    "memory: bare hash + ready entry",
    "memory: bare, no st/sq/q (listpack <= 160 B)",
)


def test_floors_produce_every_row() -> None:
    # benchmarks/floors.py: quasar's calls beside bare scripts over the same layout (own server).
    done = run_script("floors", "--jobs", "1200", "--runs", "1")
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
        for line in done.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| what")
    }
    assert sorted(rows) == sorted(FLOOR_ROWS), done.stdout
    for name, (rate, inside, cpu) in rows.items():
        assert float(rate.split()[0].replace(",", "")) > 0, (name, rate)
        if not name.startswith("memory"):
            assert float(inside.split()[0].replace(",", "")) > 0, (name, inside)
            assert float(cpu.split()[0].replace(",", "")) > 0, (name, cpu)


@pytest.mark.heavy
@pytest.mark.cluster
def test_partitions_benchmark_produces_every_figure() -> None:
    # benchmarks/partitions.py: its own cluster (3 primaries, no replicas here) and server.
    if shutil.which("redis-server") is None:
        if REQUIRE:
            pytest.fail("QUASAR_REQUIRE_REDIS=1 but redis-server not on PATH")
        pytest.skip("redis-server not on PATH")
    argv = [sys.executable, "-m", "benchmarks.partitions", "--jobs", "600", "--rounds", "1"]
    argv += ["--replicas", "0"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    layouts = ["P=1", "P=3", "P=3 on one primary", "standalone P=1", "standalone P=3"]
    assert sorted(out["layouts"]) == layouts
    for name, layout in out["layouts"].items():
        for phase in ("enqueue", "process"):
            figures = layout[phase]
            for key in ("us_per_job", "process_cpu_us_per_job", "calls_per_job", "jobs_per_s"):
                assert figures[key] > 0, (name, phase, key, figures)
            assert abs(sum(figures["shares"]) - 1) < 1e-3, (name, phase, figures)
        assert layout["process"]["connections_per_worker_per_primary"] >= 0, (name, layout)
    # (the three partitions are on the three primaries: each did some of the work)
    assert all(share > 0 for share in out["layouts"]["P=3"]["process"]["shares"]), out
    assert set(out["cpu_per_job_P3_over_P1"]) == {"P=3", "P=3 on one primary", "standalone P=3"}
    # (the three on one primary: it did most of the work; the namespace root's own calls, the
    # workers' registry and sweeps, go to its slot's primary once a second or so, not once a
    # job, so their share grows with the run's length on a slow or busy machine: 0.88 seen)
    assert out["layouts"]["P=3 on one primary"]["process"]["shares"][0] > 0.75, out
