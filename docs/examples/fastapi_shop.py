"""A FastAPI app that enqueues jobs from its routes and waits for their results.

The App opens with the web app's lifespan and closes with it. The worker runs apart, as many
processes as you like (from this directory)::

    QUASAR_REDIS_URL=redis://127.0.0.1:6379/0 quasar worker fastapi_shop:tasks

or, for a small deployment, inside the web app's own event loop: set ``SHOP_WORKER=1``.

Run the web app with ``uvicorn fastapi_shop:api`` (pip install fastapi uvicorn).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from quasar_redis import App, Worker

# The Redis URL comes from QUASAR_REDIS_URL, then REDIS_URL.
tasks = App(namespace=os.environ.get("SHOP_NAMESPACE", "shop"))


@tasks.task(queue="default", max_attempts=3)
async def add(a: int, b: int) -> int:
    return a + b


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    async with tasks:  # closes the App's connections when the web app stops
        if os.environ.get("SHOP_WORKER") == "1":
            async with Worker(tasks, ["default"], concurrency=10):  # stops gracefully at the end
                yield
        else:
            yield


api = FastAPI(lifespan=lifespan)


@api.post("/sums")
async def enqueue_sum(a: int, b: int) -> dict[str, str]:
    """Enqueue and answer at once: the client asks for the result later."""
    handle = await add.aenqueue(a, b)
    return {"job": handle.id}


@api.get("/sums")
async def sum_now(a: int, b: int) -> dict[str, int]:
    """Enqueue and wait for the result (a few seconds at most)."""
    handle = await add.aenqueue(a, b)
    return {"sum": await handle.aresult(timeout=10)}
