"""The dashboard's guards: basic authentication for the standalone server, the checks every
action (a POST) passes against cross-site requests, and the warning of a server that listens on
a public address without authentication.

Cross-site requests: each page sets a random token in a cookie (``SameSite=Strict``,
``HttpOnly``) and in its forms; an action is refused (403) unless the form's token equals the
cookie's, and, when the browser says where the request comes from (``Origin``, else
``Referer``, and ``Sec-Fetch-Site``), that is this host or a trusted origin.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import secrets
from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ConfigurationError

#: The headers of every page: its scripts, styles and forms only from the dashboard itself.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
COOKIE = "quasar_csrf"
FIELD = "csrf"
#: The dashboard's probe, open without credentials (it tells only whether Redis answers).
HEALTH_PATH = "/healthz"
LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})
log = logging.getLogger("quasar_redis.dashboard")


def public_address(host: str) -> bool:
    """Whether listening on ``host`` lets other machines in: every address (``0.0.0.0``,
    ``::``, empty), any IP but a loopback one, any name but localhost's."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return False
    if name in ("", "*"):
        return True
    try:
        return not ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: it may resolve to any address
        return True


def exposure_warning(host: str, authenticated: bool) -> str | None:
    """The warning of a dashboard on ``host`` without authentication, if that is a public
    address (``public_address``); None otherwise."""
    if authenticated or not public_address(host):
        return None
    return (
        f"This dashboard listens on {host}, a public address, without authentication: anyone "
        "who reaches it can see and act on your jobs. Give it --basic-auth, or listen on "
        "127.0.0.1 behind a proxy that authenticates (docs/dashboard.md, Security)."
    )


def starting(host: str, authenticated: bool) -> None:
    """What the standalone server logs as it starts: every action's audit line (the
    ``quasar_redis.dashboard`` log, to stderr unless logging is set up), and a warning if it
    listens on a public address without authentication."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    warning = exposure_warning(host, authenticated)
    if warning is not None:
        log.warning(warning)


def parse_credentials(text: str) -> tuple[str, str]:
    """``user:password`` (the password may hold ``:``), both non-empty."""
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise ConfigurationError("basic auth must be given as user:password, both non-empty")
    return user, password


class BasicAuth:
    """ASGI middleware: every HTTP request must carry these basic-auth credentials (else 401),
    but the probe's (``HEALTH_PATH``)."""

    def __init__(self, app: ASGIApp, user: str, password: str, realm: str = "quasar") -> None:
        self.app = app
        self.expected = f"{user}:{password}".encode()
        self.user = user
        self.realm = realm

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == HEALTH_PATH:
            await self.app(scope, receive, send)
            return
        if self._allowed(scope):  # (who acts: the audit line of each action names them)
            await self.app({**scope, "quasar.user": self.user}, receive, send)
            return
        headers = [
            (b"www-authenticate", f'Basic realm="{self.realm}", charset="UTF-8"'.encode()),
            (b"content-type", b"text/plain; charset=utf-8"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b"authentication required\n"})

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, encoded = value.partition(b" ")
                if scheme.lower() != b"basic":
                    return False
                try:
                    given = base64.b64decode(encoded.strip(), validate=True)
                except (binascii.Error, ValueError):
                    return False
                return secrets.compare_digest(given, self.expected)
        return False


def token_of(request: Request) -> tuple[str, bool]:
    """The request's CSRF token (its cookie's), or a new one; and whether it is new."""
    token = request.cookies.get(COOKIE, "")
    if len(token) == 43 and token.replace("-", "").replace("_", "").isalnum():
        return token, False
    return secrets.token_urlsafe(32), True


def cross_site_reason(request: Request, form_token: str, trusted: Collection[str]) -> str | None:
    """Why this POST is refused as cross-site, or None if it passes."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return "the request comes from another site"
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is not None and not _same_origin(request, origin, trusted):
        return "the request's origin is not this dashboard's"
    cookie = request.cookies.get(COOKIE, "")
    if not cookie or not form_token or not secrets.compare_digest(cookie, form_token):
        return "the form's token is missing or does not match (reload the page)"
    return None


def _same_origin(request: Request, origin: str, trusted: Collection[str]) -> bool:
    parts = urlsplit(origin)
    if f"{parts.scheme}://{parts.netloc}" in trusted:
        return True
    host = request.headers.get("host", "")
    return bool(parts.netloc) and parts.netloc.lower() == host.lower()
