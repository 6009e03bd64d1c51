"""One name per transition across the layers (docs/contributing.md): the script
``lua/<name>.lua``, the call builder method that sends it, the ``Operations`` entry and the method
of both clients share that name, the public method's.

The exceptions are listed here, each with its reason; adding to them is a decision to make in
review, not a way to quiet the test.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from quasar_redis import AsyncQuasar, Complete, LeaseToken, NewJob, Quasar, Schedule
from quasar_redis._calls import Call, CallBuilder, WorkerEntry
from quasar_redis._enqueue_calls import prepare
from quasar_redis._keys import KeySpace
from quasar_redis._operations import Operations
from quasar_redis._scripts import names, scripts

#: Builder methods sending a script of another name: a variant of one public method, sharing its
#: script (the script is named after the method the others vary).
SHARES = {
    "enqueue_many": "enqueue",  # a batch, all or nothing: the script's "all" mode
    "enqueue_each": "enqueue",  # a batch, each job on its own: the script's "each" mode
    "prepared": "enqueue",  # one job worked out once but for its id and payload (a task's)
    "claim_many": "claim",  # claim is claim_many of one job, its reply the first claim
    "page_jobs": "list_jobs",  # list_jobs' pages by cursor instead of offset
    "carry_on": "resume_cascades",  # the cascade work of one call (its id) instead of any
    "trigger_schedule": "fire_schedule",  # a schedule's job now, its ticks unchanged
    "pause_schedule": "change_schedule",  # change_schedule's three actions, one method each
    "resume_schedule": "change_schedule",
    "remove_schedule": "change_schedule",
    "set_group_limits": "set_limits",  # the limits of one group of the queue, not its own
    "update_input": "change",  # change of the input alone
    "change_priority": "change",  # change of the priority alone
    "reschedule": "change",  # change of the time alone
    "promote": "change",  # change to due now
}

#: Scripts no client method sends, and why.
NO_CLIENT_METHOD = {
    "announce": "a Worker's own entry in the worker registry, sent by the Worker itself",
    "retire": "a Worker's entry removed as it stops, sent by the Worker itself",
}

TOKEN = LeaseToken("j", 0, "w", 1, 2_000_000_000_000, "n")

#: A value for each parameter of a builder method that has no default.
SAMPLES: dict[str, Any] = {
    "job": NewJob("s"),
    "prepared": prepare(NewJob("s")),
    "jobs": [NewJob("s")],
    "queue": "default",
    "group": "g",
    "worker_id": "w",
    "lease_ms": 1000,
    "limit": 1,
    "job_id": "j",
    "token": TOKEN,
    "outcomes": [Complete(TOKEN)],
    "output_ref": "inline",
    "result": None,
    "reason": "r",
    "retry_delay_ms": 0,
    "kind": "Error",
    "delay_ms": 0,
    "expected_fence": None,
    "max_age_ms": None,
    "max_count": None,
    "status": "completed",
    "job_ids": ["j"],
    "finished_before": None,
    "offset": 0,
    "after": None,
    "now": None,
    "worker": WorkerEntry("w", "host", 1, ("default",), 1, (), "0"),
    "ttl_ms": 1000,
    "schedule": Schedule.of("s", "s", every=60),
    "tick": 60_000,
    "name": "s",
    "action": "pause",
    "payload": None,
    "priority": 0,
    "batch_id": "b",
    "value": 50.0,
}


def builder_methods() -> dict[str, Any]:
    return {
        name: fn
        for name, fn in inspect.getmembers(CallBuilder, inspect.isfunction)
        if not name.startswith("_")
    }


def build(name: str) -> Call[Any]:
    builder = CallBuilder(KeySpace("names"))
    method = getattr(builder, name)
    if name == "carry_on":
        return builder.carry_on(builder.cancel("j", None, "r"))
    wanted = inspect.signature(method).parameters.values()
    args = {p.name: SAMPLES[p.name] for p in wanted if p.default is inspect.Parameter.empty}
    call: Call[Any] = method(**args)
    return call


def client_methods(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_every_script_is_named_after_a_client_method() -> None:
    for client in (Quasar, AsyncQuasar):
        nameless = set(names()) - client_methods(client)
        assert nameless == set(NO_CLIENT_METHOD), client.__name__
    assert set(SHARES.values()) <= set(names())


@pytest.mark.parametrize("name", sorted(builder_methods()))
def test_every_builder_method_sends_the_script_of_its_name(name: str) -> None:
    assert build(name).script is scripts()[SHARES.get(name, name)]


def test_every_script_has_the_builder_method_of_its_name() -> None:
    assert set(builder_methods()) == set(names()) | set(SHARES)


@pytest.mark.parametrize(
    "name", sorted(n for n, _ in inspect.getmembers(Operations, inspect.isfunction))
)
def test_every_operation_calls_the_builder_of_its_name(name: str) -> None:
    entry = getattr(Operations, name)
    assert re.findall(r"self\.calls\.(\w+)\(", inspect.getsource(entry)) == [name]
    for client in (Quasar, AsyncQuasar):
        assert getattr(client, name).__wrapped__ is entry, client.__name__
