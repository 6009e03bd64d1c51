"""``quasar dashboard``: the web dashboard of one namespace, served alone by uvicorn."""

from __future__ import annotations

import errno
import importlib
import socket
from typing import Any

import click
import redis

from .._connect import sync_client
from .._environment import DASHBOARD_AUTH_VARIABLE
from .._keys import KeySpace
from .._partitions import recorded
from .._urls import redact
from ..errors import QuasarError
from ._config import namespace_options
from ._options import runtime_error

INSTALL_HINT = "pip install 'quasar_redis[dashboard]'"


def reachable(url: str, namespace: str) -> int | None:
    """Redis answers at ``url`` (else one line and exit 1); the namespace's partitions, by its
    record (docs/scaling.md)."""
    client = sync_client(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
        return recorded(client.get(KeySpace(namespace).partitions))
    except (QuasarError, redis.RedisError) as exc:  # (out of reach; a record no client wrote)
        raise runtime_error(exc, url) or exc from None
    finally:
        client.close()


@click.command()
@namespace_options
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
    listening = bound(host, port)
    port = listening.getsockname()[1]  # (the port the system chose for --port 0)
    click.echo(
        f"quasar dashboard of namespace {namespace} on {redact(redis_url)}: "
        f"http://{host}:{port}/" + (" (read-only)" if read_only else "")
    )
    # (the audit log of actions; a warning when public without authentication)
    importlib.import_module("quasar_redis.dashboard").starting(host, basic_auth is not None)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", proxy_headers=False)
    uvicorn.Server(config).run(sockets=[listening])


def bound(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, handed to uvicorn: a port already in use (or an
    address not of this host) is one line and exit 1 before anything says it serves."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listening = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, port))
        listening.listen(2048)
    except OSError as exc:
        listening.close()
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"port {port} on {host} is in use (another server? choose one with --port)"
            ) from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    listening.set_inheritable(True)
    return listening
