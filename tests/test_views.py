"""The operator's read model without Redis: its values made from replies (``_views.py``) and
its reads driven by hand with the replies a client would give (``_reading.py``, ``_paged.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from quasar_redis import _paged as paged
from quasar_redis import _reading as reading
from quasar_redis import _types as t
from quasar_redis import _views as views
from quasar_redis._calls import Call, CallBuilder
from quasar_redis._keys import KeySpace

CALLS = CallBuilder(KeySpace("views"))


def test_an_entry_of_a_run_of_jobs_is_one_event_per_job() -> None:
    fields = {b"ev": b"completed", b"q": b"mail", b"job": b"a b c", b"a": b"1 2"}
    made = views.decode_event(b"1700000000123-0", fields)
    assert [(e.job, e.attempt) for e in made] == [("a", "1"), ("b", "2"), ("c", None)]
    assert {(e.id, e.at_ms, e.event, e.queue) for e in made} == {
        ("1700000000123-0", 1700000000123, "completed", "mail")
    }
    assert made[0].at == t.readable_time(1700000000123)


def test_a_pause_and_a_resume_are_events_of_no_job() -> None:
    paused = views.decode_event("5-1", {b"ev": b"paused", b"q": b"mail"})
    assert paused == [views.Event("5-1", 5, "paused", "mail")]
    resumed = views.decode_event(b"6-0", {b"ev": b"resumed", b"q": b"sms"})
    job = views.decode_event(b"7-0", {b"ev": b"paused", b"q": b"mail", b"job": b"x", b"a": b"1"})
    everything = paused + resumed + job
    assert views.events_of_queue(everything, "mail") == paused
    assert views.events_of_job(everything, "x") == job
    assert views.decode_event(b"8-0", {})[0].event == "?"  # (a field missing: shown as ?)


def test_a_listing_cursor_names_its_status_and_the_page_within() -> None:
    statuses = (t.Status.AVAILABLE, t.Status.DISCARDED)
    assert views.listing_start(statuses, None) == (0, None)
    assert views.listing_start(statuses, "discarded:abc") == (1, "abc")
    assert views.listing_start(statuses, "discarded:") == (1, None)
    with pytest.raises(ValueError, match="not a cursor"):
        views.listing_start(statuses, "completed:abc")
    assert views.listing_cursor(statuses, 1, "abc") == "discarded:abc"
    assert views.listing_cursor(statuses, 2, None) is None


def test_dependents_keep_the_total_and_some_ids_sorted() -> None:
    found = views.dependents(3, [b"c", b"a", "b"], 2)
    assert found == views.Dependents(3, ("a", "b")) and found.more
    assert not views.dependents(1, [b"a"], 2).more
    gone = views.Linked("x", None)
    assert gone.named("missing") == "missing"
    assert views.Linked("y", t.Status.COMPLETED).named("deleted") == "completed"


def test_slots_times_and_counts() -> None:
    worker = t.WorkerInfo(
        id="w1",
        host="h",
        pid=1,
        queues=("mail",),
        concurrency=4,
        running=("a", "b"),
        version="1",
        started_at=0,
        last_seen=0,
    )
    assert views.slots_of([worker]) == [("w1", 2, 4)]
    assert views.server_ms([b"1700000000", b"123456"]) == 1700000000123
    counts = t.QueueCounts(
        now=0,
        available=1,
        scheduled=0,
        executing=2,
        retryable=0,
        blocked=0,
        completed=5,
        discarded=3,
        cancelled=0,
    )
    assert views.counts_of(counts, (t.Status.DISCARDED, t.Status.COMPLETED)) == {
        "discarded": 3,
        "completed": 5,
    }
    assert list(views.counts_of(counts)) == [s.value for s in t.Status]


def drive(flow: Any, replies: Sequence[Any]) -> tuple[list[Any], Any]:
    """Run ``flow`` on canned ``replies``: what it asked for, and what it returned."""
    asked: list[Any] = []
    try:
        ask = next(flow)
        for reply in replies:
            asked.append(ask)
            ask = flow.send(reply)
    except StopIteration as stop:
        return asked, stop.value
    raise AssertionError(f"the flow asked for more: {ask!r}")


def test_the_event_scan_stops_at_its_cap_and_keeps_the_newest_oldest_first() -> None:
    def page(top: int) -> list[Any]:  # EVENT_PAGE entries, newest first, each naming job j
        return [
            (f"{n}-0".encode(), {b"ev": b"x", b"q": b"m", b"job": b"j", b"a": str(n).encode()})
            for n in range(top, top - views.EVENT_PAGE, -1)
        ]

    pages = views.EVENTS_SCANNED // views.EVENT_PAGE
    replies = [page(100_000 - i * views.EVENT_PAGE) for i in range(pages)]
    asked, found = drive(reading.job_events(CALLS, "j", 3), replies[:1])
    assert [e.attempt for e in found] == ["99998", "99999", "100000"]
    assert asked[0] == reading.RedisAsk(
        "xrevrange", (CALLS.keys.events,), {"max": "+", "min": "-", "count": views.EVENT_PAGE}
    )
    asked, found = drive(reading.job_events(CALLS, "other", 3), replies)
    assert found == [] and len(asked) == pages  # (the cap: never more than EVENTS_SCANNED)
    assert asked[1].kwargs["max"] == f"({100_000 - views.EVENT_PAGE + 1}-0"


def failed_job(i: int) -> t.Job:
    return t.Job(
        id=f"f{i}",
        queue="mail",
        stage="s",
        raw_payload=b"",
        input_ref="inline",
        input_revision=0,
        dependencies=(),
        priority=0,
        attempt=1,
        max_attempts=1,
        fencing_version=10 + i,
        state=t.Failed(reason="x", failed_at=1000 + i),
        inserted_at=0,
    )


def test_a_paged_retry_passes_each_fence_a_page_at_a_time() -> None:
    jobs = [failed_job(i) for i in range(250)]
    told: list[int] = []
    flow = paged.retry_failed(CALLS, "mail", "why", told.append)
    page = t.JobPage(tuple(jobs), None)
    replies: list[Any] = [(b"2", b"0"), page]  # TIME (well after every failure), the page
    replies += [[t.JobApplied(j) for j in jobs[s : s + paged.BATCH]] for s in (0, 100, 200)]
    asked, tally = drive(flow, replies)
    assert isinstance(asked[0], reading.RedisAsk) and asked[0].method == "time"
    listed = CALLS.page_jobs("mail", t.Status.DISCARDED, None, paged.PAGE, None)
    assert asked[1].args[1:] == listed.args[1:]  # (args[0]: the call's own "now")
    batches = asked[2:]
    assert [len(b) for b in batches] == [100, 100, 50] == told
    sent = [call for batch in batches for call in batch]
    assert all(isinstance(c, Call) for c in sent)
    assert [c.args[1:] for c in sent] == [
        CALLS.retry(j.id, j.fencing_version, "why").args[1:] for j in jobs
    ]
    assert (tally.changed, tally.refused) == (250, [])
