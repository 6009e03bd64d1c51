"""The chart of docs/performance.md: throughput per system (matplotlib, the ``bench`` extra).

python -m benchmarks.chart RESULTS.json OUT.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks.report import THROUGHPUT, measured, title

COLORS = {
    "quasar": "#d62728",
    "bullmq": "#1f77b4",
    "rq": "#ff7f0e",
    "arq": "#2ca02c",
    "saq": "#9467bd",
    "dramatiq": "#8c564b",
    "huey": "#17becf",
}


def draw(results: dict[str, Any], out: Path) -> None:
    systems = measured(results)
    figures = [(k, title(results, t)) for k, t, _ in THROUGHPUT]
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    width = 0.8 / max(len(systems), 1)
    for i, system in enumerate(systems):
        stats = [results["systems"][system]["figures"].get(k) for k, _ in figures]
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(figures))]
        values = [s["median"] if s else 0.0 for s in stats]
        low = [s["median"] - s["min"] if s else 0.0 for s in stats]
        high = [s["max"] - s["median"] if s else 0.0 for s in stats]
        ax.bar(
            xs,
            values,
            width,
            label=system,
            color=COLORS.get(system, "#7f7f7f"),
            yerr=[low, high],
            capsize=2,
            error_kw={"elinewidth": 0.8},
        )
        for x, s in zip(xs, stats, strict=True):
            if s is None:
                ax.text(x, 12, "n/a", rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(bottom=10)
    ax.set_ylabel("jobs per second (log scale)")
    ax.set_xticks(range(len(figures)))
    ax.set_xticklabels([t.replace(", ", ",\n", 1) for _, t in figures], fontsize=9)
    m = results["machine"]
    ax.set_title(
        f"Throughput per system: median of {results['runs']} run(s), min–max\n"
        f"{m['nproc']} cores ({m['cpu']}), {m['redis_server'].split(' sha=')[0]}",
        fontsize=10,
    )
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(ncol=len(systems), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    results = json.loads(Path(sys.argv[1]).read_text())
    draw(results, Path(sys.argv[2]))


if __name__ == "__main__":
    main()
