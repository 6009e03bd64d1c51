"""The worker: claims jobs of some queues in batches, runs them, reports each outcome.

asyncio at its core: async tasks run on the loop, plain functions in a thread pool. Leases are
renewed by the lease keeper thread (``_lease_keeper``) at about a third of their duration; when a
renewal is refused (the job was cancelled, expired or taken over) the running task is told
(asyncio cancellation, and ``current_job().cancelled`` for plain functions) and its outcome is
never reported. An idle worker blocks on the queues' wake lists until work arrives or the next
scheduled job is due. Maintenance (promote, sweep, prune) runs inside every worker; any number
of them may run it at once.

Outcomes ride the next claim: one ``report_and_claim`` call reports the jobs that ended and claims
as many new ones (one round trip a batch). When no claim is about to go out (the worker is idle,
backing off, full or stopping), or a heartbeat of the job is in flight, the lease keeper reports
the outcome instead. The reporter (``_reporting``) makes that choice for every outcome, and
hands every result back to the runner.

The modules, by role: ``_lifecycle`` (the ``Worker``: settings, serve, stop, ``with``) and
``_serving`` (the parts of one serve, and its stop as ordered steps); ``_claiming`` (the claim
loops and the idle wait; ``_resend``, calls sent again); ``_reporting`` (each outcome's way to
Redis and back); ``_running`` (slots, phases, hand-backs, results; ``_invoking`` calls a task,
``_prefetch``); ``_job`` (a held job and its ``JobPhase``); ``_lease`` (a lease, its
``LeaseState``, an ``Outgoing`` outcome) and ``_lease_keeper``; ``_outcomes``; ``_maintenance``
(and the Redis clock's offset) and ``_registry``; ``_startup`` (settings checked, Redis reached,
the start line) and ``_drain`` (burst mode on this loop, for tests); ``_health`` (what its probes
read) and ``_endpoints`` (``/livez``, ``/readyz`` over HTTP).
"""

from .._hooks import WorkerContext
from ._drain import adrain, drain
from ._endpoints import EndpointServer, serve_health
from ._health import HealthReport, WorkerHealth, WorkerPhase
from ._job import (
    PHASE_CHANGES,
    CancelFlag,
    HeldJob,
    JobContext,
    JobPhase,
    current_job,
    current_worker,
)
from ._lease import LEASE_CHANGES, Build, Lease, LeaseEvent, LeaseState, PhaseError
from ._lease_keeper import LeaseKeeper
from ._lifecycle import Worker, default_worker_id
from ._outcomes import REASON_MAX, Outcome, OutcomeKind, WorkerStats
from ._prefetch import PREFETCH_STALE_S, PREFETCH_WAIT_S, RUN_AVG_WEIGHT
from ._reporting import CARRY_MAX
from ._resend import CUT_SHORT_KEPT

__all__ = [
    "CARRY_MAX",
    "CUT_SHORT_KEPT",
    "LEASE_CHANGES",
    "PHASE_CHANGES",
    "PREFETCH_STALE_S",
    "PREFETCH_WAIT_S",
    "REASON_MAX",
    "RUN_AVG_WEIGHT",
    "Build",
    "CancelFlag",
    "EndpointServer",
    "HealthReport",
    "HeldJob",
    "JobContext",
    "JobPhase",
    "Lease",
    "LeaseEvent",
    "LeaseKeeper",
    "LeaseState",
    "Outcome",
    "OutcomeKind",
    "PhaseError",
    "Worker",
    "WorkerContext",
    "WorkerHealth",
    "WorkerPhase",
    "WorkerStats",
    "adrain",
    "current_job",
    "current_worker",
    "default_worker_id",
    "drain",
    "serve_health",
]
