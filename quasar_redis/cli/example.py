"""``quasar example``: the quick start, step by step, printing each typed result.

A few jobs go through every edge of the lifecycle (a dependency, a scheduled job, a retry, a stale
token, an operator retry). ``open_quasar`` opens the namespace it runs in: on a Redis, or on the
embedded server of ``memory://``; of several partitions when given ``partitions``, A and B (a job
and its dependent) then one flow, with ids in its partition (``flow_id``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
import redis

from .. import _types as t
from .._connect import sync_client
from .._keys import KeySpace
from .._partitions import hashed
from .._urls import MEMORY_URL, redact
from ..app import Connector
from ..client import Quasar
from ._options import runtime_error

QUEUE = "images"
LEASE_MS = 30_000
HOUR_MS = 3_600_000
FLOW = "cat.png"  # A and its dependent B: one flow, so one partition


def flow_id(flow: str, name: str, partitions: int | None) -> str:
    """The id ``name`` for a job of ``flow``: on a namespace of several partitions, made to be in
    the flow's partition (its number and ``~`` before ``name``: docs/scaling.md, "Where a job
    goes"), where ``name`` alone would be wherever its hash says."""
    if partitions is None or partitions == 1:
        return name
    return f"{hashed(flow, partitions)}~{name}"


# --- describing typed results --------------------------------------------------------------------


def describe_state(state: t.JobState) -> str:
    """One state, without its timestamps."""
    match state:
        case t.Waiting():
            return "Waiting"
        case t.RetryWaiting(reason):
            return f"RetryWaiting({reason!r})"
        case t.Leased(worker_id, fence):
            return f"Leased(by {worker_id}, fence {fence})"
        case t.Succeeded(output_ref):
            return f"Succeeded({output_ref})"
        case t.Failed(reason):
            return f"Failed({reason!r})"
        case t.Cancelled(reason):
            return f"Cancelled({reason!r})"
    raise AssertionError(state)  # pragma: no cover


def describe_job(job: t.Job) -> str:
    text = f"{job.id} {describe_state(job.state)}, attempt {job.attempt}/{job.max_attempts}"
    if job.pending_dependencies:
        text += f", {job.pending_dependencies} dependency pending"
    if job.result is not None:
        text += f", result {job.result!r}"
    return text


def describe_claim(claim: t.Claim) -> str:
    token = claim.token
    return (
        f"{describe_job(claim.job)}; token(job {token.job_id}, worker {token.worker_id}, "
        f"fence {token.fencing_version})"
    )


def describe_counts(counts: t.QueueCounts) -> str:
    return ", ".join(f"{status.value} {n}" for status, n in counts.by_status().items())


def describe_error(error: t.JobError) -> str:
    """A refusal as its repr would show it, times (``..._at``) as people read them."""
    shown = []
    for f in dataclasses.fields(error):
        value = getattr(error, f.name)
        is_time = f.name.endswith("_at") and isinstance(value, int)
        shown.append(f"{f.name}={t.readable_time(value) if is_time else repr(value)}")
    return f"{type(error).__name__}({', '.join(shown)})"


def describe(result: Any) -> str:
    """A typed result as one line: what ``match`` sees, and the fields that matter."""
    match result:
        case t.JobApplied(job):
            return f"JobApplied: {describe_job(job)}"
        case t.ClaimApplied(claim):
            return f"ClaimApplied: {describe_claim(claim)}"
        case t.JobRefused(error) | t.ClaimRefused(error):
            return f"{type(result).__name__}({describe_error(error)})"
        case t.JobInfo(job, _, waiting_on):
            waits = f", waiting on {waiting_on}" if waiting_on else ""
            return f"JobInfo: {job.id} status {result.status.value}{waits}"
        case t.QueueCounts():
            return f"QueueCounts: {describe_counts(result)}"
    return repr(result)


# --- the example -------------------------------------------------------------------------------


class Example:
    """The quick start, step by step, on one namespace."""

    def __init__(self, q: Quasar) -> None:
        self.q = q
        self.step = 0
        self.a, self.b = (flow_id(FLOW, name, q.partitions) for name in ("A", "B"))

    def show(self, what: str, result: Any) -> Any:
        self.step += 1
        click.echo(f"{self.step:2d}. {what}")
        click.echo(f"    -> {describe(result)}")
        return result

    def claim(self, worker: str, what: str) -> t.LeaseToken:
        result = self.show(what, self.q.claim(QUEUE, worker, LEASE_MS))
        if not isinstance(result, t.ClaimApplied):
            raise click.ClickException(f"expected a claim, got {result!r}")
        return result.claim.token

    def run(self) -> None:
        self.enqueue_three()
        self.dependency_and_retry()
        self.operator_retry()
        self.show("counts of the queue", self.q.counts(QUEUE))
        self.show("inspect C", self.q.get_job("C"))

    def enqueue_three(self) -> None:
        q = self.q
        a, b = self.a, self.b
        self.show("enqueue A", q.enqueue("resize", {"image": FLOW}, id=a, queue=QUEUE, flow=FLOW))
        self.show(
            "enqueue B, depending on A",
            q.enqueue("thumbnail", {"size": 64}, id=b, queue=QUEUE, dependencies=[a], flow=FLOW),
        )
        self.show(
            "enqueue C, scheduled in one hour",
            q.enqueue("report", None, id="C", queue=QUEUE, delay_ms=HOUR_MS),
        )

    def dependency_and_retry(self) -> None:
        """A runs while B waits for it; B fails once, is retried, and its first token goes stale."""
        token_a = self.claim("worker-1", "worker-1 claims from the queue")
        self.show(
            "worker-2 claims from the queue (B waits on A, C is scheduled)",
            self.q.claim(QUEUE, "worker-2", LEASE_MS),
        )
        self.show("inspect B", self.q.get_job(self.b))
        self.show(
            "worker-1 completes A",
            self.q.complete(token_a, "worker-1", result={"resized": "cat-1024.png"}),
        )
        first = self.claim("worker-2", "worker-2 claims from the queue")
        self.show(
            "worker-2 fails B (retry delay 0)",
            self.q.fail(first, "worker-2", "upstream timeout", retry_delay_ms=0),
        )
        second = self.claim("worker-1", "worker-1 claims from the queue")
        self.show(
            "worker-2 tries to complete B with its old token (fenced out)",
            self.q.complete(first, "worker-2", result="late"),
        )
        self.show(
            "worker-1 completes B",
            self.q.complete(second, "worker-1", result={"thumbnail": "cat-64.png"}),
        )

    def operator_retry(self) -> None:
        """D fails for good, an operator retries it, and it completes."""
        q = self.q
        self.show("enqueue D", q.enqueue("charge", {"cents": 995}, id="D", queue=QUEUE))
        token = self.claim("worker-1", "worker-1 claims from the queue")
        self.show(
            "worker-1 fails D permanently",
            q.permanent_fail(token, "worker-1", "card declined", kind="PaymentError"),
        )
        self.show("an operator retries D", q.retry("D", reason="card updated"))
        token = self.claim("worker-1", "worker-1 claims from the queue")
        self.show("worker-1 completes D", q.complete(token, "worker-1", result={"paid": 995}))


# --- connections -------------------------------------------------------------------------------


def namespace_keys(client: Any, keys: KeySpace, partitions: int | None) -> Iterator[Any]:
    """Every key of the namespace (SCAN by pattern, never KEYS): those under its root, then with
    several partitions those of each, found by one SCAN of ``<prefix>:{<namespace>/*}:*`` (of
    which only the keys under a partition's root are kept: a key of a namespace given this one's
    name as its tag may match). On a Redis Cluster client too (its SCAN covers every primary)."""
    yield from client.scan_iter(match=f"{keys.root}*", count=1000)
    if partitions is None or partitions == 1:
        return
    roots = tuple(keys.part(i).root.encode() for i in range(partitions))
    match = keys.part(0).root.replace("/0}", "/*}", 1)  # (a name holds no "/" and no "}")
    for key in client.scan_iter(match=f"{match}*", count=1000):
        if (key.encode() if isinstance(key, str) else key).startswith(roots):
            yield key


def holds_keys(client: Any, keys: KeySpace, partitions: int | None) -> bool:
    """Whether the namespace holds any key (stopping at the first key found)."""
    return next(namespace_keys(client, keys, partitions), None) is not None


def delete_namespace(client: Any, keys: KeySpace, partitions: int | None) -> int:
    """Delete every key of the namespace (never FLUSHDB); returns how many."""
    found = list(namespace_keys(client, keys, partitions))
    for i in range(0, len(found), 500):
        client.delete(*found[i : i + 500])
    return len(found)


@contextmanager
def real_quasar(url: str, namespace: str, partitions: int | None) -> Iterator[Quasar]:
    """A client on the Redis at ``url``; the namespace must be empty, and is emptied after."""
    client = sync_client(url, socket_timeout=10)
    try:
        client.ping()
        q = Quasar(client, namespace, partitions=partitions)
        if holds_keys(client, q.keys, partitions):
            raise click.ClickException(
                f"namespace {namespace!r} already holds keys at {redact(url)}"
            )
        try:
            yield q
        finally:
            n = delete_namespace(client, q.keys, partitions)
            click.echo(f"deleted the {n} keys of namespace {namespace!r}")
    except redis.RedisError as exc:
        raise runtime_error(exc, url) or exc from exc
    finally:
        client.close()


@contextmanager
def embedded_quasar(namespace: str, partitions: int | None) -> Iterator[Quasar]:
    """A client on an embedded server of its own (``memory://``)."""
    client = Connector(MEMORY_URL).sync()
    try:
        yield Quasar(client, namespace, partitions=partitions)
    finally:
        client.close()


def open_quasar(
    url: str, namespace: str, partitions: int | None = None
) -> contextlib.AbstractContextManager[Quasar]:
    """``embedded_quasar`` for ``memory://``, else ``real_quasar``; ``partitions``: the
    namespace's (None: one, as ever)."""
    if url == MEMORY_URL:
        return embedded_quasar(namespace, partitions)
    return real_quasar(url, namespace, partitions)
