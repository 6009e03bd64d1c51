"""Dedup keys of an enqueue (lua/include/unique.lua): unique, throttle and debounce windows at
their edges, batches that skip duplicates, bad options, re-sent calls, and prune freeing a key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from quasar_redis import (
    App,
    BatchApplied,
    BatchRefused,
    Debounce,
    DuplicateJob,
    InvalidJob,
    JobApplied,
    JobRefused,
    NewJob,
    Quasar,
    Status,
    Throttle,
    Unique,
    Waiting,
)
from quasar_redis._schema import ENQUEUE_ITEM
from quasar_redis.cli.ops._show import details
from quasar_redis.dashboard._data import job_fields

from .helpers import T0, app_url, applied, claimed, snapshot, where

DOC = Path(__file__).resolve().parent.parent / "docs" / "deduplication.md"


def deduplicated(result: Any) -> str:
    """The id of the job an enqueue was answered with instead of a new one."""
    assert isinstance(result, JobApplied), result
    assert result.deduplicated, result
    return result.job.id


def fresh(result: Any) -> str:
    """The id of the job an enqueue made."""
    assert isinstance(result, JobApplied), result
    assert not result.deduplicated, result
    return result.job.id


def stored(q: Quasar) -> dict[str, Any]:
    """``snapshot`` but the call records (a deduplicating call keeps one for its re-sending)."""
    return {k: v for k, v in snapshot(q).items() if not k.startswith(q.keys.call(""))}


def finish(q: Quasar, now: int) -> None:
    """Claim and complete the one available job of the default queue at ``now``."""
    claim = claimed(q.claim("default", "w", 10_000, now=now))
    assert isinstance(q.complete(claim.token, "w", now=now), JobApplied)


# --- unique ------------------------------------------------------------------------------------


def test_unique_until_running_answers_with_the_job_until_it_finishes(q: Quasar) -> None:
    key = Unique("report")
    first = fresh(q.enqueue("s", 1, dedup=key, now=T0))
    before = stored(q)
    assert deduplicated(q.enqueue("s", 2, dedup=key, now=T0 + 5)) == first
    assert stored(q) == before  # nothing written: no job, no sequence number, no event
    claimed(q.claim("default", "w", 10_000, now=T0 + 10))
    assert deduplicated(q.enqueue("s", 3, dedup=key, now=T0 + 20)) == first  # running
    finish(q, T0 + 20_001)  # (its lease ran out: claimed again, then completed)
    second = fresh(q.enqueue("s", 4, dedup=key, now=T0 + 20_002))
    assert second != first
    assert q.redis.get(q.keys.unique("report")) == second.encode()


def test_unique_until_waiting_makes_a_new_job_once_the_first_runs(q: Quasar) -> None:
    key = Unique("w", until="waiting")
    first = fresh(q.enqueue("s", dedup=key, now=T0))
    assert deduplicated(q.enqueue("s", dedup=key, now=T0)) == first
    claimed(q.claim("default", "w", 10_000, now=T0))
    assert fresh(q.enqueue("s", dedup=key, now=T0)) != first


def test_unique_until_finished_holds_the_key_for_the_ttl_after_it_finished(q: Quasar) -> None:
    key = Unique("f", until="finished", ttl_ms=1_000)
    first = fresh(q.enqueue("s", dedup=key, now=T0))
    finish(q, T0 + 100)  # finished_at = T0 + 100: the key is held while now < T0 + 1100
    assert deduplicated(q.enqueue("s", dedup=key, now=T0 + 1_099)) == first
    assert fresh(q.enqueue("s", dedup=key, now=T0 + 1_100)) != first


def test_the_callers_mode_decides_not_the_holders(q: Quasar) -> None:
    first = fresh(q.enqueue("s", dedup=Unique("k", until="finished", ttl_ms=5_000), now=T0))
    finish(q, T0)
    assert deduplicated(q.enqueue("s", dedup=Unique("k", "finished", 5_000), now=T0 + 1)) == first
    assert fresh(q.enqueue("s", dedup=Unique("k", until="running"), now=T0 + 1)) != first


def test_a_derived_key_is_the_stage_and_the_payload(q: Quasar) -> None:
    first = fresh(q.enqueue("s", {"a": 1}, dedup=Unique(), now=T0))
    assert deduplicated(q.enqueue("s", {"a": 1}, dedup=Unique(), now=T0)) == first
    assert fresh(q.enqueue("s", {"a": 2}, dedup=Unique(), now=T0)) != first
    assert fresh(q.enqueue("t", {"a": 1}, dedup=Unique(), now=T0)) != first


def test_a_job_with_a_key_shows_it_to_operators(q: Quasar) -> None:
    result = q.enqueue("s", dedup=Throttle("t", 500), now=T0)
    assert isinstance(result, JobApplied) and result.job.dedup == "throttle 500 t"
    assert q.redis.hget(q.keys.job(result.job.id), "uq") == b"throttle 500 t"
    info = q.get_job(result.job.id, now=T0)
    assert info is not None and info.job.dedup == "throttle 500 t"
    assert details(info)["dedup"] == "throttle 500 t"  # quasar job
    assert ("dedup", "throttle 500 t") in job_fields(info.job, T0)[1]  # the dashboard's
    plain = applied(q.enqueue("s", now=T0))
    assert plain.dedup is None and ("dedup", "-") in job_fields(plain, T0)[1]
    again = q.enqueue("s", dedup=Throttle("t", 500), now=T0 + 1)
    assert isinstance(again, JobApplied) and again.job.dedup == "throttle 500 t"


# --- throttle ----------------------------------------------------------------------------------


def test_throttle_keeps_the_first_job_of_the_window_whatever_its_state(q: Quasar) -> None:
    key = Throttle("t", window_ms=1_000)
    first = fresh(q.enqueue("s", 1, dedup=key, now=T0))
    finish(q, T0 + 10)
    assert deduplicated(q.enqueue("s", 2, dedup=key, now=T0 + 999)) == first  # the last ms in
    second = fresh(q.enqueue("s", 3, dedup=key, now=T0 + 1_000))  # the window's end: a new one
    assert deduplicated(q.enqueue("s", 4, dedup=key, now=T0 + 1_999)) == second
    assert fresh(q.enqueue("s", 5, dedup=key, now=T0 + 2_000)) not in (first, second)


# --- debounce ----------------------------------------------------------------------------------


def test_debounce_replaces_the_waiting_jobs_payload_and_time(q: Quasar) -> None:
    key = Debounce("d", window_ms=1_000)
    first = fresh(q.enqueue("s", {"n": 1}, dedup=key, delay_ms=300, now=T0))
    result = q.enqueue("s", {"n": 2}, dedup=key, delay_ms=300, now=T0 + 999)
    assert deduplicated(result) == first
    assert isinstance(result, JobApplied)
    assert result.job.payload == {"n": 2}
    assert result.job.state == Waiting(T0 + 999 + 300)
    assert result.job.inserted_at == T0
    info = q.get_job(first)
    assert info is not None and info.job.payload == {"n": 2}
    assert info.job.state == Waiting(T0 + 1_299)
    assert where(q, first) == {"delayed"}
    # at the window's end (counted from the first enqueue): a new job; the first keeps its input
    second = fresh(q.enqueue("s", {"n": 3}, dedup=key, now=T0 + 1_000))
    assert second != first
    assert where(q, second) == {"ready"}


def test_debounce_moves_a_job_between_its_indexes(q: Quasar) -> None:
    key = Debounce("d", window_ms=1_000)
    first = fresh(q.enqueue("s", dedup=key, now=T0))
    assert where(q, first) == {"ready"}
    applied(q.enqueue("s", dedup=key, delay_ms=50, now=T0 + 1))
    assert where(q, first) == {"delayed"}
    applied(q.enqueue("s", dedup=key, now=T0 + 2))
    assert where(q, first) == {"ready"}
    claim = claimed(q.claim("default", "w", 1_000, now=T0 + 2))
    assert claim.job.id == first


@pytest.mark.parametrize("debounce_first", [True, False])
def test_a_debounce_and_a_supersede_of_one_job_in_one_batch_apply_in_its_order(
    q: Quasar, debounce_first: bool
) -> None:
    """One batch both debounces a waiting job (by its key) and supersedes it (by its id): each
    rewrites the job as the one before it left it, as if sent one after the other."""
    held = fresh(q.enqueue("s", {"v": 0}, id="held", dedup=Unique("k"), now=T0))
    debounce = NewJob(
        "s", {"v": "debounced"}, id="other", dedup=Debounce("k", 1_000), available_at=T0 - 200
    )
    supersede = NewJob("s", {"v": "superseded"}, id=held, input_revision=1)
    batch = [debounce, supersede] if debounce_first else [supersede, debounce]
    result = q.enqueue_many(batch, now=T0)
    assert isinstance(result, BatchApplied), result
    info = q.get_job(held)
    assert info is not None
    assert result.jobs == (info.job, info.job)  # both answered by the job as the batch left it
    assert info.job.input_revision == 1
    assert info.job.state == Waiting(T0 - 200)  # (a supersede keeps a waiting job's time)
    assert info.job.payload == {"v": "superseded" if debounce_first else "debounced"}
    ready = q.redis.zrange(q.keys.queue("default", "ready"), 0, -1)
    assert [m[11:].decode() for m in ready] == [held]  # one entry, at the time stored
    assert where(q, held) == {"ready"}


@pytest.mark.parametrize("each", [False, True])
def test_a_debounce_after_a_supersede_in_one_batch_leaves_none_of_its_long_payload(
    q: Quasar, each: bool
) -> None:
    """A batch supersedes a waiting job with a payload stored in chunks, then debounces it with
    a short one: the job holds the short payload alone, as if the two were sent one after the
    other (the debounce drops the chunks the supersede wrote, not only those it found first)."""
    held = fresh(q.enqueue("s", {"v": 0}, id="held", dedup=Debounce("k", 1_000), now=T0))
    supersede = NewJob("s", b"\x00" * 63, id=held, input_revision=1)  # (65 bytes: two chunks)
    debounce = NewJob("s", 0, id="other", dedup=Debounce("k", 1_000))
    if each:
        results = q.enqueue_each([supersede, debounce], now=T0 + 1)
        assert all(isinstance(r, JobApplied) for r in results), results
    else:
        assert isinstance(q.enqueue_many([supersede, debounce], now=T0 + 1), BatchApplied)
    info = q.get_job(held)
    assert info is not None and info.job.payload == 0 and info.job.input_revision == 1
    fields = q.redis.hkeys(q.keys.job(held))
    assert not [f for f in fields if re.fullmatch(rb"p\d+", f)], fields  # no chunk left


def test_debounce_replaces_a_long_payload_by_a_short_one(q: Quasar) -> None:
    key = Debounce("d", window_ms=1_000)
    first = fresh(q.enqueue("s", "x" * 500, dedup=key, now=T0))  # stored in chunks
    result = q.enqueue("s", "short", dedup=key, now=T0 + 1)
    assert isinstance(result, JobApplied) and result.job.payload == "short"
    info = q.get_job(first)
    assert info is not None and info.job.payload == "short"


def test_debounce_makes_a_new_job_once_the_first_started(q: Quasar) -> None:
    key = Debounce("d", window_ms=1_000)
    first = fresh(q.enqueue("s", 1, dedup=key, now=T0))
    claim = claimed(q.claim("default", "w", 1_000, now=T0))
    q.fail(claim.token, "w", "boom", now=T0 + 1)  # waiting again, but attempted
    second = fresh(q.enqueue("s", 2, dedup=key, now=T0 + 2))
    assert second != first
    info = q.get_job(first)
    assert info is not None and info.job.payload == 1


# --- batches -----------------------------------------------------------------------------------


def test_a_batch_refuses_a_duplicate_id_unless_told_to_skip_it(q: Quasar) -> None:
    applied(q.enqueue("s", "old", id="a", now=T0))
    jobs = [NewJob("s", id="b"), NewJob("s", "new", id="a"), NewJob("s", id="b"), NewJob("s")]
    before = snapshot(q)
    assert q.enqueue_many(jobs, now=T0) == BatchRefused(1, DuplicateJob("a"))
    assert snapshot(q) == before
    result = q.enqueue_many(jobs, now=T0, on_duplicate="skip")
    assert isinstance(result, BatchApplied)
    assert result.deduplicated == (1, 2)
    assert [j.id for j in result.jobs[:3]] == ["b", "a", "b"]
    assert result.jobs[1].payload == "old"  # the job that exists, unchanged
    assert len(set(result.ids)) == 3


def test_a_batch_skips_jobs_by_key_and_says_which(q: Quasar) -> None:
    held = fresh(q.enqueue("s", dedup=Unique("k1"), now=T0))
    jobs = [
        NewJob("s", dedup=Unique("k1")),
        NewJob("s", dedup=Unique("k2")),
        NewJob("s", dedup=Unique("k2")),
        NewJob("s"),
    ]
    result = q.enqueue_many(jobs, now=T0)
    assert isinstance(result, BatchApplied)
    assert result.deduplicated == (0, 2)
    assert result.jobs[0].id == held
    assert result.jobs[2].id == result.jobs[1].id != held
    ids_only = q.enqueue_many(jobs, now=T0, ids_only=True)
    assert isinstance(ids_only, BatchApplied)
    assert ids_only.deduplicated == (0, 1, 2)
    assert ids_only.ids[:3] == (held, result.jobs[1].id, result.jobs[1].id)


def test_enqueue_each_answers_each_deduplicated_job(q: Quasar) -> None:
    held = fresh(q.enqueue("s", dedup=Unique("k"), now=T0))
    results = q.enqueue_each([NewJob("s", dedup=Unique("k")), NewJob("s", dedup=Unique("n"))])
    assert deduplicated(results[0]) == held
    made = fresh(results[1])
    again = q.enqueue_each([NewJob("s", dedup=Unique("n")), NewJob("s", dedup=Unique("n"))])
    assert [deduplicated(r) for r in again] == [made, made]


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dedup", "reason"),
    [
        (Throttle("k", 0), "throttle window_ms must be positive"),
        (Debounce("k", -5), "debounce window_ms must be positive"),
        (Unique("k", "finished"), "unique ttl_ms must be an integer number of ms"),
        (Unique("k", "finished", 0), "unique ttl_ms must be positive"),
        (Unique("k", "running", 10), "unique until 'running' takes no ttl_ms"),
        (Unique("k", "later"), "unique until must be 'waiting', 'running' or 'finished'"),  # type: ignore[arg-type]
        (
            Unique("a b"),
            "dedup key must not contain whitespace, control or format characters (U+0020)",
        ),
        (Unique(""), "dedup key must not be empty"),
        (Unique("k" * 257), "dedup key must be at most 256 bytes"),
        (Throttle("k", 1.5), "throttle window_ms must be an integer number of ms"),  # type: ignore[arg-type]
        ("k", "dedup must be a Unique, Throttle or Debounce"),
    ],
)
def test_bad_dedup_options_are_refused_and_change_nothing(
    q: Quasar, dedup: Any, reason: str
) -> None:
    applied(q.enqueue("s", id="there", now=T0))
    before = snapshot(q)
    assert q.enqueue("s", dedup=dedup, now=T0) == JobRefused(InvalidJob(reason))
    batch = [NewJob("s"), NewJob("s", dedup=dedup)]
    assert q.enqueue_many(batch, now=T0) == BatchRefused(1, InvalidJob(reason))
    assert snapshot(q) == before


@pytest.mark.parametrize(
    ("arg", "reason"),
    [
        ("throttle 0 k", "throttle window must be positive"),
        ("debounce -1 k", "debounce window must be positive"),
        ("running 5 k", "running takes no window"),
        ("throttle 5 " + "k" * 257, "dedup key must be at most 256 bytes"),
        ("throttle 17592186044416 k", "throttle window must be at most 17592186044415 ms"),
        (
            "often 5 k",
            "dedup must be '<mode> <window ms> <key>', mode one of waiting, running, "
            "finished, throttle, debounce",
        ),
        (
            "throttle 5",
            "dedup must be '<mode> <window ms> <key>', mode one of waiting, running, "
            "finished, throttle, debounce",
        ),
        (
            "throttle 5 a b",
            "dedup key must not contain whitespace, control or format characters (U+0020)",
        ),
    ],
)
def test_the_script_refuses_a_bad_dedup_argument(q: Quasar, arg: str, reason: str) -> None:
    """What another client might send: the script checks it too, before any write."""
    before = snapshot(q)
    call = q.calls.enqueue(NewJob("s"), T0)
    args = list(call.args)
    args[len(args) - len(ENQUEUE_ITEM) + ENQUEUE_ITEM.index("dedup")] = arg  # the last job's
    assert q.execute(type(call)(call.script, tuple(args), call.parse)) == JobRefused(
        InvalidJob(reason)
    )
    assert snapshot(q) == before


def test_on_duplicate_must_be_refuse_or_skip(q: Quasar) -> None:
    before = snapshot(q)
    result = q.enqueue_many([NewJob("s")], now=T0, on_duplicate="merge")  # type: ignore[arg-type]
    assert result == BatchRefused(0, InvalidJob("on_duplicate must be 'refuse' or 'skip'"))
    assert snapshot(q) == before


# --- re-sent calls and prune -------------------------------------------------------------------


def test_a_resent_debounce_changes_nothing_more(q: Quasar) -> None:
    key = Debounce("d", window_ms=1_000)
    first = fresh(q.enqueue("s", 1, dedup=key, now=T0))
    call = q.calls.enqueue(NewJob("s", 2, dedup=key, delay_ms=10), T0 + 5)
    assert deduplicated(q.execute(call)) == first
    before = snapshot(q)
    again = q.execute(call)
    assert deduplicated(again) == first
    assert isinstance(again, JobApplied) and again.job.state == Waiting(T0 + 15)
    assert snapshot(q) == before


def test_a_resent_unique_enqueue_keeps_its_answer_after_the_holder_finished(q: Quasar) -> None:
    first = fresh(q.enqueue("s", dedup=Unique("k"), now=T0))
    call = q.calls.enqueue_many([NewJob("s", dedup=Unique("k")), NewJob("s", id="x")], T0)
    result = q.execute(call)
    assert isinstance(result, BatchApplied) and result.deduplicated == (0,)
    finish(q, T0 + 1)  # the key is free now: a new call would make a job
    before = snapshot(q)
    again = q.execute(call)
    assert isinstance(again, BatchApplied)
    assert again.deduplicated == (0,)
    assert [j.id for j in again.jobs] == [first, "x"]
    assert snapshot(q) == before


def test_a_resent_each_call_keeps_its_answers(q: Quasar) -> None:
    first = fresh(q.enqueue("s", dedup=Unique("k"), now=T0))
    call = q.calls.enqueue_each([NewJob("s", dedup=Unique("k")), NewJob("s", id="y")], T0)
    results = q.execute(call)
    assert deduplicated(results[0]) == first
    finish(q, T0 + 1)
    before = snapshot(q)
    again = q.execute(call)
    assert deduplicated(again[0]) == first
    assert fresh(again[1]) == "y"
    assert snapshot(q) == before


def test_prune_frees_the_key_of_the_job_it_deletes(q: Quasar) -> None:
    first = fresh(q.enqueue("s", dedup=Unique("k", "finished", 10), now=T0))
    finish(q, T0)
    q.prune(max_age_ms=1, now=T0 + 120_000)
    assert q.get_job(first) is None
    assert q.redis.get(q.keys.unique("k")) is None


def test_prune_leaves_a_key_another_job_took(q: Quasar) -> None:
    first = fresh(q.enqueue("s", dedup=Unique("k", "waiting"), now=T0))
    token = claimed(q.claim("default", "w", 10_000, now=T0)).token
    second = fresh(q.enqueue("s", dedup=Unique("k", "waiting"), now=T0))
    assert isinstance(q.complete(token, "w", now=T0), JobApplied)
    q.prune(max_age_ms=1, now=T0 + 200_000)
    assert q.get_job(first) is None
    assert q.redis.get(q.keys.unique("k")) == second.encode()


# --- the task API ------------------------------------------------------------------------------


def rebuild(user_id: int, *, full: bool = False) -> int:
    return user_id


def test_a_task_derives_its_key_from_its_name_and_arguments(app: App) -> None:
    task = app.task(rebuild, name="rebuild").options(dedup=Unique())
    first = task.enqueue(42)
    assert task.enqueue(42).id == first.id
    assert task.enqueue(42, full=True).id != first.id
    assert task.enqueue(7).id != first.id
    other = app.task(rebuild, name="rebuild_other").options(dedup=Unique())
    assert other.enqueue(42).id != first.id
    key = app.client.redis.hget(app.client.keys.job(first.id), "uq")
    assert key is not None and key.startswith(b"running 0 rebuild:")


def test_a_task_batch_with_a_duplicate_gets_the_holders_handle(app: App) -> None:
    task = app.task(rebuild, name="rebuild").options(dedup=Throttle("user-1", 1_000))
    handles = app.enqueue_many([task.job(1), task.job(1)])
    assert handles[0].id == handles[1].id


# --- the documentation -------------------------------------------------------------------------


def test_the_examples_of_the_deduplication_page_run_as_written(
    q: Quasar, backend: str, namespace: str
) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) == 6
    with app_url(backend, namespace) as url, App(url, namespace=namespace) as app:
        space: dict[str, Any] = {"q": q, "app": app, "__name__": "docs_deduplication"}
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), space)


def test_later_jobs_of_a_batch_get_the_job_an_earlier_one_got(q: Quasar) -> None:
    key = Debounce("d", window_ms=1_000)
    held = fresh(q.enqueue("s", 1, dedup=key, delay_ms=100, now=T0))
    jobs = [NewJob("s", 2, dedup=key, delay_ms=100), NewJob("s", 3, dedup=key)]
    result = q.enqueue_many(jobs, now=T0 + 10)
    assert isinstance(result, BatchApplied) and result.deduplicated == (0, 1)
    assert [j.payload for j in result.jobs] == [2, 2]  # the first replaced it, the second not
    assert [j.state for j in result.jobs] == [Waiting(T0 + 110)] * 2
    each = q.enqueue_each([NewJob("s", 4, dedup=key), NewJob("s", 5, dedup=key)], now=T0 + 20)
    assert [deduplicated(r) for r in each] == [held, held]
    assert [r.job.payload for r in each if isinstance(r, JobApplied)] == [4, 4]


def test_a_debounce_skipped_for_its_id_changes_nothing(q: Quasar) -> None:
    applied(q.enqueue("s", 1, id="a", now=T0))
    before = stored(q)
    job = NewJob("s", 2, id="a", dedup=Debounce("k", 100), delay_ms=50)
    result = q.enqueue_many([job], now=T0 + 1, on_duplicate="skip")
    assert isinstance(result, BatchApplied) and result.deduplicated == (0,)
    assert result.jobs[0].payload == 1
    assert stored(q) == before


def test_a_debounce_appends_an_event_and_a_dropped_enqueue_none(q: Quasar) -> None:
    def events() -> list[tuple[bytes, bytes]]:
        entries = q.redis.xrange(q.keys.events)
        return [(fields[b"ev"], fields[b"job"]) for _, fields in entries]

    first = fresh(q.enqueue("s", 1, dedup=Debounce("d", 1_000), now=T0))
    fresh(q.enqueue("s", 1, dedup=Throttle("t", 1_000), now=T0))
    before = events()
    applied(q.enqueue("s", 2, dedup=Debounce("d", 1_000), delay_ms=500, now=T0 + 1))
    assert events() == [*before, (b"scheduled", first.encode())]
    applied(q.enqueue("s", 2, dedup=Throttle("t", 1_000), now=T0 + 1))
    assert events() == [*before, (b"scheduled", first.encode())]


def test_coalesced_enqueues_without_now_are_deduplicated_too(q: Quasar) -> None:
    first = fresh(q.enqueue("s", dedup=Unique("k")))  # (the asyncio client coalesces these)
    assert deduplicated(q.enqueue("s", dedup=Unique("k"))) == first


def test_purge_frees_the_key_of_the_job_it_deletes(q: Quasar) -> None:
    first = fresh(q.enqueue("s", dedup=Unique("k", "finished", 10), now=T0))
    finish(q, T0)
    assert q.purge("default", Status.COMPLETED, [first], now=T0 + 120_000) == 1
    assert q.redis.get(q.keys.unique("k")) is None
