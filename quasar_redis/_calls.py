"""The call builders: the ``Call`` value and the ``CallBuilder`` that makes every script call.

This is the IO-free core with ``_args`` (how values become script arguments) and ``_replies``
(how replies become typed results): the sync and asyncio clients are thin shells around it. Each
of their methods builds a ``Call`` here, sends it, and hands the raw reply back to
``Call.parse``. A ``Call`` carries a call id made here, once: when redis-py re-sends the command
after a timeout or a dropped connection, the script sees the same id and answers with what the
first delivery did, changing nothing more.
"""

from __future__ import annotations

from ._batch_calls import BatchCalls
from ._call_base import (
    POLICIES,
    BuilderBase,
    Call,
    Limits,
    NewJob,
    WorkerEntry,
    dependency_id,
    new_call_id,
)
from ._dependency_calls import DependencyCalls
from ._enqueue_calls import EnqueueCalls
from ._flow_calls import FlowCalls
from ._lease_calls import LeaseCalls
from ._operator_calls import OperatorCalls
from ._schedule_calls import ScheduleCalls

__all__ = [
    "POLICIES",
    "BuilderBase",
    "Call",
    "CallBuilder",
    "Limits",
    "NewJob",
    "WorkerEntry",
    "dependency_id",
    "new_call_id",
]


class CallBuilder(
    EnqueueCalls, LeaseCalls, OperatorCalls, ScheduleCalls, FlowCalls, DependencyCalls, BatchCalls
):
    """Builds the ``Call`` of every operation for one namespace: the enqueue calls
    (``_enqueue_calls``), a lease holder's (``_lease_calls``), an operator's and the reads
    (``_operator_calls``), the periodic schedules' (``_schedule_calls``), flow control's
    (``_flow_calls``), the read of a job's dependencies (``_dependency_calls``), the batches'
    (``_batch_calls``)."""
