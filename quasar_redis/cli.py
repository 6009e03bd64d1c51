"""The ``quasar`` command line.

- ``quasar demo``: a realistic mix of jobs through in-process workers, with live progress and a
  summary (``demo.py``).
- ``quasar example``: the quick start, every edge of the lifecycle by hand (``example.py``).
- ``quasar worker MODULE:APP``: run a worker for an application's tasks (``--burst``: until its
  queues are empty; ``--reload``: restarted on a code change).
- ``quasar events``: print (and follow) a namespace's event stream.
- ``quasar queues``, ``info``, ``jobs``, ``job``, ``retry``, ``cancel``, ``purge``, ``pause``,
  ``resume``, ``workers``: the operator commands (``ops``; docs/operations.md).

``--redis-url`` defaults to ``QUASAR_REDIS_URL``, then ``REDIS_URL``; without either ``demo`` and
``example`` run on an embedded in-memory server (``memory://``, fakeredis). Every URL shown is
redacted (``redis://:***@host``). A mistake (a bad option, a module that does not import, Redis
out of reach or refusing the password) is one line ``Error: ...`` and a non-zero exit.
"""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

import click
import redis
from click.core import ParameterSource
from rich.console import Console

from . import __version__, ops
from . import demo as demo_module
from ._cli_acl import acl
from ._connect import sync_client
from ._dashboard_command import dashboard
from ._environment import URL_VARIABLES
from ._keys import KeySpace
from ._loading import load_app
from ._urls import MEMORY_URL, check_url, redact, redact_text, where
from ._waits import block_ms
from .errors import ConfigurationError, QuasarError
from .example import Example, open_quasar
from .worker import Worker

F = TypeVar("F", bound=Callable[..., Any])
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
EVENTS_BLOCK_MS = 5_000


def url_checked(memory: bool) -> Any:
    """A ``--redis-url`` callback: a Redis URL (``memory://`` too when ``memory``), else a usage
    error that shows the URL redacted."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check_url(value, memory=memory)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc)) from None

    return check


# demo and example: --redis-url, else QUASAR_REDIS_URL, else REDIS_URL, else memory://
redis_url_or_memory = click.option(
    "--redis-url",
    envvar=list(URL_VARIABLES),
    default=MEMORY_URL,
    callback=url_checked(memory=True),
    help="Redis to run on (also QUASAR_REDIS_URL, REDIS_URL); default: memory://, an embedded "
    "fakeredis server.",
)


def log_level_option(default: str, help: str) -> Callable[[F], F]:
    return click.option(
        "--log-level",
        default=default,
        show_default=True,
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        help=help,
    )


def quasar_error(exc: QuasarError) -> click.ClickException:
    """One line for the user: the error's kind and message, any URL in it redacted."""
    return click.ClickException(redact_text(f"{type(exc).__name__}: {exc}"))


# --- commands ----------------------------------------------------------------------------------


class OneLineErrors(click.Group):
    """A mistake on the command line is one line, ``Error: ...`` (exit 2), with where to look
    for help, rather than click's usage block above it."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        *,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"Error: {exc.format_message()}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)  # (an int: what ctx.exit(code) asked for)


@click.group(cls=OneLineErrors)
@click.version_option(__version__)
def main() -> None:
    """quasar_redis: a distributed job queue on Redis."""


main.add_command(acl)
ops.register(main)  # queues, info, jobs, job, retry, cancel, purge, pause, resume, workers


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
@log_level_option(
    "WARNING", "INFO shows one line per job outcome; DEBUG also the tracebacks of failures."
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
        raise quasar_error(exc) from None
    click.echo("done")


# --- the worker --------------------------------------------------------------------------------


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
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    help="Queue to work (repeatable); default: default.",
)
@click.option(
    "--concurrency",
    "-c",
    default=10,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Jobs run at once.",
)
@click.option(
    "--prefetch",
    default="auto",
    show_default=True,
    metavar="auto|N",
    callback=prefetch_option,
    help="Jobs claimed ahead of free slots; 'auto': as many as should start within 10 ms by "
    "recent run times, at most --concurrency (see docs/workers.md).",
)
@click.option(
    "--lease-ms",
    default=30_000,
    show_default=True,
    type=click.IntRange(1000),
    help="Lease of a job whose task sets none, in ms; renewed while the job runs.",
)
@click.option(
    "--grace",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds running jobs get to finish at a stop.",
)
@click.option(
    "--connect-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds to try to reach Redis at start before giving up (exit 1).",
)
@click.option(
    "--burst",
    is_flag=True,
    help="Stop (exit 0) once nothing of the queues is claimable and no job runs; jobs "
    "scheduled for later stay.",
)
@click.option(
    "--max-jobs",
    default=None,
    type=click.IntRange(1),
    help="Stop (exit 0) after running this many jobs.",
)
@click.option(
    "--allow-eviction",
    is_flag=True,
    help="Serve, and let the tasks enqueue, where Redis's maxmemory-policy may evict keys (jobs "
    "may be lost: see docs/guarantees.md); refused by default.",
)
@click.option(
    "--processes",
    "-p",
    default=None,
    type=click.IntRange(1, 1000),
    help="Run plain-function tasks in this many processes of their own (CPU-bound work; a job "
    "past its timeout is killed); --concurrency defaults to it. Default: in threads.",
)
@click.option(
    "--max-jobs-per-process",
    default=None,
    type=click.IntRange(1),
    help="With --processes: replace a process after it ran this many jobs.",
)
@click.option(
    "--reload",
    is_flag=True,
    help="Development: restart the worker when a .py file under the current folder changes "
    "(needs watchfiles: pip install 'quasar_redis[dev]').",
)
@click.option(
    "--worker-id", default=None, help="Its name in leases and logs; default: <host>-<pid>-<random>."
)
@click.option(
    "--metrics-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics at http://0.0.0.0:PORT/metrics (needs "
    "quasar_redis[prometheus]).",
)
@log_level_option("INFO", "INFO logs one line per job outcome.")
@click.pass_context
def worker(
    ctx: click.Context,
    app_path: str,
    queues: tuple[str, ...],
    concurrency: int,
    prefetch: int | Literal["auto"],
    lease_ms: int,
    grace: float,
    connect_timeout: float,
    burst: bool,
    max_jobs: int | None,
    allow_eviction: bool,
    processes: int | None,
    max_jobs_per_process: int | None,
    reload: bool,
    worker_id: str | None,
    metrics_port: int | None,
    log_level: str,
) -> None:
    """Run a worker for the tasks of MODULE:APP until SIGTERM / SIGINT (twice: at once).

    MODULE is a module name (tasks, myproject.tasks), importable from the current folder; APP
    the name of its quasar_redis App.
    """
    if reload:
        reloading(ctx)
        return
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = load_app(app_path)
    app.allow_eviction = app.allow_eviction or allow_eviction  # (its tasks enqueue as well)
    if processes is not None and ctx.get_parameter_source("concurrency") is ParameterSource.DEFAULT:
        concurrency = processes
    try:
        runner = Worker(
            app,
            queues or ("default",),
            concurrency,
            prefetch=prefetch,
            worker_id=worker_id,
            lease_ms=lease_ms,
            grace=grace,
            connect_timeout=connect_timeout,
            burst=burst,
            max_jobs=max_jobs,
            allow_eviction=allow_eviction,
            processes=processes,
            max_jobs_per_process=max_jobs_per_process,
        )
        if metrics_port is not None:
            serve_metrics(runner, metrics_port)
        runner.run(install_signals=True)
    except QuasarError as exc:
        raise quasar_error(exc) from None
    if job_threads_outlive(1.0):
        logging.shutdown()  # a plain-function job still runs past the grace period: leave it
        os._exit(0)


def serve_metrics(runner: Worker, port: int) -> None:
    """``--metrics-port``: the worker's metrics, served from a thread of their own."""
    try:  # optional (quasar_redis[prometheus]): imported only when asked for
        prometheus: Any = importlib.import_module("quasar_redis.prometheus")
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    prometheus.serve_worker_metrics(runner, port)


def job_threads_outlive(seconds: float) -> bool:
    """Whether a plain-function job's thread still runs ``seconds`` after the worker stopped (a
    job past its grace period); the pool's idle threads end in that time."""
    deadline = time.monotonic() + seconds
    for thread in threading.enumerate():
        if thread.name.startswith("quasar-task"):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return True
    return False


def reloading(ctx: click.Context) -> None:
    """``--reload``: run this worker command (without ``--reload``) in a child process, started
    again whenever a .py file under the current folder changes."""
    try:  # optional (quasar_redis[dev]): imported only when asked for
        watchfiles: Any = importlib.import_module("watchfiles")
    except ImportError:
        raise click.ClickException(
            "--reload needs watchfiles: pip install 'quasar_redis[dev]'"
        ) from None
    command = [sys.executable, "-m", "quasar_redis", "worker", *command_args(ctx)]
    click.echo(f"quasar worker --reload: watching {os.getcwd()} for .py changes", err=True)
    watchfiles.run_process(
        os.getcwd(),
        target=shlex.join(command),
        target_type="command",
        watch_filter=watchfiles.PythonFilter(),
        callback=lambda changes: click.echo(
            f"quasar worker --reload: {len(changes)} change(s), restarting", err=True
        ),
    )


def command_args(ctx: click.Context) -> list[str]:
    """The command line of ``ctx``'s command as it was parsed, without ``--reload``."""
    args: list[str] = []
    for param in ctx.command.params:
        value = ctx.params[param.name or ""]
        if isinstance(param, click.Argument):
            args.append(str(value))
        elif param.name != "reload" and value is not None and value is not False:
            args += _option_args(param, value)
    return args


def _option_args(param: click.Parameter, value: Any) -> list[str]:
    flag = param.opts[0]
    if isinstance(param, click.Option) and param.is_flag:
        return [flag]
    return [part for one in (value if param.multiple else (value,)) for part in (flag, str(one))]


# --- events ------------------------------------------------------------------------------------


def format_event(entry_id: Any, fields: dict[Any, Any]) -> list[str]:
    """One stream entry as lines, one per job: UTC time (from the entry id), job, event, queue,
    attempt. An entry lists the jobs of one run of the same event in one call, space-separated;
    an event of a queue (a pause, a resume) is one line with no job.
    """
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    when = datetime.fromtimestamp(int(text.split("-")[0]) / 1000, tz=timezone.utc)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    def get(name: str) -> str:
        value = fields.get(name.encode(), b"?")
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    event, queue = get("ev"), get("q")
    if b"job" not in fields:  # an event of the queue itself (QUEUE_EVENTS): a pause, a resume
        return [f"{stamp} event={event} queue={queue}"]
    jobs, attempts = get("job").split(" "), get("a").split(" ")
    attempts += ["?"] * (len(jobs) - len(attempts))
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
    "--redis-url",
    envvar=list(URL_VARIABLES),
    callback=url_checked(memory=True),
    help="Redis (also QUASAR_REDIS_URL, REDIS_URL).",
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
        raise click.BadParameter(str(exc), param_hint="--namespace") from None
    client = sync_client(redis_url, socket_timeout=EVENTS_BLOCK_MS / 1000 + 10)
    try:
        last = print_recent(client, stream, count)
        if follow:
            follow_stream(client, stream, last)
    except KeyboardInterrupt:
        pass
    except redis.RedisError as exc:
        raise click.ClickException(redact_text(f"Redis at {redact(redis_url)}: {exc}")) from None
    finally:
        client.close()


main.add_command(dashboard)
