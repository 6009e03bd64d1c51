"""Where a ``quasar`` command's Redis and namespace come from: one rule for every command
(docs/operations.md, "Configuration").

1. A flag given: ``--redis-url``, ``--namespace``.
2. The application's own settings, when the command is given one (``--app MODULE:APP``, else
   ``QUASAR_APP``): the URL and the namespace its ``App(...)`` declares.
3. The environment: ``QUASAR_REDIS_URL``, then ``REDIS_URL``; ``QUASAR_NAMESPACE``.
4. The defaults: the namespace ``default``; no URL (a usage error), or ``memory://`` for
   ``demo`` and ``example``.

A mistake in any of them (a URL that is not a Redis URL, a namespace no key can have, an app
path that names no app) is the same one line from every command, wherever it came from, and
exit 2 (``Mistake``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from .._environment import APP_VARIABLE, DEFAULT_NAMESPACE, NAMESPACE_VARIABLE, URL_VARIABLES
from .._keys import check_name
from .._urls import MEMORY_URL, check_url
from ..app import App
from ..errors import ConfigurationError
from ._loading import load_app
from ._options import Mistake

F = TypeVar("F", bound=Callable[..., Any])

NO_URL = (
    "no Redis URL: give --redis-url or set QUASAR_REDIS_URL (or REDIS_URL), or give the app "
    "one (App('redis://127.0.0.1:6379/0'), named by MODULE:APP or --app)"
)
EMBEDDED = (
    "memory:// is an embedded server of one process: nothing of another is in it (give the "
    "Redis of your workers)"
)
URL_HELP = (
    "Redis: redis://, rediss://, unix://, redis+cluster://, redis+sentinel:// (else the "
    "app's, then QUASAR_REDIS_URL, REDIS_URL)."
)
NAMESPACE_HELP = "The namespace (else the app's, then QUASAR_NAMESPACE, then default)."
APP_HELP = (
    "An application, MODULE:APP as quasar worker takes it (also QUASAR_APP): its own Redis URL "
    "and namespace, unless --redis-url / --namespace are given."
)


@dataclass(frozen=True, slots=True)
class Settings:
    """A command's Redis (checked), namespace (checked) and application (None: none given)."""

    url: str
    namespace: str
    app: App | None = None


def given(ctx: click.Context, name: str) -> bool:
    """Whether the parameter ``name`` was given on the command line (not the environment)."""
    return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def checked_url(url: str | None, *, memory: bool) -> str:
    """``url`` if it is a Redis URL (``memory://`` too when ``memory``), else a ``Mistake``."""
    if not url:
        raise Mistake(NO_URL)
    if url == MEMORY_URL:
        if memory:
            return url
        raise Mistake(EMBEDDED)
    try:  # (the same words whether the command takes memory:// or not)
        return check_url(url, memory=False)
    except ConfigurationError as exc:
        raise Mistake(str(exc)) from None


def checked_namespace(name: str) -> str:
    """``name`` if a namespace can have it, else a ``Mistake``."""
    try:
        return check_name(name, "namespace")
    except ConfigurationError as exc:
        raise Mistake(str(exc)) from None


def app_url(app: App) -> str | None:
    """The URL the app declares, else the environment's; None without either."""
    try:
        return app.connector.url
    except ConfigurationError:
        return None


def resolve(
    ctx: click.Context,
    redis_url: str | None,
    namespace: str,
    app_path: str | None,
    *,
    memory: bool = False,
) -> Settings:
    """The command's settings by the rule above, from its parsed ``--redis-url``,
    ``--namespace`` and ``--app``; a ``Mistake`` for any of them wrong."""
    app = load_app(app_path) if app_path else None
    url = redis_url if app is None or given(ctx, "redis_url") else app_url(app)
    name = namespace if app is None or given(ctx, "namespace") else app.namespace
    return Settings(checked_url(url, memory=memory), checked_namespace(name), app)


Callback = Callable[[click.Context, click.Parameter, Any], Any]


def url_option(
    help: str = URL_HELP, default: str | None = None, callback: Callback | None = None
) -> Callable[[F], F]:
    """``--redis-url``, else ``QUASAR_REDIS_URL``, then ``REDIS_URL`` (checked by ``resolve``,
    or by ``callback``)."""
    return click.option(
        "--redis-url",
        envvar=list(URL_VARIABLES),
        default=default,
        callback=callback,
        metavar="URL",
        help=help,
    )


def url_checked(*, memory: bool) -> Callback:
    """A ``--redis-url`` callback of a command with no namespace to resolve: ``checked_url``
    (None stays None)."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        return None if value is None else checked_url(value, memory=memory)

    return check


def namespace_checked(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """A ``--namespace`` callback: ``checked_namespace`` (None stays None)."""
    return None if value is None else checked_namespace(value)


#: demo and example: --redis-url, else QUASAR_REDIS_URL, else REDIS_URL, else memory://
url_or_memory = url_option(
    "Redis to run on (also QUASAR_REDIS_URL, REDIS_URL); default: memory://, an embedded "
    "fakeredis server.",
    default=MEMORY_URL,
    callback=url_checked(memory=True),
)


def app_option(help: str = APP_HELP) -> Callable[[F], F]:
    """``--app MODULE:APP``, else ``QUASAR_APP`` (loaded by ``resolve``)."""
    return click.option("--app", "app_path", envvar=APP_VARIABLE, metavar="MODULE:APP", help=help)


def namespace_option(help: str = NAMESPACE_HELP) -> Callable[[F], F]:
    """``--namespace``, else ``QUASAR_NAMESPACE``, else ``default`` (checked by ``resolve``)."""
    return click.option(
        "--namespace",
        envvar=NAMESPACE_VARIABLE,
        default=DEFAULT_NAMESPACE,
        metavar="NAME",
        help=help,
    )


def namespace_options(command: F) -> F:
    """``--redis-url``, ``--namespace`` and ``--app`` for a command that talks to a namespace of
    a Redis other processes use: ``command`` gets ``redis_url`` and ``namespace`` resolved and
    checked (``resolve``)."""

    @functools.wraps(command)
    def resolved(*args: Any, redis_url: str | None, app_path: str | None, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        settings = resolve(ctx, redis_url, kwargs.pop("namespace"), app_path)
        return command(*args, redis_url=settings.url, namespace=settings.namespace, **kwargs)

    decorated = url_option()(namespace_option()(app_option()(resolved)))
    return cast(F, decorated)
