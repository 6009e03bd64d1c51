"""The fast readings of the common replies, each the mirror of the Lua that wrote the reply.

The common reply is what redis-py gives with ``decode_responses=False``: every name and text value
bytes. These readings build the same values as ``_general`` without its per-field generic steps;
some rebuild what a script wrote without it being sent back (a claimed job's lease, a job an
enqueue created), applying in Python exactly what the Lua they name applied. Whatever a reading
does not expect raises inside it, and the general reading decides instead (and raises its error).
A change to the Lua a reading mirrors changes the reading too; tests/test_parse_fast.py checks
that each gives what the general reading gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from . import _types as t
from ._general import BLOB_CHUNKS, DEFAULTS, general_job, general_token, optional_int, text
from .errors import ProtocolError

#: One job's arguments as an enqueue sends them (lua/enqueue.lua's group of 13).
Group: TypeAlias = Sequence[str | bytes]

_DEFAULTS_B = {name.encode(): value for name, value in DEFAULTS.items()}
_CHUNKS_B = {
    name: [f"{name.decode()}{i}".encode() for i in range(2, BLOB_CHUNKS + 1)]
    for name in (b"p", b"res")
}
_TERMINAL_B = (b"S", b"F", b"C")
_text_of = bytes.decode
_job = t.builder(t.Job)
_token = t.builder(t.LeaseToken)
_claim = t.builder(t.Claim)
_leased = t.builder(t.Leased)


def _joined(f: dict[bytes, Any], name: bytes) -> bytes:
    parts = [f.get(name, b"")]
    for key in _CHUNKS_B[name]:
        part = f.pop(key, None)
        if part is None:
            break
        parts.append(part)
    return b"".join(parts)


def _state(f: dict[bytes, Any], st: bytes) -> t.JobState:
    if st == b"W":
        return t.Waiting(int(f[b"at"]))
    if st == b"R":
        return t.RetryWaiting(text(f.get(b"em", b"")), int(f[b"at"]))
    if st == b"S":
        return t.Succeeded(text(f.get(b"o", b"")), int(f[b"fin"]))
    if st == b"F":
        return t.Failed(text(f.get(b"em", b"")), int(f[b"fin"]))
    return t.Cancelled(text(f.get(b"cr", b"")), int(f[b"fin"]))


def _job_from_reply(reply: Sequence[Any]) -> t.Job:
    if type(reply[1]) is not bytes:
        raise TypeError("not the common reply")
    f = _DEFAULTS_B.copy()
    it = iter(reply)
    next(it)
    f.update(zip(it, it, strict=True))
    return _job_from_fields(reply[0], f)


def _job_from_fields(job_id: bytes, f: dict[bytes, Any]) -> t.Job:
    if b"p2" in f:
        f[b"p"] = _joined(f, b"p")
    if b"res2" in f:
        f[b"res"] = _joined(f, b"res")
    st = f[b"st"]
    fence = int(f[b"f"])
    state: t.JobState
    if st == b"L":
        state = _leased(_text_of(f[b"w"], "utf-8", "replace"), fence, int(f[b"x"]))
    else:
        state = _state(f, st)
    ek = f.get(b"ek")
    att = f.get(b"att")
    return _job(
        _text_of(job_id, "utf-8", "replace"),
        _text_of(f[b"q"], "utf-8", "replace"),
        _text_of(f[b"s"], "utf-8", "replace"),
        f.get(b"p", b""),
        _text_of(f[b"ir"], "utf-8", "replace"),
        int(f[b"rv"]),
        tuple(_text_of(f[b"dp"], "utf-8", "replace").split()),
        int(f[b"pr"]),
        int(f[b"a"]),
        int(f[b"m"]),
        fence,
        state,
        int(f[b"ins"] if b"ins" in f else f[b"at"]),
        None if att is None else int(att),
        optional_int(f.get(b"fin")) if st in _TERMINAL_B else None,
        None if ek is None else t.ErrorInfo(text(ek), text(f.get(b"em", b""))),
        f.get(b"res") or None,
        "cancel" if f[b"odf"] == b"cancel" else "block",
        int(f[b"pd"]),
    )


def parse_job(reply: Sequence[Any]) -> t.Job:
    """A job from ``{id, field, value, ...}``: mirrors lua/include/job.lua's ``job_reply`` (a later
    field wins, a field holding its DEFAULTS value may be absent, a blob may come in chunks)."""
    try:
        return _job_from_reply(reply)
    except Exception:  # anything unusual: the general reading decides (and raises its error)
        return general_job(reply)


def parse_token(reply: Sequence[Any]) -> t.LeaseToken:
    """A lease token: mirrors lua/include/lease.lua's ``token_reply`` (id, rv, w, f, x, n)."""
    try:
        return _token(
            _text_of(reply[0], "utf-8", "replace"),
            int(reply[1]),
            _text_of(reply[2], "utf-8", "replace"),
            int(reply[3]),
            int(reply[4]),
            _text_of(reply[5], "utf-8", "replace"),
        )
    except Exception:  # not the common reply: the general reading decides
        return general_token(reply)


def parse_claim(reply: Sequence[Any]) -> t.Claim:
    """``{"Claim", job, token}``, as lua/claim_job.lua and a re-sent claim give it."""
    return _claim(parse_job(reply[1]), parse_token(reply[2]))


def parse_leased(reply: Sequence[Any]) -> t.Claim:
    """A claim read from its leased job alone, whose fields hold the lease (the token is the
    job's id, rv, w, f, x and n): ``parse_claimed``'s general route."""
    job = parse_job(reply)
    state = job.state
    # The nonce: the last "n" field (a later field overrides an earlier one), near the end.
    nonce = next((reply[i + 1] for i in range(len(reply) - 2, 0, -2) if reply[i] == b"n"), None)
    if not isinstance(state, t.Leased) or nonce is None:
        raise ProtocolError(f"claimed job {job.id!r} is not leased")
    token = _token(
        job.id,
        job.input_revision,
        state.worker_id,
        state.fencing_version,
        state.expires_at,
        _text_of(nonce, "utf-8", "replace"),
    )
    return _claim(job, token)


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def parse_claimed(
    job_id: Any, before: Sequence[Any], now: Any, worker: str, lease_ms: int, nonce: str
) -> t.Claim:
    """A job a claim's first delivery leased, from its fields as they were before the lease (the
    reply of lua/claim.lua and lua/report_and_claim.lua): mirrors lua/include/lease.lua's
    ``lease`` as ``take_some`` applies it (st L, attempt + 1, fence + 1, the worker, expires_at =
    now + lease_ms, the nonce, attempted_at = now)."""
    try:
        if type(job_id) is not bytes or (before and type(before[0]) is not bytes):
            raise TypeError("not the common reply")
        f = _DEFAULTS_B.copy()
        it = iter(before)
        f.update(zip(it, it, strict=True))
        fence, expires = int(f[b"f"]) + 1, int(now) + lease_ms
        f[b"st"], f[b"a"], f[b"f"] = b"L", b"%d" % (int(f[b"a"]) + 1), b"%d" % fence
        f[b"w"], f[b"x"], f[b"att"] = worker.encode(), b"%d" % expires, now
        job = _job_from_fields(job_id, f)
        return _claim(job, _token(job.id, job.input_revision, worker, fence, expires, nonce))
    except Exception:  # anything unusual: the general reading decides (and raises its error)
        fields = dict(zip(map(text, before[::2]), before[1::2], strict=True))
        attempt, fence = int(fields.get("a", b"0")) + 1, int(fields.get("f", b"0")) + 1
        lease = [b"st", b"L", b"a", b"%d" % attempt, b"f", b"%d" % fence, b"w", _as_bytes(worker)]
        lease += [b"x", b"%d" % (int(now) + lease_ms), b"n", _as_bytes(nonce)]
        lease += [b"att", _as_bytes(now)]
        return parse_leased([job_id, *before, *lease])


def created_job(group: Group, now: int, pending: bytes) -> t.Job:
    """A job this very call created, from what the client sent (a "slim" reply carries only its
    count of dependencies not yet succeeded): the Job a "jobs" reply would have given. Mirrors
    the job table lua/enqueue.lua's ``write_one`` stores (st W, attempt 0, fence 0, available_at
    = the given time or now + delay, inserted_at = now)."""
    job_id, queue, stage, payload, input_ref, revision, deps, priority, attempts = group[:9]
    available_at, delay, policy = group[9:12]
    at = now + int(delay or 0) if available_at == "" else int(available_at)
    return _job(
        job_id,
        queue,
        stage,
        payload,
        input_ref,
        int(revision),
        tuple(str(deps).split()),
        int(priority),
        0,
        int(attempts),
        0,
        t.Waiting(at),
        now,
        None,
        None,
        None,
        None,
        "cancel" if policy == "cancel" else "block",
        int(pending),
    )
