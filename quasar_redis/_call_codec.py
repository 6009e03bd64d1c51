"""A task call as a job payload and back: the envelope (``payload_of``, ``args_of``) and the
app's serializer around it (``CallCodec``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _types as t
from ._binding import CallCheck, unencodable
from ._codec import Encoded
from .errors import CorruptDataError, InvalidTaskCall
from .serializers import Serializer, name_of


def payload_of(
    args: Sequence[Any], kwargs: dict[str, Any], trace: dict[str, str] | None = None
) -> dict[str, Any]:
    """The payload envelope of a call: ``a`` its positional arguments, ``k`` its keyword
    arguments, and ``t`` the trace context of its enqueue when tracing is on."""
    if trace is None:
        return {"a": list(args), "k": kwargs}
    return {"a": list(args), "k": kwargs, "t": trace}


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
    ) -> Encoded:
        """The payload of a call of the task named ``task`` (whose signature ``check`` holds),
        encoded; ``InvalidTaskCall`` if the function cannot take these arguments or the
        serializer cannot encode them."""
        problem = check.problem(args, kwargs)
        if problem is None:
            try:
                return Encoded(self.serializer.dumps(payload_of(args, kwargs, trace)))
            except (TypeError, ValueError, OverflowError) as exc:
                problem = unencodable(self.serializer, check.named(args, kwargs), exc)
        raise InvalidTaskCall(task, t.InvalidJob(problem))

    def traced_call_of(self, job: t.Job) -> tuple[list[Any], dict[str, Any], Any]:
        """The arguments of the call ``job`` runs, and the trace context its enqueue stored
        (None if none); TypeError / CorruptDataError if it holds no call."""
        payload = self.load(job.raw_payload, "payload", job.id)
        args, kwargs = args_of(payload)
        return args, kwargs, payload.get("t")

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
