"""redis-py clients for a URL: one server, a Redis Cluster, or a primary that Sentinel manages.

``sync_client(url)`` and ``async_client(url)`` read the URL as ``_urls.target`` does (the forms
are in its docs): ``redis://``, ``rediss://`` and ``unix://`` go to redis-py's own ``from_url``;
``redis+cluster://`` to ``RedisCluster`` with every host as a startup node; ``redis+sentinel://``
to ``Sentinel(...).master_for(service)``, whose connections follow the primary through a
failover. Every client is made with ``decode_responses`` off, as the clients need.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
import redis.sentinel
from redis.exceptions import RedisClusterException

from ._reconnects import watched
from ._urls import Target, check_url, redact, target
from .errors import RedisUnavailable

SENTINEL_SETTINGS = ("socket_timeout", "socket_connect_timeout", "socket_keepalive")


def _primary_options(found: Target, defaults: dict[str, Any]) -> dict[str, Any]:
    """The primary's connection settings: ``defaults``, then the URL's own (credentials,
    database, TLS, options), as ``from_url`` takes them."""
    parse: Any = redis.connection.parse_url  # (untyped)
    options: dict[str, Any] = {**defaults, **parse(found.url)}
    for name in ("host", "port", "connection_class"):
        options.pop(name, None)
    if found.url.startswith("rediss://"):
        options["ssl"] = True
    return options


def _sentinel_options(found: Target, primary: dict[str, Any]) -> dict[str, Any]:
    """The sentinels' own settings: their credentials (``sentinel_*`` in the query), the
    socket settings and TLS of the URL."""
    options = {k: v for k, v in primary.items() if k in SENTINEL_SETTINGS or k.startswith("ssl")}
    for name, value in found.sentinel_options:
        options[name.removeprefix("sentinel_")] = value
    return options


def _sentinel(found: Target, module: Any, defaults: dict[str, Any]) -> Any:
    primary = _primary_options(found, defaults)
    sentinels = module.Sentinel(
        list(found.hosts), sentinel_kwargs=_sentinel_options(found, primary), **primary
    )
    return sentinels.master_for(found.service)


def sync_client(url: str, **defaults: Any) -> Any:
    """A ``redis.Redis`` (or ``RedisCluster``) for ``url``; ``defaults``: connection settings
    where the URL gives none (``socket_timeout=...``). RedisUnavailable when no node of a
    cluster answers (a cluster client asks them for the slots as it is made)."""
    found = target(check_url(url, memory=False))
    if found.kind == "cluster":
        node: Any = redis.cluster.ClusterNode  # (untyped)
        nodes = [node(h, p) for h, p in found.hosts[1:]]
        try:  # (a sync cluster client reaches its nodes as it is made)
            return redis.cluster.RedisCluster.from_url(found.url, startup_nodes=nodes, **defaults)
        except RedisClusterException as exc:
            raise RedisUnavailable(
                f"cannot reach the Redis Cluster at {redact(url)}: {exc}"
            ) from None
    if found.kind == "sentinel":
        return _watched(_sentinel(found, redis.sentinel, defaults))
    return _watched(redis.Redis.from_url(url, **defaults))


def async_client(url: str, **defaults: Any) -> Any:
    """A ``redis.asyncio.Redis`` (or its ``RedisCluster``) for ``url``; ``defaults`` as
    ``sync_client``'s."""
    found = target(check_url(url, memory=False))
    if found.kind == "cluster":
        cluster = redis.asyncio.cluster
        nodes = [cluster.ClusterNode(h, p) for h, p in found.hosts[1:]]
        return cluster.RedisCluster.from_url(found.url, startup_nodes=nodes, **defaults)
    if found.kind == "sentinel":
        return _watched(_sentinel(found, redis.asyncio.sentinel, defaults))
    return _watched(redis.asyncio.Redis.from_url(url, **defaults))


def _watched(client: Any) -> Any:
    """``client``, its connections watched (``_reconnects``): a database number the server
    does not have is told with how many it has."""
    watched(client)
    return client
