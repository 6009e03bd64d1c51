"""Script arguments: how each value a call sends becomes text or bytes.

A value of the wrong type is not refused here: it becomes a text the script refuses by name (an
``InvalidJob`` naming the argument).
"""

from __future__ import annotations

from typing import Any

from . import _types as t
from ._codec import EncodeError, encode

#: One script argument, as redis-py sends it.
Arg = str | bytes

#: The default limit on a payload's (and a result's) encoded size (``Limits.max_payload_bytes``).
MAX_PAYLOAD_BYTES = 1 << 20


def now_arg(now: int | None) -> str:
    return "" if now is None else int_arg(now)


def int_arg(value: Any) -> str:
    """An integer argument as text; anything else becomes a text the script refuses by name."""
    if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)  # (the usual value, a plain int, passes the first test alone)
    return repr(value)


def text_arg(value: Any) -> Arg:
    if type(value) is str or isinstance(value, str | bytes):
        return value
    return repr(value)


def name_arg(value: Any) -> Arg:
    """A name (of a queue, ...): text as it is; anything else becomes a text no name can be (5
    and None must not pass for the names "5" and "None")."""
    if isinstance(value, str | bytes):
        return value
    return f"{value!r} ({type(value).__name__})"


def lease_args(token: t.LeaseToken, worker_id: str) -> tuple[Arg, ...]:
    return (
        text_arg(token.job_id),
        int_arg(token.input_revision),
        text_arg(token.worker_id),
        int_arg(token.fencing_version),
        int_arg(token.expires_at),
        text_arg(token.nonce),
        text_arg(worker_id),
    )


def report_token_args(token: t.LeaseToken) -> tuple[Arg, ...]:
    """The six token arguments of a report item (``_schema.TOKEN``: ``lease_args`` without the
    worker id)."""
    job_id, worker, nonce = token.job_id, token.worker_id, token.nonce
    rv, fence, expires = token.input_revision, token.fencing_version, token.expires_at
    if (
        type(job_id) is str
        and type(worker) is str
        and type(nonce) is str
        and type(rv) is int
        and type(fence) is int
        and type(expires) is int
    ):
        return (job_id, str(rv), worker, str(fence), str(expires), nonce)
    return lease_args(token, "")[:6]


def result_arg(result: Any, max_bytes: int) -> bytes | t.JobRefused:
    """A result encoded (``b""`` for None), or the refusal of one that cannot be encoded or is
    over the limit a payload has (``Limits.max_payload_bytes``)."""
    try:
        raw = b"" if result is None else encode(result)
    except EncodeError as exc:
        return t.JobRefused(t.InvalidJob(f"result {exc}"))
    if len(raw) > max_bytes:
        return t.JobRefused(
            t.InvalidJob(f"result is {len(raw)} bytes, over the limit of {max_bytes}")
        )
    return raw


def outcome_group(
    outcome: t.Outcome, max_result: int = MAX_PAYLOAD_BYTES
) -> tuple[Arg, ...] | t.JobRefused:
    """An outcome's item of a report in ``_schema.REPORT_ITEM``'s order (a plain tuple, built
    once per outcome: tests/test_schema.py reads it back by the layout's names), or the refusal
    of a result Python cannot send."""
    if (
        type(outcome) is t.Complete
        and outcome.result is None
        and type(outcome.output_ref) is str
        and outcome.result_ttl_ms is None
    ):
        return ("complete", *report_token_args(outcome.token), outcome.output_ref, b"", "", "")
    token = report_token_args(outcome.token)
    match outcome:
        case t.Complete(_, result, output_ref, ttl):
            raw = result_arg(result, max_result)
            if isinstance(raw, t.JobRefused):
                return raw
            return (
                "complete",
                *token,
                text_arg(output_ref),
                raw,
                "" if ttl is None else int_arg(ttl),
                "",
            )
        case t.Fail(_, reason, delay, kind, trace):
            return (
                "fail",
                *token,
                text_arg(reason),
                int_arg(delay),
                text_arg(kind),
                text_arg(trace),
            )
        case t.PermanentFail(_, reason, kind, trace):
            return ("permanent_fail", *token, text_arg(reason), "", text_arg(kind), text_arg(trace))
        case t.Release(_, delay, hold):
            return (
                "release",
                *token,
                int_arg(delay),
                "" if hold is None else int_arg(hold),
                "",
                "",
            )
    raise TypeError(f"not an outcome: {outcome!r}")
