"""What a job id may hold: one rule, checked here before a call is sent and again inside the
scripts (``lua/include/checks.lua``'s ``id_error``, whose table and words these mirror).

An id is 1 to 256 bytes of UTF-8 text without whitespace, control or format characters: no code
point of Unicode's categories Zs, Zl, Zp (spaces and separators), Cc (controls) or Cf (format
characters: soft hyphen, zero-width spaces and joiners, bidirectional marks and overrides, the
byte order mark, tags), as Unicode 15.0 lists them. So an id reads the same wherever it is shown,
and a list of ids joined by spaces splits back into the same ids. ``bytes`` are taken as the
UTF-8 text they hold (and come back as ``str``); bytes that are not UTF-8, and a ``str`` holding
a lone surrogate (no UTF-8 text can), are refused.
"""

from __future__ import annotations

import bisect

ID_MAX_BYTES = 256

#: The code points no id may hold, as inclusive ranges (ID_REFUSED in lua/include/checks.lua).
REFUSED: tuple[tuple[int, int], ...] = (
    (0x0000, 0x0020),
    (0x007F, 0x00A0),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x1680, 0x1680),
    (0x180E, 0x180E),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x205F, 0x2064),
    (0x2066, 0x206F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
_STARTS = [low for low, _ in REFUSED]


def refused_char(cp: int) -> bool:
    """Whether no id may hold the code point ``cp``."""
    i = bisect.bisect_right(_STARTS, cp) - 1
    return i >= 0 and cp <= REFUSED[i][1]


def id_error(value: object, what: str = "id") -> str | None:
    """Why ``value`` cannot be a job id (worded as the scripts word it), or None."""
    if (  # the usual id, ASCII: no decoding, no table
        type(value) is str
        and value.isascii()
        and value.isprintable()
        and " " not in value
        and 0 < len(value) <= ID_MAX_BYTES
    ):
        return None
    if isinstance(value, str):  # (a lone surrogate counts as the bytes Lua would be sent)
        raw = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        raw = value
    else:
        return f"{what} must be a string, not {type(value).__name__}"
    if not raw:
        return f"{what} must not be empty"
    if len(raw) > ID_MAX_BYTES:
        return f"{what} must be at most {ID_MAX_BYTES} bytes"
    try:
        value, broken = raw.decode("utf-8"), False
    except UnicodeDecodeError as exc:  # (what comes before the first bad byte is read first)
        value, broken = raw[: exc.start].decode("utf-8"), True
    for char in value:
        if refused_char(ord(char)):
            return (
                f"{what} must not contain whitespace, control or format characters"
                f" (U+{ord(char):04X})"
            )
    return f"{what} must be UTF-8 text" if broken else None


def sendable(value: object) -> bool:
    """Whether ``value`` can be sent to a script as it is (which then applies the rule itself):
    bytes, or a ``str`` without lone surrogates (which no UTF-8 encoding takes)."""
    if isinstance(value, bytes) or (type(value) is str and value.isascii()):
        return True
    return isinstance(value, str) and not any("\ud800" <= c <= "\udfff" for c in value)
