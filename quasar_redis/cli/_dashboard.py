"""``quasar dashboard``: the web dashboard of one namespace, served alone by uvicorn."""

from __future__ import annotations

import importlib
from typing import Any

import click
import redis

from .._connect import sync_client
from .._environment import DASHBOARD_AUTH_VARIABLE
from .._keys import KeySpace
from .._partitions import recorded
from .._urls import check_url, redact, redact_text
from ..errors import ConfigurationError, QuasarError
from ._options import namespace_option, redis_url_option

INSTALL_HINT = "pip install 'quasar_redis[dashboard]'"


def _url(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if not value:
        raise click.BadParameter("needed (or QUASAR_REDIS_URL, REDIS_URL)")
    try:
        return check_url(value, memory=False)  # (not memory://: an embedded server is empty)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


def reachable(url: str, namespace: str) -> int | None:
    """Redis answers at ``url`` (else one line and exit 1); the namespace's partitions, by its
    record (docs/scaling.md)."""
    client = sync_client(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
        return recorded(client.get(KeySpace(namespace).partitions))
    except QuasarError as exc:  # (a namespace no key can have, a record no client wrote)
        raise click.ClickException(str(exc)) from None
    except redis.RedisError as exc:
        raise click.ClickException(redact_text(f"Redis at {redact(url)}: {exc}")) from None
    finally:
        client.close()


@click.command()
@redis_url_option(_url)
@namespace_option("The namespace to show (also QUASAR_NAMESPACE).", checked=False)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on.",
)
@click.option("--read-only", is_flag=True, help="Show no action; every POST is refused.")
@click.option(
    "--basic-auth",
    metavar="USER:PASSWORD",
    envvar=DASHBOARD_AUTH_VARIABLE,
    help="Ask every request for these credentials (also QUASAR_DASHBOARD_AUTH).",
)
@click.option(
    "--trusted-origin",
    "trusted_origins",
    multiple=True,
    metavar="URL",
    help="Accept actions from this origin too (https://host, behind a proxy; repeatable).",
)
def dashboard(
    redis_url: str,
    namespace: str,
    host: str,
    port: int,
    read_only: bool,
    basic_auth: str | None,
    trusted_origins: tuple[str, ...],
) -> None:
    """Serve the web dashboard of a namespace: queues, jobs, workers, live (Ctrl-C stops)."""
    try:  # optional (quasar_redis[dashboard]): imported only when asked for
        uvicorn: Any = importlib.import_module("uvicorn")
        create_app = importlib.import_module("quasar_redis.dashboard").create_app
    except ImportError as exc:
        raise click.ClickException(f"the dashboard needs {exc.name}: {INSTALL_HINT}") from None
    try:
        app = create_app(
            redis_url,
            namespace,
            partitions=reachable(redis_url, namespace),
            read_only=read_only,
            basic_auth=basic_auth,
            trusted_origins=trusted_origins,
            host=host,
        )
    except QuasarError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"quasar dashboard of namespace {namespace} on {redact(redis_url)}: "
        f"http://{host}:{port}/" + (" (read-only)" if read_only else "")
    )
    # (the audit log of actions; a warning when public without authentication)
    importlib.import_module("quasar_redis.dashboard").starting(host, basic_auth is not None)
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)
