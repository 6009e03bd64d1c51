"""What the ``quasar`` commands share, each defined once: ``--redis-url`` (else
``QUASAR_REDIS_URL``, then ``REDIS_URL``) and its checks, ``--namespace`` (else
``QUASAR_NAMESPACE``, else ``default``), ``--json``, ``--log-level``, ``--partitions``, one-line
errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._environment import NAMESPACE_VARIABLE, URL_VARIABLES
from .._keys import check_name
from .._partitions import check_partitions
from .._urls import MEMORY_URL, check_url, redact_text
from ..errors import ConfigurationError, QuasarError

F = TypeVar("F", bound=Callable[..., Any])
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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


URL_HELP = "Redis (also QUASAR_REDIS_URL, REDIS_URL)."
Callback = Callable[[click.Context, click.Parameter, Any], Any]


def redis_url_option(
    callback: Callback | None = None, default: str | None = None, help: str = URL_HELP
) -> Callable[[F], F]:
    """``--redis-url``, else ``QUASAR_REDIS_URL``, else ``REDIS_URL``; ``callback`` checks it
    (by default: a Redis URL, ``memory://`` too)."""
    return click.option(
        "--redis-url",
        envvar=list(URL_VARIABLES),
        default=default,
        callback=callback or url_checked(memory=True),
        help=help,
    )


# demo and example: --redis-url, else QUASAR_REDIS_URL, else REDIS_URL, else memory://
redis_url_or_memory = redis_url_option(
    default=MEMORY_URL,
    help="Redis to run on (also QUASAR_REDIS_URL, REDIS_URL); default: memory://, an embedded "
    "fakeredis server.",
)


def checked_namespace(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_name(value, "namespace")
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


def namespace_option(
    help: str = "The namespace (also QUASAR_NAMESPACE).", checked: bool = True
) -> Callable[[F], F]:
    """``--namespace``, else ``QUASAR_NAMESPACE``, else ``default``; ``checked``: a name a
    namespace can have, else a usage error."""
    return click.option(
        "--namespace",
        envvar=NAMESPACE_VARIABLE,
        default="default",
        show_default=True,
        callback=checked_namespace if checked else None,
        help=help,
    )


def json_option(help: str = "Print JSON (one document) for scripts.") -> Callable[[F], F]:
    """``--json``, given to the command as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def log_level_option(default: str, help: str) -> Callable[[F], F]:
    return click.option(
        "--log-level",
        default=default,
        show_default=True,
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        help=help,
    )


def checked_partitions(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    try:
        return check_partitions(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


def partitions_option(help: str) -> Callable[[F], F]:
    """``--partitions P``: the namespace's number of partitions, checked as the clients check it
    (1 to ``MAX_PARTITIONS``), else a usage error; None when not given."""
    return click.option(
        "--partitions", type=int, default=None, callback=checked_partitions, help=help
    )


def quasar_error(exc: QuasarError) -> click.ClickException:
    """One line for the user: the error's kind and message, any URL in it redacted."""
    return click.ClickException(redact_text(f"{type(exc).__name__}: {exc}"))
