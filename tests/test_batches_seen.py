"""A batch as the CLI and the dashboard show it (docs/workflows.md, "Seeing a workflow"):
``quasar batch`` with its counts, callbacks and members, ``quasar job`` naming a member's
batch and a callback's, and the dashboard's batch page linked from both jobs' pages."""

from __future__ import annotations

import re

from quasar_redis import NewJob, Quasar

from .helpers import applied, claimed
from .test_cli_ops import inproc, rq

__all__ = ["rq"]


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
