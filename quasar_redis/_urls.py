"""Redis URLs as people see them: credentials redacted, and a URL checked before it is used.

Every message and log line that shows a URL shows ``redact(url)``; text from elsewhere that may
hold one (a redis-py error) goes through ``redact_text``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from .errors import ConfigurationError

MEMORY_URL = "memory://"
SCHEMES = ("redis", "rediss", "unix")
HIDDEN = "***"

# scheme://[user[:password]]@ in any text: the credentials are group 2
_CREDENTIALS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)([^\s/@]*)@")


def _hide(found: re.Match[str]) -> str:
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
    """``url`` if it is a Redis URL (``redis://``, ``rediss://``, ``unix://``, and ``memory://``
    when ``memory``); ConfigurationError, naming the URL redacted, when it is not."""
    if memory and url == MEMORY_URL:
        return url
    try:
        parts = urlsplit(url)
        _ = parts.port  # (a port that is not a number raises ValueError)
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis URL {redact(url)!r}: {exc}") from None
    schemes = [f"{s}://" for s in SCHEMES] + ([MEMORY_URL] if memory else [])
    if parts.scheme not in SCHEMES:
        raise ConfigurationError(
            f"bad Redis URL {redact(url)!r}: it must start with {', '.join(schemes)} "
            "(for example redis://127.0.0.1:6379/0)"
        )
    return url
