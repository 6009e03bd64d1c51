"""The ``quasar`` command line.

- ``quasar demo``: a realistic mix of jobs through in-process workers, with live progress and a
  summary (``demo.py``).
- ``quasar example``: the quick start, every edge of the lifecycle by hand (``example.py``).
- ``quasar worker MODULE:APP``: run a worker for an application's tasks.
- ``quasar events``: print (and follow) a namespace's event stream.

``--redis-url`` defaults to ``QUASAR_REDIS_URL``, then ``REDIS_URL``; without either ``demo`` and
``example`` run on an embedded in-memory server (``memory://``, fakeredis).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import uuid
from datetime import datetime, timezone
from typing import Any, Literal

import click
import redis
from rich.console import Console

from . import __version__
from . import demo as demo_module
from ._keys import KeySpace
from ._waits import block_ms
from .app import MEMORY_URL, URL_VARIABLES, App
from .errors import QuasarError
from .example import Example, open_quasar, where
from .worker import Worker

# demo and example: --redis-url, else QUASAR_REDIS_URL, else REDIS_URL, else memory://
redis_url_or_memory = click.option(
    "--redis-url",
    envvar=list(URL_VARIABLES),
    default=MEMORY_URL,
    help="Redis to run on (also QUASAR_REDIS_URL, REDIS_URL); default: memory://, an embedded "
    "fakeredis server.",
)
EVENTS_BLOCK_MS = 5_000


# --- commands ----------------------------------------------------------------------------------


@click.group()
@click.version_option(__version__)
def main() -> None:
    """quasar_redis: a distributed job queue on Redis."""


@main.command()
@redis_url_or_memory
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
@click.option("--namespace", default=None, help="Namespace to use (default: demo-<random>).")
@click.option(
    "--timeout",
    default=120.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Give up (exit 1) when the jobs have not all finished after this many seconds.",
)
@click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="INFO shows one line per job outcome.",
)
def demo(
    redis_url: str,
    jobs: int,
    workers: int,
    concurrency: int,
    namespace: str | None,
    timeout: float,
    log_level: str,
) -> None:
    """Run a realistic mix of jobs through in-process workers: live progress, then a summary."""
    config = demo_module.DemoConfig(jobs, workers, concurrency, timeout, log_level)
    namespace = namespace or f"demo-{uuid.uuid4().hex[:8]}"
    demo_module.run(redis_url, namespace, config, Console(highlight=False))


@main.command()
@redis_url_or_memory
@click.option("--namespace", default=None, help="Namespace to use (default: example-<random>).")
def example(redis_url: str, namespace: str | None) -> None:
    """Run the quick start: enqueue, claim, complete, fail, retry; print each typed result."""
    namespace = namespace or f"example-{uuid.uuid4().hex[:8]}"
    click.echo(f"quasar example: namespace {namespace!r} on {where(redis_url)}")
    try:
        with open_quasar(redis_url, namespace) as q:
            Example(q).run()
    except QuasarError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo("done")


# --- the worker --------------------------------------------------------------------------------


def load_app(path: str) -> App:
    """The ``App`` named by ``MODULE:ATTRIBUTE`` (the current folder is importable)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter("expected MODULE:APP, e.g. myproject.tasks:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{path!r} is not a quasar_redis App")
    return app


def prefetch_option(
    ctx: click.Context, param: click.Parameter, value: str
) -> int | Literal["auto"]:
    """``--prefetch``: ``auto`` or a nonnegative integer."""
    if value == "auto":
        return "auto"
    if not value.strip().isdigit():  # (no sign, no point)
        raise click.BadParameter(f"{value!r} is neither 'auto' nor a nonnegative integer")
    return int(value)


@main.command()
@click.argument("app_path", metavar="MODULE:APP")
@click.option("--queue", "-q", "queues", multiple=True, help="Queue to work (repeatable).")
@click.option("--concurrency", "-c", default=10, show_default=True, type=click.IntRange(1))
@click.option(
    "--prefetch",
    default="auto",
    show_default=True,
    metavar="auto|N",
    callback=prefetch_option,
    help="Jobs claimed ahead of free slots; 'auto': as many as should start within 10 ms by "
    "recent run times, at most --concurrency (see docs/workers.md).",
)
@click.option("--lease-ms", default=30_000, show_default=True, type=click.IntRange(1))
@click.option(
    "--grace", default=30.0, show_default=True, help="Seconds running jobs get to finish."
)
@click.option("--worker-id", default=None, help="Default: <host>-<pid>-<random>.")
@click.option("--log-level", default="INFO", show_default=True)
def worker(
    app_path: str,
    queues: tuple[str, ...],
    concurrency: int,
    prefetch: int | Literal["auto"],
    lease_ms: int,
    grace: float,
    worker_id: str | None,
    log_level: str,
) -> None:
    """Run a worker for the tasks of MODULE:APP until SIGTERM / SIGINT (twice: at once)."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = load_app(app_path)
    try:
        runner = Worker(
            app,
            queues or ("default",),
            concurrency,
            prefetch=prefetch,
            worker_id=worker_id,
            lease_ms=lease_ms,
            grace=grace,
        )
    except (ValueError, QuasarError) as exc:
        raise click.ClickException(str(exc)) from exc
    runner.run(install_signals=True)
    if any(th.name.startswith("quasar-task") for th in threading.enumerate()):
        logging.shutdown()  # a plain-function job still runs past the grace period: leave it
        os._exit(0)


# --- events ------------------------------------------------------------------------------------


def format_event(entry_id: Any, fields: dict[Any, Any]) -> list[str]:
    """One stream entry as lines, one per job: UTC time (from the entry id), job, event, queue,
    attempt. An entry lists the jobs of one run of the same event in one call, space-separated.
    """
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    when = datetime.fromtimestamp(int(text.split("-")[0]) / 1000, tz=timezone.utc)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    def get(name: str) -> str:
        value = fields.get(name.encode(), b"?")
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    jobs, attempts = get("job").split(" "), get("a").split(" ")
    attempts += ["?"] * (len(jobs) - len(attempts))
    event, queue = get("ev"), get("q")
    return [
        f"{stamp} job={job} event={event} queue={queue} attempt={attempt}"
        for job, attempt in zip(jobs, attempts, strict=False)
    ]


def print_recent(client: Any, stream: str, count: int) -> Any:
    """Print the last ``count`` events, oldest first; returns the newest entry id (or 0-0)."""
    newest = client.xrevrange(stream, count=max(count, 1))
    lines = [line for entry in reversed(newest) for line in format_event(*entry)]
    for line in lines[max(0, len(lines) - count) :]:
        click.echo(line)
    return newest[0][0] if newest else b"0-0"


def follow_stream(client: Any, stream: str, last: Any) -> None:
    """Print every event after ``last`` as it arrives (XREAD BLOCK), until interrupted."""
    while True:
        block = block_ms(client, EVENTS_BLOCK_MS)  # the URL's socket_timeout wins
        reply = client.xread({stream: last}, block=block, count=1000)
        for _name, entries in reply or ():
            for entry_id, fields in entries:
                for line in format_event(entry_id, fields):
                    click.echo(line)
                last = entry_id


@main.command()
@click.option(
    "--redis-url", envvar=list(URL_VARIABLES), help="Redis (also QUASAR_REDIS_URL, REDIS_URL)."
)
@click.option("--namespace", required=True, help="The namespace whose events to print.")
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Keep printing new events as they arrive (Ctrl-C stops).",
)
@click.option(
    "--count",
    "-n",
    default=10,
    show_default=True,
    type=click.IntRange(0),
    help="How many past events to print first.",
)
def events(redis_url: str | None, namespace: str, follow: bool, count: int) -> None:
    """Print a namespace's event stream: one line per state change (like tail [-f])."""
    if not redis_url or redis_url == MEMORY_URL:
        raise click.UsageError(
            "quasar events needs --redis-url (or QUASAR_REDIS_URL, REDIS_URL): "
            "an embedded server is empty"
        )
    try:
        stream = KeySpace(namespace).events
    except QuasarError as exc:
        raise click.BadParameter(str(exc), param_hint="--namespace") from exc
    client = redis.Redis.from_url(redis_url, socket_timeout=EVENTS_BLOCK_MS / 1000 + 10)
    try:
        last = print_recent(client, stream, count)
        if follow:
            follow_stream(client, stream, last)
    except KeyboardInterrupt:
        pass
    except redis.RedisError as exc:
        raise click.ClickException(f"Redis at {redis_url}: {exc}") from exc
    finally:
        client.close()
