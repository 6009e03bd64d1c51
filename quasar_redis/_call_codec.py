"""A task call as a job payload and back: the envelope (``payload_of``, ``args_of``) and the
app's serializer around it (``CallCodec``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _types as t
from ._binding import RECEIVED, CallCheck, unencodable
from ._codec import Encoded
from .errors import CorruptDataError, InvalidTaskCall
from .serializers import Serializer, name_of


def payload_of(
    args: Sequence[Any],
    kwargs: dict[str, Any],
    trace: dict[str, str] | None = None,
    receives: str | None = None,
) -> dict[str, Any]:
    """The payload envelope of a call: ``a`` its positional arguments, ``k`` its keyword
    arguments, ``t`` the trace context of its enqueue when tracing is on, and ``r`` what the
    call receives first, before ``a``, when it is a workflow's (``_workflows``)."""
    payload: dict[str, Any] = {"a": list(args), "k": kwargs}
    if trace is not None:
        payload["t"] = trace
    if receives is not None:
        payload["r"] = receives
    return payload


def args_of(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """The call arguments in a job payload made by ``payload_of``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("a", []), list):
        raise TypeError("the payload is not a task call (expected {'a': [...], 'k': {...}})")
    kwargs = payload.get("k", {})
    if not isinstance(kwargs, dict):
        raise TypeError("the payload's keyword arguments are not a map")
    return list(payload.get("a", [])), kwargs


class CallCodec:
    """Task calls and results through one serializer: what a producer enqueues and what a
    worker reads back."""

    def __init__(self, serializer: Serializer) -> None:
        self.serializer = serializer

    def encode(
        self,
        task: str,
        check: CallCheck,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        trace: dict[str, str] | None = None,
        receives: str | None = None,
    ) -> Encoded:
        """The payload of a call of the task named ``task`` (whose signature ``check`` holds),
        encoded; ``InvalidTaskCall`` if the function cannot take these arguments (after the one
        it ``receives`` first, if any) or the serializer cannot encode them."""
        problem = check.problem([RECEIVED, *args] if receives else args, kwargs)
        if problem is None:
            try:
                return Encoded(self.serializer.dumps(payload_of(args, kwargs, trace, receives)))
            except (TypeError, ValueError, OverflowError) as exc:
                problem = unencodable(self.serializer, check.named(args, kwargs), exc)
        raise InvalidTaskCall(task, t.InvalidJob(problem))

    def traced_call_of(self, job: t.Job) -> tuple[list[Any], dict[str, Any], Any]:
        """The arguments of the call ``job`` runs, and the trace context its enqueue stored
        (None if none); TypeError / CorruptDataError if it holds no call."""
        args, kwargs, trace, _ = self.run_of(job)
        return args, kwargs, trace

    def run_of(self, job: t.Job) -> tuple[list[Any], dict[str, Any], Any, str | None]:
        """``traced_call_of``, and what the call receives before its arguments (None: nothing;
        see ``payload_of``)."""
        payload = self.load(job.raw_payload, "payload", job.id)
        args, kwargs = args_of(payload)
        receives = payload.get("r")
        if receives is not None and not isinstance(receives, str):
            raise TypeError("the payload's 'r' (what the call receives first) is not a text")
        return args, kwargs, payload.get("t"), receives

    def result_of(self, job: t.Job) -> Any:
        """The result ``job`` stored (None if it stored none)."""
        return None if not job.raw_result else self.load(job.raw_result, "result", job.id)

    def load(self, data: bytes, what: str, job_id: str) -> Any:
        """``data`` decoded; CorruptDataError if the serializer cannot read it."""
        try:
            return self.serializer.loads(data)
        except Exception as exc:  # a user's serializer may raise anything on data it did not write
            raise CorruptDataError(
                f"{what} of job {job_id!r} is not valid {name_of(self.serializer)}: {exc}"
            ) from None
