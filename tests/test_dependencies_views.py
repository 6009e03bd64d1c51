"""A job's dependencies and dependents as ``quasar job`` and the dashboard's job page show them:
each with its status, the first 100 dependents by id and how many more there are."""

from __future__ import annotations

import asyncio
from typing import Any

from quasar_redis import CancelApplied, NewJob, Quasar

from .helpers import applied, claimed
from .test_cli_ops import quasar, rq
from .test_dashboard import backing, dashboard_of, http, sync_q

__all__ = ["backing", "rq", "sync_q"]  # (the fixtures)


def family(q: Quasar) -> list[str]:
    """``parent`` failed, ``kid`` (policy run) depending on it and on ``other`` (cancelled),
    and 150 jobs depending on ``kid``; their ids."""
    for job_id in ("parent", "other"):
        applied(q.enqueue("s", id=job_id, max_attempts=1))
    claim = claimed(q.claim_job("parent", "w", 60_000))
    applied(q.permanent_fail(claim.token, "w", "no stock", kind="OutOfStock"))
    assert isinstance(q.cancel("other"), CancelApplied)
    applied(q.enqueue("s", id="kid", dependencies=["parent", "other"], on_dependency_failure="run"))
    ids = [f"d{i:03d}" for i in range(150)]
    assert q.enqueue_many([NewJob("s", id=i, dependencies=["kid"]) for i in ids], ids_only=True)
    return ids


def test_quasar_job_shows_dependencies_and_the_first_dependents(rq: Quasar, namespace: str) -> None:
    ids = family(rq)
    document = quasar("job", "kid", "--json", namespace=namespace).json()
    assert document["on_dependency_failure"] == "run" and document["status"] == "available"
    assert document["dependencies"] == {"parent": "discarded", "other": "cancelled"}
    assert document["dependents_total"] == 150
    assert list(document["dependents"]) == ids[:100]
    assert set(document["dependents"].values()) == {"blocked"}
    shown = quasar("job", "kid", namespace=namespace)
    assert shown.code == 0
    for text in ("parent  discarded", "other  cancelled", "d000  blocked", "and 50 more"):
        assert text in shown.out, shown.out
    assert "d100" not in shown.out


def test_the_job_page_shows_dependencies_and_dependents_with_badges(
    backing: tuple[Any, Any], backend: str, namespace: str, sync_q: Quasar
) -> None:
    ids = family(sync_q)

    async def run() -> tuple[str, str]:
        async with http(dashboard_of(backing, backend, namespace)) as client:
            kid = await client.get("/jobs/kid")
            parent = await client.get("/jobs/parent")
            return kid.text, parent.text

    kid, parent = asyncio.run(run())
    assert '<a href="/jobs/parent">parent</a> <span class="badge status-discarded">' in kid
    assert '<a href="/jobs/other">other</a> <span class="badge status-cancelled">' in kid
    assert f'<a href="/jobs/{ids[0]}">{ids[0]}</a> <span class="badge status-blocked">' in kid
    assert f'/jobs/{ids[99]}"' in kid and f'/jobs/{ids[100]}"' not in kid
    assert "And 50 more." in kid
    assert '<a href="/jobs/kid">kid</a> <span class="badge status-available">' in parent
