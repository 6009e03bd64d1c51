"""``quasar worker MODULE:APP``: a worker for an application's tasks (``--burst``: until its
queues are empty; ``--reload``: restarted on a code change)."""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import sys
import threading
import time
from typing import Any, Literal

import click
from click.core import ParameterSource

from .._durable import Durable
from .._environment import HEALTH_PORT_VARIABLE, NAMESPACE_VARIABLE, URL_VARIABLES
from ..app import App
from ..errors import ConfigurationError, QuasarError
from ..worker import Worker
from ..worker._endpoints import serve_health
from ._config import app_option, given, namespace_option, resolve, url_option
from ._options import Mistake, log_level_option, runtime_error


def prefetch_option(
    ctx: click.Context, param: click.Parameter, value: str
) -> int | Literal["auto"]:
    """``--prefetch``: ``auto`` or a nonnegative integer."""
    if value == "auto":
        return "auto"
    if not value.strip().isdigit():  # (no sign, no point)
        raise click.BadParameter(f"{value!r} is neither 'auto' nor a nonnegative integer")
    return int(value)


def durable_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """``--durable REPLICAS[:TIMEOUT_MS]`` as a ``Durable``; a bad value is a usage error."""
    if value is None:
        return None
    replicas, _, timeout = value.partition(":")
    try:
        return Durable(int(replicas), int(timeout) if timeout else 1000)
    except (ValueError, ConfigurationError) as exc:
        raise click.BadParameter(f"{value!r} is not REPLICAS[:TIMEOUT_MS] ({exc})") from exc


@click.command()
@click.argument("module_app", metavar="MODULE:APP", required=False)
@app_option("The application, as MODULE:APP may name it (also QUASAR_APP).")
@url_option("Redis to serve instead of the app's own URL (else QUASAR_REDIS_URL, REDIS_URL).")
@namespace_option("Namespace to serve instead of the app's own (else QUASAR_NAMESPACE, default).")
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
    "--durable",
    default=None,
    metavar="REPLICAS[:TIMEOUT_MS]",
    callback=durable_option,
    help="Every write waits until this many replicas have it (WAIT, at most TIMEOUT_MS, default "
    "1000), else is sent again: see docs/guarantees.md. Default: the app's own setting.",
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
@click.option(
    "--health-port",
    default=None,
    envvar=HEALTH_PORT_VARIABLE,
    type=click.IntRange(0, 65535),
    help="Serve /livez and /readyz for probes at http://0.0.0.0:PORT (also QUASAR_HEALTH_PORT; "
    "--metrics-port serves them too): see docs/deploy.md.",
)
@log_level_option("INFO", "INFO logs one line per job outcome.")
@click.pass_context
def worker(
    ctx: click.Context,
    module_app: str | None,
    app_path: str | None,
    redis_url: str | None,
    namespace: str,
    queues: tuple[str, ...],
    concurrency: int,
    prefetch: int | Literal["auto"],
    lease_ms: int,
    grace: float,
    connect_timeout: float,
    burst: bool,
    max_jobs: int | None,
    allow_eviction: bool,
    durable: Durable | None,
    processes: int | None,
    max_jobs_per_process: int | None,
    reload: bool,
    worker_id: str | None,
    metrics_port: int | None,
    health_port: int | None,
    log_level: str,
) -> None:
    """Run a worker for the tasks of MODULE:APP until SIGTERM / SIGINT (twice: at once).

    MODULE is a module name (tasks, myproject.tasks), importable from the current folder; APP
    the name of its quasar_redis App. Its Redis and namespace: --redis-url and --namespace,
    else the app's own, else QUASAR_REDIS_URL (REDIS_URL) and QUASAR_NAMESPACE.
    """
    if reload:
        reloading(ctx)
        return
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = configured(ctx, module_app or app_path, redis_url, namespace)
    app.allow_eviction = app.allow_eviction or allow_eviction  # (its tasks enqueue as well)
    if durable is not None:
        app.durable = durable
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
        serve_endpoints(runner, metrics_port, health_port)
        runner.run(install_signals=True)
    except QuasarError as exc:
        raise runtime_error(exc, app.connector.url) or exc from None
    if job_threads_outlive(1.0):
        logging.shutdown()  # a plain-function job still runs past the grace period: leave it
        os._exit(0)


def configured(ctx: click.Context, path: str | None, redis_url: str | None, namespace: str) -> App:
    """The app to serve, on the Redis and namespace of the rule every command follows
    (``_config``); a flag is also set in the environment, for the processes the worker starts."""
    if path is None:
        raise Mistake(
            "give the application to serve: quasar worker MODULE:APP (or --app, QUASAR_APP)"
        )
    if ctx.params["app_path"] not in (None, path) and given(ctx, "app_path"):
        raise Mistake(f"two applications given: {path!r} and --app {ctx.params['app_path']!r}")
    flags = {"redis_url": URL_VARIABLES[0], "namespace": NAMESPACE_VARIABLE}
    for name, variable in flags.items():
        if given(ctx, name):
            os.environ[variable] = ctx.params[name]
    settings = resolve(ctx, redis_url, namespace, path, memory=True)
    app = settings.app
    assert app is not None
    if given(ctx, "redis_url") or given(ctx, "namespace"):
        app.connect(
            settings.url if given(ctx, "redis_url") else None,
            namespace=settings.namespace if given(ctx, "namespace") else None,
        )
    return app


def serve_endpoints(runner: Worker, metrics_port: int | None, health_port: int | None) -> None:
    """``--metrics-port``: the worker's metrics (and probes), ``--health-port``: its probes,
    each served from a thread of its own (one server when both name one port)."""
    if metrics_port is not None:
        try:  # optional (quasar_redis[prometheus]): imported only when asked for
            prometheus: Any = importlib.import_module("quasar_redis.prometheus")
        except ImportError as exc:
            raise click.ClickException(str(exc)) from None
        prometheus.serve_worker_metrics(runner, metrics_port)
    if health_port is not None and health_port != metrics_port:
        serve_health(runner, health_port)


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
        if not given(ctx, param.name or ""):  # (a default, or the environment the child inherits)
            continue
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
