"""A running job's progress, IO-free: the check and text of a report (``progress_args``) and
its reading from a job's fields (``progress_of``), as lua/include/progress.lua writes them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from . import _types as t
from ._schema import KEY
from .errors import InvalidArgument

#: The longest progress message, in characters (a longer one is refused, never cut).
MESSAGE_MAX = 200

_NAMES = ("progress_value", "progress_message", "progress_at", "progress_attempt")
_FIELDS = {KEY[name].encode(): i for i, name in enumerate(_NAMES)}


def progress_args(value: Any, message: Any = None) -> tuple[str, str]:
    """The text of ``value`` and ``message`` as the scripts take them; InvalidArgument for a
    value that is not a finite int or float (NaN, infinity, a bool, anything else) and for a
    message that is not a str of at most MESSAGE_MAX characters."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(
            f"progress value must be an int or a float, not {type(value).__name__}"
        )
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise InvalidArgument(f"progress value must be finite, not {value!r}")
    if message is None:
        return repr(number), ""
    if not isinstance(message, str):
        raise InvalidArgument(f"progress message must be a str, not {type(message).__name__}")
    if len(message) > MESSAGE_MAX:
        raise InvalidArgument(
            f"progress message is {len(message)} characters long, more than {MESSAGE_MAX}"
        )
    return repr(number), message


def progress_of(reply: Sequence[Any]) -> t.Progress | None:
    """The progress in a job's flat reply ``{id, field, value, ...}`` (a later field wins), or
    None when it holds none (or none Python can read)."""
    found: list[Any] = [None, None, None, None]
    for i in range(1, len(reply) - 1, 2):
        at = _FIELDS.get(reply[i])
        if at is not None:
            found[at] = reply[i + 1]
    value, message, at_ms, attempt = found
    if value is None:
        return None
    try:
        text = message.decode("utf-8", "replace") if message else ""
        return t.Progress(float(value), text or None, int(at_ms), int(attempt or 0))
    except (TypeError, ValueError):
        return None
