"""Prometheus metrics (``pip install 'quasar_redis[prometheus]'``).

Two places serve them: ``quasar worker --metrics-port N`` (``serve_worker_metrics``) and the
dashboard's ``/metrics``. Names and labels:

- ``quasar_queue_jobs{queue, status}`` (gauge): jobs of each queue by status, and
  ``quasar_queue_paused{queue}`` (1 or 0). Read with one ``queues()`` call, kept for
  ``DEPTH_MAX_AGE_S`` so that scrapers never cost more than one call a second. Both places.
- On the dashboard's endpoint, each queue's flow control (docs/flow-control.md), one series a
  queue (never one a group): ``quasar_queue_rate_limit_per_second{queue}`` and
  ``quasar_queue_concurrency_limit{queue}`` (its limits, for a queue that has them),
  ``quasar_queue_group_rate_limit_per_second{queue}`` and
  ``quasar_queue_group_concurrency_limit{queue}`` (its groups' default), and
  ``quasar_queue_leased_jobs{queue}`` and ``quasar_queue_groups{queue, state}`` (gauges; state:
  turn, wait, full: groups taking turns, held by their rate or a hold, at their cap).
- ``quasar_worker_running_jobs{worker}`` and ``quasar_worker_free_slots{worker}`` (gauges): the
  worker's own on its endpoint; every live worker of the namespace (from the worker registry)
  on the dashboard's.
- On the worker's endpoint only, its own counts since it started (sum them over workers in
  PromQL): ``quasar_jobs_total{queue, task, outcome}`` (outcome: completed, retried, failed,
  snoozed, rate_limited: a ``RateLimited`` raised, handed_back),
  ``quasar_job_latency_seconds{queue, task}`` (histogram: enqueue to the claim of the first
  attempt), ``quasar_job_run_seconds{queue, task}`` (histogram),
  ``quasar_leases_lost_total{queue, reason}`` (a heartbeat or outcome refused: ``StaleLease``
  when another worker took the job over or it was cancelled, ``LeaseExpired``...) and
  ``quasar_leases_expired_total`` (run-out leases its maintenance recovered, any worker's).

Every series of both endpoints also carries ``namespace`` (the namespace served), so that the
workers and dashboards of several namespaces scraped into one Prometheus never mix; both serve
the Prometheus text format 0.0.4 (``CONTENT_TYPE``), whatever the scraper accepts
(docs/observability.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import _reading as reading
from ._views import counts_of
from .worker._endpoints import EndpointServer

INSTALL_HINT = "pip install 'quasar_redis[prometheus]'"
try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client import core as _core
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
    from prometheus_client.metrics_core import Metric
except ImportError as exc:  # pragma: no cover (the extra is in the test dependencies)
    raise ImportError(f"Prometheus metrics need prometheus-client: {INSTALL_HINT}") from exc

if TYPE_CHECKING:
    from ._flow import FlowInfo
    from .client import Quasar
    from .worker import Worker
    from .worker._metrics import MetricsSnapshot

DEPTH_MAX_AGE_S = 1.0
#: The format both endpoints serve: the Prometheus text format 0.0.4, which every scraper reads.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
#: The label every series carries: the namespace served.
NAMESPACE_LABEL = "namespace"
__all__ = [
    "CONTENT_TYPE",
    "NAMESPACE_LABEL",
    "DepthCache",
    "MetricsServer",
    "depth_families",
    "exposition",
    "flow_families",
    "registry_of",
    "serve_worker_metrics",
    "slot_families",
    "worker_families",
    "worker_registry",
]


def depth_families(queues: Sequence[Any]) -> list[Metric]:
    """``quasar_queue_jobs`` and ``quasar_queue_paused`` of ``queues`` (``QueueInfo``s, as
    ``_reading.queues`` reads them)."""
    core = _core
    jobs = core.GaugeMetricFamily(
        "quasar_queue_jobs", "Jobs of a queue by status.", labels=["queue", "status"]
    )
    paused = core.GaugeMetricFamily(
        "quasar_queue_paused", "1 if the queue is paused, else 0.", labels=["queue"]
    )
    for info in queues:
        for status, n in counts_of(info.counts).items():
            jobs.add_metric([info.name, status], n)
        paused.add_metric([info.name], 1 if info.paused else 0)
    return [jobs, paused]


#: The states of a queue's groups that ``quasar_queue_groups`` counts.
GROUP_STATES = ("turn", "wait", "full")


def flow_families(flows: Sequence[FlowInfo]) -> list[Metric]:
    """Each queue's limits, leased jobs and groups by state (``Quasar.flow``): series per queue
    and state only, so as many as the queues whatever the number of groups."""
    core = _core

    def gauge(name: str, text: str) -> Any:
        return core.GaugeMetricFamily(name, text, labels=["queue"])

    rate = gauge("quasar_queue_rate_limit_per_second", "The queue's rate: jobs started a second.")
    cap = gauge("quasar_queue_concurrency_limit", "The queue's cap on leased jobs.")
    group_rate = gauge(
        "quasar_queue_group_rate_limit_per_second",
        "Each group's rate unless it has its own: jobs started a second.",
    )
    group_cap = gauge(
        "quasar_queue_group_concurrency_limit", "Each group's cap unless it has its own."
    )
    leased = gauge("quasar_queue_leased_jobs", "The queue's leased jobs (its cap counts them).")
    groups = core.GaugeMetricFamily(
        "quasar_queue_groups",
        "The queue's groups with ready jobs: taking turns, waiting on their rate, at their cap.",
        labels=["queue", "state"],
    )
    for info in flows:
        name = info.queue
        for family, limit in ((rate, info.rate), (group_rate, info.group_rate)):
            if limit is not None:
                family.add_metric([name], limit.limit / limit.per)
        for family, count in ((cap, info.concurrency), (group_cap, info.group_concurrency)):
            if count is not None:
                family.add_metric([name], count)
        leased.add_metric([name], info.leased)
        counts = (info.groups_in_turn, info.groups_waiting, info.groups_full)
        for state, n in zip(GROUP_STATES, counts, strict=True):
            groups.add_metric([name, state], n)
    return [rate, cap, group_rate, group_cap, leased, groups]


def slot_families(workers: Iterable[tuple[str, int, int]]) -> list[Metric]:
    """``quasar_worker_running_jobs`` and ``quasar_worker_free_slots`` of ``(worker id, running,
    concurrency)`` triples (``_views.slots_of``)."""
    core = _core
    running = core.GaugeMetricFamily(
        "quasar_worker_running_jobs", "Jobs the worker runs now.", labels=["worker"]
    )
    free = core.GaugeMetricFamily(
        "quasar_worker_free_slots", "Jobs the worker could start now.", labels=["worker"]
    )
    for worker_id, busy, concurrency in workers:
        running.add_metric([worker_id], busy)
        free.add_metric([worker_id], max(0, concurrency - busy))
    return [running, free]


def worker_families(snapshot: MetricsSnapshot) -> list[Metric]:
    """A worker's own counts (``Worker.metrics.snapshot()``)."""
    core = _core
    outcomes = core.CounterMetricFamily(
        "quasar_jobs",
        "Runs by outcome (completed, retried, failed, snoozed, rate_limited, handed_back).",
        labels=["queue", "task", "outcome"],
    )
    for (queue, task, outcome), n in sorted(snapshot.outcomes.items()):
        outcomes.add_metric([queue, task, outcome], n)
    made: list[Metric] = [outcomes]
    for name, text, histograms in (
        ("quasar_job_latency_seconds", "Enqueue to first claim.", snapshot.latency),
        ("quasar_job_run_seconds", "Run time of a job.", snapshot.run_time),
    ):
        family = core.HistogramMetricFamily(name, text, labels=["queue", "task"])
        for (queue, task), histogram in sorted(histograms.items()):
            family.add_metric([queue, task], histogram.cumulative(), histogram.total)
        made.append(family)
    lost = core.CounterMetricFamily(
        "quasar_leases_lost",
        "Leases lost: a heartbeat or an outcome refused, by refusal.",
        labels=["queue", "reason"],
    )
    for (queue, reason), n in sorted(snapshot.lost.items()):
        lost.add_metric([queue, reason], n)
    expired = core.CounterMetricFamily(
        "quasar_leases_expired", "Run-out leases this worker's maintenance recovered."
    )
    expired.add_metric([], snapshot.expired)
    made += [lost, expired]
    made += slot_families([(snapshot.worker_id, snapshot.running, snapshot.concurrency)])
    return made


class DepthCache:
    """The queues' counts, read with ``read`` (one ``queues()`` call) at most every ``max_age``
    seconds, whoever asks."""

    def __init__(self, read: Callable[[], Sequence[Any]], max_age: float = DEPTH_MAX_AGE_S):
        self._read = read
        self._max_age = max_age
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._value: Sequence[Any] = ()

    def get(self) -> Sequence[Any]:
        with self._lock:
            if time.monotonic() - self._at >= self._max_age:
                self._value = self._read()
                self._at = time.monotonic()
            return self._value


class _Families:
    """A prometheus-client collector of whatever ``make`` returns at each scrape, each sample
    labelled with ``namespace``."""

    def __init__(self, make: Callable[[], list[Metric]], namespace: str) -> None:
        self._make = make
        self._namespace = namespace

    def collect(self) -> Iterable[Metric]:
        families = self._make()
        for family in families:
            family.samples = [
                sample._replace(labels={NAMESPACE_LABEL: self._namespace, **sample.labels})
                for sample in family.samples
            ]
        return families


def registry_of(make: Callable[[], list[Metric]], namespace: str) -> CollectorRegistry:
    """A registry of its own holding one collector that yields ``make()`` at each scrape, every
    series labelled ``namespace``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(make, namespace))
    return registry


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """A scrape's body and content type: the text format 0.0.4 (``CONTENT_TYPE``), from both
    endpoints alike."""
    return generate_latest(registry), CONTENT_TYPE


def worker_registry(worker: Worker, client: Quasar) -> CollectorRegistry:
    """The registry ``quasar worker --metrics-port`` serves: the worker's own counts and the
    depth of its queues (read with ``client``, at most one call a second)."""
    cache = DepthCache(lambda: reading.run(client, reading.queues(client.calls)))
    mine = set(worker.queues)

    def make() -> list[Metric]:
        queues = [info for info in cache.get() if info.name in mine]
        return worker_families(worker.metrics.snapshot()) + depth_families(queues)

    return registry_of(make, worker.app.namespace)


class MetricsServer(EndpointServer):
    """``worker``'s metrics served at ``http://addr:port/metrics``, beside its ``/livez`` and
    ``/readyz`` (``EndpointServer``), from a thread of their own until ``close()``."""

    def __init__(self, worker: Worker, port: int, addr: str = "0.0.0.0") -> None:
        client = worker.app.new_client()
        registry = worker_registry(worker, client)
        super().__init__(
            worker,
            port,
            addr,
            client=client,
            pages={"/metrics": lambda: (200, *exposition(registry))},
        )


def serve_worker_metrics(worker: Worker, port: int, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve ``worker``'s metrics (``MetricsServer``)."""
    return MetricsServer(worker, port, addr)
