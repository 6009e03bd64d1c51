"""Dedup keys of an enqueue: ``Unique``, ``Throttle`` and ``Debounce`` (docs/deduplication.md).

A job enqueued with one of them names a key; while another job holds that key (how long is the
option's rule, checked by lua/include/unique.lua inside the enqueue), the enqueue is answered
with that job instead of making a new one: ``JobApplied(job, deduplicated=True)``. A key left
out (``None``) is derived from the job's stage and payload, so that the same call of the same
task is one job.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from . import _types as t
from ._codec import EncodeError, encode
from ._ids import id_error

__all__ = [
    "Debounce",
    "Dedup",
    "OnDuplicate",
    "Throttle",
    "Unique",
    "dedup_arg",
    "dedup_key",
    "derived_key",
]

#: How long a unique job holds its key: while it waits (Waiting or RetryWaiting), while it
#: waits or runs, or also for ``ttl_ms`` after it finished.
UniqueUntil: TypeAlias = Literal["waiting", "running", "finished"]


@dataclass(frozen=True, slots=True)
class Unique:
    """One job per key: an enqueue with the key of a job that still holds it gets that job.

    ``until`` says how long the job holds the key: ``"waiting"`` (until a worker takes it),
    ``"running"`` (until it finishes) or ``"finished"`` (until ``ttl_ms`` after it finished:
    a positive number of ms, given for ``"finished"`` alone)."""

    key: str | None = None
    until: UniqueUntil = "running"
    ttl_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Throttle:
    """The first job of a key in each window: an enqueue within ``window_ms`` of the first
    enqueue of the key's job gets that job (whatever its state), a later one makes a new job."""

    key: str | None
    window_ms: int


@dataclass(frozen=True, slots=True)
class Debounce:
    """The last input of a key's burst: an enqueue within ``window_ms`` of the first enqueue of
    the key's job, while that job still waits unstarted, replaces its payload and its
    available_at (now + delay, or the time given) and gets it back; once the job has started,
    or after the window, a new job is made."""

    key: str | None
    window_ms: int


Dedup: TypeAlias = Unique | Throttle | Debounce
#: What a batch enqueue does with a job whose id exists (or came earlier in the batch): refuse
#: the batch (``DuplicateJob``), or skip the job, answered with the job of that id.
OnDuplicate: TypeAlias = Literal["refuse", "skip"]


def derived_key(stage: str, payload: bytes) -> str:
    """The key of a job by what it runs: a digest of its stage and its encoded payload."""
    digest = hashlib.blake2b(payload, digest_size=16, person=b"quasar-dedup")
    digest.update(b"\0" + stage.encode())
    return f"{stage}:{digest.hexdigest()}"


def dedup_key(job: Any) -> str | None:
    """The dedup key of a ``NewJob`` with a dedup option: given, or derived from its stage and
    payload (None for what the enqueue refuses: no option, a key that is no id, a payload that
    cannot be encoded)."""
    if not isinstance(job.dedup, Unique | Throttle | Debounce):
        return None
    key = job.dedup.key
    if key is not None:
        return key if id_error(key) is None and isinstance(key, str) else None
    try:
        return derived_key(job.stage, encode(job.payload))
    except EncodeError:
        return None


def _window(value: object, what: str) -> int | t.InvalidJob:
    if type(value) is not int:
        return t.InvalidJob(f"{what} must be an integer number of ms")
    if value < 1:
        return t.InvalidJob(f"{what} must be positive")
    return value


def dedup_arg(dedup: object, stage: str, payload: bytes) -> str | t.InvalidJob:
    """The enqueue argument of ``dedup`` ("<mode> <window ms> <key>"), or the refusal of a bad
    one (an unknown option, a window of 0 or less, a key that breaks the rule of job ids)."""
    mode: str
    window: int | t.InvalidJob = 0
    if isinstance(dedup, Unique):
        mode = dedup.until
        if mode not in ("waiting", "running", "finished"):
            return t.InvalidJob("unique until must be 'waiting', 'running' or 'finished'")
        if mode == "finished":
            window = _window(dedup.ttl_ms, "unique ttl_ms")
        elif dedup.ttl_ms is not None:
            return t.InvalidJob(f"unique until {mode!r} takes no ttl_ms")
    elif isinstance(dedup, Throttle | Debounce):
        mode = "throttle" if isinstance(dedup, Throttle) else "debounce"
        window = _window(dedup.window_ms, f"{mode} window_ms")
    else:
        return t.InvalidJob("dedup must be a Unique, Throttle or Debounce")
    if isinstance(window, t.InvalidJob):
        return window
    key = derived_key(stage, payload) if dedup.key is None else dedup.key
    if not isinstance(key, str):
        return t.InvalidJob("dedup key must be text")
    if (bad := id_error(key, "dedup key")) is not None:
        return t.InvalidJob(bad)
    return f"{mode} {window} {key}"
