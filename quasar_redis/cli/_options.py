"""What the ``quasar`` commands share, each defined once: ``--json``, ``--log-level``,
``--partitions``, one-line errors: a usage error (``Mistake``, exit 2) and a runtime error
(``runtime_error``, exit 1). ``--redis-url``, ``--namespace`` and ``--app``: ``_config``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
import redis

from .._access import database_in, refusal
from .._partitions import check_partitions
from .._urls import redact, redact_text
from ..errors import (
    AuthenticationError,
    ConfigurationError,
    InvalidArgument,
    QuasarError,
    RedisUnavailable,
)

F = TypeVar("F", bound=Callable[..., Any])
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR")


class Mistake(click.UsageError):
    """A usage error that reads the same from every command, whichever flag or environment
    variable it came from: ``Error: <message>`` on one line, exit 2 (no pointer to one
    command's help)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_text(message))


def json_option(help: str = "Print JSON (one document) for scripts.") -> Callable[[F], F]:
    """``--json``, given to the command as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def _level(ctx: click.Context, param: click.Parameter, value: str) -> str:
    return "WARNING" if value.upper() == "WARN" else value.upper()


def log_level_option(default: str, help: str) -> Callable[[F], F]:
    """``--log-level``: DEBUG, INFO, WARNING (or WARN), ERROR, in any case; given upper case."""
    return click.option(
        "--log-level",
        default=default,
        show_default=True,
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        callback=_level,
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


def _unreachable(text: str, at: str) -> str:
    if "No master found for" in text:  # (Sentinel's own words, followed by its clients' reprs)
        service = text.split("No master found for", 1)[1].split(" : ", 1)[0].strip()
        return f"no sentinel of {at} names a primary {service} (the service name? sentinels down?)"
    return text if text.startswith("cannot reach") else f"cannot reach Redis at {at}: {text}"


def runtime_error(exc: BaseException, url: str) -> click.ClickException | None:
    """``exc`` as one line for the user (a runtime error: exit 1), any URL redacted: Redis out
    of reach, refused credentials, a refusal; None for an exception that is not one of them."""
    at = redact(url)
    refused = refusal(exc, database_in(url))  # (a password, a database: said once, not retried)
    if refused is not None:
        said = str(refused)  # (a worker's own words name the Redis already)
        return click.ClickException(
            redact_text(said if said.startswith("Redis at") else f"Redis at {at}: {said}")
        )
    if isinstance(exc, (AuthenticationError, redis.AuthenticationError)):
        return click.ClickException(redact_text(f"Redis at {at} refused the credentials: {exc}"))
    if isinstance(exc, redis.ResponseError) and "WRONGPASS" in str(exc):
        return click.ClickException(redact_text(f"Redis at {at} refused the credentials: {exc}"))
    if isinstance(exc, (RedisUnavailable, redis.ConnectionError, redis.TimeoutError)):
        return click.ClickException(redact_text(_unreachable(str(exc), at)))
    if isinstance(exc, InvalidArgument):
        return click.ClickException(redact_text(str(exc)))
    if isinstance(exc, QuasarError):
        return click.ClickException(redact_text(f"{type(exc).__name__}: {exc}"))
    if isinstance(exc, redis.RedisError):
        return click.ClickException(redact_text(f"Redis at {at}: {exc}"))
    return None
