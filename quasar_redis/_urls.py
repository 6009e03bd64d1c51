"""Redis URLs as people see them: credentials redacted, and a URL checked before it is used.

Every message and log line that shows a URL shows ``redact(url)``; text from elsewhere that may
hold one (a redis-py error) goes through ``redact_text``.

Besides one server (``redis://``, ``rediss://`` for TLS, ``unix://``), a URL may name a Redis
Cluster or a primary that Redis Sentinel manages (``target`` reads it; ``_connect`` connects)::

    redis+cluster://[user:password@]host:port[,host:port...][?options]
    redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db][?options]

with ``rediss+cluster://`` and ``rediss+sentinel://`` for TLS. A cluster URL lists startup
nodes (the others are discovered); a Sentinel URL lists sentinels (port 26379 by default) and
the name of the primary they watch. The user and password are the data nodes' (the primary's);
``sentinel_username`` / ``sentinel_password`` in the query are the sentinels' own. Every other
option of the query (``socket_timeout``, ``ssl_ca_certs``, ...) is redis-py's, as ``redis://``
takes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from .errors import ConfigurationError

MEMORY_URL = "memory://"
SCHEMES = ("redis", "rediss", "unix")
#: schemes of a Redis Cluster and of a Sentinel-managed primary, with the scheme of one server
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
SENTINEL_PORT = 26379
HIDDEN = "***"

# scheme://[user[:password]]@ in any text: the credentials are group 2
_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)([^\s/@]*)@")


#: The credentials of the URL forms that messages show (``redis://:PASSWORD@host:port/db``):
#: words to replace, not secrets, so left as they are.
PLACEHOLDERS = (":PASSWORD", "USER:PASSWORD")


def _hide(found: re.Match[str]) -> str:
    if found.group(2) in PLACEHOLDERS:
        return found.group(0)
    user, colon, _password = found.group(2).partition(":")
    if not colon:  # redis://secret@host: a lone name may well be a misplaced password
        return f"{found.group(1)}{HIDDEN}@"
    return f"{found.group(1)}{user}:{HIDDEN}@" if user else f"{found.group(1)}:{HIDDEN}@"


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***`` (a user name
    stays)."""
    return _CREDENTIALS.sub(_hide, text) if "@" in text else text


def redact(url: str) -> str:
    """``url`` for people to see: ``redis://:***@host:6379/0``, ``redis://user:***@host``.

    Also hides a ``password=`` query parameter.
    """
    return re.sub(r"(?i)(password=)[^&]*", rf"\1{HIDDEN}", redact_text(url))


def where(url: str) -> str:
    """Where a URL points, for a first line or a start line: redacted, or the embedded server."""
    return "an embedded fakeredis server" if url == MEMORY_URL else redact(url)


def check_url(url: str, *, memory: bool = True) -> str:
    """``url`` if it is a Redis URL (``redis://``, ``rediss://``, ``unix://``, a cluster or
    Sentinel URL, and ``memory://`` when ``memory``); ConfigurationError, naming the URL
    redacted, when it is not."""
    if memory and url == MEMORY_URL:
        return url
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in CLUSTER_SCHEMES or scheme in SENTINEL_SCHEMES:
        target(url)
        return url
    try:
        parts = urlsplit(url)
        _ = parts.port  # (a port that is not a number raises ValueError)
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis URL {redact(url)!r}: {exc}") from None
    if parts.scheme not in SCHEMES:
        schemes = [f"{s}://" for s in (*SCHEMES, *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)]
        raise ConfigurationError(
            f"bad Redis URL {redact(url)!r}: it must start with "
            f"{', '.join(schemes + ([MEMORY_URL] if memory else []))} "
            "(for example redis://127.0.0.1:6379/0)"
        )
    return url


@dataclass(frozen=True, slots=True)
class Target:
    """What a URL names: one server (``url`` as it is), a cluster (``hosts``: startup nodes) or
    a Sentinel-managed primary (``hosts``: the sentinels; ``service``: the primary's name).

    ``url`` is a plain ``redis://`` / ``rediss://`` URL of the first host with the credentials,
    database and options, for redis-py to read its connection settings from.
    """

    kind: Literal["server", "cluster", "sentinel"]
    url: str
    hosts: tuple[tuple[str, int], ...] = ()
    service: str = ""
    sentinel_options: tuple[tuple[str, str], ...] = ()


def _host_port(text: str, default: int, url: str) -> tuple[str, int]:
    found = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::(\d{1,5}))?", text)
    if found is None or not 0 < int(found.group(2) or default) < 65536:
        raise ConfigurationError(f"bad Redis URL {redact(url)!r}: {text!r} is not host:port")
    return found.group(1).strip("[]"), int(found.group(2) or default)


SENTINEL_ONLY = ("sentinel_username", "sentinel_password")


def target(url: str) -> Target:
    """What ``url`` names (see the module's docs); ConfigurationError, naming the URL redacted,
    for a cluster or Sentinel URL without hosts, with a bad port, or without a service name."""
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    plain = CLUSTER_SCHEMES.get(scheme) or SENTINEL_SCHEMES.get(scheme)
    if plain is None:
        return Target("server", url)
    head, query = re.match(r"([^?#]*)\??([^#]*)", rest).groups()  # type: ignore[union-attr]
    netloc, _, path = head.partition("/")
    userinfo, at, hostlist = netloc.rpartition("@")
    sentinel = scheme in SENTINEL_SCHEMES
    default = SENTINEL_PORT if sentinel else 6379
    hosts = tuple(_host_port(h, default, url) for h in hostlist.split(",") if h)
    if not hosts:
        raise ConfigurationError(f"bad Redis URL {redact(url)!r}: no host:port")
    service, db = "", ""
    if sentinel:
        service, _, db = unquote(path).strip("/").partition("/")
        if not service:
            raise ConfigurationError(
                f"bad Redis URL {redact(url)!r}: name the primary after the sentinels "
                "(redis+sentinel://host:26379,host:26380/mymaster)"
            )
        if db and not db.isdigit():
            raise ConfigurationError(f"bad Redis URL {redact(url)!r}: database {db!r}")
    elif path.strip("/") not in ("", "0"):
        raise ConfigurationError(f"bad Redis URL {redact(url)!r}: a cluster has database 0 only")
    options = parse_qs(query)
    own = tuple((k, options.pop(k)[0]) for k in SENTINEL_ONLY if k in options)
    rest_query = urlencode(options, doseq=True)
    host, port = hosts[0]
    host = f"[{host}]" if ":" in host else host
    first = f"{plain}://{userinfo}{at}{host}:{port}/{db or 0}" + (
        f"?{rest_query}" if rest_query else ""
    )
    return Target("sentinel" if sentinel else "cluster", first, hosts, service, own)
