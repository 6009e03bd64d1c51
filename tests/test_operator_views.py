"""What the operator commands read, on both backends: pages across statuses by cursor, a job's
dependents and its events, and stored values decoded whatever their format."""

from __future__ import annotations

import json

import pytest

from quasar_redis import Quasar, Status
from quasar_redis._codec import pack
from quasar_redis.cli.ops._durations import parse_duration
from quasar_redis.cli.ops._look import ORDER, dependents, list_page, recent_events, status_named
from quasar_redis.cli.ops._show import decoded

from .helpers import T0, applied
from .test_operator import finish


def test_pages_run_through_every_status_by_cursor(sync_q: Quasar) -> None:
    q = sync_q
    for i in range(5):
        applied(q.enqueue("s", i, id=f"a{i}", queue="m", now=T0))
    for i in range(3):
        applied(q.enqueue("s", i, id=f"d{i}", queue="m", max_attempts=1, now=T0))
        finish(q, f"d{i}", T0 + i, fail=True)
    seen, cursor = [], None
    while True:
        page = list_page(q, "m", ORDER, cursor, 3)
        seen += [(status.value, job.id) for status, job in page.jobs]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [("available", f"a{i}") for i in range(5)] + [
        ("discarded", f"d{i}") for i in range(3)
    ]
    with pytest.raises(ValueError, match="not a cursor"):
        list_page(q, "m", ORDER, "lost:x", 3)


def test_dependents_and_events_of_a_job(sync_q: Quasar) -> None:
    q = sync_q
    applied(q.enqueue("s", None, id="root", now=T0))
    for i in range(60):
        applied(q.enqueue("s", None, id=f"c{i:02d}", dependencies=["root"], now=T0))
    total, some = dependents(q, "root")
    assert total == 60 and len(some) == 50 and set(some) <= {f"c{i:02d}" for i in range(60)}
    finish(q, "root", T0 + 5)
    assert [e["event"] for e in recent_events(q, "root")] == ["available", "executing", "completed"]
    assert recent_events(q, "nobody") == []


def test_values_are_decoded_whatever_their_format() -> None:
    assert decoded(pack({"a": [1]})) == {"format": "msgpack", "value": {"a": [1]}}
    assert decoded(b'{"a": [1]') == {"format": "text", "value": '{"a": [1]'}
    assert decoded(json.dumps([1, 2]).encode()) == {"format": "json", "value": [1, 2]}
    assert decoded(b"\xc1\xff") == {"format": "bytes", "value": "wf8="}
    assert decoded(None) is None


@pytest.mark.parametrize(
    ("text", "ms"), [("90s", 90_000), ("1h30m", 5_400_000), ("7d", 604_800_000), ("250ms", 250)]
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "soon", "-5m", "5", "5 parsecs", "m5", "1000000w"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration|longer than a century"):
        parse_duration(text)


def test_status_words() -> None:
    assert status_named("failed") == Status.DISCARDED
    assert status_named("Succeeded") == Status.COMPLETED
    with pytest.raises(ValueError):
        status_named("lost")
