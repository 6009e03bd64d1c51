"""The operator commands through the installed ``quasar`` entry point, against real Redis:
exit codes, output, and ``--json`` parsed. Every refusal is one line, changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from quasar_redis import ClaimRefused, Quasar, QueuePaused, Status, Unique, __version__
from quasar_redis.cli import main
from quasar_redis.cli.ops._look import ORDER

from .helpers import (
    REDIS_URL,
    applied,
    claimed,
    delete_namespace,
    real_redis,
    snapshot,
    wait_for,
)
from .locked_redis import WRONG, LockedRedis, closed_port, locked

__all__ = ["locked"]  # (the fixture)

QUASAR = Path(sys.executable).parent / "quasar"
MINUTES_AGO = 5 * 60_000


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)

    def one_error(self) -> str:
        """The one ``Error:`` line of a refused command: no traceback, nothing on stdout."""
        assert self.code != 0, self.out
        assert "Traceback" not in self.err, self.err
        assert self.out == "", self.out
        lines = self.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), self.err
        return lines[0]


def quasar(*args: str, url: str = REDIS_URL, namespace: str | None = None) -> Ran:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QUASAR_NAMESPACE")}
    env["QUASAR_REDIS_URL"] = url
    if namespace is not None:
        env["QUASAR_NAMESPACE"] = namespace
    done = subprocess.run(
        [str(QUASAR), *args],
        check=False,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def inproc(*args: str, url: str = REDIS_URL, namespace: str | None = None) -> Ran:
    """``quasar ARGS`` run in this process (click's CliRunner): for the many refusals, each of
    which the installed entry point is shown to print the same way by a few runs above."""
    env = {"QUASAR_REDIS_URL": url, "REDIS_URL": None, "QUASAR_NAMESPACE": namespace}
    result = CliRunner().invoke(main, list(args), env=env)
    return Ran(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def rq(namespace: str) -> Iterator[Quasar]:
    client = real_redis()
    try:
        yield Quasar(client, namespace)
    finally:
        delete_namespace(client, namespace)
        client.close()


def server_ms(q: Quasar) -> int:
    seconds, micros = q.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def finished(
    q: Quasar, job_id: str, *, fail: bool = False, at: int | None = None, **job: Any
) -> None:
    """Enqueue ``job_id`` and finish it (at ``at``, server ms; default now)."""
    applied(q.enqueue("tasks.send", {"a": [job_id], "k": {}}, id=job_id, now=at, **job))
    token = claimed(q.claim_job(job_id, "w-1", 60_000, now=at)).token
    if fail:
        applied(q.permanent_fail(token, "w-1", f"no mailbox for {job_id}", kind="KeyError", now=at))
    else:
        applied(q.complete(token, "w-1", result={"sent": job_id}, now=at))


# --- jobs and job ------------------------------------------------------------------------


def test_jobs_pages_by_cursor_through_every_status(rq: Quasar, namespace: str) -> None:
    for i in range(12):
        applied(rq.enqueue("tasks.send", i, id=f"w{i:02d}", queue="mail"))
    for i in range(5):
        finished(rq, f"f{i}", fail=True, queue="mail")
    seen: list[tuple[str, str]] = []
    cursor: str | None = None
    pages = 0
    while True:
        args = ["jobs", "mail", "--limit", "7", "--json"] + (["--after", cursor] if cursor else [])
        page = quasar(*args, namespace=namespace).json()
        assert len(page["jobs"]) <= 7
        seen += [(j["id"], j["status"]) for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [(f"w{i:02d}", "available") for i in range(12)] + [
        (f"f{i}", "discarded") for i in range(5)
    ]
    failed = quasar("jobs", "mail", "--status", "failed", "--json", namespace=namespace).json()
    assert [j["id"] for j in failed["jobs"]] == [f"f{i}" for i in range(5)]
    assert failed["jobs"][0]["error"] == "KeyError: no mailbox for f0"
    table = quasar("jobs", "mail", "-s", "discarded", namespace=namespace)
    assert table.code == 0
    assert "f0" in table.out and "KeyError: no mailbox for f0" in table.out


def test_job_shows_fields_payload_result_errors_dependencies_and_events(
    rq: Quasar, namespace: str
) -> None:
    finished(rq, "root")
    applied(rq.enqueue("tasks.send", None, id="gate", delay_ms=3_600_000))
    payload = {"a": [1], "k": {"to": "x"}}
    applied(rq.enqueue("tasks.send", payload, id="child", dependencies=["root", "gate"]))
    document = quasar("job", "root", "--json", namespace=namespace).json()
    assert document["id"] == "root" and document["status"] == "completed"
    assert document["state"]["name"] == "Succeeded"
    assert document["payload"] == {"format": "msgpack", "value": {"a": ["root"], "k": {}}}
    assert document["result"] == {"format": "msgpack", "value": {"sent": "root"}}
    assert document["dependents_total"] == 1 and document["dependents"] == {"child": "blocked"}
    assert [e["event"] for e in document["events"]] == ["available", "executing", "completed"]
    child = quasar("job", "child", "--json", namespace=namespace).json()
    assert child["status"] == "blocked" and child["waiting_on"] == "gate"
    assert child["dependencies"] == {"root": "completed", "gate": "scheduled"}
    shown = quasar("job", "child", namespace=namespace)
    assert shown.code == 0
    for text in ("blocked", "waits on", "gate  scheduled", '{"a": [1], "k": {"to": "x"}}'):
        assert text in shown.out


def test_job_shows_how_a_job_was_enqueued_with_a_dedup_key(rq: Quasar, namespace: str) -> None:
    applied(rq.enqueue("tasks.send", id="once", dedup=Unique("nightly", "finished", 60_000)))
    document = quasar("job", "once", "--json", namespace=namespace).json()
    assert document["dedup"] == "finished 60000 nightly"
    assert "finished 60000 nightly" in quasar("job", "once", namespace=namespace).out


def test_job_shows_a_superseded_and_changed_job(rq: Quasar, namespace: str) -> None:
    applied(rq.enqueue("tasks.send", {"a": [1], "k": {}}, id="r"))
    claimed(rq.claim_job("r", "w-1", 60_000))
    applied(rq.enqueue("tasks.send", {"a": [2], "k": {}}, id="r", input_revision=1))
    applied(rq.change("r", priority=-2, delay_ms=3_600_000))
    document = quasar("job", "r", "--json", namespace=namespace).json()
    assert (document["status"], document["attempt"]) == ("scheduled", 0)
    assert (document["input_revision"], document["priority"]) == (1, -2)
    assert document["payload"]["value"] == {"a": [2], "k": {}}
    events = ["available", "executing", "available", "scheduled"]  # run, superseded, changed
    assert [e["event"] for e in document["events"]] == events
    assert "inline (revision 1)" in quasar("job", "r", namespace=namespace).out


def test_job_shows_a_failure(rq: Quasar, namespace: str) -> None:
    finished(rq, "bad", fail=True)
    document = quasar("job", "bad", "--json", namespace=namespace).json()
    assert document["error"]["kind"] == "KeyError"
    assert document["error"]["message"] == "no mailbox for bad"
    shown = quasar("job", "bad", namespace=namespace).out
    assert "KeyError: no mailbox for bad" in shown


# --- retry, cancel, purge ----------------------------------------------------------------


def test_retry_by_id_and_the_refusals_it_reports(rq: Quasar, namespace: str) -> None:
    finished(rq, "bad", fail=True)
    finished(rq, "good")
    ran = quasar("retry", "bad", "good", namespace=namespace)
    assert ran.code == 1  # one of the two was refused
    assert ran.out.strip() == "retried 1 job(s); 1 refused"
    assert ran.err.strip() == "good: not retried: not failed"
    assert rq.get_job("bad").status == Status.AVAILABLE  # type: ignore[union-attr]
    again = quasar("retry", "bad", "--json", namespace=namespace)
    assert again.code == 1
    assert json.loads(again.out) == {
        "changed": 0,
        "cascaded": 0,
        "refused": [{"id": "bad", "reason": "not failed"}],
    }


def test_a_retried_job_shows_its_real_error_and_the_retry_its_reason(
    rq: Quasar, namespace: str
) -> None:
    finished(rq, "bad", fail=True, queue="mail")
    assert inproc("retry", "bad", namespace=namespace).code == 0
    rows = inproc("jobs", "mail", "--json", namespace=namespace).json()["jobs"]
    assert [(r["id"], r["status"], r["error"]) for r in rows] == [
        ("bad", "available", "KeyError: no mailbox for bad")
    ]
    table = inproc("jobs", "mail", namespace=namespace).out
    assert "KeyError: no mailbox for bad" in table and "OperatorRetry" not in table
    job = inproc("job", "bad", "--json", namespace=namespace).json()
    assert (job["error"]["kind"], job["error"]["message"]) == ("KeyError", "no mailbox for bad")
    assert job["events"][-1]["event"] == "retryable"
    assert job["events"][-1]["message"] == "retried by operator"
    assert (
        "retryable  attempt=1  retried by operator" in inproc("job", "bad", namespace=namespace).out
    )


def test_a_retry_whose_time_has_come_is_available_in_info_and_jobs(
    rq: Quasar, namespace: str
) -> None:
    for job_id, delay in (("soon", 0), ("later", 3_600_000)):
        applied(rq.enqueue("tasks.send", None, id=job_id, queue="mail", max_attempts=2))
        token = claimed(rq.claim_job(job_id, "w-1", 60_000)).token
        applied(rq.fail(token, "w-1", "smtp down", retry_delay_ms=delay))
    document = inproc("info", "mail", "--json", namespace=namespace).json()
    assert (document["counts"]["available"], document["counts"]["retryable"]) == (1, 1)
    assert document["oldest_available"]["id"] == "soon"
    assert "oldest available: soon, enqueued " in inproc("info", "mail", namespace=namespace).out
    listed = inproc("jobs", "mail", "--json", namespace=namespace).json()["jobs"]
    assert [(r["id"], r["status"]) for r in listed] == [
        ("soon", "available"),
        ("later", "retryable"),
    ]
    assert claimed(rq.claim("mail", "w-1", 60_000)).job.id == "soon"


def test_retry_all_failed_in_batches(rq: Quasar, namespace: str) -> None:
    for i in range(130):  # more than a batch
        finished(rq, f"f{i:03d}", fail=True, queue="mail")
    finished(rq, "other", fail=True, queue="sms")
    ran = quasar("retry", "--all-failed", "mail", "--json", namespace=namespace)
    assert ran.json() == {"changed": 130, "cascaded": 0, "refused": [], "queue": "mail"}
    counts = rq.counts("mail")
    assert (counts.available, counts.retryable, counts.discarded) == (130, 0, 0)
    assert rq.counts("sms").discarded == 1
    assert quasar("retry", "--all-failed", "mail", namespace=namespace).out == "retried 0 job(s)\n"


def test_cancel_with_its_cascade(rq: Quasar, namespace: str) -> None:
    applied(rq.enqueue("tasks.send", None, id="a"))
    applied(rq.enqueue("tasks.send", None, id="b", dependencies=["a"]))
    finished(rq, "done")
    ran = quasar("cancel", "a", "done", namespace=namespace)
    assert ran.code == 1
    assert ran.out.strip() == "cancelled 1 job(s) (and 1 dependents with them); 1 refused"
    assert ran.err.strip() == "done: not cancelled: already finished"
    assert rq.get_job("b").status == Status.CANCELLED  # type: ignore[union-attr]


def test_promote_makes_waiting_jobs_due_and_leaves_the_rest(rq: Quasar, namespace: str) -> None:
    applied(rq.enqueue("tasks.send", None, id="later", delay_ms=3_600_000))
    applied(rq.enqueue("tasks.send", None, id="running"))
    claimed(rq.claim_job("running", "w-1", 60_000))
    finished(rq, "done")
    ran = quasar("promote", "later", "running", "done", "--priority", "-3", namespace=namespace)
    assert ran.code == 1
    assert ran.out.strip() == "promoted 1 job(s); 2 refused"
    assert ran.err.strip().splitlines() == [
        "running: not promoted: running",
        "done: not promoted: already finished",
    ]
    job = rq.get_job("later").job  # type: ignore[union-attr]
    assert (job.status(server_ms(rq)), job.priority) == (Status.AVAILABLE, -3)
    assert quasar("promote", "ghost", namespace=namespace).one_error() == (
        f"Error: no job 'ghost' in namespace {namespace!r}: nothing was changed"
    )


def test_purge_by_status_and_age(rq: Quasar, namespace: str) -> None:
    now = server_ms(rq)
    for i in range(3):
        finished(rq, f"old{i}", at=now - 3 * 3_600_000, queue="mail")
    finished(rq, "hour", at=now - MINUTES_AGO, queue="mail")
    finished(rq, "fresh", queue="mail")  # in the re-send window: kept whatever the age asked
    finished(rq, "oldfail", fail=True, at=now - 3 * 3_600_000, queue="mail")
    ran = quasar(
        "purge",
        "mail",
        "--status",
        "succeeded",
        "--older-than",
        "2h",
        "--json",
        namespace=namespace,
    )
    assert ran.json() == {"queue": "mail", "status": "completed", "purged": 3, "kept": 0}
    ran = quasar("purge", "mail", "--status", "completed", namespace=namespace)
    assert ran.code == 0
    assert ran.out.startswith("purged 1 completed job(s) of queue 'mail'; kept 1 ")
    assert [j.id for j in rq.page_jobs("mail", Status.COMPLETED).jobs] == ["fresh"]
    assert rq.counts("mail").discarded == 1  # another status: untouched


# --- bad input: one line, nothing changed ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["jobs", "nope"], "no queue 'nope' in namespace"),
        (["jobs", "mail", "--limit", "-1"], "-1 is not in the range 1<=x<=1000"),
        (["jobs", "mail", "--limit", "0"], "0 is not in the range 1<=x<=1000"),
        (["jobs", "mail", "--status", "lost"], "'lost' is not a status"),
        (["jobs", "mail", "--after", "junk"], "'junk' is not a cursor"),
        (["jobs", "bad queue!"], "queue must be 1-64 characters"),
        (["job", "nobody"], "no job 'nobody' in namespace"),
        (["job", "a b"], "'a b' is not a job id"),
        (["retry", "bad", "nobody"], "no job 'nobody' in namespace"),
        (["retry", "bad", "a\tb"], "is not a job id"),
        (["retry"], "give job IDs or --all-failed QUEUE"),
        (["retry", "bad", "--all-failed", "mail"], "give job IDs or --all-failed QUEUE"),
        (["retry", "--all-failed", "nope"], "no queue 'nope'"),
        (["cancel", "nobody"], "no job 'nobody'"),
        (["purge", "mail", "--status", "available"], "purge takes succeeded (completed)"),
        (["purge", "mail", "--status", "failed", "--older-than", "soon"], "'soon' is not a"),
        (["purge", "mail", "--status", "failed", "--older-than", "-5m"], "'-5m' is not a"),
        (["purge", "nope", "--status", "failed"], "no queue 'nope'"),
        (["jobs", "mail", "--namespace", "a:b"], "namespace must be 1-64 characters"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    rq: Quasar, namespace: str, args: list[str], said: str
) -> None:
    finished(rq, "bad", fail=True, queue="mail")
    before = snapshot(rq)
    line = inproc(*args, namespace=namespace).one_error()
    assert said in line
    assert snapshot(rq) == before


@pytest.mark.parametrize("command", [["jobs", "mail"], ["job", "x"], ["retry", "x"]])
def test_a_namespace_with_nothing_in_it(command: list[str]) -> None:
    line = inproc(*command, namespace="no-such-namespace-here").one_error()
    assert "namespace 'no-such-namespace-here' has no queues" in line or "no job 'x'" in line


COMMANDS = [
    ["queues"],
    ["info", "q"],
    ["jobs", "q"],
    ["job", "x"],
    ["retry", "x"],
    ["retry", "--all-failed", "q"],
    ["cancel", "x"],
    ["purge", "q", "-s", "failed"],
    ["pause", "q"],
    ["resume", "q"],
    ["workers"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_an_unreachable_server_and_a_wrong_password(
    command: list[str], locked: LockedRedis
) -> None:
    url = f"redis://:{WRONG}@127.0.0.1:{closed_port()}/0"
    line = inproc(*command, url=url).one_error()
    assert "cannot reach Redis at redis://:***@127.0.0.1:" in line and WRONG not in line
    line = inproc(*command, url=locked.url("", WRONG)).one_error()
    assert "refused the user or password" in line and WRONG not in line


@pytest.mark.parametrize("command", [["queues"], ["retry", "x"]])
def test_the_installed_quasar_says_the_same(command: list[str], locked: LockedRedis) -> None:
    url = f"redis://:{WRONG}@127.0.0.1:{closed_port()}/0"
    assert "cannot reach Redis at redis://:***@127.0.0.1:" in quasar(*command, url=url).one_error()
    line = quasar(*command, url=locked.url("", WRONG)).one_error()
    assert "refused the user or password" in line and WRONG not in line
    line = quasar(*command, namespace="no-such-namespace-here").one_error()
    assert "namespace 'no-such-namespace-here' has no queues" in line


def test_memory_and_a_missing_url_are_refused() -> None:
    ran = quasar("jobs", "mail", url="memory://")
    assert "memory:// is an embedded server of one process" in ran.one_error()
    ran = quasar("jobs", "mail", url="")
    assert "no Redis URL: give --redis-url or set QUASAR_REDIS_URL" in ran.one_error()


# --- queues, info, pause, resume, workers --------------------------------------------------


def test_queues_and_info(rq: Quasar, namespace: str) -> None:
    for i in range(3):
        applied(rq.enqueue("tasks.send", i, id=f"m{i}", queue="mail"))
    finished(rq, "bad", fail=True, queue="mail")
    applied(rq.enqueue("tasks.send", None, id="s0", queue="sms", delay_ms=3_600_000))
    rows = quasar("queues", "--json", namespace=namespace).json()
    assert [(r["name"], r["paused"], r["total"]) for r in rows] == [
        ("mail", False, 4),
        ("sms", False, 1),
    ]
    assert rows[0]["counts"]["available"] == 3 and rows[0]["counts"]["discarded"] == 1
    assert rows[1]["counts"]["scheduled"] == 1
    table = quasar("queues", namespace=namespace).out.splitlines()
    assert table[0].split() == ["queue", "state", *[s.value for s in ORDER]]
    assert table[1].split() == ["mail", "running", "0", "3", "0", "0", "0", "1", "0", "0", "0"]
    document = quasar("info", "mail", "--json", namespace=namespace).json()
    assert document["oldest_available"]["id"] == "m0"
    assert (document["paused"], document["total"], document["workers"]) == (False, 4, [])
    text = quasar("info", "mail", namespace=namespace).out
    assert "jobs: 3 available, 1 discarded (4 in all)" in text
    assert "oldest available: m0, enqueued " in text


def test_pause_and_resume_are_idempotent_and_hold(rq: Quasar, namespace: str) -> None:
    applied(rq.enqueue("tasks.send", None, id="m0", queue="mail"))
    first = quasar("pause", "mail", "--json", namespace=namespace).json()
    assert first == {"queue": "mail", "paused": True, "changed": True}
    again = quasar("pause", "mail", namespace=namespace)
    assert (again.code, again.out) == (0, "queue 'mail' was already paused: unchanged\n")
    assert rq.claim("mail", "w", 1000) == ClaimRefused(QueuePaused("mail"))
    assert quasar("queues", "--json", namespace=namespace).json()[0]["paused"] is True
    assert "PAUSED" in quasar("info", "mail", namespace=namespace).out
    ran = quasar("resume", "mail", namespace=namespace)
    assert (ran.code, ran.out) == (0, "queue 'mail' resumed\n")
    again_json = quasar("resume", "mail", "--json", namespace=namespace).json()
    assert again_json == {"queue": "mail", "paused": False, "changed": False}
    assert claimed(rq.claim("mail", "w", 1000)).job.id == "m0"


def test_a_queue_with_no_job_yet_is_paused_ahead_of_its_jobs(rq: Quasar, namespace: str) -> None:
    applied(rq.enqueue("tasks.send", None, id="m0", queue="mail"))
    ran = inproc("pause", "next", namespace=namespace)
    assert (ran.code, ran.out) == (
        0,
        f"queue 'next' of namespace '{namespace}' paused: it has no job yet; its workers lease "
        "none until it is resumed\n",
    )
    rows = inproc("queues", "--json", namespace=namespace).json()
    assert [(r["name"], r["paused"], r["total"]) for r in rows] == [
        ("mail", False, 1),
        ("next", True, 0),
    ]
    assert inproc("queues", namespace=namespace).out.splitlines()[2].split()[:3] == [
        "next",
        "paused",
        "0",
    ]
    applied(rq.enqueue("tasks.send", None, id="n0", queue="next"))
    assert rq.claim("next", "w", 1000) == ClaimRefused(QueuePaused("next"))
    assert inproc("resume", "next", namespace=namespace).out == "queue 'next' resumed\n"
    assert claimed(rq.claim("next", "w", 1000)).job.id == "n0"
    unknown = inproc("resume", "never", "--json", namespace=namespace).json()
    assert unknown == {"queue": "never", "paused": False, "changed": False}


def test_a_new_namespace_can_be_paused_ahead_of_its_first_deploy(
    rq: Quasar, namespace: str
) -> None:
    assert inproc("pause", "mail", namespace=namespace).code == 0
    rows = inproc("queues", "--json", namespace=namespace).json()
    assert [(r["name"], r["paused"], r["total"]) for r in rows] == [("mail", True, 0)]
    assert rq.claim("mail", "w", 1000) == ClaimRefused(QueuePaused("mail"))


def test_an_empty_listing_says_so_in_one_line(rq: Quasar, namespace: str) -> None:
    finished(rq, "done", queue="mail")
    rq.open_batch("empty")
    said = {
        "jobs mail --status failed": "no jobs with status 'discarded' in queue 'mail'",
        "jobs mail --status retryable": "no jobs with status 'retryable' in queue 'mail'",
        "workers": f"no workers are running in namespace '{namespace}'",
        "schedules list": f"no schedule in namespace '{namespace}'",
        "limits show mail": "groups: 0 in turn, 0 waiting, 0 at their cap",  # (no table)
        "batch empty": "no members in batch 'empty'",
    }
    for command, line in said.items():
        assert inproc(*command.split(), namespace=namespace).out.splitlines()[-1] == line, command
    empty_page = inproc("jobs", "mail", "--status", "failed", "--json", namespace=namespace).json()
    assert empty_page == {"queue": "mail", "jobs": [], "next_cursor": None}
    assert inproc("workers", "--json", namespace=namespace).json() == []
    assert inproc("batch", "empty", "--json", namespace=namespace).json()["members"] == []
    rq.redis.srem(rq.keys.queues, "mail")
    rq.redis.sadd(rq.keys.queues, "not a queue")  # (a name written by hand: left out)
    assert inproc("queues", namespace=namespace).out == f"no queues in namespace '{namespace}'\n"
    assert inproc("queues", "--json", namespace=namespace).json() == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["info", "nope"], "no queue 'nope' in namespace"),
        (["pause", "a:b"], "queue must be 1-64 characters"),
        (["resume", "a b"], "queue must be 1-64 characters"),
    ],
)
def test_fleet_commands_refuse_unknown_queues(
    rq: Quasar, namespace: str, args: list[str], said: str
) -> None:
    applied(rq.enqueue("tasks.send", None, id="m0", queue="mail"))
    before = snapshot(rq)
    assert said in inproc(*args, namespace=namespace).one_error()
    assert snapshot(rq) == before


@pytest.mark.parametrize("command", [["queues"], ["info", "mail"], ["workers"]])
def test_fleet_commands_of_an_empty_namespace(command: list[str]) -> None:
    line = inproc(*command, namespace="no-such-namespace-here").one_error()
    assert "namespace 'no-such-namespace-here' has no queues" in line


WORKER_TASKS = """
import os
from quasar_redis import App

app = App(namespace=os.environ["QUASAR_NAMESPACE"])


@app.task(queue="mail", name="send")
def send(to: str) -> str:
    return to
"""


def test_workers_lists_a_live_worker_process(rq: Quasar, namespace: str, tmp_path: Path) -> None:
    applied(rq.enqueue("send", {"a": ["x"], "k": {}}, queue="mail"))
    (tmp_path / "tasks.py").write_text(WORKER_TASKS)
    env = {**os.environ, "QUASAR_REDIS_URL": REDIS_URL, "QUASAR_NAMESPACE": namespace}
    proc = subprocess.Popen(
        [str(QUASAR), "worker", "tasks:app", "-q", "mail", "-q", "sms", "-c", "3"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def listed() -> list[Any]:
            return list(quasar("workers", "--json", namespace=namespace).json())

        (worker,) = wait_for(listed, 60, "the worker in quasar workers", 0.2)
        assert (worker["pid"], worker["queues"], worker["concurrency"]) == (
            proc.pid,
            ["mail", "sms"],
            3,
        )
        assert worker["version"] == __version__
        table = quasar("workers", namespace=namespace).out
        assert worker["id"] in table and "mail, sms" in table and "0/3" in table
        header = table.splitlines()[0].split()
        assert header[-2:] == ["processed", "failed"]  # (the dashboard's order too)
        assert worker["processed"] >= 0 and worker["failed"] == 0  # (its one job may have run)
        assert worker["id"] in quasar("info", "mail", namespace=namespace).out
    finally:
        proc.terminate()
        proc.wait(60)
    assert quasar("workers", "--json", namespace=namespace).json() == []
    said = quasar("workers", namespace=namespace).out
    assert said == f"no workers are running in namespace '{namespace}'\n"


def test_a_bulk_change_shows_progress_on_a_terminal(rq: Quasar, namespace: str) -> None:
    for i in range(30):
        finished(rq, f"f{i:02d}", fail=True, queue="mail")
    main, follower = os.openpty()  # stderr a terminal: the progress bar is drawn there
    env = {**os.environ, "QUASAR_REDIS_URL": REDIS_URL, "QUASAR_NAMESPACE": namespace}
    env.update(TERM="xterm", COLUMNS="100")
    try:
        done = subprocess.run(
            [str(QUASAR), "retry", "--all-failed", "mail"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=120,
            check=False,
        )
        os.close(follower)
        drawn = b""
        while chunk := _read(main):
            drawn += chunk
    finally:
        os.close(main)
    assert done.returncode == 0 and done.stdout == b"retried 30 job(s)\n"
    assert b"retrying mail" in drawn and b"30/30" in drawn


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # (the other end closed: Linux says EIO)
        return b""


FAILING_TASKS = """
import os
from quasar_redis import App
from quasar_redis.retry import Fixed

app = App(namespace=os.environ["QUASAR_NAMESPACE"])


@app.task(queue="mail", name="send", max_attempts=2, retry=Fixed(0))
def send(to: str) -> str:
    return lookup(to)


def lookup(to: str) -> str:
    raise KeyError(f"no mailbox for {to}")
"""


def test_job_shows_the_failure_history_with_tracebacks(
    rq: Quasar, namespace: str, tmp_path: Path
) -> None:
    applied(
        rq.enqueue(
            "send", {"a": ["ann@example.com"], "k": {}}, id="m1", queue="mail", max_attempts=2
        )
    )
    (tmp_path / "tasks.py").write_text(FAILING_TASKS)
    env = {**os.environ, "QUASAR_REDIS_URL": REDIS_URL, "QUASAR_NAMESPACE": namespace}
    burst = [str(QUASAR), "worker", "tasks:app", "-q", "mail", "--burst"]
    subprocess.run(burst, cwd=tmp_path, env=env, capture_output=True, timeout=120, check=True)
    document = quasar("job", "m1", "--json", namespace=namespace).json()
    assert document["status"] == "discarded"
    assert [(e["attempt"], e["kind"]) for e in document["errors"]] == [
        (1, "KeyError"),
        (2, "KeyError"),
    ]
    for error in document["errors"]:
        assert error["message"] == "'no mailbox for ann@example.com'"
        assert error["at"] is not None
        assert 'raise KeyError(f"no mailbox for {to}")' in error["traceback"]
        assert "in lookup" in error["traceback"]
    shown = quasar("job", "m1", namespace=namespace).out
    assert "failures (2, oldest first):" in shown
    assert "attempt 1 at " in shown and "attempt 2 at " in shown
    assert "    Traceback (most recent call last):" in shown


def test_an_id_given_twice_is_changed_once(rq: Quasar, namespace: str) -> None:
    finished(rq, "bad", fail=True)
    ran = inproc("retry", "bad", "bad", namespace=namespace)
    assert (ran.code, ran.out) == (0, "retried 1 job(s)\n")
    applied(rq.enqueue("tasks.send", None, id="live"))
    ran = inproc("cancel", "live", "live", "--json", namespace=namespace)
    assert json.loads(ran.out) == {"changed": 1, "cascaded": 0, "refused": []}


def test_job_jobs_and_queues_show_an_expired_job(rq: Quasar, namespace: str) -> None:
    at = server_ms(rq) - MINUTES_AGO
    applied(rq.enqueue("tasks.send", None, id="late", deadline=at + 100, now=at))
    assert rq.sweep_expired(now=at + 100).past_deadline == ("late",)
    document = inproc("job", "late", "--json", namespace=namespace).json()
    assert document["status"] == "expired"
    assert document["state"]["name"] == "Expired"
    assert document["deadline"] == document["state"]["deadline"] == document["completed_at"]
    shown = inproc("job", "late", namespace=namespace).out
    assert "expired" in shown and "deadline" in shown
    listed = inproc("jobs", "default", "--status", "expired", "--json", namespace=namespace)
    assert [job["id"] for job in listed.json()["jobs"]] == ["late"]
    rows = inproc("queues", "--json", namespace=namespace).json()
    assert rows[0]["counts"]["expired"] == 1
