"""The environment variables that name a Redis and a namespace, read by ``App`` and ``quasar``.

``QUASAR_REDIS_URL``, then ``REDIS_URL``: the Redis of an ``App(url=None)`` and the default of
every ``--redis-url``; ``QUASAR_NAMESPACE``: the default of the operator commands'
``--namespace``; ``QUASAR_DASHBOARD_AUTH``: the dashboard's ``user:password``;
``QUASAR_HEALTH_PORT``: the port of a worker's probes (``quasar worker --health-port``, and the
port ``quasar probe`` asks).
"""

from __future__ import annotations

import os

from ._urls import MEMORY_URL
from .errors import ConfigurationError

URL_VARIABLES = ("QUASAR_REDIS_URL", "REDIS_URL")
NAMESPACE_VARIABLE = "QUASAR_NAMESPACE"
DASHBOARD_AUTH_VARIABLE = "QUASAR_DASHBOARD_AUTH"
HEALTH_PORT_VARIABLE = "QUASAR_HEALTH_PORT"


def redis_url(url: str | None = None) -> str:
    """``url``, else the first of ``QUASAR_REDIS_URL`` and ``REDIS_URL`` set in the environment.

    Neither: ConfigurationError, so that a producer that forgets its URL fails at once instead
    of enqueuing into a server no worker sees.
    """
    if url is not None:
        return url
    for variable in URL_VARIABLES:
        if os.environ.get(variable):
            return os.environ[variable]
    raise ConfigurationError(
        "no Redis URL: pass one (App('redis://127.0.0.1:6379/0')) or set QUASAR_REDIS_URL "
        f"(or REDIS_URL); App({MEMORY_URL!r}) asks for an embedded in-memory server, which no "
        "other process sees"
    )
