"""A connection pool per worker, opened at startup and closed at shutdown, and a middleware that
reports every failed run (docs/hooks.md).

    export QUASAR_REDIS_URL=redis://127.0.0.1:6379/0
    quasar worker worker_hooks:app -q pages

The pool here is a Redis client of the application's own cache; an asyncpg or psycopg pool, an
HTTP client or an SQLAlchemy engine opens and closes the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import redis.asyncio

from quasar_redis import App, JobContext, PermanentFailure, WorkerContext, current_worker

app = App(namespace=os.environ.get("SHOP_NAMESPACE", "shop"))
CACHE_URL = os.environ.get("CACHE_URL") or app.connector.url
errors = logging.getLogger("shop.errors")


@app.on_startup
async def open_cache(worker: WorkerContext) -> None:
    """One pool per worker, as large as the jobs it runs at once."""
    cache = redis.asyncio.Redis.from_url(CACHE_URL, max_connections=worker.concurrency)
    await cache.ping()  # a cache out of reach stops the worker now, not at its first job
    worker.state.cache = cache


@app.on_shutdown
async def close_cache(worker: WorkerContext) -> None:
    cache = getattr(worker.state, "cache", None)  # none if open_cache failed
    if cache is not None:
        await cache.aclose()


@app.middleware
def report_failures(job: JobContext) -> Iterator[None]:
    """Every run that raises is reported (here to a logger; docs/hooks.md has Sentry), then
    fails as it would have."""
    try:
        yield
    except Exception:
        errors.exception(
            "job %s (%s) failed, attempt %d of %d",
            job.job.id,
            job.job.stage,
            job.attempt,
            job.job.max_attempts,
        )
        raise


@app.task(queue="pages", name="shop.count_view")
async def count_view(page: str) -> int:
    if not page:
        raise PermanentFailure("no page named")
    cache = current_worker().state.cache
    views: int = await cache.incr(f"{app.namespace}:views:{page}")
    return views
