"""Pages of jobs by cursor (``page_jobs``), and the bound on ``list_jobs``' offset."""

from __future__ import annotations

import pytest

from quasar_redis import InvalidArgument, JobPage, NewJob, Quasar, Status

from .helpers import T0, applied, claimed


def every_page(q: Quasar, status: Status | str, limit: int, now: int) -> list[str]:
    """The ids of every page of ``status``, walked by cursor to its end."""
    ids: list[str] = []
    cursor: str | None = None
    for _ in range(1_000):
        page = q.page_jobs("default", status, after=cursor, limit=limit, now=now)
        assert isinstance(page, JobPage)
        ids += [job.id for job in page.jobs]
        cursor = page.next_cursor
        if cursor is None:
            return ids
    raise AssertionError("the pages never ended")


def retry_waiting(q: Quasar, job_id: str, now: int, delay_ms: int = 0) -> None:
    token = claimed(q.claim_job(job_id, "w", 1000, now=now)).token
    applied(q.fail(token, "w", "again", retry_delay_ms=delay_ms, now=now))


def test_pages_by_cursor_hold_what_list_jobs_holds(q: Quasar) -> None:
    # Ties on every score (one available_at, one priority), jobs due and not yet due, RetryWaiting
    # entries among the available ones, finished jobs.
    q.enqueue_many([NewJob("s", id=f"a{i:02d}") for i in range(30)], now=T0)
    q.enqueue_many([NewJob("s", id=f"d{i:02d}", delay_ms=10) for i in range(12)], now=T0)
    q.enqueue_many([NewJob("s", id=f"s{i:02d}", delay_ms=10_000) for i in range(9)], now=T0)
    for i in range(0, 30, 4):
        retry_waiting(q, f"a{i:02d}", T0)
    for i in range(1, 30, 7):
        token = claimed(q.claim_job(f"a{i:02d}", "w", 1000, now=T0)).token
        applied(q.complete(token, "w", now=T0 + i))
    now = T0 + 100
    for status in [*Status, "blocked"]:
        whole = [job.id for job in q.list_jobs("default", status, limit=1000, now=now)]
        for limit in (1, 4, 1000):
            assert every_page(q, status, limit, now) == whole, (status, limit)


def test_a_cursor_resumes_after_a_job_that_left_its_index(q: Quasar) -> None:
    q.enqueue_many([NewJob("s", id=f"j{i:02d}") for i in range(10)], now=T0)
    first = q.page_jobs("default", Status.AVAILABLE, limit=4, now=T0)
    assert [job.id for job in first.jobs] == ["j00", "j01", "j02", "j03"]
    claimed(q.claim_job("j03", "w", 1000, now=T0))  # the last job seen leaves `ready`
    claimed(q.claim_job("j04", "w", 1000, now=T0))
    second = q.page_jobs("default", Status.AVAILABLE, after=first.next_cursor, limit=4, now=T0)
    assert [job.id for job in second.jobs] == ["j05", "j06", "j07", "j08"]
    last = q.page_jobs("default", Status.AVAILABLE, after=second.next_cursor, limit=4, now=T0)
    assert ([job.id for job in last.jobs], last.next_cursor) == (["j09"], None)


def test_a_page_reads_a_bounded_run_of_entries(q: Quasar) -> None:
    # 120 RetryWaiting entries not yet due ahead of the one scheduled job: the first page of
    # scheduled jobs stops after reading limit + 100 entries, short, with a cursor to go on from.
    q.enqueue_many([NewJob("s", id=f"r{i:03d}") for i in range(120)], now=T0)
    q.enqueue("s", id="waiting", delay_ms=20_000, now=T0 + 1)
    for i in range(120):
        retry_waiting(q, f"r{i:03d}", T0 + 1, delay_ms=10_000)
    first = q.page_jobs("default", Status.SCHEDULED, limit=1, now=T0 + 2)
    assert first.jobs == ()
    assert first.next_cursor is not None
    assert every_page(q, Status.SCHEDULED, 1, T0 + 2) == ["waiting"]


def test_paging_refuses_what_it_cannot_page_by(q: Quasar) -> None:
    q.enqueue_many([NewJob("s", id=f"j{i}") for i in range(3)], now=T0)
    cursor = q.page_jobs("default", Status.AVAILABLE, limit=1, now=T0).next_cursor
    assert cursor is not None
    with pytest.raises(InvalidArgument, match="cursor"):
        q.page_jobs("default", Status.SCHEDULED, after=cursor, now=T0)
    for bad in ("nonsense", "available:9:0:", "available:1:0:abc", "available:1:x:00"):
        with pytest.raises(InvalidArgument, match="cursor"):
            q.page_jobs("default", Status.AVAILABLE, after=bad, now=T0)
    with pytest.raises(InvalidArgument, match="limit"):
        q.page_jobs("default", Status.AVAILABLE, limit=1001)
    for status in (Status.AVAILABLE, Status.SCHEDULED):
        with pytest.raises(InvalidArgument, match="offset"):
            q.list_jobs("default", status, offset=1001)
        assert q.list_jobs("default", status, offset=1000) == []
    assert q.list_jobs("default", Status.COMPLETED, offset=10**6) == []
