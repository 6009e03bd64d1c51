"""Payloads and results as msgpack (never pickle)."""

from __future__ import annotations

from typing import Any

import msgpack

from .errors import CorruptDataError


class EncodeError(ValueError):
    """A value msgpack cannot encode."""


class Encoded:
    """A value already encoded as msgpack (``encode`` passes it through unchanged)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def encode(value: Any) -> bytes:
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
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        name = what if of is None else f"{what} {of!r}"
        raise CorruptDataError(f"{name} is not valid msgpack: {exc}") from None
