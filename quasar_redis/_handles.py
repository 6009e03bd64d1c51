"""Job handles: a job enqueued through the task API, to inspect, wait for or cancel."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import redis.exceptions as rex

from . import _types as t
from ._access import database_of
from ._partition_ops import keys_of
from ._sending import CONNECTION_ERRORS
from ._waits import Outage, block_ms
from .errors import (
    JobCancelledError,
    JobExpiredError,
    JobFailedError,
    JobTimeoutError,
    QuasarError,
    RedisUnavailable,
)

if TYPE_CHECKING:
    from .app import App


#: What may break a wait for a while: a connection that broke (redis-py's own re-sends spent),
#: raw from a read or as our RedisUnavailable from a call, and what a cluster's failover or
#: migration answers a read (``_waits.passing``); ``Outage`` raises the others.
WAIT_ERRORS = (*CONNECTION_ERRORS, RedisUnavailable, rex.ResponseError, rex.RedisClusterException)


class JobHandle:
    """A job enqueued through the task API: inspect it, wait for its result, promote or cancel
    it."""

    def __init__(self, app: App, job_id: str) -> None:
        self.app = app
        self.id = job_id

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def info(self) -> t.JobInfo | None:
        return self.app.client.get_job(self.id)

    def progress(self) -> t.Progress | None:
        """The job's last progress (``current_job().progress``); None while it reported none,
        or once the job is gone."""
        info = self.app.client.get_job(self.id)
        return None if info is None else info.progress

    async def aprogress(self) -> t.Progress | None:
        """``progress`` on the asyncio client."""
        info = await self.app.aclient().get_job(self.id)
        return None if info is None else info.progress

    def cancel(self, reason: str = "cancelled") -> t.CancelResult:
        return self.app.client.cancel(self.id, reason=reason)

    def promote(self) -> t.JobResult:
        """Make the job due now, while it waits to run (``promote``, a ``change``)."""
        return self.app.client.promote(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Block until the job ends; its result, or JobFailedError / JobCancelledError /
        JobExpiredError.

        Waits on the namespace's event stream (no polling loop); after ``timeout`` seconds,
        ``JobTimeoutError`` (a ``TimeoutError``) naming the job and where it stands (waiting for
        a worker, scheduled, running, retrying, blocked on a dependency). A connection that
        breaks during the wait (a restart, a failover) is tried again, for up to 30 s of Redis
        away (then RedisUnavailable), as long as the timeout allows.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        client = self.app.client
        outage = Outage(database=database_of(client.redis))
        stream = keys_of(client.calls, self.id).events
        last: Any = None
        while True:
            try:
                if last is None:
                    last = _last_event_id(client.redis.xrevrange(stream, count=1))
                job = self._finished(client.get_job(self.id))
                if job is not None:
                    return self._outcome(job)
                if (left := _remaining_ms(deadline)) is None:
                    break
                reply = client.redis.xread(
                    {stream: last}, block=block_ms(client.redis, left), count=1000
                )
                last = _scan_events(reply, self.id, last)
                outage.ok()
            except WAIT_ERRORS as exc:
                if (pause := _pause(outage, exc, deadline, self.id)) is None:
                    raise self._timed_out(timeout, None) from exc  # (Redis away: not asked)
                time.sleep(pause)
        info = None
        with contextlib.suppress(Exception):  # (where it stands, if Redis says)
            info = client.get_job(self.id)
        raise self._timed_out(timeout, info)

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result`` for asyncio code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        client = self.app.aclient()
        outage = Outage(database=database_of(client.redis))
        stream = keys_of(client.calls, self.id).events
        last: Any = None
        while True:
            try:
                if last is None:
                    reply = await client.redis.xrevrange(stream, count=1)
                    last = _last_event_id(reply)
                job = self._finished(await client.get_job(self.id))
                if job is not None:
                    return self._outcome(job)
                if (left := _remaining_ms(deadline)) is None:
                    break
                reply = await client.redis.xread(
                    {stream: last}, block=block_ms(client.redis, left), count=1000
                )
                last = _scan_events(reply, self.id, last)
                outage.ok()
            except WAIT_ERRORS as exc:
                if (pause := _pause(outage, exc, deadline, self.id)) is None:
                    raise self._timed_out(timeout, None) from exc  # (Redis away: not asked)
                await asyncio.sleep(pause)
        info = None
        with contextlib.suppress(Exception):  # (where it stands, if Redis says)
            info = await client.get_job(self.id)
        raise self._timed_out(timeout, info)

    def _timed_out(self, timeout: float | None, info: t.JobInfo | None) -> JobTimeoutError:
        return JobTimeoutError(self.id, max(timeout or 0.0, 0.0), standing(info))

    def _finished(self, info: t.JobInfo | None) -> t.Job | None:
        if info is None:
            raise QuasarError(f"job {self.id!r} does not exist (or was pruned)")
        job = info.job
        done = isinstance(job.state, t.Succeeded | t.Failed | t.Cancelled | t.Expired)
        return job if done else None

    def _outcome(self, job: t.Job) -> Any:
        if isinstance(job.state, t.Succeeded):
            return self.app.result_of(job)
        if isinstance(job.state, t.Cancelled):
            raise JobCancelledError(job)
        if isinstance(job.state, t.Expired):
            raise JobExpiredError(job)
        raise JobFailedError(job)


def _pause(outage: Outage, exc: BaseException, deadline: float | None, job_id: str) -> float | None:
    """How long to pause after ``exc`` broke a wait for job ``job_id`` (see ``Outage``), never
    past ``deadline``; None once it has passed."""
    try:
        pause = outage.failed(exc)
    except RedisUnavailable as away:
        raise RedisUnavailable(f"waiting for job {job_id!r}: {away}") from exc
    if deadline is None:
        return pause
    left = deadline - time.monotonic()
    return None if left <= 0 else min(pause, left)


def _last_event_id(reply: Any) -> Any:
    return reply[0][0] if reply else b"0-0"


def _remaining_ms(deadline: float | None) -> int | None:
    """How long the next block may last, in ms; None once ``deadline`` has passed."""
    if deadline is None:
        return 5_000
    left = deadline - time.monotonic()
    return None if left <= 0 else max(1, min(5_000, int(left * 1000)))


def standing(info: t.JobInfo | None) -> str | None:
    """Where a job stands, in words a user acts on: what it waits for, or who runs it."""
    if info is None:
        return None
    job, status = info.job, info.status
    queue = f"queue {job.queue!r}"
    attempt = f"attempt {job.attempt} of {job.max_attempts}"
    state = job.state
    if status is t.Status.AVAILABLE:
        return (
            f"it is still waiting in {queue} (no worker has claimed it: `quasar workers` lists "
            "the queues each worker serves, `quasar queues` those paused)"
        )
    if status is t.Status.BLOCKED:
        on = f" on job {info.waiting_on!r}" if info.waiting_on else ""
        return f"it is blocked{on}: a dependency has not succeeded yet"
    if isinstance(state, t.Leased):
        return f"it is running ({attempt}) on worker {state.worker_id!r}"
    if isinstance(state, t.RetryWaiting):
        at = t.readable_time(state.available_at)
        return f"{attempt} failed ({state.reason}); it is retried at {at} in {queue}"
    if isinstance(state, t.Waiting):
        return f"it is scheduled to run at {t.readable_time(state.available_at)} in {queue}"
    return f"it ended {status.value} as the wait ended"


def _scan_events(reply: Any, job_id: str, last: Any) -> Any:
    """The last stream id read; the caller re-reads the job after any batch of events."""
    for _stream, entries in reply or ():
        for entry_id, _fields in entries:
            last = entry_id
    return last
