"""A worker's start: its settings checked, Redis reached (or a clear refusal), and the start line
that says what it serves.

An unreachable Redis at start is tried again for ``connect_timeout`` seconds, then refused
(``RedisUnavailable``); refused credentials or permissions (``AccessDenied``) and a database
number the server does not have (``NoSuchDatabase``) end it at once, since trying again cannot
help. Once it serves, a lost connection is tried again for ever.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis.exceptions as rex

from .._access import database_of
from .._urls import check_url, redact_text, where
from ..errors import (
    AccessDenied,
    AuthenticationError,
    ConfigurationError,
    InvalidArgument,
    NoSuchDatabase,
    PermissionDenied,
    QuasarError,
    RedisUnavailable,
)
from ._claiming import access_denied, pause

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("quasar_redis.worker")

#: The shortest lease a worker takes: the lease keeper renews at about a third of it.
MIN_LEASE_MS = 100
#: The wait between two tries to reach Redis at start.
CONNECT_RETRY_S = 0.5


def check_settings(
    *,
    concurrency: int,
    lease_ms: int,
    grace: float,
    connect_timeout: float,
    max_jobs: int | None,
    prefetch: Any,
    processes: int | None = None,
    max_jobs_per_process: int | None = None,
) -> None:
    """InvalidArgument, naming the setting, for a value out of its bounds."""
    bounds = [
        (_whole(concurrency, 1), f"concurrency must be an integer >= 1: got {concurrency!r}"),
        (
            _whole(lease_ms, MIN_LEASE_MS),
            f"lease_ms must be an integer >= {MIN_LEASE_MS}: got {lease_ms!r}",
        ),
        (_at_least(grace, 0.0), f"grace must be a number of seconds >= 0: got {grace!r}"),
        (
            _at_least(connect_timeout, 0.0) and connect_timeout > 0,
            f"connect_timeout must be a number of seconds > 0: got {connect_timeout!r}",
        ),
        (
            max_jobs is None or _whole(max_jobs, 1),
            f"max_jobs must be None or an integer >= 1: got {max_jobs!r}",
        ),
        (
            processes is None or _whole(processes, 1),
            f"processes must be None or an integer >= 1: got {processes!r}",
        ),
        (
            max_jobs_per_process is None or _whole(max_jobs_per_process, 1),
            f"max_jobs_per_process must be None or an integer >= 1: got {max_jobs_per_process!r}",
        ),
        (
            prefetch == "auto" or _whole(prefetch, 0),
            f"prefetch must be a nonnegative integer or 'auto': got {prefetch!r}",
        ),
    ]
    for ok, message in bounds:
        if not ok:
            raise InvalidArgument(message)


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _at_least(value: Any, least: float) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= least
    )


async def connect(app: App, timeout: float, stopping: asyncio.Event) -> None:
    """PING Redis until it answers, for at most ``timeout`` seconds (or until ``stopping``).

    ConfigurationError for a URL that is not a Redis URL; AuthenticationError / PermissionDenied
    at once when Redis refuses, NoSuchDatabase at once for a database number it does not have;
    RedisUnavailable, saying what was tried, after ``timeout``.
    """
    url = check_url(app.connector.url)
    client = app.aclient().redis
    deadline = time.monotonic() + timeout
    tries = 0
    while not stopping.is_set():
        tries += 1
        try:
            await asyncio.wait_for(client.ping(), max(deadline - time.monotonic(), 0.05))
            return
        except (rex.RedisError, OSError, asyncio.TimeoutError) as exc:
            _refused(exc, url, database_of(client))
            last = exc
        left = deadline - time.monotonic()
        if left <= 0:
            raise RedisUnavailable(
                f"cannot reach Redis at {where(url)}: {tries} tries in {timeout:g}s "
                f"(connect_timeout), the last: {redact_text(str(last)) or type(last).__name__}"
            )
        await pause(stopping, min(CONNECT_RETRY_S, left))


async def check_eviction(app: App, allowed: bool) -> None:
    """ConfigurationError when Redis may evict keys (``maxmemory-policy`` not "noeviction"), unless
    ``allowed``: evicted job hashes, indexes or call records lose jobs silently."""
    policy = await app.aclient().eviction_policy()
    if policy is None or policy == "noeviction":
        return
    at = where(app.connector.url)
    if allowed:
        log.warning("Redis at %s has maxmemory-policy %r: it may evict job keys", at, policy)
        return
    raise ConfigurationError(
        f"Redis at {at} has maxmemory-policy {policy!r}, which may evict job keys and lose jobs "
        "silently (docs/guarantees.md): set maxmemory-policy noeviction, or accept it with "
        "Worker(allow_eviction=True), App(allow_eviction=True) or quasar worker --allow-eviction"
    )


async def declare_limits(app: App, queues: Sequence[str], worker_id: str) -> None:
    """Set the limits the app declares (``App.limit``) of the queues served, in Redis. A user
    without the scheduler role may not (said once: the jobs still run, under the limits Redis
    holds); any other failure is a warning, and the worker starts."""
    for queue in queues:
        declared = app.queue_limits.get(queue)
        if not declared:
            continue
        try:
            await app.aclient().set_limits(queue, declare=True, **declared)
        except AccessDenied as exc:
            log.error(
                "worker %s: its Redis user may not set the app's queue limits (the scheduler "
                "role, docs/security.md): %s",
                worker_id,
                redact_text(str(exc)),
            )
            return
        except (QuasarError, rex.RedisError, OSError) as exc:
            log.warning(
                "worker %s: the limits of queue %r were not set: %s",
                worker_id,
                queue,
                redact_text(str(exc)),
            )


def _refused(exc: BaseException, url: str, database: int | None) -> None:
    """Raise at once what no retry helps: refused credentials or permissions, a ``database``
    the server does not have (``_access``), naming the server."""
    denied = access_denied(exc, database)
    if denied is None:
        return
    if isinstance(denied, AuthenticationError):
        raise AuthenticationError(f"Redis at {where(url)}: {denied}")
    if isinstance(denied, NoSuchDatabase):
        raise NoSuchDatabase(f"Redis at {where(url)}: {denied}", denied.database)
    raise PermissionDenied(f"Redis at {where(url)}: {denied}")


def announce(worker_id: str, app: App, queues: Sequence[str], settings: str) -> None:
    """Log the start line (the queues and the tasks served; the server, redacted; the namespace)
    and a warning for a queue without a task, and for a task on a queue not served."""
    served = set(queues)
    tasks = sorted(app.tasks.values(), key=lambda task: task.name)
    names = ", ".join(f"{task.name} ({task.queue})" for task in tasks if task.queue in served)
    log.info(
        "worker %s started: queues %s; tasks %s; Redis %s, namespace %r; %s",
        worker_id,
        ", ".join(queues),
        names or "none",
        where(app.connector.url),
        app.namespace,
        settings,
    )
    with_task = {task.queue for task in tasks}
    for queue in queues:
        if queue not in with_task:
            log.warning(
                "worker %s: no task of this app is declared on queue %r",
                worker_id,
                queue,
            )
    for task in tasks:
        if task.queue not in served:
            log.warning(
                "worker %s: task %s is on queue %r, which this worker does not serve",
                worker_id,
                task.name,
                task.queue,
            )


def freeze_startup() -> bool:
    """Keep what a worker's start-up made out of the garbage collector's full collections, where
    the worker owns its process (``Worker.run``, ``quasar worker``); whether it did.

    A full collection walks every object the process tracks (the modules, the application, the
    clients): about 20 ms on a small worker, in which no job starts. The objects jobs leave behind
    bring one on every second or two at a few hundred jobs a second, and the jobs due during it
    wait for it. ``gc.freeze()`` (once ``gc.collect()`` has taken the start-up's garbage) moves
    the objects alive now to the permanent generation, which no collection walks: a full
    collection walks only what came after (0.1-0.2 ms). Frozen objects are still freed when their
    last reference goes; only a reference cycle among them waits for ``gc.unfreeze()``, which
    ``Worker.run`` calls as it returns. A process that froze objects before keeps its own policy:
    nothing is frozen then."""
    if gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    return True


def unfreeze_startup() -> None:
    """Give what ``freeze_startup`` froze back to the collector (``Worker.run``, as it returns):
    a reference cycle among those objects is collected again."""
    gc.unfreeze()
