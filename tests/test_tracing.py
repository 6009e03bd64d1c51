"""OpenTelemetry traces on both backends, seen through the SDK's in-memory exporter: the producer's
span and the worker's span in one trace, errors on the span, and nothing at all when tracing is
off."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import opentelemetry.trace as otel_trace
import pytest
from opentelemetry import baggage, context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from quasar_redis import (
    App,
    Fixed,
    InvalidTaskCall,
    JobApplied,
    JobFailedError,
    JobRefusedError,
    NewJob,
    Snooze,
    Unique,
    current_job,
)
from quasar_redis import _tracing as tracing
from quasar_redis._codec import Encoded

from .helpers import app_url


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> TracerProvider:
    """An SDK tracer provider, set as the application's global one for the test."""
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", made)  # (set_tracer_provider: once only)
    return made


def spans_of(provider: TracerProvider) -> list[ReadableSpan]:
    processor = provider._active_span_processor._span_processors[0]
    assert isinstance(processor, SimpleSpanProcessor)
    exporter = processor.span_exporter
    assert isinstance(exporter, InMemorySpanExporter)
    return list(exporter.get_finished_spans())


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def payload_of(app: App, handle: Any) -> Any:
    info = handle.info()
    assert info is not None
    return app.serializer.loads(info.job.raw_payload)


# --- one trace from the enqueue to the run -------------------------------------------------------


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_the_enqueue_and_the_run_are_one_trace(
    app: App, provider: TracerProvider, kind: str
) -> None:
    tracer = provider.get_tracer("the application")

    def plain(order: int) -> int:
        with otel_trace.get_tracer("task code", tracer_provider=provider).start_as_current_span(
            "charge"
        ):
            return order * 2

    async def coroutine(order: int) -> int:
        with tracer.start_as_current_span("charge"):
            await asyncio.sleep(0)
            return order * 2

    fn = plain if kind == "plain" else coroutine
    task = app.task(fn, name="shop.charge", queue="payments")
    with tracer.start_as_current_span("POST /orders") as request:
        handle = task.enqueue(21)
    assert app.drain() == 1
    assert handle.result(timeout=5) == 42

    spans = spans_of(provider)
    [send] = named(spans, "send payments")
    [process] = named(spans, "process payments")
    [charge] = named(spans, "charge")
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in (send, process, charge)} == {trace_id}
    assert parent_of(send) == request.get_span_context().span_id
    assert parent_of(process) == send.context.span_id
    assert parent_of(charge) == process.context.span_id
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    assert dict(send.attributes or {}) == {
        "messaging.system": "quasar",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "payments",
        "messaging.message.id": handle.id,
        "messaging.quasar.namespace": app.namespace,
        "messaging.quasar.task.name": "shop.charge",
    }
    attributes = dict(process.attributes or {})
    worker_id = attributes.pop("messaging.client.id")
    assert isinstance(worker_id, str) and worker_id
    assert attributes == {
        "messaging.system": "quasar",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "payments",
        "messaging.message.id": handle.id,
        "messaging.quasar.namespace": app.namespace,
        "messaging.quasar.task.name": "shop.charge",
        "messaging.quasar.job.attempt": 1,
        "messaging.quasar.outcome": "completed",
    }
    assert process.status.status_code is StatusCode.UNSET
    carried = payload_of(app, handle)["t"]
    assert carried["traceparent"].split("-")[1] == f"{trace_id:032x}"


def test_aenqueue_and_a_batch_continue_their_traces(app: App, provider: TracerProvider) -> None:
    async def double(x: int) -> int:
        return 2 * x

    task = app.task(double, name="double", queue="math")

    async def enqueue() -> Any:
        try:
            return await task.aenqueue(1)
        finally:
            await app.aclose()

    single = asyncio.run(enqueue())
    batch = app.enqueue_many([task.job(2), task.job(3)])
    assert app.drain() == 3
    assert [h.result(timeout=5) for h in (single, *batch)] == [2, 4, 6]

    spans = spans_of(provider)
    sends = named(spans, "send math")
    [one] = [s for s in sends if s.kind is SpanKind.PRODUCER]
    [many] = [s for s in sends if s.kind is SpanKind.CLIENT]
    creates = named(spans, "create math")
    assert len(creates) == 2 and all(c.kind is SpanKind.PRODUCER for c in creates)
    assert (many.attributes or {})["messaging.batch.message_count"] == 2
    processes = {
        (s.attributes or {})["messaging.message.id"]: s for s in named(spans, "process math")
    }
    assert parent_of(processes[single.id]) == one.context.span_id
    made = {c.context.span_id for c in creates}
    assert {parent_of(processes[h.id]) for h in batch} == made
    for handle in batch:
        process = processes[handle.id]
        [create] = [c for c in creates if c.context.span_id == parent_of(process)]
        assert process.context.trace_id == create.context.trace_id


# --- errors --------------------------------------------------------------------------------------


def test_a_failing_run_is_an_error_on_its_span(app: App, provider: TracerProvider) -> None:
    def broken() -> None:
        raise KeyError(f"attempt {current_job().attempt}")

    handle = app.task(broken, name="broken", max_attempts=2, retry=Fixed(0)).enqueue()
    app.drain()
    with pytest.raises(JobFailedError):
        handle.result(timeout=5)

    spans = spans_of(provider)
    [send] = named(spans, "send default")
    runs = sorted(
        named(spans, "process default"),
        key=lambda s: str((s.attributes or {})["messaging.quasar.job.attempt"]),
    )
    assert len(runs) == 2
    for attempt, run in enumerate(runs, 1):
        attributes = run.attributes or {}
        assert parent_of(run) == send.context.span_id  # every attempt continues the trace
        assert attributes["messaging.quasar.job.attempt"] == attempt
        assert attributes["error.type"] == "KeyError"
        assert attributes["messaging.quasar.outcome"] == "failed"
        assert run.status.status_code is StatusCode.ERROR
        assert run.status.description == f"KeyError: 'attempt {attempt}'"
        [event] = run.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "KeyError"


def test_a_snooze_is_not_an_error(app: App, provider: TracerProvider) -> None:
    def later() -> str:
        if current_job().job.fencing_version == 1:
            raise Snooze(0)
        return "done"

    handle = app.task(later, name="later").enqueue()
    app.drain()
    assert handle.result(timeout=5) == "done"
    outcomes = [
        ((s.attributes or {})["messaging.quasar.outcome"], s.status.status_code)
        for s in named(spans_of(provider), "process default")
    ]
    assert sorted(outcomes, key=str) == [
        ("completed", StatusCode.UNSET),
        ("snoozed", StatusCode.UNSET),
    ]


def test_a_refused_enqueue_is_an_error_on_its_span(app: App, provider: TracerProvider) -> None:
    task = app.task(lambda: None, name="dependent")
    with pytest.raises(JobRefusedError):
        task.options(depends_on=["no-such-job"]).enqueue()
    [send] = named(spans_of(provider), "send default")
    assert send.status.status_code is StatusCode.ERROR
    assert (send.attributes or {})["error.type"] == "JobRefusedError"
    assert "messaging.message.id" not in (send.attributes or {})

    def typed(x: int) -> None: ...

    with pytest.raises(InvalidTaskCall):
        app.task(typed, name="typed").enqueue(object())  # type: ignore[arg-type]
    [send, bad] = named(spans_of(provider), "send default")
    assert bad.status.status_code is StatusCode.ERROR
    assert (bad.attributes or {})["error.type"] == "InvalidTaskCall"


def test_a_result_that_cannot_be_stored_is_an_error_without_an_exception(
    app: App, provider: TracerProvider
) -> None:
    handle = app.task(object, name="unencodable").enqueue()
    app.drain()
    with pytest.raises(JobFailedError):
        handle.result(timeout=5)
    [process] = named(spans_of(provider), "process default")
    assert process.status.status_code is StatusCode.ERROR
    attributes = process.attributes or {}
    assert attributes["error.type"] == "_OTHER"
    assert attributes["messaging.quasar.outcome"] == "failed permanently"
    assert process.events == ()


def test_a_batch_over_several_queues_is_one_send_span(app: App, provider: TracerProvider) -> None:
    one = app.task(lambda: 1, name="one", queue="a")
    two = app.task(lambda: 2, name="two", queue="b")
    app.enqueue_many([one.job(), two.job()])
    [send] = named(spans_of(provider), "send")
    attributes = send.attributes or {}
    assert "messaging.destination.name" not in attributes
    assert attributes["messaging.batch.message_count"] == 2


# --- bounds and foreign data ---------------------------------------------------------------------


def test_the_trace_context_a_job_carries_is_bounded(app: App, provider: TracerProvider) -> None:
    task = app.task(lambda: "ran", name="bounded")
    token = context.attach(baggage.set_baggage("big", "x" * 5000))
    try:
        with provider.get_tracer("app").start_as_current_span("request"):
            handle = task.enqueue()
    finally:
        context.detach(token)
    carried = payload_of(app, handle)["t"]
    assert list(carried) == ["traceparent"]  # the baggage did not fit
    assert sum(len(k) + len(v) for k, v in carried.items()) <= tracing.CARRIER_MAX
    app.drain()
    assert handle.result(timeout=5) == "ran"

    found = {f"k{i}": "v" for i in range(20)} | {"x": 1, 2: "y"}
    kept = tracing.bounded(found)
    assert kept is not None and len(kept) == tracing.CARRIER_ENTRIES
    assert tracing.bounded({"a": 1}) is None


@pytest.mark.parametrize(
    "carried", [None, "garbage", ["traceparent"], {"traceparent": 7}, {"traceparent": "00-zz"}]
)
def test_a_job_with_no_or_foreign_trace_context_runs_in_a_new_trace(
    app: App, provider: TracerProvider, carried: Any
) -> None:
    app.task(lambda: None, name="foreign")
    envelope: dict[str, Any] = {"a": [], "k": {}}
    if carried is not None:
        envelope["t"] = carried
    new = NewJob(stage="foreign", payload=Encoded(app.serializer.dumps(envelope)))
    assert isinstance(app.client.enqueue_job(new), JobApplied)
    app.drain()
    [process] = named(spans_of(provider), "process default")
    assert process.parent is None
    assert (process.attributes or {})["messaging.quasar.outcome"] == "completed"


# --- off -----------------------------------------------------------------------------------------


def test_without_a_tracer_provider_nothing_is_traced_or_carried(app: App) -> None:
    assert isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider)
    assert app.tracer() is None
    handle = app.task(lambda: "ran", name="untraced").enqueue()
    assert set(payload_of(app, handle)) == {"a", "k"}
    app.drain()
    assert handle.result(timeout=5) == "ran"


def test_tracing_false_turns_it_off_with_a_provider_set(
    backend: str, namespace: str, provider: TracerProvider
) -> None:
    with app_url(backend, namespace) as url, App(url, namespace=namespace, tracing=False) as app:
        handle = app.task(lambda: "ran", name="untraced").enqueue()
        assert set(payload_of(app, handle)) == {"a", "k"}
        app.drain()
        assert handle.result(timeout=5) == "ran"
    assert spans_of(provider) == []


def test_without_opentelemetry_installed_nothing_is_traced(
    app: App, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "_otel", None)  # not tried yet: the import fails
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    assert app.tracer() is None
    handle = app.task(lambda: "ran", name="untraced").enqueue()
    app.drain()
    assert handle.result(timeout=5) == "ran"
    assert spans_of(provider) == []


def test_a_provider_from_the_environment_or_a_newer_api_is_found(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider named by OTEL_PYTHON_TRACER_PROVIDER, or an API that keeps its provider
    elsewhere: ``get_tracer_provider()`` answers."""
    made = TracerProvider()
    monkeypatch.setattr(otel_trace, "get_tracer_provider", lambda: made)
    assert app.tracer() is None  # none set, none named in the environment
    monkeypatch.setattr(tracing, "_from_environment", True)
    assert app.tracer() is not None
    monkeypatch.setattr(tracing, "_from_environment", False)
    monkeypatch.delattr(otel_trace, "_TRACER_PROVIDER")
    assert app.tracer() is not None
    monkeypatch.setattr(otel_trace, "get_tracer_provider", otel_trace.NoOpTracerProvider)
    assert app.tracer() is None


def test_a_derived_dedup_key_leaves_the_trace_context_out(
    app: App, provider: TracerProvider
) -> None:
    def rebuild(user_id: int) -> int:
        return user_id

    task = app.task(rebuild, name="rebuild").options(dedup=Unique())
    with provider.get_tracer("app").start_as_current_span("one request"):
        first = task.enqueue(1)
    with provider.get_tracer("app").start_as_current_span("another request"):
        again = task.enqueue(1)
    assert again.id == first.id  # the same call, in two traces: one job
