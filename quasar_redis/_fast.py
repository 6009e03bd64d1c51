"""The fast readings of the common replies, each the mirror of the Lua that wrote the reply.

The common reply is what redis-py gives with ``decode_responses=False``: every name and text value
bytes. These readings build the same values as ``_general`` without its per-field generic steps.
Whatever a reading does not expect raises inside it, and the general reading decides instead (and
raises its error). A change to the Lua a reading mirrors changes the reading too;
tests/test_parse_fast.py checks that each gives what the general reading gives.

Two readings rebuild what a script wrote without it being sent back, so that the commonest
replies stay short: ``parse_claimed`` (a claimed job's lease, as lua/include/lease.lua's ``lease``
wrote it) and ``created_job`` (a job an enqueue created, from the arguments the client sent).
They are the only places Python re-derives a script's writes, and they take every field, default
and argument position from ``_schema``: tests/test_schema.py checks that no function of the
package spells a job field's key but ``_schema`` and the readers it names (which read what a reply
carries), and that the Lua those two mirror writes what ``_schema`` says it writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, TypeAlias

from . import _types as t
from ._general import POLICY_OF, general_job, general_token, optional_int, text
from ._schema import BLOB_CHUNKS, BLOBS, DEFAULTS, ENQUEUE_ITEM, KEY, LEASE_WRITES, STATE
from .errors import ProtocolError

#: One job's arguments as an enqueue sends them (``_schema.ENQUEUE_ITEM``).
Group: TypeAlias = Sequence[str | bytes]

_DEFAULTS_B = {name.encode(): value for name, value in DEFAULTS.items()}
_CHUNKS_B = {
    name.encode(): [f"{name}{i}".encode() for i in range(2, BLOB_CHUNKS + 1)] for name in BLOBS
}
# What the derivations below write or read, by name.
LEASE_KEYS_B = tuple(key.encode() for key in LEASE_WRITES)
_ST, _A, _F, _W, _X, _N, _ATT = LEASE_KEYS_B
_LEASED = STATE["leased"].encode()
_NEW_ATTEMPT, _NEW_FENCE = int(DEFAULTS[KEY["attempt"]]), int(DEFAULTS[KEY["fencing_version"]])
# The arguments created_job reads, by name, in the order it unpacks them.
_CREATED_READS = (
    "id queue stage payload input_ref input_revision dependencies priority max_attempts"
    " available_at delay odf deadline expires_in dedup group batch"
)
_CREATED = itemgetter(*map(ENQUEUE_ITEM.index, _CREATED_READS.split()))
_TERMINAL_B = (b"S", b"F", b"C", b"E")
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
    if st == b"E":
        return t.Expired(int(f[b"dl"]), int(f[b"fin"]))
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
    dl = f.get(b"dl")
    uq = f.get(b"uq")
    g = f.get(b"g")
    bt = f.get(b"bt")
    cbo = f.get(b"cbo")
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
        POLICY_OF.get(f[b"odf"], "block"),
        int(f[b"pd"]),
        None if dl is None else int(dl),
        None if uq is None else _text_of(uq, "utf-8", "replace"),
        None if g is None else _text_of(g, "utf-8", "replace"),
        None if bt is None else _text_of(bt, "utf-8", "replace"),
        None if cbo is None else _text_of(cbo, "utf-8", "replace"),
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
    nonce = next((reply[i + 1] for i in range(len(reply) - 2, 0, -2) if reply[i] == _N), None)
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
    reply of lua/claim.lua and lua/report_and_claim.lua): ``_schema.LEASE_WRITES`` applied as
    lua/include/lease.lua's ``lease`` applies them."""
    try:
        if type(job_id) is not bytes or (before and type(before[0]) is not bytes):
            raise TypeError("not the common reply")
        f = _DEFAULTS_B.copy()
        it = iter(before)
        f.update(zip(it, it, strict=True))
        fence, expires = int(f[_F]) + 1, int(now) + lease_ms
        f[_ST], f[_A], f[_F] = _LEASED, b"%d" % (int(f[_A]) + 1), b"%d" % fence
        f[_W], f[_X], f[_ATT] = worker.encode(), b"%d" % expires, now
        job = _job_from_fields(job_id, f)
        return _claim(job, _token(job.id, job.input_revision, worker, fence, expires, nonce))
    except Exception:  # anything unusual: the general reading decides (and raises its error)
        return parse_leased([job_id, *before, *_lease_fields(before, now, worker, lease_ms, nonce)])


def _lease_fields(
    before: Sequence[Any], now: Any, worker: str, lease_ms: int, nonce: str
) -> list[bytes]:
    """``_schema.LEASE_WRITES`` as names and values, for fields of any shape."""
    fields = {
        text(name).encode(): value for name, value in zip(before[::2], before[1::2], strict=True)
    }
    attempt = int(fields.get(_A, _DEFAULTS_B[_A])) + 1
    fence = int(fields.get(_F, _DEFAULTS_B[_F])) + 1
    values: tuple[bytes, ...] = (_LEASED, b"%d" % attempt, b"%d" % fence, _as_bytes(worker))
    values += (b"%d" % (int(now) + lease_ms), _as_bytes(nonce), _as_bytes(now))
    return [part for pair in zip(LEASE_KEYS_B, values, strict=True) for part in pair]


def created_job(group: Group, now: int, pending: bytes) -> t.Job:
    """A job this very call created, from what the client sent (a "slim" reply carries only its
    count of dependencies not yet succeeded): the Job a "jobs" reply would have given. Mirrors
    the job table lua/enqueue.lua's ``write_one`` stores (waiting, the attempt and fencing
    version at their defaults, available_at = the given time or now + delay, inserted_at = now),
    reading ``group`` by the names of ``_schema.ENQUEUE_ITEM``."""
    (
        job_id,
        queue,
        stage,
        payload,
        input_ref,
        revision,
        deps,
        priority,
        attempts,
        available_at,
        delay,
        policy,
        deadline,
        expires_in,
        dedup,
        flow_group,
        batch,
    ) = _CREATED(group)
    at = now + int(delay or 0) if available_at == "" else int(available_at)
    dl = int(deadline) if deadline else (now + int(expires_in) if expires_in else None)
    return _job(
        job_id,
        queue,
        stage,
        payload,
        input_ref,
        int(revision),
        tuple(str(deps).split()),
        int(priority),
        _NEW_ATTEMPT,
        int(attempts),
        _NEW_FENCE,
        t.Waiting(at),
        now,
        None,
        None,
        None,
        None,
        POLICY_OF.get(policy.encode() if isinstance(policy, str) else policy, "block"),
        int(pending),
        dl,
        str(dedup) or None,
        str(flow_group) or None,
        str(batch) or None,
        None,
    )
