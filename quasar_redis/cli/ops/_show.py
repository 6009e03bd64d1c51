"""Jobs, values and times as the operator commands show them: a JSON-ready dict each, and the
same for people (rich tables and text)."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

from ... import _types as t
from ..._codec import unpack

#: at most this much of a decoded value's text on a terminal (JSON gets it whole)
SHOWN_CHARS = 2000


def when(ms: int | None) -> str | None:
    return None if ms is None else t.readable_time(ms)


def ago(ms: int | None, now: int) -> str:
    """``12s ago``, ``3m ago``, ``in 5s``, for a time in ms against ``now``."""
    if ms is None:
        return "-"
    delta = (now - ms) / 1000
    size = abs(delta)
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60)):
        if size >= seconds:
            text = f"{size / seconds:.0f}{unit}"
            break
    else:
        text = f"{size:.0f}s" if size >= 1 else f"{size * 1000:.0f}ms"
    return f"{text} ago" if delta >= 0 else f"in {text}"


def decoded(data: bytes | None) -> dict[str, Any] | None:
    """A stored payload or result, read as msgpack (the default serializer, with its extension
    types), else JSON, else UTF-8 text, else bytes (base64): ``{"format": ..., "value": ...}``."""
    if data is None:
        return None
    readers: list[tuple[str, Any]] = [("msgpack", unpack), ("json", json.loads)]
    for name, read in readers:
        try:
            return {"format": name, "value": read(data)}
        except Exception:
            continue
    try:
        return {"format": "text", "value": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"format": "bytes", "value": base64.b64encode(data).decode()}


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: times in ISO 8601, sets and tuples as lists, bytes in
    base64, anything else unknown as its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (uuid.UUID, Decimal)):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return repr(value)


def state_fields(state: t.JobState) -> dict[str, Any]:
    """The state's name and fields, times readable."""
    out: dict[str, Any] = {"name": type(state).__name__}
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        out[f.name] = when(value) if f.name.endswith("_at") or f.name == "deadline" else value
    return out


def error_fields(error: t.ErrorInfo) -> dict[str, Any]:
    """A failed attempt: its kind, message, traceback, attempt and time (the last three empty
    for ``Job.error``, which keeps the kind and message only)."""
    return {
        "kind": error.kind,
        "message": error.message,
        "attempt": error.attempt or None,
        "at": when(error.at) if error.at else None,
        "traceback": error.traceback,
    }


def summary(job: t.Job, status: t.Status) -> dict[str, Any]:
    """A job in a list: what tells it apart."""
    return {
        "id": job.id,
        "status": status.value,
        "task": job.stage,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "group": job.group,
        "inserted_at": when(job.inserted_at),
        "finished_at": when(job.completed_at),
        "error": None if job.error is None else f"{job.error.kind}: {job.error.message}",
    }


def details(info: t.JobInfo) -> dict[str, Any]:
    """Every field of a job, its payload and result decoded, and its failure history."""
    job = info.job
    return {
        "id": job.id,
        "queue": job.queue,
        "task": job.stage,
        "status": info.status.value,
        "state": state_fields(job.state),
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "group": job.group,
        "batch": job.batch,
        "callback_of": job.callback_of,
        "fencing_version": job.fencing_version,
        "inserted_at": when(job.inserted_at),
        "attempted_at": when(job.attempted_at),
        "completed_at": when(job.completed_at),
        "deadline": when(job.deadline),
        "input_ref": job.input_ref,
        "input_revision": job.input_revision,
        "dependencies": list(job.dependencies),
        "pending_dependencies": job.pending_dependencies,
        "on_dependency_failure": job.on_dependency_failure,
        "dedup": job.dedup,
        "waiting_on": info.waiting_on,
        "payload": jsonable(decoded(job.raw_payload)),
        "result": jsonable(decoded(job.raw_result)),
        "error": None if job.error is None else error_fields(job.error),
        "errors": [error_fields(e) for e in info.errors],
        "progress": progress_fields(info.progress),
    }


def progress_fields(progress: t.Progress | None) -> dict[str, Any] | None:
    if progress is None:
        return None
    return {
        "value": progress.value,
        "message": progress.message,
        "at": when(progress.at_ms),
        "attempt": progress.attempt,
    }


def progress_text(progress: dict[str, Any] | None) -> str:
    """``42 "resizing" (attempt 1, 2026-...)``, or "-" for none."""
    if progress is None:
        return "-"
    message = progress["message"]
    said = "" if message is None else " " + json.dumps(message, ensure_ascii=False)
    return f"{progress['value']:g}{said} (attempt {progress['attempt']}, {progress['at']})"


def shown(value: Any) -> str:
    """A decoded value for people: its JSON text, cut at ``SHOWN_CHARS``."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} chars)"
