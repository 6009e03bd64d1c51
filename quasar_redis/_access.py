"""What Redis says when it will not serve a connection, told as what to do about it.

A connection's set-up (AUTH or ``HELLO ... AUTH``, then SELECT of the URL's database) fails on
a server that wants a password when the URL gives none, on a wrong user or password, and on a
database number the server does not have. redis-py raises these in several words, by the
protocol it speaks (RESP3: "HELLO must be called with the client already authenticated";
RESP2: "NOAUTH Authentication required", or "Protocol error: unauthenticated multibulk length"
for a long first command) and as several classes (``AuthenticationError``, itself a
``ConnectionError``; ``ResponseError``). ``refusal`` reads them all, once, for every place that
decides what an error means (``_sending.map_error``, the worker's start and claim loop, the
operator commands): none of them is an outage, so none is tried again. A refused SELECT comes
as ``DatabaseOutOfRange`` from a pool ``_reconnects`` watches, with how many databases the
server has, asked on the connection it refused. ``permission_denied`` reads what the server
says of a command or key a user's ACL refuses a script call.
"""

from __future__ import annotations

import re
from typing import Any

import redis.connection
import redis.exceptions as rex

from ._urls import target
from .errors import AuthenticationError, NoSuchDatabase, PermissionDenied, QuasarError

#: How Redis's words of a refusal may start, before the words themselves.
PREFIXES = ("err ", "protocol error: ")
#: How a server that wants a password refuses a connection that gave none.
NEEDS_PASSWORD = (
    "hello must be called with the client already authenticated",
    "noauth",
    "authentication required",
    "unauthenticated multibulk length",
    "unauthenticated bulk length",
)
#: How it refuses a wrong password, or a user it does not know (or has disabled).
WRONG_PASSWORD = ("wrongpass", "invalid username-password pair", "invalid password")
#: How it refuses a password where it has none set.
NO_PASSWORD_SET = ("auth <password> called without any password configured",)
#: How it refuses a database number it does not have (Redis; Valkey and older servers).
NO_DATABASE = ("db index is out of range", "invalid db index")

URL_FORM = "redis://:PASSWORD@host:port/db, or redis://USER:PASSWORD@host:port/db for an ACL user"
GIVEN = "--redis-url, QUASAR_REDIS_URL, REDIS_URL or App(url)"


def _password_needed() -> str:
    return f"this Redis needs a password: give it in the URL ({URL_FORM}; {GIVEN})"


def _wrong_password(text: str) -> str:
    said = text.rstrip(".")
    return (
        f"Redis refused the user or password ({said}): check them in the URL ({URL_FORM}; "
        f"{GIVEN}); an ACL user must exist and be on"
    )


def _no_users() -> str:
    return (
        "Redis refused AUTH with a user name: a server before Redis 6 has no users; give the "
        "password alone (redis://:PASSWORD@host:port/db)"
    )


def _no_password_set() -> str:
    return (
        "the URL gives a password, but this Redis has none set for its default user: remove it "
        "from the URL, or name the user it is for (redis://USER:PASSWORD@host:port/db)"
    )


class DatabaseOutOfRange(rex.ResponseError):
    """Redis refused SELECT of a database it does not have; ``databases``: how many it has,
    asked on the same connection as it was refused (``_reconnects``), None where Redis did not
    say (CONFIG refused)."""

    def __init__(self, message: str, databases: int | None) -> None:
        super().__init__(message)
        self.databases = databases


def _says(text: str, words: tuple[str, ...]) -> bool:
    """Whether an error's ``text`` (lower case) opens with one of ``words``, after an error
    code Redis may put first."""
    for prefix in PREFIXES:
        text = text.removeprefix(prefix)
    return text.startswith(words)


def out_of_range(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a database number it does not have."""
    return isinstance(exc, rex.ResponseError) and _says(str(exc).lower(), NO_DATABASE)


def databases_in(reply: Any) -> int | None:
    """How many databases ``CONFIG GET databases`` says the server has (RESP2 or RESP3)."""
    if isinstance(reply, dict):
        reply = [item for pair in reply.items() for item in pair]
    if isinstance(reply, list) and len(reply) == 2:
        try:
            return int(reply[1])
        except (TypeError, ValueError):
            return None
    return None


def database_of(client: Any) -> int | None:
    """The database number a redis-py client's connections select (None where unknown: a
    cluster client, or a client with no pool)."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    db = kwargs.get("db") if isinstance(kwargs, dict) else None
    try:
        return None if db is None else int(db)
    except (TypeError, ValueError):
        return None


def database_in(url: str) -> int | None:
    """The database number a URL selects (its path, or ``?db=``; None where it names none)."""
    parse: Any = redis.connection.parse_url  # (untyped)
    try:
        db = parse(target(url).url).get("db")
        return None if db is None else int(db)
    except (ValueError, TypeError, QuasarError):
        return None


def no_such_database(database: int | None, databases: int | None = None) -> NoSuchDatabase:
    """The error of a database number the server does not have (``databases``: how many it
    has, where known)."""
    which = "of the number the URL names" if database is None else str(database)
    if databases is not None and databases > 0:
        has = f"it has {databases}: 0 to {databases - 1}; see `databases` in redis.conf"
    else:
        has = "a server has 16 by default, 0 to 15, or as many as `databases` in redis.conf says"
    return NoSuchDatabase(
        f"Redis has no database {which} ({has}): pick one that exists in the URL's path "
        "(redis://host:port/0)",
        database,
    )


def refusal(exc: BaseException, database: int | None = None) -> QuasarError | None:
    """The error a refused connection set-up means (``AuthenticationError`` for a missing or
    wrong password, ``NoSuchDatabase`` for a database ``database`` the server lacks), else None.
    Errors of ours pass as they are."""
    if isinstance(exc, AuthenticationError | NoSuchDatabase):
        return exc
    if not isinstance(exc, rex.RedisError):
        return None
    text = str(exc)
    lower = text.lower()
    if isinstance(exc, rex.AuthenticationWrongNumberOfArgsError):
        return AuthenticationError(_no_users())
    if _says(lower, NO_PASSWORD_SET):
        return AuthenticationError(_no_password_set())
    if _says(lower, WRONG_PASSWORD):
        return AuthenticationError(_wrong_password(text.removeprefix("WRONGPASS ")))
    if _says(lower, NEEDS_PASSWORD):
        return AuthenticationError(_password_needed())
    if isinstance(exc, rex.AuthenticationError):
        return AuthenticationError(f"Redis refused the credentials ({text})")
    if out_of_range(exc):
        return no_such_database(database, getattr(exc, "databases", None))
    return None


#: How Redis words a command a script ran, or a key it touched, that the user's ACL refuses
#: (Redis 6.2, and 7+ on a command the script did not list up front), and how Valkey does.
SCRIPT_REFUSALS = ("the user executing the script can't", "no permissions to access", "acl failure")

#: What a user refused the scripts themselves can do.
LOADING_HINT = (
    ": an admin user loads the scripts once (quasar acl load, or load_scripts() on a client), "
    "and `quasar acl setuser` prints the rules of each role (docs/security.md)"
)


def _permission(text: str) -> str | None:
    """The ACL rule a refusal asks for: ours say "(grant +xadd)", Redis's own "to run the
    'xadd' command" (``function|load`` for a subcommand)."""
    found = re.search(r"\(grant (\S+)\)", text) or re.search(r"to run the '([\w|]+)' command", text)
    if found is None:
        return None
    rule = found.group(1)
    return rule if rule[0] in "+~" else f"+{rule.lower()}"


def permission_denied(exc: BaseException) -> PermissionDenied | None:
    """The ``PermissionDenied`` an error of a script call means, naming what is missing."""
    text = str(exc)
    lower = text.lower()
    if isinstance(exc, rex.NoPermissionError) or lower.startswith("noperm"):
        text = text.removeprefix("NOPERM ")
        if any(f"'{c}" in lower for c in ("fcall", "function", "evalsha", "script")):
            text += LOADING_HINT
        return PermissionDenied(text, _permission(text))
    if isinstance(exc, rex.ResponseError) and any(r in lower for r in SCRIPT_REFUSALS):
        return PermissionDenied(
            f"the Redis user may not run a command, or use a key, that a script needs ({text}): "
            "`quasar acl setuser` prints the rules of each role (docs/security.md)",
            _permission(text),
        )
    return None
