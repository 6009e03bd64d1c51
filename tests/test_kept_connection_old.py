"""Before redis-py 5.1 (no ``ensure_connection`` on its pools) no connection is kept: every call
goes on a connection its pool lends, checked as the pool checks it (real Redis)."""

from __future__ import annotations

import redis
import redis.asyncio

from quasar_redis import AsyncQuasar, Quasar

from .helpers import REDIS_URL, real_redis


def test_a_pool_keeps_a_connection_only_where_it_checks_the_ones_it_lends() -> None:
    real_redis().close()
    keeps = hasattr(redis.ConnectionPool, "ensure_connection")
    q = Quasar(redis.Redis.from_url(REDIS_URL), "kept-old")
    a = AsyncQuasar(redis.asyncio.Redis.from_url(REDIS_URL), "kept-old")
    try:
        assert q._packed is not None and a._packed is not None
        assert (getattr(q._packed, "kept", None) is not None) is keeps
        assert (getattr(a._packed, "kept", None) is not None) is keeps
        assert q._send(("ECHO", "x")) == b"x"
    finally:
        q.redis.close()
