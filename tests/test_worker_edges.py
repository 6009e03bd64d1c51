"""Worker edge cases: a stop() before serve() starts, a task that raises SystemExit."""

from __future__ import annotations

import asyncio

from quasar_redis import App, Connector, RetryWaiting, Worker
from quasar_redis.retry import Fixed


def test_stop_before_serve_starts_is_not_lost() -> None:
    async def main() -> bool:
        worker = Worker(App(connector=Connector("memory://")), ["default"], 2, idle_wait=0.5)
        serving = asyncio.create_task(worker.serve())
        worker.stop()
        done, _ = await asyncio.wait({serving}, timeout=5)
        if not done:
            worker.stop()
            await serving
        return bool(done)

    assert asyncio.run(main()), "serve() kept running after a stop() made before it started"


def test_a_task_raising_system_exit_fails_its_job_only() -> None:
    app = App(connector=Connector("memory://"))

    @app.task(name="bye", retry=Fixed(60))
    async def bye() -> None:
        raise SystemExit(3)

    handle = bye.enqueue()

    async def main() -> None:
        async with Worker(app, ["default"], 2):
            for _ in range(200):
                info = handle.info()
                if info is not None and isinstance(info.job.state, RetryWaiting):
                    break
                await asyncio.sleep(0.01)
        await app.aclose()

    asyncio.run(main())
    info = handle.info()
    assert info is not None
    assert isinstance(info.job.state, RetryWaiting)
    assert info.job.error is not None and info.job.error.kind == "SystemExit"
    app.close()
