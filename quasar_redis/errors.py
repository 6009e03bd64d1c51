"""Exceptions. Refusals of transitions are values (see ``_types``), never exceptions.

Exceptions are for broken connections, damaged data, broken scripts and programmer errors::

    QuasarError
    ├── ConfigurationError (also ValueError)   bad namespace, client with decode_responses=True
    │   ├── EvictionPolicyError                Redis may evict keys: enqueue refused, unless allowed
    │   ├── NoSuchDatabase                     the URL's database number is not one Redis has
    │   └── PartitionMismatch                  the client's partitions are not the namespace's
    ├── InvalidArgument (also ValueError)      bad input to an inspection or maintenance call, or
    │   │                                      a worker setting out of its bounds
    │   ├── InvalidTaskCall                    the task API: a call refused before it is sent
    │   └── InvalidSchedule                    a periodic schedule's settings: nothing written
    ├── RedisUnavailable                       connection refused, dropped, or timed out
    │   └── NotReplicated                      durable mode: fewer replicas than asked have a
    │                                          write in time (it may or may not survive failover)
    ├── RedisFull                              Redis is out of memory (maxmemory): nothing written
    ├── AccessDenied                           Redis refused us: never transient
    │   ├── AuthenticationError                a wrong password or user name, or none given where
    │   │                                      Redis needs one: never tried again
    │   └── PermissionDenied                   the ACL user may not run a command or use a key
    ├── CorruptDataError                       data in Redis that no script of ours wrote
    │   ├── CorruptJobError                    a job hash with a missing or malformed field
    │   └── CorruptKeyError                    a key of ours holding the wrong type
    ├── ProtocolError                          a script reply or error that Python does not know
    ├── JobRefusedError                        the task API: an enqueue was refused (``.error``)
    │   └── InvalidTaskCall                    ... (also an InvalidArgument, above)
    ├── JobFailedError                         the task API: the job awaited ended Failed
    │   ├── JobCancelledError                  ... or Cancelled
    │   └── JobExpiredError                    ... or Expired: not started by its deadline
    ├── JobTimeoutError (also TimeoutError)    the task API: the job awaited did not end in time
    ├── HookError                              a worker's startup hook raised: it did not start
    └── PhaseError                             a held job or its lease was asked for a change its
                                               table does not allow: a worker bug
                                               (``quasar_redis.worker``)

Four more are not errors of quasar_redis, so not under ``QuasarError``::

    Snooze (Exception)                         raised by a task: run it again later, no attempt
                                               used (``quasar_redis.retry``)
    RateLimited (Snooze)                       ... and start no job of its group (or queue)
                                               meanwhile: the service said "slow down"
    PermanentFailure (Exception)               raised by a task: fail its job now, no retry
    EvictionPolicyWarning (RuntimeWarning)     a warning: Redis may evict keys and lose jobs
"""

from __future__ import annotations

from typing import Any


class QuasarError(Exception):
    """Base of every exception quasar_redis raises."""


class ConfigurationError(QuasarError, ValueError):
    """The client was set up wrongly (a bad namespace, a client that decodes responses)."""


class PartitionMismatch(ConfigurationError):
    """A client made with ``partitions=P`` met a namespace that records another number of
    partitions (or a record no client wrote): nothing was sent (docs/scaling.md)."""


class EvictionPolicyError(ConfigurationError):
    """Redis may evict keys (its ``maxmemory-policy`` is not "noeviction"), so an enqueue was
    refused and nothing written: evicted job keys lose acknowledged jobs silently. Set the policy
    to "noeviction", or accept the loss with ``allow_eviction=True`` on the client or the App."""


class NoSuchDatabase(ConfigurationError):
    """The URL's database number (``redis://host:6379/42``) is not one the server has (16 by
    default, 0 to 15; ``databases`` in redis.conf): nothing was sent, and trying again cannot
    help. ``database`` is the number asked for (None where it is not known)."""

    def __init__(self, message: str, database: int | None = None) -> None:
        super().__init__(message)
        self.database = database


class InvalidArgument(QuasarError, ValueError):
    """Bad input to a read or maintenance call (transitions refuse with ``InvalidJob`` instead),
    or a ``Worker`` setting out of its bounds."""


class RedisUnavailable(QuasarError):
    """Redis could not be reached, or the connection broke and retries did not help."""


class NotReplicated(RedisUnavailable):
    """Durable mode (``Durable``): the call was applied on the primary, but only
    ``acknowledged`` of the ``wanted`` replicas confirmed it within ``timeout_ms``.

    The write may or may not survive a failover: a replica that has it may be promoted, or one
    that lacks it. ``result`` is what the primary replied (do not act on it as settled), ``calls``
    the calls sent. Sending the same calls again is safe (``client.execute(call)`` or
    ``execute_many(calls)``: the same call ids get the first reply, changing nothing more, and
    wait for the replicas again); an enqueue sent anew under the same job id is refused
    ``DuplicateJob`` if the first one survived. docs/guarantees.md ("Failover")."""

    def __init__(
        self, acknowledged: int, wanted: int, timeout_ms: int, result: Any, calls: Any
    ) -> None:
        super().__init__(
            f"the write reached {acknowledged} of {wanted} replicas within {timeout_ms} ms: it "
            "may not survive a failover; send the same calls again (same call ids) to be sure"
        )
        self.acknowledged = acknowledged
        self.wanted = wanted
        self.timeout_ms = timeout_ms
        self.result = result
        self.calls = calls


class RedisFull(QuasarError):
    """Redis refused the call because it is out of memory (``maxmemory`` reached, with the
    ``noeviction`` policy): nothing was written. Reads, ``prune`` and ``cancel`` still run, so
    a full queue can be inspected and drained; raise ``maxmemory`` or free memory to go on."""


class AccessDenied(QuasarError):
    """Redis refused the connection's credentials or permissions: trying again cannot help."""


class AuthenticationError(AccessDenied):
    """Redis refused the password or user name, or wants a password the URL does not give: the
    message says which, and how the URL gives them (``redis://:PASSWORD@host:port/db``). Never
    tried again: a worker does not start, a command exits at once."""


class PermissionDenied(AccessDenied):
    """The Redis user may not run a command or touch a key quasar_redis needs (an ACL).

    ``permission`` is what to grant, as an ``ACL SETUSER`` rule (``"+xadd"``,
    ``"~quasar:{orders}:*"``), where Redis said; docs/security.md has the rules of each role.
    A call refused so by a script on Redis 7+ changed nothing."""

    def __init__(self, message: str, permission: str | None = None) -> None:
        super().__init__(message)
        self.permission = permission


class CorruptDataError(QuasarError):
    """Something in Redis was not written by quasar_redis; nothing was changed."""


class CorruptJobError(CorruptDataError):
    """A job hash is damaged (a field missing, a number that is not one, an unknown state)."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id!r} is damaged: {reason}")
        self.job_id = job_id
        self.reason = reason


class CorruptKeyError(CorruptDataError):
    """A key of the namespace holds the wrong type."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"key {key!r} {reason}")
        self.key = key
        self.reason = reason


class ProtocolError(QuasarError):
    """A script replied with something this client does not understand, or raised an error."""


class JobRefusedError(QuasarError):
    """The task API raises this when a transition (an enqueue, say) was refused; see ``error``.
    ``message``: what the user is told (the task API names the task, the queue and the reason);
    by default ``refused: <error>``."""

    def __init__(self, error: Any, message: str | None = None) -> None:
        super().__init__(message or f"refused: {error}")
        self.error = error


class JobFailedError(QuasarError):
    """The job whose result was awaited ended Failed (``job`` holds it, with its error)."""

    def __init__(self, job: Any) -> None:
        error = getattr(job, "error", None)
        detail = f"{error.kind}: {error.message}" if error else "failed"
        super().__init__(f"job {job.id!r} failed: {detail}")
        self.job = job


class JobCancelledError(JobFailedError):
    """The job whose result was awaited was cancelled."""

    def __init__(self, job: Any) -> None:
        QuasarError.__init__(self, f"job {job.id!r} was cancelled: {job.state.reason}")
        self.job = job


class JobExpiredError(JobFailedError):
    """The job whose result was awaited expired: it was not started by its deadline, so it
    never ran."""

    def __init__(self, job: Any) -> None:
        QuasarError.__init__(self, f"job {job.id!r} expired unstarted at its deadline")
        self.job = job


class JobTimeoutError(QuasarError, TimeoutError):
    """A wait for a job's result (``JobHandle.result(timeout=...)``, ``aresult``) ended before
    the job did: ``job_id`` is the job, ``timeout`` the seconds waited, ``status`` where the job
    stood when the wait ended (None if it could not be read). The job goes on: wait again, or
    cancel it."""

    def __init__(self, job_id: str, timeout: float, status: str | None) -> None:
        where = f": {status}" if status else ""
        super().__init__(f"job {job_id!r} did not finish within {timeout:g} s{where}")
        self.job_id = job_id
        self.timeout = timeout
        self.status = status


class InvalidSchedule(InvalidArgument):
    """A periodic schedule refused before anything is written: a cron expression cronsim does
    not read, an unknown time zone, an interval of zero or less, or another setting out of its
    bounds (docs/schedules.md)."""


class InvalidTaskCall(InvalidArgument, JobRefusedError):
    """The task API refused a call before sending it: arguments its function does not take, or
    a value the app's serializer cannot encode. Nothing was written; ``task`` is the task's
    name, ``error`` the refusal (an ``InvalidJob`` with the reason)."""

    def __init__(self, task: str, error: Any) -> None:
        QuasarError.__init__(self, f"task {task!r}: {error.reason}")
        self.error = error
        self.task = task


class HookError(QuasarError):
    """A worker's startup hook raised, so the worker did not start: ``hook`` is its name,
    ``phase`` ``"startup"``, and the hook's exception the ``__cause__``. The message says where
    (``file:line``) and what, in one line."""

    def __init__(self, phase: str, hook: str, where: str, error: BaseException) -> None:
        at = f" ({where})" if where else ""
        detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        super().__init__(f"{phase} hook {hook} failed{at}: {detail}")
        self.phase = phase
        self.hook = hook
