"""The dashboard in a real browser: headless Chromium (the system's, /usr/bin/chromium, driven by
Playwright; nothing is downloaded) on a dashboard served by uvicorn on real Redis, with a live
worker.

With QUASAR_WRITE_SCREENSHOTS=1 the test also writes docs/dashboard-*.png, the screenshots
docs/dashboard.md and README.md show; otherwise they go to a temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Browser, Page, expect, sync_playwright

from quasar_redis import App, Schedule, Status, Worker
from quasar_redis.dashboard import create_app

from .helpers import REDIS_URL, REQUIRE, delete_namespace, free_port, real_redis, wait_for

CHROMIUM = os.environ.get("QUASAR_TEST_CHROMIUM", "/usr/bin/chromium")
DOCS = Path(__file__).parent.parent / "docs"
SCRIPT = "<script>window.pwned = true; document.title = 'pwned'</script>"
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not shutil.which(CHROMIUM):
        if REQUIRE:
            pytest.fail(f"QUASAR_REQUIRE_REDIS=1 but there is no Chromium at {CHROMIUM}")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


class Served:
    """A dashboard served by uvicorn from a thread of its own, on a free port."""

    def __init__(self, namespace: str, **options: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(REDIS_URL, namespace, **options)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        wait_for(lambda: self.server.started, 30, "the dashboard to listen")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def shot(page: Page, name: str, folder: Path) -> None:
    page.screenshot(path=str(folder / f"dashboard-{name}.png"), full_page=True)


def test_operating_the_dashboard_in_a_browser(
    browser: Browser, namespace: str, tmp_path: Path
) -> None:
    real_redis().close()  # skip (or fail under QUASAR_REQUIRE_REDIS=1) without a server
    folder = DOCS if os.environ.get("QUASAR_WRITE_SCREENSHOTS") == "1" else tmp_path
    gate, failing = threading.Event(), threading.Event()
    failing.set()
    app = App(REDIS_URL, namespace=namespace)

    def resize(width: int, height: int) -> dict[str, int]:
        gate.wait(60)
        time.sleep(0.05)
        return {"width": width, "height": height}

    def publish(post: dict[str, Any]) -> str:
        if failing.is_set():
            raise ConnectionError("the feed is down")
        return f"published {post['title']}"

    resize_task = app.task(resize, name="images.resize", queue="images")
    publish_task = app.task(publish, name="feed.publish", queue="feed", max_attempts=1)
    try:
        worker = Worker(app, ["images", "feed"], 4, maintenance_interval=0.2, idle_wait=1.0)
        with (
            worker,
            Served(namespace, app=app) as served,
            Served(namespace, read_only=True) as viewer,
        ):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(served.url + "/")
            expect(page.locator("#queues")).to_contain_text("No queue")

            # counts change live as jobs are enqueued and run
            for i in range(6):
                resize_task.enqueue(640 + i, 480)
            executing = page.locator('[data-count="images|executing"]')
            expect(executing).to_have_text("4", timeout=WAIT_MS)  # 4 slots: 4 run, 2 wait
            expect(page.locator('[data-count="images|available"]')).to_have_text("2")
            expect(page.locator('[data-paused="images"]')).to_be_hidden()
            workers = browser.new_page(viewport={"width": 1280, "height": 500})

            def four_running() -> bool:  # (as of the worker's last beat in the registry)
                workers.goto(served.url + "/workers")
                return workers.locator('table.workers a[href^="/jobs/"]').count() == 4

            wait_for(four_running, 30, "the registry to show the 4 running jobs", every=0.3)
            expect(workers.locator("table.workers")).to_contain_text(worker.worker_id)
            gate.set()
            expect(page.locator('[data-count="images|completed"]')).to_have_text(
                "6", timeout=WAIT_MS
            )
            expect(executing).to_have_text("0")

            def six_processed() -> bool:  # (the worker's counts, as of its last beat)
                workers.goto(served.url + "/workers")
                return workers.locator("td.processed").first.inner_text() == "6"

            wait_for(six_processed, 30, "the registry to count the 6 runs", every=0.3)
            expect(workers.locator("td.failed").first).to_have_text("0")
            expect(workers.locator("td.seen time")).to_have_attribute("title", re.compile("Z$"))
            shot(workers, "workers", folder)
            workers.close()

            # failed jobs, one whose payload holds a <script>
            failed = publish_task.enqueue({"title": "Launch", "body": SCRIPT})
            drafts = [publish_task.enqueue({"title": f"Draft {i}"}) for i in (1, 2)]
            expect(page.locator('[data-count="feed|discarded"]')).to_have_text("3", timeout=WAIT_MS)
            page.click('a[href="/queues/feed"]')  # opens on its busiest status
            expect(page.locator(".tabs a.current")).to_contain_text("discarded")
            expect(page.locator("table.jobs")).to_contain_text(failed.id)

            # two rows selected, retried at once through the confirmation
            for draft in drafts:
                page.check(f'input.pick[value="{draft.id}"]')
            expect(page.locator("#selected-count")).to_have_text("2 selected")
            shot(page, "queue", folder)
            page.click("#bulk-retry")
            expect(page.locator("form.confirm")).to_contain_text("Retry these 2 jobs")
            expect(page.locator("#targets")).to_contain_text(drafts[1].id)
            shot(page, "confirm", folder)
            page.click("#confirm")
            expect(page.locator(".notice")).to_have_text("2 of 2 jobs retried.")
            expect(page.locator(".tabs a.current")).to_contain_text("discarded")
            tab = page.locator('.tabs [data-count="feed|discarded"]')
            expect(tab).to_have_text("3", timeout=WAIT_MS)  # (they failed again)

            # select all on the page, then a row's own action
            page.reload()
            page.check("#select-all")
            expect(page.locator("#selected-count")).to_have_text("3 selected")
            page.uncheck("#select-all")
            page.click(f'tr[data-job="{drafts[0].id}"] a:has-text("Retry")')
            expect(page.locator("form.confirm")).to_contain_text(f"Retry job {drafts[0].id}")
            page.click("#confirm")
            expect(page.locator(".notice")).to_have_text("Job retried.")
            expect(page).to_have_url(f"{served.url}/queues/feed?status=discarded&done=retried")

            # the search: an id goes to its job, whose arguments are named
            page.fill("#search", failed.id)
            page.press("#search", "Enter")
            expect(page.locator("#status")).to_have_text("discarded")
            expect(page.locator("#arguments")).to_contain_text("post")
            expect(page.locator("#arguments")).to_contain_text(SCRIPT)  # shown as text
            expect(page.locator("#details")).not_to_have_attribute("open", "")
            expect(page.locator(".errors")).to_contain_text("the feed is down")
            expect(page.locator(".traceback")).to_contain_text("in publish")  # its traceback
            assert page.locator("#fields time").first.get_attribute("title", timeout=WAIT_MS)
            assert page.evaluate("window.pwned") is None and page.title() != "pwned"
            shot(page, "job", folder)

            # retry, confirm: the job runs again and succeeds
            failing.clear()
            page.click("#retry")
            expect(page.locator("form.confirm")).to_contain_text(f"Retry job {failed.id}")
            page.click("#confirm")
            expect(page.locator(".notice")).to_have_text("Job retried.")

            def succeeded() -> bool:
                page.reload()
                return page.locator("#status").inner_text() == "completed"

            wait_for(succeeded, 30, "the retried job to succeed", every=0.3)
            expect(page.locator("#result")).to_contain_text("published Launch")
            info = app.client.get_job(failed.id)
            assert info is not None and info.status is Status.COMPLETED

            page.goto(served.url + "/")  # the charts, from what the worker wrote meanwhile
            expect(page.locator(".chart polyline").first).to_be_visible(timeout=WAIT_MS)
            expect(page.locator(".chart .x-axis").first).to_contain_text("now")
            expect(page.locator(".chart .y-axis").first).to_contain_text("/s")
            expect(page.locator('link[rel="icon"]')).to_have_attribute("href", "/favicon.svg")
            shot(page, "overview", folder)

            # a job that is not there: a page with the way back
            page.goto(served.url + "/jobs/no-such-job")
            expect(page.locator("#problem")).to_contain_text("No job with that id")
            expect(page.locator("#looked-for")).to_have_text("no-such-job")
            shot(page, "not-found", folder)
            page.click("#back")
            expect(page.locator("#queues")).to_contain_text("feed")

            # a cross-site form aimed at the dashboard is refused, and changes nothing
            other = publish_task.enqueue({"title": "Other"})
            wait_for(
                lambda: (i := app.client.get_job(other.id)) and i.status is Status.COMPLETED,
                30,
                "the other job to run",
            )
            evil = (
                f'<form method="post" action="{served.url}/actions/cancel">'
                f'<input name="job" value="{other.id}"><input name="csrf" value="guess">'
                '<button id="go">go</button></form>'
            )
            page.route(
                "http://evil.test/**",
                lambda route: route.fulfill(body=evil, content_type="text/html"),
            )
            page.goto("http://evil.test/")
            with page.expect_navigation():
                page.click("#go")
            assert "Refused" in page.content()

            # a schedule paused from its row, through its confirmation
            app.client.declare_schedule(Schedule.of("nightly", "jobs.night", "30 2 * * *"))
            page.goto(served.url + "/schedules")
            page.click('a[href="/confirm/pause-schedule?schedule=nightly"]')
            expect(page.locator("form.confirm")).to_contain_text("Pause schedule nightly")
            page.click("#confirm")
            expect(page.locator(".notice")).to_have_text("Schedule paused.")
            expect(page.locator('[data-schedule="nightly"]')).to_contain_text("Resume")
            assert app.client.schedules()[0].paused

            # the same pages read-only: no action, and their POSTs refused
            page.goto(f"{viewer.url}/jobs/{failed.id}")
            expect(page.locator("#status")).to_have_text("completed")
            assert page.locator(".actions a, form[method=post], button").count() == 0
            page.goto(f"{viewer.url}/queues/feed")
            assert page.locator(".actions a, form[method=post]").count() == 0
            refused = page.request.post(
                f"{viewer.url}/actions/retry",
                form={"job": failed.id},
                headers={"origin": viewer.url},
            )
            assert refused.status == 403 and "read-only" in refused.text()
            page.close()
    finally:
        delete_namespace(app.client.redis, namespace)
        app.close()
