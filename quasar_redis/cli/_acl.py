"""``quasar acl``: the Redis users of each role (docs/security.md).

- ``quasar acl roles``: every role, what it may do and the commands it takes.
- ``quasar acl setuser NAME ROLE... --namespace NS``: the ``ACL SETUSER`` command making a user
  of those roles for those namespaces, printed for ``redis-cli`` (``--apply``: run on
  ``--redis-url`` as the admin user of the URL).
- ``quasar acl load``: load the function library and the scripts as an admin user, for users
  who may run them but not load them.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from functools import partial
from typing import Any

import click
import redis
from redis.cluster import RedisCluster

from .._environment import DEFAULT_NAMESPACE, NAMESPACE_VARIABLE
from .._scripts import library, scripts
from .._urls import redact_text
from ..acl import PATHS, ROLES, Paths, scripts_instead, setuser
from ..client import Quasar
from ..errors import ConfigurationError, QuasarError
from ._config import app_option, checked_namespace, given, url_checked, url_option
from ._loading import load_app

admin_url_option = url_option(
    "Redis, as an admin user (also QUASAR_REDIS_URL, REDIS_URL).",
    callback=url_checked(memory=False),
)


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(redact_text(f"{type(exc).__name__}: {exc}"))


@click.group()
def acl() -> None:
    """Least-privilege Redis users: the roles, their ACL rules, loading the scripts."""


@acl.command()
def roles() -> None:
    """Every role, what its users may do, and the Redis commands it takes."""
    for role in ROLES.values():
        click.echo(f"{role.name}: {role.summary}")
        click.echo(f"  operations: {' '.join(role.operations)}")
        click.echo(f"  commands: {' '.join(c.lower() for c in role.commands)}")


@acl.command("setuser")
@click.argument("user")
@click.argument("role_names", metavar="ROLE...", nargs=-1, required=True)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    envvar=NAMESPACE_VARIABLE,
    help="A namespace the user may use (repeat for several); else the app's, then "
    "QUASAR_NAMESPACE, then default.",
)
@app_option("An application, MODULE:APP (also QUASAR_APP): the user may use its namespace.")
@click.option("--tag", default="", help="The clients' tag= (hash tag), if they are given one.")
@click.option("--key-prefix", default="quasar", show_default=True, help="The clients' key_prefix=.")
@click.option(
    "--paths",
    type=click.Choice(list(PATHS)),
    default="both",
    show_default=True,
    help="functions: FCALL (Redis 7+); scripts: EVALSHA (Redis 6.2, Cluster); both.",
)
@click.option(
    "--cluster", is_flag=True, help="Also what a Redis Cluster client sends (set it on every node)."
)
@click.option(
    "--password-env",
    metavar="VARIABLE",
    help="An environment variable holding the user's password (stored as its SHA-256).",
)
@click.option(
    "--partitions",
    type=click.IntRange(1),
    help="The namespaces' partitions, when they have several (docs/scaling.md).",
)
@click.option("--apply", is_flag=True, help="Run the command on --redis-url instead of printing.")
@admin_url_option
@click.pass_context
def setuser_command(
    ctx: click.Context,
    user: str,
    role_names: tuple[str, ...],
    namespaces: tuple[str, ...],
    app_path: str | None,
    tag: str,
    key_prefix: str,
    paths: Paths,
    cluster: bool,
    password_env: str | None,
    partitions: int | None,
    apply: bool,
    redis_url: str | None,
) -> None:
    """Print the ACL SETUSER command for USER with the union of the ROLEs (see `quasar acl
    roles`): the namespaces' keys and the roles' commands, nothing else."""
    namespaces = tuple(checked_namespace(name) for name in namespaces_of(ctx, namespaces, app_path))
    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise click.BadParameter(f"${password_env} is not set", param_hint="--password-env")

    def words_of(paths: Paths) -> list[str]:
        return setuser(
            user,
            role_names,
            namespaces,
            password=password,
            tag=tag,
            key_prefix=key_prefix,
            paths=paths,
            cluster=cluster,
            partitions=partitions,
        )

    try:
        words = words_of(paths)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    if not apply:
        click.echo(shlex.join(words))
        if password is None:
            click.echo(
                "# add a password (>secret, or --password-env) before it can log in", err=True
            )
        return
    if redis_url is None:
        raise click.UsageError("--apply needs --redis-url (or QUASAR_REDIS_URL, REDIS_URL)")
    _run(redis_url, partial(_apply, words_of, paths, cluster), cluster)
    click.echo(f"user {user}: {' '.join(role_names)} on {' '.join(namespaces)}")


@acl.command()
@admin_url_option
@click.option(
    "--functions/--no-functions",
    default=True,
    show_default=True,
    help="Load the function library too (Redis 7+); the scripts are always loaded.",
)
def load(redis_url: str | None, functions: bool) -> None:
    """Load the function library and every script, as an admin user: users who may run them
    but not load them then find them there. Once per version of quasar_redis, and the scripts
    again after a restart (Redis keeps functions with the data, never scripts)."""
    if redis_url is None:
        raise click.UsageError("quasar acl load needs --redis-url (or QUASAR_REDIS_URL, REDIS_URL)")
    client: Any = None

    def loading(connection: Any) -> None:
        nonlocal client
        client = Quasar(connection, functions=functions, check_eviction_policy=False)
        client.load_scripts()

    _run(redis_url, loading)
    what = f"library {library().name} and " if client is not None and client.functions else ""
    click.echo(f"loaded {what}{len(scripts())} scripts")


def namespaces_of(
    ctx: click.Context, namespaces: tuple[str, ...], app_path: str | None
) -> tuple[str, ...]:
    """``--namespace`` given, else the app's, else QUASAR_NAMESPACE, else ``default``."""
    if app_path is not None and not given(ctx, "namespaces"):
        return (load_app(app_path).namespace,)
    return namespaces or (DEFAULT_NAMESPACE,)


def _apply(
    words_of: Callable[[Paths], list[str]], paths: Paths, cluster: bool, connection: Any
) -> None:
    """Send the rules of ``paths``; those of ``scripts`` if the server has no functions. On a
    cluster every node gets them, replicas too: a failover must find the user there."""
    nodes = {"target_nodes": connection.ALL_NODES} if cluster else {}
    try:
        connection.execute_command(*words_of(paths), **nodes)
    except redis.ResponseError as exc:
        if not scripts_instead(exc, paths):
            raise
        connection.execute_command(*words_of("scripts"), **nodes)


def _run(url: str, action: Any, cluster: bool = False) -> None:
    connection: Any = (RedisCluster if cluster else redis.Redis).from_url(url)
    try:
        action(connection)
    except (QuasarError, redis.RedisError) as exc:
        raise _fail(exc) from None
    finally:
        connection.close()
