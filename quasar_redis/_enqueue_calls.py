"""The enqueue calls: one job, a batch all or nothing, a batch each on its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from . import _types as t
from ._args import Arg, int_arg, now_arg, text_arg
from ._call_base import POLICIES, BuilderBase, Call, NewJob, dependency_id, new_call_id
from ._codec import EncodeError, encode
from ._dedup import OnDuplicate, dedup_arg
from ._general import text
from ._ids import id_error, sendable
from ._replies import (
    parse_batch_result,
    parse_each_result,
    parse_slim_batch,
    parse_slim_each,
    parse_slim_one,
)
from ._schema import ENQUEUE_ITEM
from ._scripts import scripts

_ID, _PAYLOAD = ENQUEUE_ITEM.index("id"), ENQUEUE_ITEM.index("payload")
_HEAD = 6  # (``_enqueue_head``'s arguments)
_LONE_ID = 1 + _HEAD + _ID  # (a call's id, the head, then the job's group)
#: The reply of an enqueue of one job that created it: ``{"BatchApplied", now, pending}``.
_APPLIED = b"BatchApplied"


def _job_group(
    job: NewJob, make_id: Callable[[], str] = new_call_id
) -> tuple[Arg, ...] | t.InvalidJob:
    """A job's group of arguments in ``_schema.ENQUEUE_ITEM``'s order, or the refusal of what
    Python cannot send (a payload msgpack cannot encode, a dependency that is no job id, an
    unknown policy). A plain tuple, built once per job: tests/test_schema.py reads it back by
    the layout's names."""
    try:
        payload = encode(job.payload)
    except EncodeError as exc:
        return t.InvalidJob(f"payload {exc}")
    job_id: Any = job.id
    if job_id is not None and not sendable(job_id):  # the script checks the rest, in batch order
        return t.InvalidJob(id_error(job_id) or "id must be UTF-8 text")
    if isinstance(job_id, bytes) and id_error(job_id) is None:  # UTF-8: the id is that text
        job_id = job_id.decode()
    deps: list[str] = []
    for dep in job.dependencies:
        dep_id = dependency_id(dep)
        if (bad := id_error(dep_id, "dependency")) is not None:
            return t.InvalidJob(bad)
        deps.append(dep_id if isinstance(dep_id, str) else dep_id.decode())
    if job.on_dependency_failure not in POLICIES:
        return t.InvalidJob("on_dependency_failure must be 'block', 'cancel' or 'run'")
    if job.flow is not None and (bad := id_error(job.flow, "flow")) is not None:
        return t.InvalidJob(bad)
    if job.batch is not None and (bad := id_error(job.batch, "batch")) is not None:
        return t.InvalidJob(bad)
    dedup = "" if job.dedup is None else dedup_arg(job.dedup, job.stage, payload)
    if isinstance(dedup, t.InvalidJob):
        return dedup
    return (
        text_arg(make_id() if job_id is None else job_id),
        text_arg(job.queue),
        text_arg(job.stage),
        payload,
        text_arg(job.input_ref),
        int_arg(job.input_revision),
        " ".join(deps),
        int_arg(job.priority),
        int_arg(job.max_attempts),
        "" if job.available_at is None else int_arg(job.available_at),
        "" if job.delay_ms is None else int_arg(job.delay_ms),
        job.on_dependency_failure,
        "1" if job.id is None else "",  # made here at random: no record of the call needed
        "" if job.deadline is None else int_arg(job.deadline),
        "" if job.expires_in_ms is None else int_arg(job.expires_in_ms),
        dedup,
        "" if job.group is None else text_arg(job.group),
        "" if job.batch is None else text_arg(job.batch),
    )


_build_job = t.builder(NewJob)
#: ``NewJob``'s fields after its stage and payload.
_AFTER_PAYLOAD = tuple(f.name for f in fields(NewJob))[2:]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One kind of job's enqueue with all its arguments but the job's id and payload worked out
    once (a task's queue, priority, attempts, times, policy, batch): what every call of it sends
    around those two. Made by ``prepare``; each client sends it by ``_enqueue_prepared``."""

    job: NewJob  #: the job, its payload None
    before: tuple[Arg, ...]  #: the job's arguments between its id and its payload
    after: tuple[Arg, ...]  #: the job's arguments after its payload
    fields: tuple[Any, ...]  #: the job's fields after its payload, in ``NewJob``'s order

    def new(self, payload: Any) -> NewJob:
        """The job of one call, with ``payload``: what the general way enqueues (a coalesced
        call's, built positionally: ``dataclasses.replace`` costs eight times as much)."""
        return _build_job(self.job.stage, payload, *self.fields)


def prepare(job: NewJob) -> Prepared | None:
    """``job``'s enqueue worked out but for its id and payload, when nothing else of it varies
    from call to call (no id, dependencies, dedup key or group of its own; every other field
    sendable); else None: each call goes the general way."""
    if job.id is not None or job.dependencies or job.dedup is not None or job.group is not None:
        return None
    group = _job_group(replace(job, payload=None), str)
    if isinstance(group, t.InvalidJob):
        return None
    rest = tuple(getattr(job, name) for name in _AFTER_PAYLOAD)
    return Prepared(job, group[_ID + 1 : _PAYLOAD], group[_PAYLOAD + 1 :], rest)


def created_id(call: Call[Any], reply: Any) -> str | None:
    """The id of the job ``call`` (``EnqueueCalls.prepared``'s) created, when ``reply`` is the
    common reply of that: ``{"BatchApplied", now, pending}``; else None, and the general
    reading (``parse_slim_one``) makes its result."""
    if (
        type(reply) is list
        and len(reply) == 3
        and reply[0] == _APPLIED
        and type(reply[2]) is bytes
        and reply[1] != b""
    ):
        return str(call.args[_LONE_ID])
    return None


def applied_id(result: t.JobResult) -> str | t.JobRefused:
    """The id of the job ``result`` applied (a prepared job is always a new one), or the
    refusal."""
    return result.job.id if isinstance(result, t.JobApplied) else result


_build_call = t.builder(Call)


def _parse_lone(group: tuple[Arg, ...]) -> Callable[[Any], t.JobResult]:
    return parse_slim_one(group, str(group[0]))


class EnqueueCalls(BuilderBase):
    """Builds the calls that enqueue jobs."""

    def _batch_size_error(self, jobs: Sequence[NewJob]) -> t.InvalidJob | None:
        if not jobs:
            return t.InvalidJob("a batch must hold at least one job")
        if len(jobs) > self.limits.max_batch:
            return t.InvalidJob(f"a batch may hold at most {self.limits.max_batch} jobs")
        return None

    def _enqueue_head(self, n: int, now: int | None, mode: str, reply: str) -> tuple[Arg, ...]:
        """The ``_HEAD`` arguments an enqueue sends before its jobs'."""
        limits = self.limits
        return (
            now_arg(now),
            str(limits.max_payload_bytes),
            str(limits.max_dependencies),
            str(n),
            mode,
            reply,
        )

    def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now: int | None = None,
        *,
        ids_only: bool = False,
        on_duplicate: OnDuplicate = "refuse",
    ) -> Call[t.BatchResult]:
        """Enqueue all of ``jobs`` or none of them; ``on_duplicate="skip"`` answers a job whose
        id exists with that job (``BatchApplied.deduplicated``) instead of refusing the batch."""
        return self._enqueue_all(jobs, now, ids_only, on_duplicate)[0]

    def _enqueue_all(
        self,
        jobs: Sequence[NewJob],
        now: int | None,
        ids_only: bool,
        on_duplicate: OnDuplicate = "refuse",
    ) -> tuple[Call[t.BatchResult], list[tuple[Arg, ...]]]:
        """``enqueue_many``'s call, and the argument group of each job it sends."""
        groups: list[tuple[Arg, ...]] = []
        error = self._batch_size_error(jobs)
        if on_duplicate not in ("refuse", "skip"):
            error = t.InvalidJob("on_duplicate must be 'refuse' or 'skip'")
        early: t.BatchResult | None = None if error is None else t.BatchRefused(0, error)
        for index, job in enumerate(jobs if early is None else ()):
            group = _job_group(job, self._new_id)
            if isinstance(group, t.InvalidJob):
                early = t.BatchRefused(index, group)
                break
            groups.append(group)
        mode = "skip" if on_duplicate == "skip" else "all"
        head = self._enqueue_head(len(jobs), now, mode, "ids" if ids_only else "slim")
        args = [arg for group in groups for arg in group]
        parse = parse_batch_result if ids_only else parse_slim_batch(groups)
        call = self._call("enqueue", (*head, *args), parse)
        return Call(call.script, call.args, call.parse, early), groups

    def enqueue_each(self, jobs: Sequence[NewJob], now: int | None = None) -> Call[list[Any]]:
        """Enqueue each of ``jobs`` on its own (one call); a JobResult per job, in order.

        Jobs Python cannot even encode get their refusal here and are not sent.
        """
        error = self._batch_size_error(jobs)
        if error is not None:
            return Call(scripts()["enqueue"], (), parse_each_result, [t.JobRefused(error)])
        if len(jobs) == 1:  # (the asyncio client's lone enqueue: nothing to put back in order)
            group = _job_group(jobs[0], self._new_id)
            if not isinstance(group, t.InvalidJob):
                head = self._enqueue_head(1, now, "each", "slim")
                call_args = (new_call_id(), *head, *group)
                return Call(self._scripts["enqueue"], call_args, parse_slim_each((group,)))
        groups: list[tuple[Arg, ...]] = []
        sent: list[int] = []
        local: dict[int, t.JobResult] = {}
        for index, job in enumerate(jobs):
            group = _job_group(job, self._new_id)
            if isinstance(group, t.InvalidJob):
                local[index] = t.JobRefused(group)
            else:
                groups.append(group)
                sent.append(index)
        parse_slim = parse_slim_each(groups)

        def parse(reply: Any) -> list[Any]:
            results: list[Any] = [local.get(i) for i in range(len(jobs))]
            answers = parse_slim(reply)
            if len(answers) == 1 and len(sent) > 1:  # the whole call was refused
                answers = answers * len(sent)
            for i, result in zip(sent, answers, strict=True):
                results[i] = result
            return results

        head = self._enqueue_head(len(sent), now, "each", "slim")
        early = [local[i] for i in range(len(jobs))] if not sent else None
        args = [arg for group in groups for arg in group]
        return Call(self._scripts["enqueue"], (new_call_id(), *head, *args), parse, early)

    def prepared(self, prepared: Prepared, payload: bytes) -> Call[t.JobResult]:
        """``enqueue``'s call of one job of ``prepared`` with ``payload`` (encoded), its id made
        here."""
        call_id, job_id = self._new_ids()
        group = (job_id, *prepared.before, payload, *prepared.after)
        args = (call_id, *self._lone_head, *group)
        return _build_call(self._scripts["enqueue"], args, _parse_lone(group), None, None, (), None)

    @cached_property
    def _lone_head(self) -> tuple[Arg, ...]:
        """The head of ``enqueue``'s call of one job, at the server's now."""
        return self._enqueue_head(1, None, "all", "slim")

    def enqueue(self, job: NewJob, now: int | None = None) -> Call[t.JobResult]:
        """One job: ``enqueue_many`` of it alone (mode "all"), answered with its own result.
        Built directly, the group once, the call once."""
        group = _job_group(job, self._new_id)
        head = self._enqueue_head(1, now, "all", "slim")
        script = self._scripts["enqueue"]
        if isinstance(group, t.InvalidJob):
            return Call(script, (new_call_id(), *head), parse_slim_one((), ""), t.JobRefused(group))
        return Call(script, (new_call_id(), *head, *group), parse_slim_one(group, text(group[0])))
