"""What the scripts and Python both know, declared once.

The job hash's fields (each one's name, its short key in the hash, the value it is not stored
while holding, whether it holds an integer), the state tags, the key words (those of ``_keys``)
and the layouts of the per-item arguments of an enqueue and of a report (each item's fields in
order: a position is the index of a name). Python reads them from here; the Lua states them
where it uses them (``DEFAULTS`` and ``NUMERIC`` of lua/include/job.lua, the key builders of
lua/include/core.lua, ``read_group`` of lua/enqueue.lua, ``report_item`` of lua/report_many.lua,
the lease of lua/include/lease.lua), and tests/test_schema.py holds each of those to this module.

Adding a job field is one line of ``FIELDS`` here and the script that writes it
(docs/contributing.md, "Adding a job field").
"""

from __future__ import annotations

from typing import NamedTuple

from ._keys import FAMILIES, SINGLES

__all__ = [
    "BLOBS",
    "BLOB_CHUNKS",
    "DEFAULTS",
    "ENQUEUE_ITEM",
    "FAMILIES",
    "FIELDS",
    "KEY",
    "LEASE_WRITES",
    "NUMERIC",
    "REPORT_ITEM",
    "SCHEDULE_FIELDS",
    "SINGLES",
    "STATE",
    "TOKEN",
    "Field",
]


class Field(NamedTuple):
    """One field of the job hash."""

    name: str  #: what it holds (the ``Job`` attribute's name where there is one)
    key: str  #: its name in the hash
    default: bytes | None = None  #: not stored while it holds this (None: always stored)
    numeric: bool = False  #: holds an integer (a script refuses a job whose field does not)


#: The fields of the job hash at ``<root>job:<id>`` (docs/redis-layout.md, "Job hash").
FIELDS = (
    Field("queue", "q", b"default"),
    Field("stage", "s"),
    Field("payload", "p"),
    Field("input_ref", "ir", b"inline"),
    Field("input_revision", "rv", b"0", numeric=True),
    Field("dependencies", "dp", b""),
    Field("pending_dependencies", "pd", b"0", numeric=True),
    Field("on_dependency_failure", "odf", b"block"),
    Field("priority", "pr", b"0", numeric=True),
    Field("sequence", "sq", numeric=True),
    Field("attempt", "a", b"0", numeric=True),
    Field("max_attempts", "m", b"3", numeric=True),
    Field("fencing_version", "f", b"0", numeric=True),
    Field("state", "st"),
    Field("available_at", "at", numeric=True),
    Field("worker_id", "w"),
    Field("expires_at", "x", numeric=True),
    Field("nonce", "n"),
    Field("error_kind", "ek"),
    Field("error_message", "em"),
    Field("cancel_reason", "cr"),
    Field("output_ref", "o"),
    Field("result", "res"),
    Field("inserted_at", "ins", numeric=True),
    Field("attempted_at", "att", numeric=True),
    Field("finished_at", "fin", numeric=True),
    Field("has_dependents", "hd"),
    Field("enqueue_call", "ec"),
    # (an integer, but counted by HINCRBY alone, so no load checks it)
    Field("cascade_waits", "cw"),
    #: Under policy "run": the dependencies counted as resolved though they did not succeed.
    Field("resolved_unsucceeded", "rd"),
    # the time by which the job must have started, or it expires (absent: no deadline)
    Field("deadline", "dl", numeric=True),
    # how it was enqueued with a dedup key: "<mode> <window ms> <key>" (lua/include/unique.lua)
    Field("dedup", "uq"),
    # its flow group: jobs of different groups take turns (lua/include/flow_control.lua)
    Field("group", "g"),
    # the batch it is a member of, and the batch it is a callback of (lua/include/batches.lua)
    Field("batch", "bt"),
    Field("callback_of", "cbo"),
    # what a running job last reported of how far it is (lua/include/progress.lua): its value
    # (a finite number's text), message ("" for none), when it was written and by which attempt
    # (integers, read by Python alone, which ignores a progress it cannot read)
    Field("progress_value", "pv"),
    Field("progress_message", "pm"),
    Field("progress_at", "pt"),
    Field("progress_attempt", "pa"),
)
#: A field's key by its name.
KEY = {field.name: field.key for field in FIELDS}
#: Fields the scripts do not store while they hold these values (lua/include/job.lua DEFAULTS).
DEFAULTS = {field.key: field.default for field in FIELDS if field.default is not None}
#: Fields that hold integers (lua/include/job.lua NUMERIC).
NUMERIC = frozenset(field.key for field in FIELDS if field.numeric)
#: Fields stored in chunks (``p``, ``p2`` ... ``p16``), at most BLOB_CHUNKS of them.
BLOBS = (KEY["payload"], KEY["result"])
BLOB_CHUNKS = 16

#: The state tags a job's ``st`` holds, by state.
STATE = {
    "waiting": "W",
    "retry_waiting": "R",
    "leased": "L",
    "succeeded": "S",
    "failed": "F",
    "cancelled": "C",
    "expired": "E",
}
#: What a claim writes into the job it leases (lua/include/lease.lua ``lease``): the state
#: "leased", attempt + 1, fencing_version + 1, the worker, expires_at = now + lease_ms, the
#: nonce, attempted_at = now.
LEASE_WRITES = tuple(
    KEY[name]
    for name in (
        "state",
        "attempt",
        "fencing_version",
        "worker_id",
        "expires_at",
        "nonce",
        "attempted_at",
    )
)

#: One job's arguments of an enqueue, in order (lua/enqueue.lua ``read_group``).
ENQUEUE_ITEM = (
    "id",
    "queue",
    "stage",
    "payload",
    "input_ref",
    "input_revision",
    "dependencies",
    "priority",
    "max_attempts",
    "available_at",  # "" = now + delay
    "delay",  # "" = 0
    "odf",  # on_dependency_failure: "block" | "cancel" | "run"
    "made",  # "1" when the client made the id at random for this call, else ""
    "deadline",  # "" = none
    "expires_in",  # "" = none
    "dedup",  # "" or "<mode> <window ms> <key>" (lua/include/unique.lua)
    "group",  # "" = none (lua/include/flow_control.lua)
    "batch",  # "" = none: the open batch it joins (lua/include/batches.lua)
)
#: The fields of a periodic schedule's hash at ``<root>schedule:<name>`` that the scripts read
#: (lua/include/schedule.lua ``SCHEDULE_FIELDS``, in order: the rows of ``schedules``), by what
#: they hold; besides them ``p``, the jobs' payload (docs/schedules.md).
SCHEDULE_FIELDS = {
    "spec": "the cron expression, or 'every <ms>'",
    "tz": "the time zone",
    "q": "the jobs' queue",
    "s": "the jobs' stage (task name)",
    "pr": "the jobs' priority",
    "m": "the jobs' max_attempts",
    "mi": "what a tick later than grace does: 'skip' | 'once'",
    "gr": "grace (ms)",
    "dg": "the digest of the settings",
    "nx": "the next tick (ms)",
    "ls": "the last tick fired or skipped (ms)",
    "ps": "'1' while paused",
    "dc": "declared at (ms)",
    "cr": "created at (ms)",
    "lj": "the id of the job of the last tick fired",
}
#: A lease token as a lease holder's call sends it (lua/include/lease.lua ``open_lease``).
TOKEN = ("job_id", "input_revision", "worker_id", "fence", "expires_at", "nonce")
#: One outcome's arguments of a report, in order (lua/report_many.lua ``report_item``): the
#: call's name, the token, then a, b, k and d, whose meaning depends on the call.
REPORT_ITEM = ("call", *TOKEN, "a", "b", "k", "d")
