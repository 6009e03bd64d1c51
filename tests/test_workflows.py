"""Chain, group and chord (docs/workflows.md, "Chain, group and chord"), on both backends: results
passed in order, a failure stopping a chain and an operator retry carrying it on, a chord's
callback given its group's results once, the checks made before anything is sent, an
interrupted enqueue finished by enqueuing again, asyncio, a partitioned namespace and a task in a
process of its own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from quasar_redis import (
    App,
    ClaimApplied,
    Connector,
    InvalidTaskCall,
    JobFailedError,
    JobRefusedError,
    Limits,
    Signature,
    Worker,
    chain,
    chord,
    current_job,
    group,
)
from quasar_redis import _workflows as wf

from . import process_tasks as pt
from .helpers import REDIS_URL, delete_namespace, real_redis


def declare(app: App) -> dict[str, Any]:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="flaky", max_attempts=1)
    def flaky(n: int) -> int:
        if current_job().attempt == 1:
            raise ValueError(f"first run of {n} fails")
        return n

    @app.task(name="total")
    def total(values: list[int], label: str = "total") -> str:
        return f"{label}: {values}"

    @app.task(name="nothing")
    def nothing() -> None:
        return None

    return {"add": add, "flaky": flaky, "total": total, "nothing": nothing}


def test_a_chain_passes_each_result_on(app: App) -> None:
    t = declare(app)
    handle = chain(t["add"].s(1, 2), t["add"].s(10), t["add"].s(b=100)).enqueue(id="sum")
    assert [h.id for h in handle.handles] == ["sum.1", "sum.2", "sum.3"]
    second = app.client.get_job("sum.2")
    assert second is not None and second.job.dependencies == ("sum.1",)
    assert app.drain() == 3
    assert handle.result(timeout=5) == 113
    assert [h.result(timeout=5) for h in handle.handles] == [3, 13, 113]


def test_a_chain_stops_at_a_failure_and_an_operator_retry_carries_it_on(app: App) -> None:
    t = declare(app)
    handle = chain(t["flaky"].s(5), t["add"].s(1)).enqueue(id="c")
    app.drain()
    with pytest.raises(JobFailedError):
        handle.handles[0].result(timeout=5)
    after = app.client.get_job("c.2")
    assert after is not None and after.status.value == "blocked"
    assert app.client.retry("c.1") is not None
    app.drain()
    assert handle.result(timeout=5) == 6


def test_a_group_gives_its_results_in_order_and_is_a_batch(app: App) -> None:
    t = declare(app)
    handle = group(t["add"].s(i, i) for i in range(12)).enqueue(id="g")
    assert [h.id for h in handle.handles] == [f"g.{i}" for i in range(1, 13)]
    app.drain()
    assert handle.result(timeout=5) == [2 * i for i in range(12)]
    info = app.client.batch("g")
    assert info is not None and info.closed and info.total == 12 and info.succeeded == 12


def test_a_chord_calls_back_once_with_every_result_in_order(app: App) -> None:
    t = declare(app)
    handle = chord(group(t["add"].s(i, 1) for i in range(30)), t["total"].s(label="all")).enqueue(
        id="ch"
    )
    assert handle.last.id == "ch@on_success"
    app.drain()
    assert handle.result(timeout=5) == f"all: {list(range(1, 31))}"
    info = app.client.batch("ch")
    assert info is not None and info.callback("on_success") is not None


def test_a_failed_member_holds_the_callback_until_it_is_retried(app: App) -> None:
    t = declare(app)
    members = [t["add"].s(1, 1), t["flaky"].s(7), t["add"].s(2, 2)]
    handle = chord(members, t["total"].s()).enqueue(id="cf")
    app.drain()
    assert app.client.get_job("cf@on_success") is None  # a member failed: no callback
    with pytest.raises(JobFailedError) as failed:
        handle.result(timeout=5)
    assert failed.value.job.id == "cf.2"
    assert app.client.retry("cf.2") is not None
    app.drain()
    assert handle.result(timeout=5) == "total: [2, 7, 4]"
    assert app.drain() == 0  # the callback ran once, nothing more is enqueued


def test_a_call_the_function_cannot_take_is_refused_before_anything_is_sent(app: App) -> None:
    t = declare(app)
    cases: list[Any] = [
        lambda: chain(t["add"].s(1, 2), t["nothing"].s()),  # receives a result it cannot take
        lambda: chain(t["add"].s(1, 2), t["add"].s(1, 2)),  # three arguments for two
        lambda: chain(t["add"].s(1)),  # the first step receives nothing
        lambda: chord(group(t["add"].s(1, 1)), t["add"].s()),
        chain,
        group,
    ]
    for make in cases:
        with pytest.raises(InvalidTaskCall):
            make().enqueue(id="bad")
    with pytest.raises(InvalidTaskCall, match="workflow id"):
        chain(t["add"].s(1, 2)).enqueue(id="has space")
    assert app.client.get_job("bad.1") is None and app.client.batch("bad") is None
    assert app.client.counts("default").available == 0


def test_the_calls_of_a_workflow_are_of_one_app(app: App) -> None:
    other = App("memory://")
    mine, theirs = declare(app), declare(other)
    with pytest.raises(InvalidTaskCall, match="one App"):
        chain(mine["add"].s(1, 2), theirs["add"].s(1)).enqueue()
    other.close()


@pytest.fixture
def small_app(backend: str, namespace: str) -> Iterator[App]:
    """An App of at most 10 jobs a call: a workflow of 25 takes three."""
    if backend == "fake":
        made = App(
            connector=Connector("memory://"), namespace=namespace, limits=Limits(max_batch=10)
        )
        yield made
        made.close()
        return
    real_redis().close()
    made = App(REDIS_URL, namespace=namespace, limits=Limits(max_batch=10))
    try:
        yield made
    finally:
        delete_namespace(made.client.redis, namespace)
        made.close()


def test_an_interrupted_enqueue_is_finished_by_enqueuing_it_again(
    small_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = small_app
    t = declare(app)
    made = chord(group(t["add"].s(i, 0) for i in range(25)), t["total"].s())
    sent: list[int] = []
    enqueue_many = app.client.enqueue_many

    def dies_after_one_call(jobs: Any, **kw: Any) -> Any:
        if sent:
            raise ConnectionError("the producer died")
        sent.append(len(jobs))
        return enqueue_many(jobs, **kw)

    monkeypatch.setattr(app.client, "enqueue_many", dies_after_one_call)
    with pytest.raises(ConnectionError):
        made.enqueue(id="big")
    monkeypatch.undo()
    info = app.client.batch("big")
    assert info is not None and info.total == 10 and not info.closed  # half way, still open
    assert app.drain() == 10 and app.client.get_job("big@on_success") is None
    handle = made.enqueue(id="big")  # again: the 15 missing ones, then the close
    info = app.client.batch("big")
    assert info is not None and info.total == 25 and info.closed
    app.drain()
    assert handle.result(timeout=5) == f"total: {list(range(25))}"


def test_asyncio_enqueues_and_waits(app: App) -> None:
    t = declare(app)

    async def main() -> tuple[Any, Any, Any]:
        c = await chain(t["add"].s(1, 1), t["add"].s(1)).aenqueue()
        g = await group(t["add"].s(i, 0) for i in range(3)).aenqueue()
        ch = await chord([t["add"].s(i, 0) for i in range(3)], t["total"].s()).aenqueue()
        await app.adrain()
        try:
            return await c.aresult(5), await g.aresult(5), await ch.aresult(5)
        finally:
            await app.aclose()

    assert asyncio.run(main()) == (3, [0, 1, 2], "total: [0, 1, 2]")


def test_a_partitioned_namespace_keeps_a_workflow_in_one_partition(backend: str) -> None:
    namespace = f"t-{uuid.uuid4().hex[:12]}"
    url = "memory://" if backend == "fake" else REDIS_URL
    if backend == "redis":
        real_redis().close()
    app = App(url, namespace=namespace, partitions=3)
    try:
        t = declare(app)
        c = chain(t["add"].s(1, 2), t["add"].s(3)).enqueue(id="pc")
        ch = chord(group(t["add"].s(i, 0) for i in range(5)), t["total"].s()).enqueue(id="pch")
        assert len({h.id.split("~")[0] for h in c.handles}) == 1
        assert len({h.id.split("~")[0] for h in ch.handles}) == 1
        app.drain()
        assert c.result(timeout=5) == 6
        assert ch.result(timeout=5) == "total: [0, 1, 2, 3, 4]"
    finally:
        if backend == "redis":
            client = real_redis()
            delete_namespace(client, namespace)
            client.close()
        app.close()


def test_a_task_in_a_process_of_its_own_receives_the_result(app: App) -> None:
    double = app.task(pt.double, name="double")
    handle = chain(double.s(4), double.s(), double.s()).enqueue()
    worker = Worker(app, concurrency=2, processes=2, maintenance_interval=0.1, idle_wait=1.0)
    with worker:
        assert handle.result(timeout=60) == 32


def test_a_step_whose_result_is_gone_fails_for_good(app: App) -> None:
    t = declare(app)
    handle = chain(t["add"].s(1, 2), t["add"].s(1)).enqueue(id="gone")
    first = app.client.claim_job("gone.1", "w", 60_000)  # the first step ends by hand
    assert isinstance(first, ClaimApplied)
    app.client.complete(first.claim.token, "w", result=None)
    # (its dependent counted it already: purge keeps it, so its hash goes as a prune's would)
    assert app.client.redis.delete(app.client.keys.job("gone.1")) == 1
    app.drain()
    with pytest.raises(JobFailedError) as failed:
        handle.result(timeout=5)
    assert failed.value.job.error is not None and failed.value.job.error.kind == "MissingResults"


def test_a_signature_is_a_value() -> None:
    app = App("memory://")
    t = declare(app)
    sig = t["add"].s(1, b=2)
    assert sig == Signature(t["add"], (1,), {"b": 2})
    assert isinstance(wf.chain(sig), wf.Chain)
    app.close()


def test_a_chord_that_fits_one_call_goes_in_whole_or_not_at_all(app: App) -> None:
    t = declare(app)
    app.client.enqueue("someone-else", id="atom.2")  # a job holds a member's id already
    made = chord([t["add"].s(i, 0) for i in range(3)], t["total"].s())
    with pytest.raises(JobRefusedError):
        made.enqueue(id="atom")
    assert app.client.batch("atom") is None and app.client.get_job("atom.1") is None
    again = chord([t["add"].s(i, 0) for i in range(3)], t["total"].s())
    handle = again.enqueue(id="whole")
    assert again.enqueue(id="whole").id == handle.id  # the same again: nothing more
    info = app.client.batch("whole")
    assert info is not None and info.total == 3 and info.closed
    app.drain()
    assert handle.result(timeout=5) == "total: [0, 1, 2]"
