"""Flow control on the dashboard, on both backends: a queue's limits, what holds it back and
its groups on its page; setting the queue's limits and a group's behind a confirmation (refused
when read-only, cross-site or malformed, nothing changed); a job's group; and the limits and
groups in /metrics."""

from __future__ import annotations

import asyncio
import html
import re
from typing import Any

import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families

from quasar_redis import UNLIMITED, AsyncQuasar, ClaimRefused, NewJob, Quasar, Rate
from quasar_redis.dashboard import create_app

from .servers import RedisServer
from .test_dashboard import (
    BASE,
    OPENED,
    backing,
    confirmed_post,
    dashboard_of,
    http,
    sync_q,
    token_in,
)
from .users import Users

__all__ = ["backing", "sync_q"]  # (the fixtures)


def grouped(q: Quasar) -> None:
    """Queue mail: two jobs of each of the groups a and b, one without a group; group a at
    its cap (1), group b waiting on its own rate (1 an hour, no cap)."""
    jobs = [
        NewJob("mail.send", i, id=f"{g}{i}", queue="mail", group=g) for g in "ab" for i in (0, 1)
    ]
    q.enqueue_many([*jobs, NewJob("mail.send", 9, id="u0", queue="mail")])
    q.set_limits("mail", rate="50/s+5", concurrency=10, group_concurrency=1)
    q.set_group_limits("mail", "b", rate="1/h", concurrency=UNLIMITED)
    leased = {q.claim("mail", "w-1", 60_000).claim.job.id for _ in range(3)}  # type: ignore[union-attr]
    assert leased == {"u0", "a0", "b0"}
    assert isinstance(q.claim("mail", "w-1", 60_000), ClaimRefused)


def row_of(table: str, name: str) -> list[str]:
    """The cells (tags removed) of the row of ``name`` in ``table``'s HTML (a job's checkbox
    left out)."""
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.DOTALL):
        cells = [
            re.sub(r"<[^>]+>", "", c).strip()
            for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.DOTALL)
        ]
        cells = cells[1:] if 'class="pick"' in row else cells
        if cells and cells[0] == name:
            return cells
    raise AssertionError(f"no row {name!r} in {table}")


def section(page: str, element_id: str) -> str:
    found = re.search(rf'<table[^>]*id="{element_id}".*?</table>', page, re.DOTALL)
    assert found, f"no table {element_id}"
    return found.group(0)


def test_the_queue_page_shows_limits_groups_and_what_holds_it_back(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    grouped(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            page = (await client.get("/queues/mail")).text
            flow = section(page, "flow")
            assert row_of(flow, "rate") == ["rate", "50/s+5"]
            assert row_of(flow, "concurrency") == ["concurrency", "10 (3 leased now)"]
            assert row_of(flow, "each group: concurrency")[1] == "1"
            assert row_of(flow, "each group: rate")[1] == "none"
            held = row_of(flow, "held back by")[1]
            assert held == "every group with ready jobs waits on its rate or is at its cap"
            assert row_of(flow, "groups")[1].startswith("0 in turn, 1 waiting, 1 at their cap")
            groups = section(page, "groups")
            a, b = row_of(groups, "a"), row_of(groups, "b")
            assert a == ["a", "full", "1", "1", "-", "default", "default"]
            assert b[:4] == ["b", "waiting", "1", "1"] and b[5:] == ["1/h", "unlimited"]
            assert re.match(r"in \d+ (s|min)$", b[4])  # until when it waits (its time on hover)
            assert 'action="/confirm/set-limits"' in page
            assert 'action="/confirm/set-group-limits"' in page
            assert 'placeholder="50/s+5"' in page  # (the current value)
            jobs = (await client.get("/queues/mail?status=available")).text
            assert "<th>group</th>" in jobs and row_of(jobs, "b1")[5] == "b"
            job = (await client.get("/jobs/a1")).text
            assert '<tr><th scope="row">group</th><td>a</td></tr>' in job
            lone = (await client.get("/jobs/u0")).text
            assert '<th scope="row">group</th>' not in lone

    asyncio.run(run())


def test_setting_the_limits_of_a_queue_and_of_a_group(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    grouped(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            ask = "/confirm/set-limits?queue=mail&rate=5%2Fmin&concurrency=none"
            ask += "&group_rate=&group_concurrency=2"
            confirm = (await client.get(ask)).text
            assert "queue mail: rate 5/min, concurrency removed, group concurrency 2?" in confirm
            assert 'href="/queues/mail"' in confirm  # (back)
            assert sync_q.flow("mail").rate == Rate(50, 1, 5)  # (asked, not done)
            done = await confirmed_post(client, ask)
            assert done.status_code == 303
            assert done.headers["location"] == "/queues/mail?done=limits-set"
            assert "Limits set" in (await client.get(done.headers["location"])).text
            info = sync_q.flow("mail")
            assert (info.rate, info.concurrency) == (Rate(5, 60), None)
            assert (info.group_rate, info.group_concurrency) == (None, 2)  # (blank: kept)

            ask = "/confirm/set-group-limits?queue=mail&group=b&rate=none&concurrency=3"
            confirm = (await client.get(ask)).text
            assert (
                "group b of queue mail: rate back to the queue&#39;s default, concurrency 3?"
                in confirm
            )
            done = await confirmed_post(client, ask)
            assert done.headers["location"] == "/queues/mail?done=limits-set"
            own = sync_q.flow("mail", group="b").groups[0]
            assert (own.rate, own.concurrency) == (None, 3)
            ask = "/confirm/set-group-limits?queue=mail&group=new&concurrency=unlimited"
            await confirmed_post(client, ask)
            assert sync_q.flow("mail", group="new").groups[0].concurrency is UNLIMITED

    asyncio.run(run())


BAD_FORMS = [
    ("set-limits", "rate=fast", "a rate is"),
    ("set-limits", "rate=0%2Fs", "a rate's limit must be a whole number"),
    ("set-limits", "concurrency=0", "must be a whole number from 1"),
    ("set-limits", "concurrency=two", "must be a whole number, 'none' or blank"),
    ("set-limits", "group_concurrency=unlimited", "'unlimited' is a group's own limit"),
    ("set-limits", "rate=&concurrency=", "no limit given"),
    ("set-group-limits", "group=&rate=1%2Fs", "Give the group's name"),
    ("set-group-limits", "group=a%20b&rate=1%2Fs", "Give the group's name"),
    ("set-group-limits", "group=a&concurrency=-3", "must be a whole number, 'none' or blank"),
]


def test_bad_limits_are_refused_and_change_nothing(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    grouped(sync_q)
    before = sync_q.flow("mail")

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            token = token_in((await client.get("/confirm/pause?queue=mail")).text)
            for action, query, said in BAD_FORMS:
                asked = await client.get(f"/confirm/{action}?queue=mail&{query}")
                text = html.unescape(asked.text)  # (a page: what is wrong, the way back)
                assert asked.status_code == 400 and said in text, (query, text)
                assert "Nothing changed" in text or "group's name" in text
                assert '<a class="button" id="back" href="/queues/mail">' in text
                form = dict(p.split("=", 1) for p in f"queue=mail&{query}".split("&"))
                form = {k: v.replace("%2F", "/").replace("%20", " ") for k, v in form.items()}
                posted = await client.post(
                    f"/actions/{action}", data={"csrf": token, **form}, headers={"origin": BASE}
                )
                text = html.unescape(posted.text)
                assert posted.status_code == 400 and said in text, (query, text)
            unknown = await client.get("/confirm/set-limits?queue=bad%20queue&rate=1%2Fs")
            assert unknown.status_code == 404

    asyncio.run(run())
    after = sync_q.flow("mail")
    assert (after.rate, after.concurrency, after.group_rate, after.group_concurrency) == (
        before.rate,
        before.concurrency,
        before.group_rate,
        before.group_concurrency,
    )
    assert [(g.name, g.rate, g.concurrency) for g in after.groups] == [
        (g.name, g.rate, g.concurrency) for g in before.groups
    ]


def test_limits_are_not_set_read_only_or_cross_site(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    grouped(sync_q)
    form = {"queue": "mail", "rate": "1/s"}

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as writer:
            token = token_in((await writer.get("/confirm/set-limits?queue=mail&rate=1%2Fs")).text)
            cookies = dict(writer.cookies)
            refused = await writer.post(
                "/actions/set-limits",
                data={"csrf": token, **form},
                headers={"origin": "https://evil.example"},
            )
            assert refused.status_code == 403 and refused.text.startswith("Refused")
        app = dashboard_of(backing, backend, namespace, read_only=True)
        async with http(app, cookies=cookies) as client:
            page = (await client.get("/queues/mail")).text
            assert 'id="flow"' in page and 'id="groups"' in page  # (shown: read, not acted)
            assert "/confirm/" not in page and "set-limits" not in page
            assert (
                await client.get("/confirm/set-limits?queue=mail&rate=1%2Fs")
            ).status_code == 403
            for action in ("set-limits", "set-group-limits"):
                refused = await client.post(
                    f"/actions/{action}",
                    data={"csrf": token, "group": "a", **form},
                    headers={"origin": BASE},
                )
                assert refused.status_code == 403 and "read-only" in refused.text

    asyncio.run(run())
    assert sync_q.flow("mail").rate == Rate(50, 1, 5)
    assert sync_q.flow("mail", group="a").groups[0].rate is None


def metrics_of(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_dashboard_metrics_show_each_queues_limits_and_groups(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    sync_q.set_limits("mail", group_rate="30/min", declare=True)  # (kept by grouped's)
    grouped(sync_q)
    sync_q.enqueue("mail.send", 1, queue="plain")  # (a queue without limits or groups)

    async def run() -> str:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            response = await client.get("/metrics")
            assert response.status_code == 200
            return response.text

    found = metrics_of(asyncio.run(run()))
    mail, plain = (("queue", "mail"),), (("queue", "plain"),)
    assert found["quasar_queue_rate_limit_per_second", mail] == 50
    assert found["quasar_queue_concurrency_limit", mail] == 10
    assert found["quasar_queue_group_rate_limit_per_second", mail] == 0.5
    assert found["quasar_queue_group_concurrency_limit", mail] == 1
    assert found["quasar_queue_leased_jobs", mail] == 3
    assert found["quasar_queue_leased_jobs", plain] == 0
    for state, n in (("turn", 0), ("wait", 1), ("full", 1)):
        assert found["quasar_queue_groups", (("queue", "mail"), ("state", state))] == n
        assert found["quasar_queue_groups", (("queue", "plain"), ("state", state))] == 0
    for name in ("rate_limit_per_second", "concurrency_limit"):
        assert (f"quasar_queue_{name}", plain) not in found  # (no limit: no series)
    assert not any("group" in dict(labels) for _, labels in found)  # (no series per group)


def test_a_reader_sees_the_limits_but_may_not_set_them(
    private_server: RedisServer, namespace: str
) -> None:
    """Users are server-wide: made on a server of the test's own. A ``reader`` reads the
    queue's limits and is told it may not set them; an ``operator`` sets them."""
    made = Users(private_server, namespace)
    admin_q = Quasar(made.admin, namespace)
    admin_q.load_scripts()
    admin_q.enqueue("mail.send", 1, queue="mail", group="a")
    admin_q.set_limits("mail", rate="5/s")

    async def set_rate(url: str) -> str:
        OPENED.append(AsyncQuasar(redis.asyncio.Redis.from_url(url), namespace))
        async with http(create_app(client=OPENED[-1])) as client:
            page = (await client.get("/queues/mail")).text
            assert "5/s" in section(page, "flow")
            done = await confirmed_post(client, "/confirm/set-limits?queue=mail&rate=9%2Fs")
            assert done.status_code == 303, done.text
            return (await client.get(done.headers["location"])).text

    try:
        denied = asyncio.run(set_rate(made.url_of(made.make(["reader"]))))
        assert "Not allowed" in denied and "Limits set" not in denied
        assert admin_q.flow("mail").rate == Rate(5)
        allowed = asyncio.run(set_rate(made.url_of(made.make(["operator"]))))
        assert "Limits set" in allowed
        assert admin_q.flow("mail").rate == Rate(9)
    finally:
        made.close()
