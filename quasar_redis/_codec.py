"""Payloads and results as msgpack (never pickle), with extension types for common Python values.

The task API's default serializer (``serializers.MsgpackSerializer``) packs with the extension
types; the ``Quasar`` clients send plain msgpack (``encode``) and read both (``decode``).

Plain msgpack values (None, bool, int, float, str, bytes, list, dict) pack as themselves; the
types msgpack has no form for travel as extension types, each a code and a body
(docs/payloads.md)::

    1 datetime   ISO 8601 text; an IANA zone's key after it in brackets ("...+02:00[Europe/Paris]")
    2 date       ISO 8601 text
    3 time       ISO 8601 text, with its UTC offset when it has one
    4 timedelta  msgpack [days, seconds, microseconds]
    5 UUID       its 16 bytes
    6 Decimal    its text (str)
    7 set        msgpack array of its items
    8 frozenset  msgpack array of its items
    9 tuple      msgpack array of its items (a tuple comes back a tuple, not a list)

Subclasses of plain types (an ``IntEnum``, a ``defaultdict``) pack as their plain base. The hook
runs only for values msgpack does not pack by itself, so plain values cost what they did;
payloads written before the extension types were added decode as they always did.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack

from .errors import CorruptDataError

DATETIME, DATE, TIME, TIMEDELTA, UUID_, DECIMAL, SET, FROZENSET, TUPLE = range(1, 10)
PLAIN = (bool, int, float, str, bytes, bytearray, list, dict)  # (bool before int: an int subclass)


class EncodeError(ValueError):
    """A value msgpack cannot encode."""


class Encoded:
    """A value already encoded (``encode`` passes it through unchanged)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _datetime(value: dt.datetime) -> bytes:
    text = value.isoformat()
    key = getattr(value.tzinfo, "key", None)  # a ZoneInfo: keep the zone, not just its offset
    return (text if key is None else f"{text}[{key}]").encode()


def _load_datetime(data: bytes) -> dt.datetime:
    text, _, key = data.decode().partition("[")
    value = dt.datetime.fromisoformat(text)
    if not key:
        return value
    zoned = value.replace(tzinfo=ZoneInfo(key[:-1]))
    if zoned.utcoffset() != value.utcoffset():  # the second of two same wall times
        zoned = zoned.replace(fold=1)
    return zoned


def _items(values: Any) -> bytes:
    return pack(list(values))


def _timedelta(value: dt.timedelta) -> bytes:
    return pack([value.days, value.seconds, value.microseconds])


_EXTENSIONS: dict[type, tuple[int, Callable[[Any], bytes]]] = {
    dt.datetime: (DATETIME, _datetime),
    dt.date: (DATE, lambda v: v.isoformat().encode()),
    dt.time: (TIME, lambda v: v.isoformat().encode()),
    dt.timedelta: (TIMEDELTA, _timedelta),
    UUID: (UUID_, lambda v: v.bytes),
    Decimal: (DECIMAL, lambda v: str(v).encode()),
    set: (SET, _items),
    frozenset: (FROZENSET, _items),
    tuple: (TUPLE, _items),
}

_LOADERS: dict[int, Callable[[bytes], Any]] = {
    DATETIME: _load_datetime,
    DATE: lambda d: dt.date.fromisoformat(d.decode()),
    TIME: lambda d: dt.time.fromisoformat(d.decode()),
    TIMEDELTA: lambda d: dt.timedelta(*unpack(d)),
    UUID_: lambda d: UUID(bytes=d),
    DECIMAL: lambda d: Decimal(d.decode()),
    SET: lambda d: set(unpack(d)),
    FROZENSET: lambda d: frozenset(unpack(d)),
    TUPLE: lambda d: tuple(unpack(d)),
}


def _extension(value: Any) -> Any:
    """msgpack's ``default`` hook: an extension type, or a plain base (for a subclass)."""
    for kind in type(value).__mro__:
        found = _EXTENSIONS.get(kind)
        if found is not None:
            return msgpack.ExtType(found[0], found[1](value))
        if kind in PLAIN:  # (slicing, not str(): str() of a str enum is its name)
            return value[:] if kind is str or kind is bytes else kind(value)
    raise TypeError(f"cannot serialize object of type {type(value).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    loader = _LOADERS.get(code)
    return msgpack.ExtType(code, data) if loader is None else loader(data)


def pack(value: Any) -> bytes:
    """``value`` as msgpack with the extension types; TypeError / ValueError when it cannot be."""
    # A Packer per call: one shared Packer is not safe while its hook runs (another thread may
    # pack meanwhile), and making one costs less than msgpack.packb does.
    data: bytes = msgpack.Packer(default=_extension, strict_types=True).pack(value)
    return data


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)


def encode(value: Any) -> bytes:
    """``value`` as plain msgpack, as the ``Quasar`` clients send a payload or a result (the task
    API encodes its own, with its app's serializer, and hands it over ``Encoded``)."""
    if isinstance(value, Encoded):
        return value.data
    try:
        data: bytes = msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot be encoded as msgpack: {exc}") from None
    return data


def decode(data: bytes, what: str, of: str | None = None) -> Any:
    """``data`` decoded; ``what`` (followed by ``of``, quoted, if given) names it in an error."""
    try:
        return unpack(data)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        name = what if of is None else f"{what} {of!r}"
        raise CorruptDataError(f"{name} is not valid msgpack: {exc}") from None
