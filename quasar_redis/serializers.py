"""How an App turns task arguments and results into bytes and back (``App(serializer=...)``).

A serializer is any object with ``dumps(value) -> bytes`` and ``loads(data) -> value``
(``Serializer``). The default, ``MsgpackSerializer``, is msgpack with extension types for
``datetime``, ``date``, ``time``, ``timedelta``, ``UUID``, ``Decimal``, ``set``, ``frozenset``
and ``tuple`` (docs/payloads.md); ``JsonSerializer`` is JSON, readable by any language. Producers
and workers of one namespace must use the same one. ``dumps`` raises ``TypeError`` or
``ValueError`` for a value it cannot encode: the task API then refuses the call at enqueue and
names the argument.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from ._codec import pack, unpack


@runtime_checkable
class Serializer(Protocol):
    """Turns a value into bytes and back; ``dumps`` raises TypeError / ValueError if it cannot."""

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


def name_of(serializer: Any) -> str:
    """What errors call ``serializer``'s format: its ``name``, else its class name."""
    return str(getattr(serializer, "name", type(serializer).__name__))


class MsgpackSerializer:
    """msgpack with extension types (the default; ``Job.payload`` and ``Job.result`` read it)."""

    name = "msgpack"

    def __repr__(self) -> str:
        return "MsgpackSerializer()"

    dumps = staticmethod(pack)
    loads = staticmethod(unpack)


class JsonSerializer:
    """JSON (UTF-8, compact): only what JSON holds (a tuple comes back a list)."""

    name = "JSON"

    def __repr__(self) -> str:
        return "JsonSerializer()"

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


MSGPACK = MsgpackSerializer()
