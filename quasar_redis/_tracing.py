"""OpenTelemetry traces: a producer span around each enqueue, a consumer span around each run.

Optional (``pip install 'quasar_redis[otel]'``, opentelemetry-api). Tracing is on when the API is
installed, the application has set a tracer provider (the SDK's, say) and the ``App`` was not
made with ``tracing=False``; otherwise every call here returns at once and nothing is imported
or added to a job.

The producer's trace context travels inside the job's payload envelope, under ``"t"`` (see
docs/payloads.md): the W3C ``traceparent`` and ``tracestate`` (and whatever else the application's
propagator writes, such as ``baggage``), at most ``CARRIER_MAX`` characters. The worker's span
continues that trace as a child of the producer's span. Attribute names follow OpenTelemetry's
messaging conventions (docs/observability.md lists them).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

#: ``messaging.system`` of every span.
SYSTEM = "quasar"
#: The most characters (keys and values) of trace context a job carries; entries past it drop.
CARRIER_MAX = 2048
#: The most entries of trace context a job carries.
CARRIER_ENTRIES = 8

# The API's modules once imported, False when it is not installed (None: not tried yet).
_otel: Any = None
# The tracer of the provider last seen (a provider set later is picked up at the next call).
_provider: Any = None
_tracer: Tracer | None = None
# Whether the provider comes from the environment (OTEL_PYTHON_TRACER_PROVIDER), read at import.
_from_environment = False
# Read where the API keeps the global provider: ``get_tracer_provider()`` looks at the
# environment on every call, which would cost every enqueue a microsecond with tracing off.
_GLOBAL = "_TRACER_PROVIDER"
_UNKNOWN = object()


def _api() -> Any:
    global _otel, _from_environment  # noqa: PLW0603 - imported once, on first use
    if _otel is None:
        try:
            trace = importlib.import_module("opentelemetry.trace")
            propagate = importlib.import_module("opentelemetry.propagate")
        except ImportError:
            _otel = False
        else:
            _otel = (trace, propagate)
            _from_environment = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
    return _otel


def tracer() -> Tracer | None:
    """The tracer to make spans with, or None when tracing is off (no API, or no provider set:
    the API's default provider makes spans that record nothing)."""
    global _provider, _tracer  # noqa: PLW0603 - a cache of the global provider's tracer
    api = _otel if _otel is not None else _api()
    if api is False:
        return None
    trace = api[0]
    provider: Any = getattr(trace, _GLOBAL, _UNKNOWN)
    if provider is None and not _from_environment:
        return None  # none set (the common case with tracing off): answered without a call
    if provider is None or provider is _UNKNOWN:
        provider = trace.get_tracer_provider()
    if provider is not _provider:
        off = isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
        version = importlib.import_module("quasar_redis").__version__
        _tracer = None if off else provider.get_tracer("quasar_redis", version)
        _provider = provider
    return _tracer


def carrier() -> dict[str, str] | None:
    """The current trace context, as the job carries it (None when there is none)."""
    found: dict[str, str] = {}
    _api()[1].inject(found)
    return bounded(found)


def bounded(found: Mapping[Any, Any]) -> dict[str, str] | None:
    """The entries of ``found`` that are text, in order, while they fit ``CARRIER_MAX`` and
    ``CARRIER_ENTRIES`` (None if none does): a job never carries more, and a worker never reads
    more from a job another program wrote."""
    kept: dict[str, str] = {}
    size = 0
    for key, value in found.items():
        if not isinstance(key, str) or not isinstance(value, str):
            continue
        size += len(key) + len(value)
        if size > CARRIER_MAX or len(kept) == CARRIER_ENTRIES:
            break
        kept[key] = value
    return kept or None


def _attributes(queue: str | None, operation: str, namespace: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.quasar.namespace": namespace,
    }
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    return attributes


def _name(operation: str, queue: str | None) -> str:
    return operation if queue is None else f"{operation} {queue}"


@contextmanager
def producing(
    tracer: Tracer,
    operation: str,
    queue: str | None,
    namespace: str,
    *,
    task: str | None = None,
    count: int | None = None,
) -> Iterator[Span]:
    """A span around one enqueue (``send``), one job made for a batch (``create``) or one batch
    sent (``send``, ``count`` jobs), current inside the block; an exception from the block is
    recorded on it and marks it an error."""
    trace = _api()[0]
    attributes = _attributes(queue, operation, namespace)
    if task is not None:
        attributes["messaging.quasar.task.name"] = task
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    kind = trace.SpanKind.CLIENT if count is not None else trace.SpanKind.PRODUCER
    with tracer.start_as_current_span(
        _name(operation, queue), kind=kind, attributes=attributes
    ) as s:
        try:
            yield s
        except BaseException as exc:
            s.set_attribute("error.type", type(exc).__qualname__)
            raise


class Consuming:
    """The consumer span of one run: the child of the span that enqueued the job, when the job
    carries its trace context; current while the run (and its middleware) runs."""

    def __init__(
        self, tracer: Tracer, job: Any, task: str, found: Any, worker_id: str, namespace: str
    ) -> None:
        api = _api()
        trace, propagate = api
        parent = bounded(found) if isinstance(found, Mapping) else None
        attributes = _attributes(job.queue, "process", namespace)
        attributes["messaging.message.id"] = job.id
        attributes["messaging.client.id"] = worker_id
        attributes["messaging.quasar.task.name"] = task
        attributes["messaging.quasar.job.attempt"] = job.attempt
        self.span: Span = tracer.start_span(
            _name("process", job.queue),
            context=propagate.extract(parent) if parent else None,
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
        )
        self.error: BaseException | None = None
        self._trace = trace

    async def watch(self, run: Any) -> Any:
        """Await ``run`` (the task inside its middleware) with the span current; an exception
        is recorded on the span (a ``Snooze`` is not an error) and raised again."""
        with self._trace.use_span(self.span, record_exception=False, set_status_on_exception=False):
            try:
                return await run
            except BaseException as exc:
                self.error = exc
                raise

    def end(self, outcome: str, *, failed: bool) -> None:
        """End the span with the run's ``outcome`` (``OutcomeKind`` value); ``failed``: an error
        status, with the exception that failed it recorded."""
        span, error = self.span, self.error
        span.set_attribute("messaging.quasar.outcome", outcome)
        if failed:
            kind = type(error).__qualname__ if error is not None else "_OTHER"
            span.set_attribute("error.type", kind)
            if error is not None:
                span.record_exception(error)
            why = f"{kind}: {error}" if error is not None else outcome
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, why))
        span.end()
