"""Payload and result types: msgpack with extension types by default, a serializer per app, and
a value no serializer can encode refused at enqueue with the argument named."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from enum import Enum, IntEnum
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import msgpack
import pytest

from quasar_redis import (
    App,
    InvalidTaskCall,
    JobFailedError,
    JsonSerializer,
    MsgpackSerializer,
    NewJob,
    Serializer,
    Worker,
)
from quasar_redis._codec import decode, pack, unpack

from .helpers import app_url, snapshot

PARIS = ZoneInfo("Europe/Paris")
VALUES: list[Any] = [
    dt.datetime(2026, 3, 29, 1, 59, 59, 999999),  # naive
    dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
    dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=-3, minutes=-30))),
    dt.datetime(2026, 7, 14, 12, 0, tzinfo=PARIS),
    dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS, fold=1),  # the second 2:30 of that night
    dt.date(2026, 2, 28),
    dt.time(23, 59, 1, 5),
    dt.time(8, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    dt.timedelta(days=-2, seconds=3, microseconds=4),
    UUID("12345678-1234-5678-1234-567812345678"),
    Decimal("-1234.5000"),
    {1, "two", (3, 4)},
    frozenset({"a", "b"}),
    (1, (2, [3, (4,)]), ()),
    b"\x00\xffbytes",
    {"nested": [dt.date(2000, 1, 1), {"k": (1, 2)}], (1, 2): "tuple key"},
]


class Colour(str, Enum):
    RED = "red"


class Size(IntEnum):
    BIG = 3


class Opaque:
    """A value no serializer knows."""


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_extension_types_round_trip_with_their_type(value: Any) -> None:
    back = unpack(pack(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, dt.datetime):
        assert back.tzinfo == value.tzinfo and back.fold == value.fold
        assert back.utcoffset() == value.utcoffset()


def test_subclasses_of_plain_types_pack_as_their_base() -> None:
    assert unpack(pack([Colour.RED, Size.BIG])) == ["red", 3]
    assert type(unpack(pack(Size.BIG))) is int


def test_plain_msgpack_written_before_extensions_still_decodes() -> None:
    old = msgpack.packb({"a": [1, "x", [2.5, None]], "k": {"b": b"raw"}}, use_bin_type=True)
    assert decode(old, "payload") == {"a": [1, "x", [2.5, None]], "k": {"b": b"raw"}}
    assert MsgpackSerializer().loads(old) == decode(old, "payload")


def test_an_unknown_extension_code_comes_back_as_is() -> None:
    assert unpack(msgpack.packb(msgpack.ExtType(99, b"x"))) == msgpack.ExtType(99, b"x")


def test_the_serializers_follow_the_protocol() -> None:
    for serializer in (MsgpackSerializer(), JsonSerializer()):
        assert isinstance(serializer, Serializer)
        assert serializer.loads(serializer.dumps({"a": [1, "b"]})) == {"a": [1, "b"]}


# --- through the task API and a worker -----------------------------------------------------------


@pytest.fixture
def url(backend: str, namespace: str) -> Iterator[str]:
    with app_url(backend, namespace) as found:
        yield found


def echo_app(url: str, namespace: str, serializer: Serializer | None = None) -> App:
    app = App(url, namespace=namespace, serializer=serializer)

    @app.task(name="echo")
    def echo(value: Any, *, when: Any = None) -> Any:
        return value if when is None else [value, when]

    return app


def serve(app: App) -> Worker:
    return Worker(app, idle_wait=1.0, maintenance_interval=0.1)


def test_arguments_and_results_keep_their_types(url: str, namespace: str) -> None:
    with echo_app(url, namespace) as app, serve(app):
        echo = app.tasks["echo"]
        handles = [echo.enqueue(value) for value in VALUES]
        for value, handle in zip(VALUES, handles, strict=True):
            back = handle.result(timeout=20)
            assert back == value and type(back) is type(value)
        info = handles[0].info()
        assert info is not None and info.job.payload == {"a": [VALUES[0]], "k": {}}
        assert info.job.result == VALUES[0]  # the clients read the extension types too


def test_a_value_no_serializer_knows_is_refused_naming_the_argument(
    url: str, namespace: str
) -> None:
    with echo_app(url, namespace) as app:
        echo = app.tasks["echo"]
        with pytest.raises(InvalidTaskCall) as caught:
            echo.enqueue(1, when=Opaque())
        assert str(caught.value) == (
            "task 'echo': argument 'when' cannot be encoded as msgpack: "
            "cannot serialize object of type Opaque"
        )
        with pytest.raises(InvalidTaskCall, match="argument 'value' cannot be encoded"):
            echo.enqueue([1, {"deep": Opaque()}])
        assert snapshot(app.client) == {}


def test_a_json_app_sends_json(url: str, namespace: str) -> None:
    with echo_app(url, namespace, JsonSerializer()) as app, serve(app):
        echo = app.tasks["echo"]
        handle = echo.enqueue({"n": 1}, when=(1, 2))
        assert handle.result(timeout=20) == [{"n": 1}, [1, 2]]  # JSON has no tuple
        raw = app.client.redis.hget(app.client.keys.job(handle.id), "p")
        assert json.loads(raw) == {"a": [{"n": 1}], "k": {"when": [1, 2]}}
        with pytest.raises(InvalidTaskCall, match="argument 'value' cannot be encoded as JSON"):
            echo.enqueue(dt.date(2026, 1, 1))


class Reversed:
    """A user's own serializer: JSON, backwards (so that nothing else could read it)."""

    def dumps(self, value: Any) -> bytes:
        if isinstance(value, set):
            raise TypeError("no sets here")
        return json.dumps(value).encode()[::-1]

    def loads(self, data: bytes) -> Any:
        return json.loads(data[::-1])


def test_a_users_serializer_carries_arguments_and_results(url: str, namespace: str) -> None:
    with echo_app(url, namespace, Reversed()) as app, serve(app):
        echo = app.tasks["echo"]
        assert echo.enqueue("abc", when=3).result(timeout=20) == ["abc", 3]
        with pytest.raises(InvalidTaskCall, match="argument 'value' cannot be encoded as Rev"):
            echo.enqueue({1})

        @app.task(name="unencodable_result")
        def gives_a_set() -> set[int]:
            return {1}

        with pytest.raises(JobFailedError) as failed:
            gives_a_set.enqueue().result(timeout=20)
        error = failed.value.job.error
        assert error.kind == "BadResult" and "Reversed: no sets here" in error.message


def test_a_payload_the_serializer_cannot_read_fails_the_job(url: str, namespace: str) -> None:
    with echo_app(url, namespace, JsonSerializer()) as app, serve(app):
        job = app.client.enqueue_job(NewJob("echo", {"a": [1], "k": {}}))  # msgpack, not JSON
        with pytest.raises(JobFailedError) as failed:
            app.handle(job.job.id).result(timeout=20)  # type: ignore[union-attr]
        error = failed.value.job.error
        assert error.kind == "BadPayload" and "is not valid JSON" in error.message


def test_an_old_plain_msgpack_payload_still_runs(url: str, namespace: str) -> None:
    with echo_app(url, namespace) as app, serve(app):
        job = app.client.enqueue_job(NewJob("echo", {"a": [[1, 2]], "k": {}}))
        assert app.handle(job.job.id).result(timeout=20) == [1, 2]  # type: ignore[union-attr]
