"""The dashboard's charts, drawn by the server as SVG: the last minutes of a namespace's (or a
queue's) throughput, failures and latency, read from the rolling counts the workers keep, with
axes, ticks and units people read (``1.2k/s``, ``850 ms``, ``2.5 min``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import _rolling as rolling
from ..aio import AsyncQuasar


@dataclass(frozen=True, slots=True)
class Tick:
    """A tick of a chart's axis: where it is (in the SVG's units) and its label."""

    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    """A line chart with axes: its polyline points in a ``CHART_W`` x ``CHART_H`` box (the
    plot inside ``PLOT``), its ticks, the largest value and the newest one, as text."""

    title: str
    points: str
    lone: tuple[tuple[str, str], ...]  # points with no known neighbour: drawn as dots
    top: str
    last: str
    empty: bool
    y_ticks: tuple[Tick, ...] = ()
    x_ticks: tuple[Tick, ...] = ()


CHART_W, CHART_H = 400, 150
#: The plot's box inside the chart: left, top, right, bottom (room for the ticks' labels).
PLOT = (56.0, 8.0, 392.0, 128.0)
Y_TICKS = 4  # intervals of the value axis


def count_text(value: float) -> str:
    """A number for people, never in scientific notation: 0, 0.25, 12.5, 850, 1.2k, 3.4M."""
    size = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size >= limit:
            return (
                f"{value / limit:.3g}{suffix}"
                if value / limit < 1000
                else f"{value / limit:.0f}{suffix}"
            )
    if size >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.2g}" if size < 1 else f"{value:.3g}"


def rate_text(per_second: float) -> str:
    """A rate for people: 1.2k/s, 0.5/s."""
    return f"{count_text(per_second)}/s"


def duration_text(ms: float) -> str:
    """A duration for people: 850 ms, 10 s, 2.5 min, 3 h."""
    for limit, unit in ((3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if abs(ms) >= limit:
            return f"{count_text(ms / limit)} {unit}"
    return f"{count_text(ms)} ms"


def nice_top(top: float) -> float:
    """The smallest round number (1, 2, 2.5 or 5 times a power of ten) at least ``top``."""
    if top <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(top))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= top * (1 - 1e-9))


def chart(
    title: str, values: Sequence[float | None], shown: Callable[[float], str] = count_text
) -> Chart:
    """``values`` (oldest first, one a ``rolling.BUCKET_S`` bucket; None: no value) as a chart
    whose value axis starts at 0 and ends at a round number, each label ``shown``."""
    left, top_y, right, bottom = PLOT
    known = [v for v in values if v is not None]
    top = max(known, default=0.0)
    scale = nice_top(top)
    step = (right - left) / max(1, len(values) - 1)

    def y_of(v: float) -> float:
        return bottom - (v / scale) * (bottom - top_y)

    known_at = [i for i, v in enumerate(values) if v is not None]
    dots = tuple(
        (f"{left + i * step:.1f}", f"{y_of(v):.1f}") for i, v in enumerate(values) if v is not None
    )
    newest = next((v for v in reversed(values) if v is not None), None)
    levels = [scale * k / Y_TICKS for k in range(Y_TICKS + 1)]
    return Chart(
        title,
        " ".join(f"{x},{y}" for x, y in dots),
        tuple(dot for dot, i in zip(dots, known_at, strict=True) if _lone(i, values)),
        shown(top),
        "-" if newest is None else shown(newest),
        not known,
        tuple(Tick(y_of(v), shown(v)) for v in levels),
        _time_ticks(len(values)),
    )


def _lone(i: int, values: Sequence[float | None]) -> bool:
    before = i > 0 and values[i - 1] is not None
    after = i + 1 < len(values) and values[i + 1] is not None
    return not (before or after)


def _time_ticks(buckets: int) -> tuple[Tick, ...]:
    """The time axis: a tick every other minute back from now."""
    left, _, right, _ = PLOT
    span_s = (buckets - 1) * rolling.BUCKET_S
    step = (right - left) / max(1, span_s)
    every = 120 if span_s > 300 else 60
    return tuple(
        Tick(right - back * step, "now" if back == 0 else f"-{back // 60} min")
        for back in range(0, span_s + 1, every)
    )[::-1]


async def charts(client: AsyncQuasar, queue: str | None = None) -> list[Chart]:
    """Throughput, failures and enqueue-to-start latency over the last ``WINDOW`` buckets, from
    the rolling store the workers write (one pipeline)."""
    now_ms = await client.server_time_ms()
    commands = rolling.read_commands(client.keys, now_ms)
    pipe = client.redis.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    series = rolling.points(now_ms, await pipe.execute())
    return [
        chart("Jobs completed per second", rolling.throughput(series, queue), rate_text),
        chart("Failed attempts per second", rolling.failures(series, queue), rate_text),
        chart("Enqueue to start (mean)", rolling.latency_ms(series, queue), duration_text),
    ]
