"""What the ``quasar`` commands share: ``--redis-url`` checks, ``--log-level``, one-line
errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._environment import URL_VARIABLES
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
