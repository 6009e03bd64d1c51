"""Markdown tables of a benchmark's results, and the docs they go into (standard library only)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.method import METHOD

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOC = ROOT / "docs" / "performance.md"
CHART = ROOT / "docs" / "performance.png"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"

#: (key, column title, unit) of the throughput figures: higher is better
THROUGHPUT = [
    ("enqueue_sync_per_s", "enqueue, one at a time", "jobs/s"),
    ("enqueue_async_one_per_s", "enqueue, asyncio, one awaited at a time", "jobs/s"),
    ("enqueue_async_per_s", "enqueue, asyncio, {c} concurrent", "jobs/s"),
    ("enqueue_bulk_per_s", "bulk enqueue", "jobs/s"),
    ("process_default_per_s", "process, default concurrency", "jobs/s"),
    ("process_tuned_per_s", "process, tuned concurrency", "jobs/s"),
]
#: the cost figures: lower is better
COSTS = [
    ("latency_p50_ms", "enqueue→start p50", "ms"),
    ("latency_p99_ms", "enqueue→start p99", "ms"),
    ("memory_bytes_per_job", "Redis memory per waiting job", "bytes"),
    ("redis_cpu_us_per_enqueue", "Redis CPU per enqueue", "µs"),
    ("redis_cpu_us_per_job_default", "Redis CPU per processed job, default", "µs"),
    ("redis_cpu_us_per_job_tuned", "Redis CPU per processed job, tuned", "µs"),
]
CEILINGS = [
    ("ceiling_evalsha_per_s", "redis-py EVALSHA, one call at a time", "calls/s"),
    ("ceiling_async_evalsha_per_s", "redis.asyncio EVALSHA, one call awaited at a time", "calls/s"),
    ("ceiling_pipelined_per_s", "redis-py EVALSHA, pipelined 100 deep", "calls/s"),
    ("ceiling_redis_benchmark_per_s", "redis-benchmark EVALSHA, {k} clients", "calls/s"),
    ("ceiling_rtt_us", "one EVALSHA round trip (redis-py)", "µs"),
    ("ceiling_server_us_per_call", "inside Redis per call (commandstats)", "µs"),
    ("ceiling_memory_bytes_per_job", "Redis memory per HSET+ZADD entry", "bytes"),
    ("ceiling_redis_cpu_us_per_call", "Redis CPU per call", "µs"),
]
#: each quasar figure, the ceiling it is compared with, and a factor to the figure's unit
AGAINST_CEILING = [
    ("enqueue_sync_per_s", "ceiling_evalsha_per_s", 1.0),
    ("enqueue_async_one_per_s", "ceiling_async_evalsha_per_s", 1.0),
    ("enqueue_async_per_s", "ceiling_redis_benchmark_per_s", 1.0),
    ("enqueue_bulk_per_s", "ceiling_pipelined_per_s", 1.0),
    ("process_default_per_s", "ceiling_redis_benchmark_per_s", 1.0),
    ("process_tuned_per_s", "ceiling_redis_benchmark_per_s", 1.0),
    ("latency_p50_ms", "ceiling_rtt_us", 0.001),
    ("latency_p99_ms", "ceiling_rtt_us", 0.001),
    ("memory_bytes_per_job", "ceiling_memory_bytes_per_job", 1.0),
    ("redis_cpu_us_per_enqueue", "ceiling_redis_cpu_us_per_call", 1.0),
    ("redis_cpu_us_per_job_default", "ceiling_redis_cpu_us_per_call", 1.0),
    ("redis_cpu_us_per_job_tuned", "ceiling_redis_cpu_us_per_call", 1.0),
    ("claim_small_us", "ceiling_rtt_us", 1.0),
    ("claim_large_us", "ceiling_rtt_us", 1.0),
    ("claim_small_server_us", "ceiling_server_us_per_call", 1.0),
    ("claim_large_server_us", "ceiling_server_us_per_call", 1.0),
]
CLAIM = [
    ("claim_{}_us", "µs per `claim` call, at the client"),
    ("claim_{}_server_us", "µs per `claim` call, inside Redis (commandstats)"),
    ("claim_{}_fill_s", "seconds to fill the queue (enqueue_many, 1,000 a call)"),
    ("claim_{}_memory_bytes_per_job", "Redis memory per waiting job (bulk-enqueued), bytes"),
]


# --- formatting ----------------------------------------------------------------------------------


def num(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def median(stat: dict[str, Any] | None) -> float | None:
    return None if stat is None else float(stat["median"])


def cell(stat: dict[str, Any] | None, spread: bool = True) -> str:
    if stat is None:
        return "n/a"
    text = num(stat["median"])
    if spread and len(stat["runs"]) > 1:
        text += f" ({num(stat['min'])}–{num(stat['max'])})"
    return text


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def title(results: dict[str, Any], text: str) -> str:
    sizes = results.get("sizes", {})
    return text.format(c=sizes.get("async_concurrency", "?"), k=sizes.get("ceiling_clients", "?"))


def measured(results: dict[str, Any]) -> list[str]:
    return [s for s, r in results["systems"].items() if any(v for v in r["figures"].values())]


# --- the tables ----------------------------------------------------------------------------------


def figure_table(
    results: dict[str, Any], figures: Sequence[tuple[str, str, str]], spread: bool = True
) -> str:
    head = ["system", *(f"{title(results, t)} ({u})" for _, t, u in figures)]
    rows = []
    for system in measured(results):
        f = results["systems"][system]["figures"]
        name = f"**{system}**" if system == "quasar" else system
        rows.append([name, *(cell(f.get(key), spread) for key, _, _ in figures)])
    return table(head, rows)


def favour(quasar: float | None, peer: float | None, higher_better: bool) -> str:
    if not quasar or not peer:
        return "n/a"
    return f"{quasar / peer if higher_better else peer / quasar:.2f}×"


def peer_ratios(results: dict[str, Any]) -> str:
    systems = results["systems"]
    if "quasar" not in systems:
        return "_quasar was not measured._"
    q = systems["quasar"]["figures"]
    figures = [(k, t, True) for k, t, _ in THROUGHPUT] + [(k, t, False) for k, t, _ in COSTS]
    head = ["peer", *(title(results, t) for _, t, _ in figures)]
    rows = []
    for peer in measured(results):
        if peer == "quasar":
            continue
        p = systems[peer]["figures"]
        rows.append(
            [peer, *(favour(median(q.get(k)), median(p.get(k)), hi) for k, _, hi in figures)]
        )
    return table(head, rows) if rows else "_no peer was measured._"


def ceiling_table(results: dict[str, Any]) -> str:
    c = results["ceiling"]["figures"]
    rows = [[title(results, t), u, cell(c.get(k))] for k, t, u in CEILINGS]
    return table(["ceiling", "unit", "median (min–max)"], rows)


def against_ceiling(results: dict[str, Any]) -> str:
    if "quasar" not in results["systems"]:
        return "_quasar was not measured._"
    q = results["systems"]["quasar"]["figures"]
    c = results["ceiling"]["figures"]
    labels = {k: (t, u) for k, t, u in (*THROUGHPUT, *COSTS)}
    labels.update({k: (t, u) for k, t, u in CEILINGS})
    for size in ("small", "large"):
        labels[f"claim_{size}_us"] = (f"claim, {size} queue, client", "µs")
        labels[f"claim_{size}_server_us"] = (f"claim, {size} queue, in Redis", "µs")
    rows = []
    for key, ceiling_key, factor in AGAINST_CEILING:
        value, limit = median(q.get(key)), median(c.get(ceiling_key))
        if value is None or limit is None:
            continue
        name, unit = labels[key]
        ratio = value / (limit * factor)
        limit_unit = "calls/s" if unit == "jobs/s" else unit
        rows.append(
            [
                title(results, name),
                f"{num(value)} {unit}",
                title(results, labels[ceiling_key][0]),
                f"{num(limit * factor)} {limit_unit}",
                f"{ratio:.2f}",
            ]
        )
    return table(["quasar figure", "quasar", "ceiling", "ceiling value", "quasar ÷ ceiling"], rows)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def one_at_a_time(results: dict[str, Any]) -> str:
    """The one-at-a-time path's targets, each with this run's figures and whether it is met."""
    systems = results["systems"]
    q = systems.get("quasar", {}).get("figures", {})
    c = results["ceiling"]["figures"]

    def fig(system: str, key: str) -> float | None:
        return median(systems.get(system, {}).get("figures", {}).get(key))

    rows: list[list[str]] = []

    def row(target: str, value: str, ok: bool | None) -> None:
        rows.append([target, value, "n/a" if ok is None else ("met" if ok else "not met")])

    def x(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}×"

    sync = median(q.get("enqueue_sync_per_s"))
    for peer in ("bullmq", "dramatiq", "saq", "arq", "rq", "huey"):
        r = _ratio(sync, fig(peer, "enqueue_sync_per_s"))
        goal = "≥ 1× (a goal for every peer but huey)" if peer != "huey" else "(huey: no goal)"
        row(
            f"sync one at a time ÷ {peer}, {goal}",
            x(r),
            None if r is None or peer == "huey" else r >= 1,
        )
    r = median(q.get("paired_sync_ratio"))
    row(
        "sync one at a time ÷ one redis-py EVALSHA at a time, the two taking turns, ≥ 0.75×",
        x(r),
        None if r is None else r >= 0.75,
    )
    r = _ratio(sync, median(c.get("ceiling_evalsha_per_s")))
    row("sync one at a time ÷ the ceiling's own phase, (no goal: measured apart)", x(r), None)
    aone = median(q.get("enqueue_async_one_per_s"))
    r = _ratio(aone, fig("bullmq", "enqueue_async_one_per_s"))
    row("asyncio one awaited at a time ÷ bullmq, ≥ 1×", x(r), None if r is None else r >= 1)
    r = median(q.get("paired_async_ratio"))
    row(
        "asyncio one awaited at a time ÷ one redis.asyncio EVALSHA at a time, the two taking "
        "turns, ≥ 0.75×",
        x(r),
        None if r is None else r >= 0.75,
    )
    r = _ratio(aone, median(c.get("ceiling_async_evalsha_per_s")))
    row(
        "asyncio one awaited at a time ÷ the ceiling's own phase, (no goal: measured apart)",
        x(r),
        None,
    )
    cpu = median(q.get("redis_cpu_us_per_enqueue"))
    r = _ratio(cpu, median(q.get("bare_write_redis_cpu_us_per_call")))
    row(
        "Redis CPU per enqueue ÷ the bare single write (floors.py's: the job's hash and `ready` "
        "entry, nothing else, one call), ≤ 2×",
        x(r),
        None if r is None else r <= 2,
    )
    r = _ratio(cpu, median(c.get("ceiling_redis_cpu_us_per_call")))
    row("Redis CPU per enqueue ÷ the ceiling's script, (no goal)", x(r), None)
    r = _ratio(median(q.get("latency_p99_ms")), fig("huey", "latency_p99_ms"))
    row("enqueue→start p99 ÷ huey's, ≤ 1×", x(r), None if r is None else r <= 1)
    mem = median(q.get("memory_bytes_per_job"))
    row(
        "Redis memory per waiting job, ≤ 400 bytes",
        "n/a" if mem is None else f"{mem:,.0f} bytes",
        None if mem is None else mem <= 400,
    )
    bare = median(q.get("bare_write_memory_bytes_per_job"))
    row(
        "Redis memory per job of the bare single write, (no goal: its floor)",
        "n/a" if bare is None else f"{bare:,.0f} bytes",
        None,
    )
    return table(["target", "this run", ""], rows)


def claim_table(results: dict[str, Any]) -> str:
    q = results["systems"].get("quasar", {}).get("figures", {})
    details = results["systems"].get("quasar", {}).get("details", {})
    if q.get("claim_small_us") is None:
        return "_not measured in this run._"
    small = details.get("claim_small_waiting", 0)
    large = details.get("claim_large_waiting", 0)
    rows = []
    for pattern, text in CLAIM:
        a, b = median(q.get(pattern.format("small"))), median(q.get(pattern.format("large")))
        if a is None or b is None:
            continue
        rows.append([text, num(a), num(b), f"{b / a:.2f}"])
    head = ["", f"{small:,} waiting", f"{large:,} waiting", "ratio"]
    return table(head, rows)


def settings_table(results: dict[str, Any]) -> str:
    rows = []
    for system, r in results["systems"].items():
        d = r["details"]
        if not d:
            continue
        v = d.get("variants", {})
        rows.append(
            [
                system,
                d.get("version", "?"),
                v.get("default", "?"),
                v.get("tuned", "?"),
                f"redis-py {d.get('redis_py', '?')}, hiredis {d.get('hiredis') or 'no'}",
            ]
        )
    return table(["system", "version", "default worker", "tuned worker", "client"], rows)


def notes(results: dict[str, Any]) -> str:
    lines = []
    for system, r in results["systems"].items():
        d = r["details"]
        items = list(d.get("notes", []))
        if d.get("sequential_note"):
            items.insert(0, f"one at a time: {d['sequential_note']}")
        if items:
            lines.append(f"- **{system}**: " + "; ".join(items) + ".")
    return "\n".join(lines)


def failures(results: dict[str, Any]) -> str:
    lines = []
    for system, r in results["systems"].items():
        for error in r["errors"]:
            first = error.strip().splitlines()
            lines.append(f"- **{system}**: {' '.join(first[-3:])[:600]}")
    for error in results["ceiling"]["errors"]:
        lines.append(f"- **ceiling**: {error.strip()[:600]}")
    return "\n".join(lines)


def machine_line(results: dict[str, Any]) -> str:
    m = results["machine"]
    quasar = results["systems"].get("quasar", {}).get("details", {})
    python = quasar.get("python") or results["ceiling"]["details"].get("python", "?")
    load = ""
    if "load_before" in m:
        load = (
            f"; 1-minute load average {m['load_before']:.2f} at the start and "
            f"{m['load_after']:.2f} at the end (from every process on the machine)"
        )
    return (
        f"{m['nproc']} cores ({m['cpu']}), {m['memory']} memory, Linux {m['kernel']}; "
        f"{m['redis_server']}, started as `redis-server {m['redis_args']}`; Python {python}"
        f"{load}"
    )


def markdown(results: dict[str, Any]) -> str:
    runs = results["runs"]
    parts = [
        f"## Throughput (jobs/s, higher is better; median of {runs} run(s), min–max)",
        figure_table(results, THROUGHPUT),
        "## Latency and cost (lower is better)",
        figure_table(results, COSTS),
        "## quasar against each peer (above 1: quasar better, below 1: the peer better)",
        peer_ratios(results),
        "## The ceiling: a minimal HSET+ZADD script on the same server",
        ceiling_table(results),
        "## quasar against the ceiling",
        against_ceiling(results),
        "## Claim cost against the number of waiting jobs (quasar)",
        claim_table(results),
    ]
    trouble = failures(results)
    if trouble:
        parts += ["## Failures", trouble]
    return "\n\n".join(parts) + "\n"


# --- the docs ------------------------------------------------------------------------------------


def readme_block(results: dict[str, Any]) -> str:
    figures = [
        THROUGHPUT[0],
        THROUGHPUT[1],
        THROUGHPUT[3],
        THROUGHPUT[4],
        THROUGHPUT[5],
        COSTS[0],
        COSTS[2],
        COSTS[4],
    ]
    against = ""
    q = results["systems"].get("quasar", {}).get("figures", {})
    c = results["ceiling"]["figures"]
    one, limit = median(q.get("enqueue_sync_per_s")), median(c.get("ceiling_evalsha_per_s"))
    bulk, piped = median(q.get("enqueue_bulk_per_s")), median(c.get("ceiling_pipelined_per_s"))
    small, large = median(q.get("claim_small_server_us")), median(q.get("claim_large_server_us"))
    if one and limit and bulk and piped:
        against = (
            f"Against the ceiling (a minimal HSET+ZADD script on the same server): one enqueue at "
            f"a time runs at {one / limit:.2f}× redis-py's one-EVALSHA-at-a-time rate, "
            f"bulk enqueue at {bulk / piped:.2f}× its 100-deep pipelined rate."
        )
    if small and large:
        against += (
            f" A claim costs {num(small)} µs inside Redis with "
            f"{results['systems']['quasar']['details'].get('claim_small_waiting', 0):,} jobs "
            f"waiting and {num(large)} µs with "
            f"{results['systems']['quasar']['details'].get('claim_large_waiting', 0):,}."
        )
    intro = (
        f"Measured with `{results['command']}` on {results['date']}: {machine_line(results)}. "
        f"Medians of {results['runs']} run(s); the min–max of each figure, every ratio, the "
        "method and a chart are in [docs/performance.md](docs/performance.md). Absolute numbers "
        "vary by machine; the ratios between systems vary less. The command makes a virtualenv "
        "per system under `benchmarks/.venvs/` (from PyPI) and starts its own `redis-server`; "
        "`--quick` measures quasar alone in a few seconds."
    )
    return "\n\n".join(
        [
            START,
            wrap(intro),
            figure_table(results, figures, spread=False),
            wrap(against.strip()),
            END,
        ]
    )


def wrap(text: str) -> str:
    return textwrap.fill(text, width=100, break_long_words=False, break_on_hyphens=False)


def write_readme(results: dict[str, Any]) -> None:
    """Replace the text between the bench markers of README.md (and nothing else)."""
    text = README.read_text()
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {START} ... {END} block to rewrite")
    README.write_text(pattern.sub(lambda _: readme_block(results), text, count=1))


def write_chart(results_file: Path, python: Path) -> None:
    subprocess.run(
        [str(python), "-m", "benchmarks.chart", str(results_file), str(CHART)],
        cwd=ROOT,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg"),
    )


def write_docs(results: dict[str, Any], python: Path, results_file: Path) -> None:
    write_chart(results_file, python)
    DOC.write_text(performance_md(results))
    write_readme(results)


def nearest_rank(n: int, q: float) -> int:
    """The place (1 for the smallest) of the nearest-rank ``q`` percentile among ``n`` values:
    the latency figures' percentiles (harness.py, latency.py)."""
    return max(1, math.ceil(q * n))


def slowest_rank(n: int, q: float) -> str:
    """Where the nearest-rank ``q`` percentile of ``n`` values stands from the slowest: "11th"."""
    rank = n - nearest_rank(n, q) + 1
    suffixes = {1: "st", 2: "nd", 3: "rd"}
    suffix = "th" if rank % 100 in (11, 12, 13) else suffixes.get(rank % 10, "th")
    return f"{rank}{suffix}"


def performance_md(results: dict[str, Any]) -> str:
    m = results["machine"]
    s = results.get("sizes", {})
    trouble = failures(results)
    return METHOD.format(
        script=results["ceiling"]["details"].get("script", "?"),
        interval_ms=s.get("latency_interval", 0) * 1000,
        p99_rank=slowest_rank(int(s.get("latency", 0)), 0.99),
        nproc=m["nproc"],
        command=results["command"],
        date=results["date"],
        commit=m["commit"],
        runs=results["runs"],
        minutes=results["seconds"] / 60,
        machine=machine_line(results),
        settings=settings_table(results),
        throughput=figure_table(results, THROUGHPUT),
        costs=figure_table(results, COSTS),
        peers=peer_ratios(results),
        ceiling=ceiling_table(results),
        against=against_ceiling(results),
        claim=claim_table(results),
        one_at_a_time=one_at_a_time(results),
        notes=notes(results),
        failures=trouble or "None: every system installed and ran.",
        **{f"s_{k}": (f"{v:,}" if isinstance(v, int) else v) for k, v in s.items()},
    )
