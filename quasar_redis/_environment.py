"""The environment variables that name a Redis and a namespace, read by ``App`` and ``quasar``.

``QUASAR_REDIS_URL``, then ``REDIS_URL``: the Redis of an ``App(url=None)`` (read at its first
connection) and of every ``quasar`` command; ``QUASAR_NAMESPACE``: the namespace of an
``App(namespace=None)`` and of every command (else ``default``); ``QUASAR_APP``: the
``MODULE:APP`` of every command's ``--app``; ``QUASAR_DASHBOARD_AUTH``: the dashboard's
``user:password``; ``QUASAR_HEALTH_PORT``: the port of a worker's probes (``quasar worker
--health-port``, and the port ``quasar probe`` asks). Precedence (docs/operations.md,
"Configuration"): what is given explicitly, then these, then the defaults.
"""

from __future__ import annotations

import os

from ._urls import MEMORY_URL
from .errors import ConfigurationError

URL_VARIABLES = ("QUASAR_REDIS_URL", "REDIS_URL")
NAMESPACE_VARIABLE = "QUASAR_NAMESPACE"
APP_VARIABLE = "QUASAR_APP"
DEFAULT_NAMESPACE = "default"
DASHBOARD_AUTH_VARIABLE = "QUASAR_DASHBOARD_AUTH"
HEALTH_PORT_VARIABLE = "QUASAR_HEALTH_PORT"


def environment_url() -> str | None:
    """The first of ``QUASAR_REDIS_URL`` and ``REDIS_URL`` set (and not empty), else None."""
    return next((os.environ[v] for v in URL_VARIABLES if os.environ.get(v)), None)


def redis_url(url: str | None = None) -> str:
    """``url``, else the first of ``QUASAR_REDIS_URL`` and ``REDIS_URL`` set in the environment.

    Neither: ConfigurationError, so that a producer that forgets its URL fails at its first
    connection instead of enqueuing into a server no worker sees.
    """
    found = url if url is not None else environment_url()
    if found is not None:
        return found
    raise ConfigurationError(
        "no Redis URL: give the App one (App('redis://127.0.0.1:6379/0')) or set QUASAR_REDIS_URL "
        f"(or REDIS_URL); App({MEMORY_URL!r}) asks for an embedded in-memory server, which no "
        "other process sees"
    )


def namespace(name: str | None = None) -> str:
    """``name``, else ``QUASAR_NAMESPACE`` when set (and not empty), else ``default``."""
    if name is not None:
        return name
    return os.environ.get(NAMESPACE_VARIABLE) or DEFAULT_NAMESPACE
