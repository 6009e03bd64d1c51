"""``quasar demo`` (a realistic mix of jobs through in-process workers, ``demo.py``) and
``quasar example`` (the quick start, every edge of the lifecycle by hand, ``example.py``)."""

from __future__ import annotations

import uuid

import click
from rich.console import Console

from .._urls import where
from ..errors import QuasarError
from . import demo as demo_module
from ._config import namespace_checked, url_or_memory
from ._options import log_level_option, partitions_option, runtime_error
from .example import Example, open_quasar

PARTITIONS_HELP = "Make the namespace one of this many partitions (docs/scaling.md); default: one."


@click.command()
@url_or_memory
@click.option(
    "--jobs",
    "-n",
    default=2000,
    show_default=True,
    type=click.IntRange(10, 1_000_000),
    help="How many jobs to enqueue.",
)
@click.option(
    "--workers",
    "-w",
    default=2,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Workers to run, as asyncio tasks of this process.",
)
@click.option(
    "--concurrency",
    "-c",
    default=20,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Jobs each worker runs at once.",
)
@click.option(
    "--namespace",
    default=None,
    callback=namespace_checked,
    help="Namespace to use (default: a new one, demo-<random>; deleted after).",
)
@click.option(
    "--timeout",
    default=120.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Give up (exit 1) when the jobs have not all finished after this many seconds.",
)
@log_level_option(
    "WARNING", "INFO shows one line per job outcome; DEBUG also the tracebacks of failures."
)
@partitions_option(PARTITIONS_HELP)
def demo(
    redis_url: str,
    jobs: int,
    workers: int,
    concurrency: int,
    namespace: str | None,
    timeout: float,
    log_level: str,
    partitions: int | None,
) -> None:
    """Run a realistic mix of jobs through in-process workers: live progress, then a summary."""
    config = demo_module.DemoConfig(jobs, workers, concurrency, timeout, log_level, partitions)
    namespace = namespace or f"demo-{uuid.uuid4().hex[:8]}"
    demo_module.run(redis_url, namespace, config, Console(highlight=False))


@click.command()
@url_or_memory
@click.option(
    "--namespace",
    default=None,
    callback=namespace_checked,
    help="Namespace to use (default: a new one, example-<random>).",
)
@partitions_option(PARTITIONS_HELP)
def example(redis_url: str, namespace: str | None, partitions: int | None) -> None:
    """Run the quick start: enqueue, claim, complete, fail, retry; print each typed result."""
    namespace = namespace or f"example-{uuid.uuid4().hex[:8]}"
    parts = "" if partitions is None else f" ({partitions} partitions)"
    click.echo(f"quasar example: namespace {namespace!r}{parts} on {where(redis_url)}")
    try:
        with open_quasar(redis_url, namespace, partitions) as q:
            Example(q).run()
    except QuasarError as exc:
        raise runtime_error(exc, redis_url) or exc from None
    click.echo("done")
