"""The general reading of a job and of a lease token, whatever shape the reply takes.

A script replies a job as ``{id, field, value, ...}`` (lua/include/job.lua's ``job_reply``): a later
field overrides an earlier one, a field holding its default may be absent, and a blob may come in
chunks. The readings here take any names and values redis-py may give (text or bytes, integers or
their digits) and check every field: a job no script of ours could have written raises
``CorruptJobError``. ``_fast`` reads the common reply faster and falls back to these.

They read what a reply carries, by the short keys ``_schema.FIELDS`` declares (defaults and blob
chunks from there too); tests/test_schema.py checks that every key they spell is declared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _types as t
from ._schema import BLOB_CHUNKS, BLOBS, DEFAULTS

__all__ = [
    "BLOB_CHUNKS",
    "DEFAULTS",
    "POLICY_OF",
    "general_job",
    "general_token",
    "optional_int",
    "text",
]
from .errors import CorruptJobError

#: A stored ``odf`` as the policy it names (an unknown one reads as the default).
POLICY_OF: dict[bytes, t.DependencyPolicy] = {b"block": "block", b"cancel": "cancel", b"run": "run"}


def text(value: Any) -> str:
    """A reply's value as text (bytes decoded, undecodable bytes replaced)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def optional_int(value: bytes | None) -> int | None:
    return None if value is None else int(value)


def _state(f: dict[str, bytes]) -> t.JobState:
    st = f["st"]
    if st == b"W":
        return t.Waiting(int(f["at"]))
    if st == b"R":
        return t.RetryWaiting(text(f.get("em", b"")), int(f["at"]))
    if st == b"L":
        return t.Leased(text(f["w"]), int(f["f"]), int(f["x"]))
    if st == b"S":
        return t.Succeeded(text(f.get("o", b"")), int(f["fin"]))
    if st == b"F":
        return t.Failed(text(f.get("em", b"")), int(f["fin"]))
    if st == b"E":
        return t.Expired(int(f["dl"]), int(f["fin"]))
    return t.Cancelled(text(f.get("cr", b"")), int(f["fin"]))


def _fields(reply: Sequence[Any]) -> dict[str, bytes]:
    """The job fields of a reply: later ones win, defaults filled in, blob chunks joined."""
    f: dict[str, bytes] = dict(DEFAULTS)
    it = iter(reply)
    next(it)
    for name, value in zip(it, it, strict=True):
        f[name.decode() if isinstance(name, bytes) else name] = value
    for name in BLOBS:
        if f"{name}2" in f:
            parts = [f.get(name, b"")]
            for i in range(2, BLOB_CHUNKS + 1):
                part = f.pop(f"{name}{i}", None)
                if part is None:
                    break
                parts.append(part)
            f[name] = b"".join(parts)
    if "ins" not in f and "at" in f:
        f["ins"] = f["at"]
    return f


def general_job(reply: Sequence[Any]) -> t.Job:
    """A job from ``{id, field, value, ...}``; ``CorruptJobError`` when a field cannot be read."""
    job_id = text(reply[0])
    f = _fields(reply)
    try:
        error = t.ErrorInfo(text(f["ek"]), text(f.get("em", b""))) if "ek" in f else None
        policy = POLICY_OF.get(f.get("odf", b"block"), "block")
        return t.Job(
            id=job_id,
            queue=text(f["q"]),
            stage=text(f["s"]),
            raw_payload=f.get("p", b""),
            input_ref=text(f["ir"]),
            input_revision=int(f["rv"]),
            dependencies=tuple(text(f.get("dp", b"")).split()),
            priority=int(f["pr"]),
            attempt=int(f["a"]),
            max_attempts=int(f["m"]),
            fencing_version=int(f["f"]),
            state=_state(f),
            inserted_at=int(f["ins"]),
            attempted_at=optional_int(f.get("att")),
            completed_at=optional_int(f.get("fin"))
            if f["st"] in (b"S", b"F", b"C", b"E")
            else None,
            error=error,
            raw_result=f.get("res") or None,
            on_dependency_failure=policy,
            pending_dependencies=int(f["pd"]),
            deadline=optional_int(f.get("dl")),
            dedup=text(f["uq"]) if "uq" in f else None,
            group=text(f["g"]) if "g" in f else None,
            batch=text(f["bt"]) if "bt" in f else None,
            callback_of=text(f["cbo"]) if "cbo" in f else None,
        )
    except (KeyError, ValueError) as exc:
        raise CorruptJobError(job_id, f"cannot decode field: {exc}") from None


def general_token(reply: Sequence[Any]) -> t.LeaseToken:
    """A lease token from ``{job_id, input_revision, worker_id, fence, expires_at, nonce}``."""
    return t.LeaseToken(
        job_id=text(reply[0]),
        input_revision=int(reply[1]),
        worker_id=text(reply[2]),
        fencing_version=int(reply[3]),
        expires_at=int(reply[4]),
        nonce=text(reply[5]),
    )
