"""The dashboard over HTTP: its pages, its actions and their guards (cross-site requests,
read-only, basic auth, escaping), mounted under a path, on both backends. The browser test is
``test_dashboard_browser.py``."""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import fakeredis
import httpx
import pytest
import redis.asyncio
import uvicorn
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.routing import Mount

from quasar_redis import App, AsyncQuasar, JobApplied, NewJob, Quasar, Schedule, Status
from quasar_redis._calls import WorkerEntry
from quasar_redis._partitions import partition_of
from quasar_redis.cli import main
from quasar_redis.cli._events import format_event
from quasar_redis.cli.ops._fleet import COLUMNS
from quasar_redis.dashboard import create_app, starting
from quasar_redis.dashboard._charts import chart, count_text, duration_text, rate_text
from quasar_redis.errors import ConfigurationError, InvalidArgument

from .helpers import NO_URL, REDIS_URL, delete_namespace, has_functions, real_redis
from .servers import RedisServer
from .users import Users

SCRIPT = "<script>document.title='pwned'</script>"
BASE = "http://dash.test"
TRACE = 'Traceback (most recent call last):\n  File "tasks.py", line 3, in send\nValueError: <b>'


@pytest.fixture
def backing(backend: str, namespace: str) -> Iterator[tuple[Any, Any]]:
    """A sync and an asyncio redis-py client of one server (fakeredis, or the real one)."""
    if backend == "fake":
        server = fakeredis.FakeServer()
        yield fakeredis.FakeRedis(server=server), lambda: fakeredis.FakeAsyncRedis(server=server)
        return
    sync = real_redis()
    try:
        yield sync, lambda: redis.asyncio.Redis.from_url(REDIS_URL)
    finally:
        delete_namespace(sync, namespace)
        sync.close()


@pytest.fixture
def sync_q(backing: tuple[Any, Any], backend: str, namespace: str) -> Quasar:
    return Quasar(backing[0], namespace, functions=backend == "redis")


OPENED: list[Any] = []


def dashboard_of(backing: tuple[Any, Any], backend: str, namespace: str, **options: Any) -> Any:
    """A dashboard on a client of its own (closed by ``http``'s block)."""
    client = AsyncQuasar(backing[1](), namespace, functions=backend == "redis")
    OPENED.append(client)
    return create_app(client=client, **options)


@contextlib.asynccontextmanager
async def http(app: Any, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=BASE, **options) as client:
            yield client
    finally:
        while OPENED:
            await OPENED.pop().redis.aclose()


def seed(q: Quasar) -> None:
    """A failed job holding a <script> payload, a job depending on it, one waiting."""
    q.enqueue_many(
        [NewJob("mail.send", {"body": SCRIPT}, id="bad<1>", queue="mail", max_attempts=1)]
    )
    q.enqueue_many(
        [NewJob("mail.send", {"n": 2}, id="after", queue="mail", dependencies=["bad<1>"])]
    )
    q.enqueue_many([NewJob("mail.send", {"n": 3}, id="waits", queue="mail")])
    claim = q.claim_job("bad<1>", "w", 30_000)
    token = claim.claim.token  # type: ignore[union-attr]
    assert isinstance(
        q.fail(token, "w", f"boom {SCRIPT}", kind="ValueError", traceback=TRACE), JobApplied
    )


def token_in(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no form token on the page"
    return found.group(1)


async def confirmed_post(client: httpx.AsyncClient, confirm: str, **headers: str) -> httpx.Response:
    """Open the confirmation page ``confirm`` and submit its form as the browser would."""
    page = await client.get(confirm)
    assert page.status_code == 200, page.text
    action = re.search(r'<form method="post" action="([^"]+)"', page.text)
    assert action
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
    fields = {k: html.unescape(v) for k, v in fields.items()}
    return await client.post(action.group(1), data=fields, headers={"origin": BASE, **headers})


def test_every_page_shows_the_namespace_escaped(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            overview = await client.get("/")
            assert overview.status_code == 200
            assert 'data-count="mail|discarded">1<' in overview.text
            assert 'data-count="mail|available">1<' in overview.text
            assert overview.headers["content-security-policy"].startswith("default-src 'self'")
            queue = await client.get("/queues/mail", params={"status": "discarded"})
            assert "bad&lt;1&gt;" in queue.text and "<script>document" not in queue.text
            job = await client.get("/jobs/bad%3C1%3E")
            assert job.status_code == 200
            assert SCRIPT not in job.text  # never as markup
            assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in job.text
            assert "ValueError" in job.text and "after</a>" in job.text  # error, dependent
            assert "in send\nValueError: &lt;b&gt;</pre>" in job.text  # its traceback, escaped
            assert "attempt 1 · " in job.text
            assert '<span class="badge status-blocked">blocked</span>' in job.text
            events = re.findall(r"<strong>(\w+)</strong> attempt", job.text)
            assert events[0] == "available" and events[-1] == "discarded"
            dependent = await client.get("/jobs/after")
            assert "bad&lt;1&gt;</a>" in dependent.text  # its dependency, with its status
            assert (await client.get("/workers")).status_code == 200
            counts = (await client.get("/api/counts")).json()
            assert counts["queues"]["mail"]["discarded"] == 1
            assert counts["queues"]["mail"]["paused"] is False
            assert "<svg" in (await client.get("/partials/charts")).text
            assert (await client.get("/jobs/nothing-here")).status_code == 404
            assert (await client.get("/queues/nope")).status_code == 404
            assert (await client.get("/queues/mail?status=bogus")).status_code == 400
            assert (await client.get("/queues/bad%20name")).status_code == 404
            found = await client.get("/queues/mail", params={"id": "waits"})
            assert found.status_code == 303 and found.headers["location"] == "/jobs/waits"
            missing = await client.get("/queues/mail", params={"id": "nope"})
            assert "No job with id <code>nope</code>" in missing.text
            js = await client.get("/static/dashboard.js")
            assert js.status_code == 200 and "textContent" in js.text

    asyncio.run(run())


def test_actions_retry_cancel_pause_resume_retry_all(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            done = await confirmed_post(client, "/confirm/retry?job=bad%3C1%3E")
            assert done.status_code == 303 and done.headers["location"].startswith(
                "/jobs/bad%3C1%3E"
            )
            page = await client.get(done.headers["location"])
            assert "Job retried." in page.text
            assert sync_q.get_job("bad<1>").status is Status.AVAILABLE  # type: ignore[union-attr]
            again = await confirmed_post(client, "/confirm/retry?job=bad%3C1%3E")
            assert "why=NotFailed" in again.headers["location"]  # refused, shown, nothing changed

            assert (await confirmed_post(client, "/confirm/pause?queue=mail")).status_code == 303
            assert (await client.get("/api/counts")).json()["queues"]["mail"]["paused"] is True
            repeated = await confirmed_post(client, "/confirm/pause?queue=mail")
            assert "done=unchanged" in repeated.headers["location"]
            await confirmed_post(client, "/confirm/resume?queue=mail")
            assert (await client.get("/api/counts")).json()["queues"]["mail"]["paused"] is False
            shown = (await client.get("/queues/mail")).text
            paused, resumed = shown.index("<strong>paused</strong>"), shown.index("<strong>resumed")
            assert paused < resumed  # the queue's events, oldest first

            soon = sync_q.enqueue("t", None, id="soon", queue="mail", delay_ms=3_600_000)
            assert isinstance(soon, JobApplied)
            assert 'id="promote"' in (await client.get("/jobs/soon")).text
            promoted = await confirmed_post(client, "/confirm/promote?job=soon")
            assert "done=promoted" in promoted.headers["location"]
            assert "Job due now." in (await client.get(promoted.headers["location"])).text
            assert sync_q.get_job("soon").status is Status.AVAILABLE  # type: ignore[union-attr]
            assert 'id="promote"' not in (await client.get("/jobs/soon")).text
            sync_q.enqueue("t", None, id="soon", queue="mail", input_revision=1)  # supersede
            revised = (await client.get("/jobs/soon")).text
            assert "inline (revision 1)" in revised
            assert revised.count("<strong>scheduled</strong>") == 1  # enqueued
            assert revised.count("<strong>available</strong>") == 2  # promoted, then revised

            cancelled = await confirmed_post(client, "/confirm/cancel?job=bad%3C1%3E")
            assert "done=cancelled" in cancelled.headers["location"]
            assert "n=1" in cancelled.headers["location"]  # its dependent with it
            assert sync_q.get_job("after").status is Status.CANCELLED  # type: ignore[union-attr]

    asyncio.run(run())
    for i in range(3):
        sync_q.enqueue_many([NewJob("t", None, id=f"f{i}", queue="mail", max_attempts=1)])
        token = sync_q.claim_job(f"f{i}", "w", 30_000).claim.token  # type: ignore[union-attr]
        sync_q.fail(token, "w", "no")

    async def retry_all() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            done = await confirmed_post(client, "/confirm/retry-all?queue=mail")
            assert (
                "done=retried-all" in done.headers["location"] and "n=3" in done.headers["location"]
            )
            assert "3 failed jobs retried." in (await client.get(done.headers["location"])).text

    asyncio.run(retry_all())
    assert sync_q.counts("mail").discarded == 0
    assert {sync_q.get_job(f"f{i}").status for i in range(3)} == {Status.AVAILABLE}  # type: ignore[union-attr]

    async def purge() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            page = await client.get("/queues/mail?status=cancelled")
            assert 'href="/confirm/purge?queue=mail&amp;status=cancelled"' in page.text
            done = await confirmed_post(client, "/confirm/purge?queue=mail&status=cancelled")
            assert "done=purged" in done.headers["location"] and "n=2" in done.headers["location"]
            assert (
                await client.get("/confirm/purge?queue=mail&status=available")
            ).status_code == 400
            token = token_in((await client.get("/confirm/purge?queue=mail&status=cancelled")).text)
            refused = await client.post(
                "/actions/purge",
                data={"csrf": token, "queue": "mail", "status": "retryable"},
                headers={"origin": BASE},
            )
            assert refused.status_code == 400

    # Two jobs cancelled two minutes ago (past the 60 s re-send window that purge keeps):
    seconds, micros = sync_q.redis.time()
    long_ago = seconds * 1000 + micros // 1000 - 120_000
    for i in range(2):
        sync_q.enqueue_many([NewJob("t", None, id=f"old{i}", queue="mail")], now=long_ago)
        sync_q.cancel(f"old{i}", now=long_ago)
    assert sync_q.counts("mail").cancelled == 4  # and the job cancelled above, and its dependent
    asyncio.run(purge())
    assert sync_q.get_job("old0") is None and sync_q.get_job("old1") is None
    assert sync_q.counts("mail").cancelled == 2  # those cancelled just now stay for the window
    assert {sync_q.get_job(f"f{i}").status for i in range(3)} == {Status.AVAILABLE}  # type: ignore[union-attr]


def test_cross_site_posts_are_refused(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            token = token_in((await client.get("/confirm/retry?job=bad%3C1%3E")).text)
            form = {"csrf": token, "job": "bad<1>"}
            attempts = [
                ({"origin": "https://evil.example"}, form),
                ({"referer": "https://evil.example/page"}, form),
                ({"origin": BASE, "sec-fetch-site": "cross-site"}, form),
                ({"origin": "null"}, form),
                ({"origin": BASE}, {"job": "bad<1>"}),  # no token
                ({"origin": BASE}, {"csrf": "x" * 43, "job": "bad<1>"}),  # not the cookie's
            ]
            for headers, data in attempts:
                refused = await client.post("/actions/retry", data=data, headers=headers)
                assert refused.status_code == 403, (headers, refused.text)
                assert refused.text.startswith("Refused")
            # without the cookie (what a cross-site form sends under SameSite=Strict)
            client.cookies.clear()
            bare = await client.post("/actions/retry", data=form, headers={"origin": BASE})
            assert bare.status_code == 403

    asyncio.run(run())
    assert sync_q.get_job("bad<1>").status is Status.DISCARDED  # type: ignore[union-attr]

    async def trusted() -> None:
        app = dashboard_of(backing, backend, namespace, trusted_origins=["https://ops.example"])
        async with http(app) as client:
            token = token_in((await client.get("/confirm/retry?job=bad%3C1%3E")).text)
            done = await client.post(
                "/actions/retry",
                data={"csrf": token, "job": "bad<1>"},
                headers={"origin": "https://ops.example"},
            )
            assert done.status_code == 303

    asyncio.run(trusted())
    assert sync_q.get_job("bad<1>").status is Status.AVAILABLE  # type: ignore[union-attr]


def test_read_only_shows_no_action_and_refuses_posts(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as writer:
            token = token_in((await writer.get("/confirm/retry?job=bad%3C1%3E")).text)
            cookies = dict(writer.cookies)
        app = dashboard_of(backing, backend, namespace, read_only=True)
        async with http(app, cookies=cookies) as client:
            for path in ("/", "/queues/mail", "/queues/mail?status=discarded", "/jobs/bad%3C1%3E"):
                page = await client.get(path)
                assert page.status_code == 200
                assert "/confirm/" not in page.text and 'method="post"' not in page.text, path
                assert "read-only" in page.text
            assert (await client.get("/confirm/retry?job=bad%3C1%3E")).status_code == 403
            for action, target in (("retry", "job"), ("cancel", "job"), ("pause", "queue")):
                refused = await client.post(
                    f"/actions/{action}",
                    data={"csrf": token, target: "bad<1>" if target == "job" else "mail"},
                    headers={"origin": BASE},
                )
                assert refused.status_code == 403 and "read-only" in refused.text

    asyncio.run(run())
    assert sync_q.get_job("bad<1>").status is Status.DISCARDED  # type: ignore[union-attr]


def test_basic_auth_and_mounting_under_a_path(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)

    async def run() -> None:
        guarded = dashboard_of(backing, backend, namespace, basic_auth="ops:s3:cret")
        async with http(guarded) as client:
            refused = await client.get("/")
            assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]
            wrong = await client.get("/", auth=("ops", "nope"))
            assert wrong.status_code == 401
            assert (await client.get("/", auth=("ops", "s3:cret"))).status_code == 200
            bad = {"authorization": "Basic !!!"}
            assert (await client.get("/", headers=bad)).status_code == 401
        host = Starlette(
            routes=[Mount("/ops/queues", app=dashboard_of(backing, backend, namespace))]
        )
        async with http(host) as client:
            page = await client.get("/ops/queues/jobs/bad%3C1%3E")
            assert page.status_code == 200
            assert 'href="/ops/queues/static/dashboard.css"' in page.text
            assert 'href="/ops/queues/confirm/retry?job=bad%3C1%3E"' in page.text
            cookie = page.headers["set-cookie"]
            assert "Path=/ops/queues" in cookie and "SameSite=strict" in cookie
            assert "HttpOnly" in cookie
            done = await confirmed_post(client, "/ops/queues/confirm/retry?job=bad%3C1%3E")
            assert done.headers["location"].startswith("/ops/queues/jobs/bad%3C1%3E")

    asyncio.run(run())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        create_app()
    with pytest.raises(ConfigurationError):
        create_app("redis://127.0.0.1:6379/0", "bad namespace")
    for auth in ("nocolon", ":pw", "user:"):
        with pytest.raises(ConfigurationError):
            create_app("redis://127.0.0.1:6379/0", basic_auth=auth)


def test_the_dashboard_command_checks_its_options() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["dashboard", "--help"])
    assert result.exit_code == 0 and "--read-only" in result.output
    result = runner.invoke(main, ["dashboard"], env=NO_URL)
    assert result.exit_code == 2 and "--redis-url" in result.output
    result = runner.invoke(main, ["dashboard", "--redis-url", "memory://"], env=NO_URL)
    assert result.exit_code == 2 and "memory:// is an embedded server" in result.output
    result = runner.invoke(
        main, ["dashboard", "--redis-url", "redis://:secret@127.0.0.1:1/0"], env=NO_URL
    )
    assert result.exit_code == 1 and "secret" not in result.output
    assert "Redis at redis://:***@127.0.0.1:1/0" in result.output
    result = runner.invoke(
        main, ["dashboard", "--redis-url", REDIS_URL, "--namespace", "a b"], env=NO_URL
    )
    assert result.exit_code == 2 and "namespace must be" in result.output  # a usage error


def test_queue_pages_by_cursor_and_large_payloads_are_cut(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    jobs = [NewJob("t", {"i": i}, id=f"j{i:03d}", queue="bulk") for i in range(60)]
    sync_q.enqueue_many(jobs)
    sync_q.enqueue_many([NewJob("t", "x" * 30_000, id="big", queue="bulk")])
    sync_q.enqueue_many([NewJob("t", b"\xff\x00raw", id="raw", queue="bulk")])
    sync_q.enqueue_many([NewJob("t", None, id="odd/id?x=1#y%2F", queue="odd")])

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            first = await client.get("/queues/bulk")
            ids = re.findall(r'href="/jobs/(j\d+)"', first.text)
            assert ids == [f"j{i:03d}" for i in range(50)]
            more = re.search(r'href="(/queues/bulk\?status=available&amp;after=[^"]+)"', first.text)
            assert more, "no link to the next page"
            second = await client.get(html.unescape(more.group(1)))
            rest = re.findall(r'href="/jobs/([a-z]\w+)"', second.text)
            assert rest == [*(f"j{i:03d}" for i in range(50, 60)), "big", "raw"]
            big = await client.get("/jobs/big")
            assert "10002 more characters not shown" in big.text  # (20,000 shown, quotes too)
            raw = await client.get("/jobs/raw")
            assert "msgpack" in raw.text and "raw" in raw.text
            odd = await client.get("/queues/odd")
            link = re.search(r'href="(/jobs/[^"]+)"', odd.text)
            assert link and link.group(1) == "/jobs/odd%2Fid%3Fx%3D1%23y%252F"
            page = await client.get(link.group(1))
            assert page.status_code == 200 and "odd/id?x=1#y%2F</span>" in page.text

    asyncio.run(run())


def test_an_expired_job_is_shown_with_its_deadline(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    t0 = 1_000_000
    sync_q.enqueue("send", None, id="late", queue="mail", deadline=t0 + 100, now=t0)
    assert sync_q.sweep_expired(now=t0 + 100).past_deadline == ("late",)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            overview = await client.get("/")
            assert 'data-count="mail|expired">1<' in overview.text
            queue = await client.get("/queues/mail", params={"status": "expired"})
            assert "late</a>" in queue.text
            job = await client.get("/jobs/late")
            assert '<span class="badge status-expired" id="status">expired</span>' in job.text
            deadline = '<time datetime="1970-01-01T00:16:40.100Z" title="1970-01-01T00:16:40.100Z">'
            assert deadline in job.text  # the deadline: relative, the exact time on hover
            assert "deadline (ms)</th><td>1000100<" in job.text  # as stored: in the details
            assert 'id="cancel"' not in job.text  # final: nothing to cancel
            assert (await client.get("/api/counts")).json()["queues"]["mail"]["expired"] == 1

    asyncio.run(run())


def test_the_schedules_page_lists_each_schedule_and_who_declares_it(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    live = Schedule.of("nightly", "jobs.night", "30 2 * * *", tz="Europe/Paris")
    gone = Schedule.of("old", "jobs.old", every=60)
    sync_q.declare_schedule(live)
    sync_q.declare_schedule(gone, now=10**12)  # declared in 2001: by no running worker now
    sync_q.fire_schedule(gone, 10**12 + 60_000, now=10**12 + 60_000)
    sync_q.pause_schedule("old")

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            page = await client.get("/schedules")
            assert page.status_code == 200
            rows = re.findall(r"<tr>(.*?)</tr>", page.text, re.DOTALL)[1:]  # (the head's first)
            assert len(rows) == 2
            assert "nightly" in rows[0] and "30 2 * * *" in rows[0]
            assert "Europe/Paris" in rows[0] and ">active<" in rows[0]
            assert "by no running worker" in rows[1] and ">paused<" in rows[1]
            assert f"/jobs/old%40{10**12 + 60_000}" in rows[1]  # its last tick's job

    asyncio.run(run())


def schedule_row(page: str, name: str) -> str:
    """The row of the schedule ``name`` on the schedules page."""
    found = re.search(rf"<tr>\s*<td>{name}</td>(.*?)</tr>", page, re.DOTALL)
    assert found, f"no row of {name}"
    return found.group(1)


def test_schedule_actions_pause_resume_trigger_and_remove(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    sync_q.declare_schedule(Schedule.of("nightly", "jobs.night", "30 2 * * *", tz="Europe/Paris"))

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            row = schedule_row((await client.get("/schedules")).text, "nightly")
            assert 'href="/confirm/pause-schedule?schedule=nightly"' in row
            assert "resume-schedule" not in row  # (an active schedule: nothing to resume)
            assert 'href="/confirm/trigger-schedule?schedule=nightly"' in row
            assert 'href="/confirm/remove-schedule?schedule=nightly"' in row
            confirm = await client.get("/confirm/pause-schedule?schedule=nightly")
            assert "Pause schedule nightly" in confirm.text and 'href="/schedules"' in confirm.text

            paused = await confirmed_post(client, "/confirm/pause-schedule?schedule=nightly")
            assert paused.status_code == 303
            assert paused.headers["location"] == "/schedules?done=schedule-paused"
            assert sync_q.schedules()[0].paused
            page = (await client.get(paused.headers["location"])).text
            assert "Schedule paused." in page
            row = schedule_row(page, "nightly")
            assert "resume-schedule?schedule=nightly" in row and "pause-schedule" not in row
            again = await confirmed_post(client, "/confirm/pause-schedule?schedule=nightly")
            assert again.headers["location"] == "/schedules?done=unchanged"

            triggered = await confirmed_post(client, "/confirm/trigger-schedule?schedule=nightly")
            shown = (await client.get(triggered.headers["location"])).text
            job_id = re.search(r"Schedule triggered: job (nightly@\d+) enqueued\.", shown)
            assert job_id, shown  # a job now, paused or not
            assert sync_q.get_job(job_id.group(1)).status is Status.AVAILABLE  # type: ignore[union-attr]

            resumed = await confirmed_post(client, "/confirm/resume-schedule?schedule=nightly")
            assert "Schedule resumed." in (await client.get(resumed.headers["location"])).text
            assert not sync_q.schedules()[0].paused

            removed = await confirmed_post(client, "/confirm/remove-schedule?schedule=nightly")
            page = (await client.get(removed.headers["location"])).text
            assert "Schedule removed." in page and "No schedule in namespace" in page
            assert sync_q.schedules() == []

    asyncio.run(run())


def test_a_schedule_removed_meanwhile_is_told_not_an_error(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    sync_q.declare_schedule(Schedule.of("gone", "jobs.gone", every=60))

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            token = token_in((await client.get("/confirm/pause-schedule?schedule=gone")).text)
            assert sync_q.remove_schedule("gone")  # (removed after the page was shown)
            for action in ("pause", "resume", "trigger", "remove"):
                done = await client.post(
                    f"/actions/{action}-schedule",
                    data={"csrf": token, "schedule": "gone"},
                    headers={"origin": BASE},
                )
                assert done.status_code == 303, (action, done.text)
                assert done.headers["location"] == "/schedules?done=schedule-missing"
                page = (await client.get(done.headers["location"])).text
                assert "No schedule with that name (it may have been removed)." in page
            bad = await client.post(
                "/actions/pause-schedule",
                data={"csrf": token, "schedule": "bad name"},
                headers={"origin": BASE},
            )
            assert bad.status_code == 400 and "No such schedule" in bad.text
            assert (await client.get("/confirm/pause-schedule?schedule=a%20b")).status_code == 404

    asyncio.run(run())
    assert sync_q.schedules() == [] and sync_q.queues() == []  # nothing written back


def test_schedule_actions_refuse_cross_site_posts_and_a_read_only_dashboard(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    sync_q.declare_schedule(Schedule.of("nightly", "jobs.night", "30 2 * * *"))
    actions = ("pause", "trigger", "remove")

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as writer:
            token = token_in((await writer.get("/confirm/pause-schedule?schedule=nightly")).text)
            for action in actions:
                for data in ({"schedule": "nightly"}, {"csrf": "x" * 43, "schedule": "nightly"}):
                    refused = await writer.post(
                        f"/actions/{action}-schedule", data=data, headers={"origin": BASE}
                    )
                    assert refused.status_code == 403 and refused.text.startswith("Refused")
            cookies = dict(writer.cookies)
        app = dashboard_of(backing, backend, namespace, read_only=True)
        async with http(app, cookies=cookies) as client:
            page = await client.get("/schedules")
            assert page.status_code == 200 and "nightly" in page.text
            assert "/confirm/" not in page.text and "<th>actions</th>" not in page.text
            confirm = await client.get("/confirm/pause-schedule?schedule=nightly")
            assert confirm.status_code == 403
            for action in (*actions, "resume"):
                refused = await client.post(
                    f"/actions/{action}-schedule",
                    data={"csrf": token, "schedule": "nightly"},
                    headers={"origin": BASE},
                )
                assert refused.status_code == 403 and "read-only" in refused.text

    asyncio.run(run())
    [info] = sync_q.schedules()
    assert not info.paused and info.last_tick is None and sync_q.queues() == []


def test_a_dashboard_user_without_a_permission_is_told_and_nothing_changes(
    private_server: RedisServer, namespace: str
) -> None:
    """Users are server-wide: they are made on the session's own server, never the shared one.
    An ``operator`` user pauses a schedule but may not enqueue, so not trigger one (with the
    ``producer`` role too it may); a ``reader`` may change nothing."""
    made = Users(private_server, namespace)
    admin_q = Quasar(made.admin, namespace)
    admin_q.load_scripts()
    admin_q.declare_schedule(Schedule.of("nightly", "jobs.night", "30 2 * * *"))

    def user_of(*roles: str) -> str:
        return made.url_of(made.make(list(roles)))

    async def post(url: str, action: str) -> str:
        OPENED.append(AsyncQuasar(redis.asyncio.Redis.from_url(url), namespace))
        async with http(create_app(client=OPENED[-1])) as client:
            done = await confirmed_post(client, f"/confirm/{action}?schedule=nightly")
            assert done.status_code == 303, done.text
            return (await client.get(done.headers["location"])).text

    try:
        operator = user_of("operator")
        assert "Schedule paused." in asyncio.run(post(operator, "pause-schedule"))
        denied = asyncio.run(post(operator, "trigger-schedule"))
        notice = re.search(r'<p class="notice" role="status">(.*?)</p>', denied)
        assert notice and notice.group(1).startswith("Not allowed: the dashboard&#39;s Redis user")
        # (Redis 7 names the command refused; Redis 6.2, where the scripts run, does not)
        said = "(grant +" if has_functions(made.admin) else "(Redis did not say which)"
        assert said in notice.group(1) and "docs/security.md" in notice.group(1)
        reader = asyncio.run(post(user_of("reader"), "resume-schedule"))
        assert "Not allowed" in reader and "Schedule resumed." not in reader
        [info] = admin_q.schedules()
        assert info.paused and admin_q.queues() == []  # paused, and no job triggered
        both = asyncio.run(post(user_of("operator", "producer"), "trigger-schedule"))
        assert "Schedule triggered: job nightly@" in both
        assert admin_q.counts("default").available == 1
    finally:
        made.close()


# --- a queue's jobs: the busiest tab, every status, search, selection ----------------------------


def finish(q: Quasar, job_id: str, ok: bool = True) -> None:
    """Run ``job_id`` to its end: completed, or failed for good (one attempt)."""
    claim = q.claim_job(job_id, "w", 30_000)
    token = claim.claim.token  # type: ignore[union-attr]
    done = q.complete(token, "w") if ok else q.fail(token, "w", "boom", kind="ValueError")
    assert isinstance(done, JobApplied)


def busy(q: Quasar) -> None:
    """Queue mail: 3 completed jobs, 2 failed (discarded), 1 available, 1 scheduled."""
    jobs = [NewJob("mail.send", {"n": i}, id=f"done-{i}", queue="mail") for i in range(3)]
    jobs += [NewJob("mail.send", {}, id=f"failed-{i}", queue="mail", max_attempts=1) for i in "01"]
    q.enqueue_many(jobs)
    for i in range(3):
        finish(q, f"done-{i}")
    for i in (0, 1):
        finish(q, f"failed-{i}", ok=False)
    q.enqueue_many([NewJob("mail.send", {}, id="waits", queue="mail")])
    q.enqueue_many([NewJob("mail.send", {}, id="later", queue="mail", delay_ms=3_600_000)])


def current_tab(page: str) -> str:
    found = re.search(r'class="current" aria-current="page">(\w+)', page)
    assert found, "no current tab"
    return found.group(1)


def job_rows(page: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)">', page)


def test_a_queue_opens_on_its_busiest_status_and_shows_every_status_at_once(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    busy(sync_q)
    sync_q.enqueue_many([NewJob("t", {}, id=f"tie-{i}", queue="tie") for i in (1, 2)])
    finish(sync_q, "tie-1")  # queue tie: 1 available, 1 completed

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            page = (await client.get("/queues/mail")).text
            assert current_tab(page) == "completed"  # 3 jobs: its busiest status
            assert sorted(job_rows(page)) == ["done-0", "done-1", "done-2"]
            tie = (await client.get("/queues/tie")).text
            assert current_tab(tie) == "available"  # a tie: the first in quasar jobs' order
            every = (await client.get("/queues/mail?status=all")).text
            assert current_tab(every) == "all" and ">all <span>7</span>" in every
            rows = job_rows(every)  # by status in quasar jobs' order, then oldest first
            assert rows == ["waits", "later", "failed-0", "failed-1", "done-0", "done-1", "done-2"]
            assert '<span class="badge status-scheduled">scheduled</span>' in every
            assert '<span class="badge status-discarded">discarded</span>' in every
            head = re.findall(r"<th[^>]*>([\w ]+)</th>", every.split('id="jobs"')[1])
            assert head[:6] == ["id", "status", "task", "attempt", "priority", "enqueued"]

    asyncio.run(run())


def test_a_search_by_id_goes_to_the_job_or_lists_those_whose_id_starts_so(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    busy(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            exact = await client.get("/queues/mail", params={"id": "failed-1"})
            assert exact.status_code == 303 and exact.headers["location"] == "/jobs/failed-1"
            prefix = (await client.get("/queues/mail", params={"id": "done-"})).text
            found = re.search(r'<div class="found" id="found">(.*?)</div>', prefix, re.DOTALL)
            assert found and "3 whose id starts so" in found.group(1)
            links = re.findall(r'href="/jobs/([^"]+)"', found.group(1))
            assert links == ["done-0", "done-1", "done-2"]
            none = (await client.get("/queues/mail", params={"id": "zzz"})).text
            assert "nor any whose id starts so" in none

    asyncio.run(run())


async def confirmed_post_all(client: httpx.AsyncClient, confirm: str) -> httpx.Response:
    """``confirmed_post`` for a form naming several jobs (each hidden field kept)."""
    page = await client.get(confirm)
    assert page.status_code == 200, page.text
    action = re.search(r'<form method="post" action="([^"]+)"', page.text)
    assert action
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(
        r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text
    ):
        fields.setdefault(name, []).append(html.unescape(value))
    return await client.post(action.group(1), data=fields, headers={"origin": BASE})


def test_selected_jobs_are_retried_through_the_confirmation_and_audited(
    backing: tuple[Any, Any],
    backend: str,
    namespace: str,
    sync_q: Quasar,
    caplog: pytest.LogCaptureFixture,
) -> None:
    busy(sync_q)
    caplog.set_level("INFO", logger="quasar_redis.dashboard")

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            page = (await client.get("/queues/mail?status=discarded")).text
            assert 'id="select-all"' in page and 'formaction="/confirm/retry"' in page
            assert page.count('<input type="checkbox" name="job" value="failed-') == 2
            row = '<a class="button small" href="/confirm/retry?job=failed-0&amp;from_queue=mail'
            assert row in page  # a row's own action, back to this page after
            ask = "/confirm/retry?from_queue=mail&from_view=discarded&job=failed-0&job=failed-1"
            confirm = (await client.get(ask)).text
            assert "Retry these 2 jobs" in confirm and "<code>failed-1</code>" in confirm
            done = await confirmed_post_all(client, ask)
            assert done.status_code == 303
            assert done.headers["location"].startswith("/queues/mail?status=discarded&done=jobs-")
            notice = (await client.get(done.headers["location"])).text
            assert "2 of 2 jobs retried." in notice
            for job_id in ("failed-0", "failed-1"):
                info = sync_q.get_job(job_id)
                assert info is not None and info.status is not Status.DISCARDED
            # a job whose status does not allow it is counted as refused, the others done
            mixed = "/confirm/cancel?from_queue=mail&from_view=all&job=done-0&job=waits"
            done = await confirmed_post_all(client, mixed)
            notice = (await client.get(done.headers["location"])).text
            assert "1 of 2 jobs cancelled. 1 refused" in notice
            too_many = "&".join(f"job=j{i}" for i in range(101))
            assert (await client.get(f"/confirm/retry?{too_many}")).status_code == 400
        lines = [r.getMessage() for r in caplog.records if r.name == "quasar_redis.dashboard"]
        assert (
            "dashboard action retry on job failed-0, failed-1 by anonymous from 127.0.0.1: "
            "2 done, 0 refused" in lines
        )
        events = sync_q.redis.xrevrange(sync_q.keys.events, count=5)
        audits = [f for _, f in events if f.get(b"ev") == b"audit"]
        assert audits[0][b"act"] == b"cancel" and audits[0][b"job"] == b"done-0 waits"
        assert audits[1][b"act"] == b"retry" and audits[1][b"job"] == b"failed-0 failed-1"
        assert audits[1][b"who"] == b"anonymous" and audits[1][b"q"] == b"mail"
        assert audits[1][b"out"] == b"2 done, 0 refused"

    asyncio.run(run())


def test_an_action_by_a_basic_auth_user_is_audited_with_their_name_in_quasar_events(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)

    async def run() -> None:
        guarded = dashboard_of(backing, backend, namespace, basic_auth="ops:s3cret")
        async with http(guarded, auth=("ops", "s3cret")) as client:
            assert (await confirmed_post(client, "/confirm/pause?queue=mail")).status_code == 303
            await confirmed_post(client, "/confirm/retry?job=bad%3C1%3E")

    asyncio.run(run())
    newest = sync_q.redis.xrevrange(sync_q.keys.events, count=10)
    (retry_id, retry), (pause_id, pause) = [e for e in newest if e[1][b"ev"] == b"audit"]
    assert pause[b"ev"] == b"audit" and pause[b"q"] == b"mail" and b"job" not in pause
    assert (pause[b"act"], pause[b"who"], pause[b"out"]) == (b"pause", b"ops", b"paused")
    (line,) = format_event(pause_id, pause)
    assert line.endswith(" event=audit queue=mail pause by ops: paused")
    (line,) = format_event(retry_id, retry)
    assert line.endswith(" job=bad<1> event=audit queue=- attempt=? retry by ops: retried")
    page = asyncio.run(page_of(backing, backend, namespace, "/jobs/bad%3C1%3E"))
    assert "<strong>audit</strong> retry by ops: retried</li>" in page  # in the job's events


def test_an_audit_entry_goes_to_the_partition_of_each_job(
    backing: tuple[Any, Any], backend: str, namespace: str
) -> None:
    sync = Quasar(backing[0], namespace, functions=backend == "redis", partitions=2)
    ids = {partition_of(f"job-{i}", 2): f"job-{i}" for i in range(20)}
    jobs = [ids[0], ids[1]]  # one in each partition
    sync.enqueue_many([NewJob("t", {}, id=job, queue="mail") for job in jobs])

    async def run() -> None:
        client = AsyncQuasar(backing[1](), namespace, functions=backend == "redis", partitions=2)
        OPENED.append(client)
        async with http(create_app(client=client)) as http_client:
            ask = f"/confirm/cancel?job={jobs[0]}&job={jobs[1]}"
            assert (await confirmed_post_all(http_client, ask)).status_code == 303
            page = (await http_client.get(f"/jobs/{jobs[1]}")).text
            assert "<strong>audit</strong> cancel by anonymous: 2 done, 0 refused" in page

    asyncio.run(run())
    for partition, job in enumerate(jobs):
        stream = sync.keys.part(partition).events
        audits = [f for _, f in sync.redis.xrange(stream) if f[b"ev"] == b"audit"]
        assert [f[b"job"] for f in audits] == [job.encode()]


async def page_of(backing: tuple[Any, Any], backend: str, namespace: str, path: str) -> str:
    async with http(dashboard_of(backing, backend, namespace)) as client:
        page = await client.get(path)
        assert page.status_code == 200, page.text
        return page.text


def test_not_found_and_bad_input_are_pages_with_the_way_back(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            for path, looked_for in [
                ("/jobs/nothing-here", "nothing-here"),
                ("/queues/nope", "nope"),
                ("/batches/none", "none"),
                ("/no/such/page", "/no/such/page"),
                ("/confirm/explode", "explode"),
            ]:
                page = await client.get(path)
                assert page.status_code == 404, path
                assert page.headers["content-type"].startswith("text/html"), path
                assert '<section class="problem" id="problem" data-status="404">' in page.text
                assert f'<code id="looked-for">{looked_for}</code>' in page.text, path
                assert '<a href="/workers">Workers</a>' in page.text  # the navigation
                assert 'id="back" href="/"' in page.text
            bad = await client.get("/queues/mail?status=bogus")
            assert bad.status_code == 400 and "No status named bogus: one of all, " in bad.text
            assert 'id="back" href="/queues/mail">Back to mail</a>' in bad.text
            cursor = await client.get("/queues/mail?status=available&after=garbage")
            assert cursor.status_code == 400 and "cursor" in cursor.text
            token = token_in((await client.get("/confirm/pause?queue=mail")).text)
            posted = await client.post(
                "/actions/retry", data={"csrf": token, "job": "a b"}, headers={"origin": BASE}
            )
            assert posted.status_code == 400 and 'class="problem"' in posted.text

    asyncio.run(run())


def test_the_favicon_is_served_and_linked(
    backing: tuple[Any, Any], backend: str, namespace: str
) -> None:
    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            for path in ("/favicon.svg", "/favicon.ico"):
                icon = await client.get(path)
                assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
                assert icon.text.startswith("<svg") and "<script" not in icon.text
            page = (await client.get("/")).text
            assert '<link rel="icon" type="image/svg+xml" href="/favicon.svg">' in page

    asyncio.run(run())


def test_tables_follow_the_order_of_the_cli(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)
    page = asyncio.run(page_of(backing, backend, namespace, "/"))
    head = re.findall(r"<th[^>]*>(\w+)</th>", page.split('id="queues"')[1].split("</thead>")[0])
    assert head == ["queue", "state", *COLUMNS]  # quasar queues
    row = re.findall(r'data-count="mail\|(\w+)"', page)
    assert row == COLUMNS


def test_a_job_shows_its_named_arguments_and_folds_its_internals(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    app = App(REDIS_URL)  # (its tasks only: it never connects)

    @app.task(name="images.resize")
    def resize(width: int, height: int, *, crop: bool = False) -> None: ...

    call = app.encode_call(resize, [2000], {"height": 1500, "crop": True})
    sync_q.enqueue_many([NewJob("images.resize", call, id="known", queue="images")])
    sync_q.enqueue_many([NewJob("other.task", app.encode_call(resize, [7, 8], {}), id="unknown")])

    async def run() -> tuple[str, str]:
        client = AsyncQuasar(backing[1](), namespace, functions=backend == "redis")
        OPENED.append(client)
        async with http(create_app(client=client, app=app)) as http_client:
            known = (await http_client.get("/jobs/known")).text
            unknown = (await http_client.get("/jobs/unknown")).text
        return known, unknown

    known, unknown = asyncio.run(run())
    assert arguments(known) == [("width", "2000"), ("height", "1500"), ("crop", "true")]
    assert arguments(unknown) == [("arg0", "7"), ("arg1", "8")]  # a task this app does not know
    details = known.split('<details class="internals" id="details">')[1].split("</details>")[0]
    assert '<th scope="row">fence</th>' in details and "inline (revision 0)" in details
    assert '<pre class="data" id="payload">' in details  # the stored envelope, folded away
    shown = known.split("<details")[0]
    assert "fence" not in shown and '"a": [' not in shown and "enqueued (ms)" not in shown
    assert re.search(r'<th scope="row">enqueued</th><td><time datetime="[^"]+Z" title=', shown)


def arguments(page: str) -> list[tuple[str, str]]:
    table = page.split('id="arguments"')[1].split("</table>", maxsplit=1)[0]
    found = re.findall(r'<code>([^<]+)</code></th><td><pre class="value">([^<]*)</pre>', table)
    return [(name, value) for name, value in found]


def test_times_are_relative_with_the_exact_time_on_hover(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)
    for path in ("/queues/mail?status=available", "/jobs/bad%3C1%3E"):
        page = asyncio.run(page_of(backing, backend, namespace, path))
        times = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', page)
        assert times, path
        for iso, title, text in times:
            assert iso == title and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", iso)
            assert re.match(r"(just now|\d+ (s|min|h|d) ago|in \d+ (s|min|h|d))$", text), text
        assert not re.search(r"\b1[7-9]\d{11}\b", page.split("<details")[0]), path  # no epoch ms


def test_the_workers_page_shows_uptime_last_seen_and_counts(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    entry = WorkerEntry("w-1", "host-a", 4242, ("mail",), 4, (), "1.2.3", 1234, 56)
    sync_q.execute(sync_q.calls.announce(entry, 60_000))
    page = asyncio.run(page_of(backing, backend, namespace, "/workers"))
    head = re.findall(r"<th[^>]*>([\w ]+)</th>", page.split('id="workers"')[1].split("</thead>")[0])
    assert head[:8] == ["worker", "host", "pid", "queues", "running", "version", "up", "seen"]
    assert head[8:10] == ["processed", "failed"]
    assert '<td class="num processed">1234</td>' in page
    assert '<td class="num failed">56</td>' in page
    assert re.search(r'<td class="seen"><time datetime="[^"]+" title="[^"]+">', page)
    assert re.search(r'<td class="up"><span title="since [^"]+Z">\d+ s</span>', page)


@pytest.mark.parametrize(
    ("host", "auth", "warned"),
    [
        ("0.0.0.0", None, True),
        ("::", None, True),
        ("192.168.1.20", None, True),
        ("dash.example.com", None, True),
        ("0.0.0.0", "ops:pw", False),
        ("127.0.0.1", None, False),
        ("::1", None, False),
        ("localhost", None, False),
    ],
)
def test_a_public_address_without_authentication_is_warned_of(
    backing: tuple[Any, Any],
    backend: str,
    namespace: str,
    host: str,
    auth: str | None,
    warned: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> str:
        app = dashboard_of(backing, backend, namespace, host=host, basic_auth=auth)
        async with http(app, auth=("ops", "pw") if auth else None) as client:
            return (await client.get("/workers")).text

    page = asyncio.run(run())
    assert ('id="exposed"' in page) is warned
    if warned:
        assert f"This dashboard listens on {host}, a public address, without authentication" in page
    starting(host, auth is not None)
    said = [r.getMessage() for r in caplog.records if r.name == "quasar_redis.dashboard"]
    assert any("a public address, without authentication" in m for m in said) is warned


def test_quasar_dashboard_on_a_public_address_warns_as_it_starts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, namespace: str
) -> None:
    real_redis().close()  # (the command checks that Redis answers)
    served: dict[str, Any] = {}
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda server, sockets: served.update(sockets=sockets)
    )
    args = ["dashboard", "--redis-url", REDIS_URL, "--namespace", namespace, "--host", "0.0.0.0"]
    result = CliRunner().invoke(main, [*args, "--port", "0"], env=NO_URL)
    assert result.exit_code == 0, result.output
    [listening] = served["sockets"]  # (the socket the command bound, handed to uvicorn)
    assert listening.getsockname()[0] == "0.0.0.0"
    listening.close()
    said = [r.getMessage() for r in caplog.records if r.name == "quasar_redis.dashboard"]
    assert any("0.0.0.0, a public address, without authentication" in m for m in said)


def test_chart_numbers_are_read_as_people_write_them() -> None:
    assert [count_text(v) for v in (0, 0.25, 12.5, 850, 1234, 10_000, 3.4e6)] == [
        "0", "0.25", "12.5", "850", "1.23k", "10k", "3.4M",
    ]  # fmt: skip
    assert [duration_text(v) for v in (850, 10_000, 150_000, 7_200_000)] == [
        "850 ms", "10 s", "2.5 min", "2 h",
    ]  # fmt: skip
    made = chart("Enqueue to start", [None, 9_000.0, 12_000.0, None], duration_text)
    assert [t.label for t in made.y_ticks] == ["0 ms", "5 s", "10 s", "15 s", "20 s"]
    assert made.top == "12 s" and made.last == "12 s"
    assert [t.label for t in chart("x", [0.0] * 60).x_ticks][-1] == "now"
    assert "e+" not in " ".join(t.label for t in chart("x", [1e4, 2e7], rate_text).y_ticks)


def test_the_charts_have_axes_and_units(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    seed(sync_q)
    page = asyncio.run(page_of(backing, backend, namespace, "/queues/mail"))
    charts = page.split('id="charts"')[1]
    assert charts.count('<g class="y-axis">') == 3 and charts.count('<g class="x-axis">') == 3
    ticks = re.findall(r'class="tick">([^<]+)</text>', charts)
    assert "now" in ticks and "-8 min" in ticks and "0/s" in ticks and "0 ms" in ticks
    assert not any("e+" in tick for tick in ticks)
