"""A batch as the CLI and the dashboard show it (docs/workflows.md, "Seeing a workflow"):
``quasar batch`` with its counts, callbacks and members, ``quasar job`` naming a member's
batch and a callback's, and the dashboard's batch page linked from both jobs' pages."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from quasar_redis import NewJob, Quasar

from .helpers import applied, claimed
from .test_cli_ops import inproc, rq
from .test_dashboard import backing, dashboard_of, http, sync_q

__all__ = ["backing", "rq", "sync_q"]


def finished_batch(q: Quasar) -> None:
    q.open_batch("nightly", on_success=NewJob("report"), on_complete=NewJob("tidy", queue="ops"))
    q.enqueue_many([NewJob("check", i, id=f"check-{i}", batch="nightly") for i in range(3)])
    q.close_batch("nightly")
    for _ in range(3):
        claim = claimed(q.claim("default", "w", 60_000))
        applied(q.complete(claim.token, "w", result={"ok": claim.job.id}))


def test_quasar_batch_shows_counts_callbacks_and_members(rq: Quasar, namespace: str) -> None:
    finished_batch(rq)
    ran = inproc("batch", "nightly", namespace=namespace)
    assert ran.code == 0, ran.err
    assert "batch nightly: closed, 3 members, 0 pending, 3 succeeded" in ran.out
    assert "on_success: report (queue default): nightly@on_success" in ran.out
    assert "on_complete: tidy (queue ops): nightly@on_complete" in ran.out
    assert "check-2" in ran.out
    document = inproc("batch", "nightly", "--json", "-n", "2", namespace=namespace).json()
    assert (document["total"], document["succeeded"], document["closed"]) == (3, 3, True)
    assert [m["id"] for m in document["members"]] == ["check-0", "check-1"]
    assert document["next_start"] == 2
    assert [c["job_id"] for c in document["callbacks"]] == [
        "nightly@on_success",
        "nightly@on_complete",
    ]


def test_quasar_job_names_a_members_batch_and_a_callbacks(rq: Quasar, namespace: str) -> None:
    finished_batch(rq)
    member = inproc("job", "check-0", "--json", namespace=namespace).json()
    assert (member["batch"], member["callback_of"]) == ("nightly", None)
    callback = inproc("job", "nightly@on_success", "--json", namespace=namespace).json()
    assert (callback["batch"], callback["callback_of"]) == (None, "nightly")
    shown = inproc("job", "nightly@on_success", namespace=namespace).out
    assert re.search(r"^callback of batch +nightly", shown, re.MULTILINE), shown


def test_quasar_batch_of_no_batch_is_one_line(rq: Quasar, namespace: str) -> None:
    finished_batch(rq)
    assert "no batch 'nope'" in inproc("batch", "nope", namespace=namespace).one_error()


# --- the dashboard -------------------------------------------------------------------------------


def test_the_dashboards_batch_page_links_members_and_callbacks(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    finished_batch(sync_q)
    sync_q.open_batch("<b>", on_failure=NewJob("alert"))
    sync_q.enqueue("check", id="lonely", batch="<b>")

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            page = await client.get("/batches/nightly")
            assert page.status_code == 200, page.text
            text = page.text
            assert '<progress id="progress" max="3" value="3">' in text
            assert 'href="/jobs/nightly%40on_success">nightly@on_success</a>' in text
            assert 'href="/jobs/check-1">check-1</a>' in text
            assert "status-completed" in text
            member = await client.get("/jobs/check-0")
            assert 'href="/batches/nightly">member of batch nightly</a>' in member.text
            callback = await client.get("/jobs/nightly%40on_complete")
            assert 'href="/batches/nightly">callback of batch nightly</a>' in callback.text
            escaped = await client.get("/batches/%3Cb%3E")
            assert escaped.status_code == 200 and "<b>" not in escaped.text.split("<main")[-1]
            assert "not yet" in escaped.text and ">open<" in escaped.text
            missing = await client.get("/batches/nope")
            assert missing.status_code == 404

    asyncio.run(run())


def pruned(q: Quasar) -> None:
    """The batch gone as prune leaves it, its members still there (tests/test_batches_prune.py)."""
    q.redis.unlink(q.keys.batch("nightly"), q.keys.members("nightly"))
    q.redis.zrem(q.keys.batches_done, "nightly")


def test_a_member_of_a_pruned_batch_still_names_it_and_the_batch_is_gone(
    rq: Quasar, namespace: str
) -> None:
    finished_batch(rq)
    pruned(rq)
    member = inproc("job", "check-0", "--json", namespace=namespace).json()
    assert member["batch"] == "nightly"
    assert "no batch 'nightly'" in inproc("batch", "nightly", namespace=namespace).one_error()


def test_the_dashboard_shows_a_member_of_a_pruned_batch_and_no_batch(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    finished_batch(sync_q)
    pruned(sync_q)

    async def run() -> None:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            member = await client.get("/jobs/check-0")
            assert member.status_code == 200, member.text
            assert 'href="/batches/nightly">member of batch nightly</a>' in member.text
            assert (await client.get("/batches/nightly")).status_code == 404

    asyncio.run(run())
