"""What the sync and asyncio clients share: their options, set-up checks and state."""

from __future__ import annotations

import inspect
import sys
from typing import Any, ClassVar, TypedDict, TypeVar

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from . import _types as t
from ._calls import Call, CallBuilder, Limits, NewJob
from ._codec import EncodeError, encode
from ._durable import Durable, check_durable
from ._enqueue_calls import Prepared
from ._keys import KeySpace
from ._partitioned_calls import PartitionedCalls
from ._partitions import check_partitions
from ._policy import EvictionPolicyWarning, warn_policy
from ._reconnects import watch_connections
from ._scripts import library
from ._sending import Sending
from .errors import ConfigurationError

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover
    from typing_extensions import Unpack

__all__ = ["ClientBase", "ClientOptions", "EvictionPolicyWarning", "NewJob", "warn_policy"]

C = TypeVar("C", bound="ClientBase")


class ClientOptions(TypedDict, total=False):
    """The options of both clients, as ``ClientBase.__init__`` takes them (``from_url``)."""

    limits: Limits | None
    tag: str
    key_prefix: str
    check_eviction_policy: bool
    allow_eviction: bool
    events: bool
    functions: bool
    durable: Durable | None
    partitions: int | None


def check_client(client: Any) -> None:
    """Refuse a Redis client that decodes responses (payloads are bytes)."""
    kwargs: dict[str, Any] = {}
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kwargs = getattr(pool, "connection_kwargs", {}) or {}
    elif hasattr(client, "get_connection_kwargs"):
        kwargs = client.get_connection_kwargs() or {}
    if kwargs.get("decode_responses"):
        raise ConfigurationError(
            "quasar_redis needs a Redis client with decode_responses=False (payloads are bytes)"
        )


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster | AsyncRedisCluster)


#: The smallest cap on a redis-py pool's connections with which it keeps one for quasar's own
#: calls (redis-py's default cap: 100 from redis-py 8, 2**31 before). A pool capped lower shares
#: every connection it has.
KEPT_POOL_MIN = 100


#: Where a pool holds its ``Kept`` (one per pool: see ``kept_of``).
KEPT_ATTRIBUTE = "_quasar_kept"


def may_keep(pool: Any, plain: type) -> bool:
    """Whether a connection may be kept out of ``pool`` between calls: redis-py's ``plain`` pool
    (not a blocking pool, not Sentinel's) capped at ``KEPT_POOL_MIN`` or more, where one kept
    connection leaves the pool enough to lend."""
    return type(pool) is plain and getattr(pool, "max_connections", 0) >= KEPT_POOL_MIN


def kept_of(pool: Any, plain: type, lock: Any = None) -> Kept | None:
    """The connection kept out of ``pool`` for the calls of every client over it, or None: a
    pool that is not redis-py's ``plain`` one (a blocking pool, Sentinel's), is capped below
    ``KEPT_POOL_MIN``, or of a redis-py whose pools lack ``ensure_connection`` keeps none. One per
    pool, however many clients are made over it (a client made per request over one redis-py
    client keeps no more); ``lock`` is its first maker's."""
    if not may_keep(pool, plain):
        return None
    if not hasattr(redis.ConnectionPool, "ensure_connection"):  # (an older redis-py: none)
        return None
    kept: Kept = vars(pool).setdefault(KEPT_ATTRIBUTE, Kept(lock))  # (atomic: one per pool)
    return kept


class Kept:
    """The connection a pool keeps out of its lending for quasar's own calls: lending a
    connection and taking it back costs redis-py about 6 µs a command (its lock, its checks, its
    events), a tenth of a lone call's round trip on a fast host. Each command takes it while no
    other command holds it, and one the pool lends otherwise; the pool still counts it as lent,
    so closing the pool closes it. A blocking client's is taken again in a forked process
    (``owner``: the process it was taken in)."""

    __slots__ = ("busy", "conn", "lock", "owner")

    def __init__(self, lock: Any = None) -> None:
        self.conn: Any = None
        self.owner: object = None
        self.busy = False
        self.lock = lock


def needs_command_name(pool: Any) -> bool:
    """Whether ``pool.get_connection`` needs the command's name (redis-py before 5.3)."""
    params = inspect.signature(pool.get_connection).parameters
    return (
        "command_name" in params and params["command_name"].default is params["command_name"].empty
    )


class ClientBase(Sending):
    """State the two clients share; every method of theirs builds its call with ``calls``.

    ``redis`` is the redis-py client calls go through: one made by ``from_url`` is closed with
    this client (``close``, ``aclose``, or leaving its ``with`` block); one passed in stays its
    owner's to close.
    """

    #: Makes the redis-py client of ``from_url`` (``redis.Redis.from_url`` and the like).
    _connect: ClassVar[Any]

    def __init__(
        self,
        redis: Any,
        namespace: str = "default",
        *,
        limits: Limits | None = None,
        tag: str = "",
        key_prefix: str = "quasar",
        check_eviction_policy: bool = True,
        allow_eviction: bool = False,
        events: bool = True,
        functions: bool = True,
        durable: Durable | None = None,
        partitions: int | None = None,
    ) -> None:
        """A client of ``namespace`` over ``redis`` (a redis-py client, ``decode_responses``
        off): its keys start with ``<key_prefix>:{<namespace>}:``, or given a ``tag`` of its
        own, ``<key_prefix>:{<tag>}/<namespace>:``. ``limits``: what it refuses to send;
        ``check_eviction_policy``: ask Redis's ``maxmemory-policy`` before the first call and
        after a reconnect and, while it may evict keys, refuse to enqueue
        (``EvictionPolicyError``) unless ``allow_eviction``, warning once of it otherwise (False:
        never ask); ``events``: write the event stream; ``functions``: FCALL of the function
        library where the server allows it (False: EVALSHA of scripts); ``durable``: a
        ``Durable`` to have every write wait for replicas (``WAIT``), else ``NotReplicated``
        (docs/guarantees.md, "Failover"); ``partitions``: the
        namespace's number of partitions, checked against (or, on a new namespace, written to)
        its record before the first call (``PartitionMismatch``); None: one, unchecked, as
        before partitions (docs/scaling.md)."""
        check_client(redis)
        self.durable = check_durable(durable)
        self.redis = redis
        # Redis Functions (one library, FCALL) where the server has them; scripts (EVALSHA)
        # on Redis Cluster clients (redis-py would ask the server for an FCALL's keys on every
        # call), on Redis 6.2, where functions are refused, or when ``functions=False``.
        self.functions = functions and not is_cluster(redis)
        self.library = library()
        self.keys = KeySpace(namespace, tag, key_prefix)
        self.partitions = check_partitions(partitions)
        self.calls = (
            PartitionedCalls(self.keys, limits, partitions, events=events)
            if partitions is not None and partitions > 1
            else CallBuilder(self.keys, limits)
        )
        self.allow_eviction = allow_eviction
        self._checks_policy = check_eviction_policy
        self._policy_checked = self._policy_asked = not check_eviction_policy
        self._evicting = self._warned = None
        self._record_checked = partitions is None
        if partitions is not None:
            self._policy_checked = False
        self._script_keys = (self.keys.root, self.keys.events) if events else (self.keys.root,)
        self._owns_redis = False
        if check_eviction_policy:
            watch_connections(redis, self._server_changed)
        self._set_up()

    def _set_up(self) -> None:
        """The client's own transport, once the shared state is set."""

    @classmethod
    def from_url(
        cls: type[C], url: str, namespace: str = "default", **options: Unpack[ClientOptions]
    ) -> C:
        """A client with a redis-py client of its own for ``url`` (``redis://``, ``rediss://``
        for TLS, ``unix://``, ``redis+cluster://`` for a Redis Cluster, ``redis+sentinel://``
        for a primary that Sentinel manages: see ``_urls``; connection settings as redis-py
        reads them from the URL's query, such as ``?socket_timeout=5``), closed when this
        client is."""
        return cls.owning(cls._connect(url), namespace, **options)

    @classmethod
    def owning(
        cls: type[C], redis: Any, namespace: str = "default", **options: Unpack[ClientOptions]
    ) -> C:
        """A client over ``redis`` that closes it when the client is closed (``close()`` /
        ``aclose()``, or the end of a ``with`` block); ``Quasar(redis)`` leaves it open."""
        client = cls(redis, namespace, **options)
        client._owns_redis = True
        return client

    @property
    def namespace(self) -> str:
        return self.keys.namespace

    def _prepared_call(self, prepared: Prepared, payload: Any) -> Call[t.JobResult] | None:
        """The call of one job of ``prepared`` with ``payload``, to send at once as the first
        send of ``_sending`` would (its common reply read by ``created_id``, any other by
        ``_sending`` given it); None when the call goes the general way: the eviction policy to
        ask first, durable mode, a payload msgpack cannot encode, a job no partition takes
        (refused without Redis)."""
        if not self._policy_checked or self.durable is not None:
            return None
        try:
            data = encode(payload)
        except EncodeError:
            return None
        call = self.calls.prepared(prepared, data)
        return call if call.early is None else None
