"""``quasar limits show`` and ``quasar limits set`` (docs/operations.md), and the group of a job
in ``quasar job`` and ``quasar jobs``, against real Redis: what they print, their ``--json``,
and every refusal one line that changes nothing."""

from __future__ import annotations

import pytest

from quasar_redis import UNLIMITED, ClaimRefused, NewJob, Quasar, Rate

from .helpers import snapshot
from .locked_redis import closed_port
from .test_cli_ops import inproc, rq

__all__ = ["rq"]  # (the fixture)

HOUR_MS = 3_600_000


def grouped(q: Quasar) -> None:
    """Two jobs of each of the groups a and b of queue mail, and one without a group."""
    jobs = [
        NewJob("mail.send", i, id=f"{g}{i}", queue="mail", group=g) for g in "ab" for i in (0, 1)
    ]
    q.enqueue_many([*jobs, NewJob("mail.send", 9, id="u0", queue="mail")])


def held(q: Quasar) -> None:
    """Group a at its cap (1 each), group b waiting on its own rate (1 an hour, no cap)."""
    q.set_limits("mail", group_concurrency=1)
    q.set_group_limits("mail", "b", rate="1/h", concurrency=UNLIMITED)
    leased = {q.claim("mail", "w-1", 60_000).claim.job.id for _ in range(3)}  # type: ignore[union-attr]
    assert leased == {"u0", "a0", "b0"}
    assert isinstance(q.claim("mail", "w-1", 60_000), ClaimRefused)


def test_set_then_show_a_queue_and_its_groups(rq: Quasar, namespace: str) -> None:
    grouped(rq)
    ran = inproc(
        "limits", "set", "mail", "--rate", "10/s+2", "--concurrency", "3", namespace=namespace
    )
    assert ran.code == 0, ran.err
    assert "queue 'mail': rate 10/s+2, concurrency 3" in ran.out
    info = rq.flow("mail")
    assert (info.rate, info.concurrency) == (Rate(10, 1, 2), 3)
    assert (info.group_rate, info.group_concurrency) == (None, None)
    args = ["limits", "set", "mail", "--group-rate", "5/min", "--group-concurrency", "2", "--json"]
    document = inproc(*args, namespace=namespace).json()
    assert document["rate"] == "10/s+2" and document["concurrency"] == 3  # (kept)
    assert document["group_rate"] == "5/min" and document["group_concurrency"] == 2
    ran = inproc(
        "limits",
        "set",
        "mail",
        "-g",
        "a",
        "--rate",
        "1/h",
        "--concurrency",
        "unlimited",
        namespace=namespace,
    )
    assert ran.code == 0, ran.err
    assert "group 'a' of queue 'mail': rate 1/h, concurrency unlimited" in ran.out
    own = rq.flow("mail", group="a").groups[0]
    assert (own.rate, own.concurrency) == (Rate(1, 3600), UNLIMITED)

    shown = inproc("limits", "show", "mail", "--json", namespace=namespace).json()
    assert shown["queue"] == "mail" and shown["leased"] == 0 and shown["ready_ungrouped"] == 1
    assert shown["held_back_by"] == [] and shown["next_at"] is None
    assert (shown["groups_in_turn"], shown["groups_waiting"], shown["groups_full"]) == (2, 0, 0)
    groups = {g["name"]: g for g in shown["groups"]}
    assert groups["a"] == {
        "name": "a",
        "state": "turn",
        "ready": 2,
        "leased": 0,
        "until": None,
        "rate": "1/h",
        "concurrency": "unlimited",
    }
    assert (groups["b"]["rate"], groups["b"]["concurrency"]) == (None, None)  # the default
    text = inproc("limits", "show", "mail", namespace=namespace)
    assert text.code == 0, text.err
    for line in (
        "rate: 10/s+2",
        "concurrency: 3 (0 leased now)",
        "each group: rate 5/min, concurrency 2",
        "held back by: nothing",
        "groups: 2 in turn, 0 waiting, 0 at their cap",
    ):
        assert line in text.out
    row = next(line for line in text.out.splitlines() if line.split()[:1] == ["a"])
    assert row.split() == ["a", "in", "turn", "2", "0", "-", "1/h", "unlimited"]


def test_show_what_holds_the_queue_and_its_groups_back(rq: Quasar, namespace: str) -> None:
    grouped(rq)
    held(rq)
    shown = inproc("limits", "show", "mail", "--json", namespace=namespace).json()
    assert shown["leased"] == 3
    assert (shown["groups_in_turn"], shown["groups_waiting"], shown["groups_full"]) == (0, 1, 1)
    assert shown["held_back_by"] == [
        "every group with ready jobs waits on its rate or is at its cap"
    ]
    groups = {g["name"]: g for g in shown["groups"]}
    assert (groups["a"]["state"], groups["a"]["ready"], groups["a"]["leased"]) == ("full", 1, 1)
    assert (groups["b"]["state"], groups["b"]["ready"], groups["b"]["leased"]) == ("wait", 1, 1)
    assert groups["b"]["until"] is not None and groups["a"]["until"] is None
    one = inproc("limits", "show", "mail", "--group", "b", "--json", namespace=namespace).json()
    assert [g["name"] for g in one["groups"]] == ["b"] and one["groups"][0]["state"] == "wait"
    text = inproc("limits", "show", "mail", namespace=namespace).out
    row = next(line for line in text.splitlines() if line.split()[:1] == ["b"])
    assert row.split()[:5] == ["b", "waiting", "1", "1", "in"]  # until: in about an hour
    row = next(line for line in text.splitlines() if line.split()[:1] == ["a"])
    assert row.split()[:6] == ["a", "at", "its", "cap", "1", "1"]
    listed = inproc("limits", "show", "mail", "--groups", "0", "--json", namespace=namespace)
    assert listed.json()["groups"] == []


def test_a_queue_held_by_its_cap_and_its_rate(rq: Quasar, namespace: str) -> None:
    grouped(rq)
    rq.set_limits("mail", rate=Rate(1, 3600, 1), concurrency=2)
    for _ in range(2):
        assert rq.claim("mail", "w-1", 60_000).claim is not None  # type: ignore[union-attr]
    shown = inproc("limits", "show", "mail", "--json", namespace=namespace).json()
    assert shown["next_at"] is not None
    words = shown["held_back_by"]
    assert words[0] == "its concurrency cap (2/2 leased)"
    assert words[1].startswith("its rate (the next job starts in ")


def test_none_clears_a_limit_and_a_group_goes_back_to_the_default(
    rq: Quasar, namespace: str
) -> None:
    grouped(rq)
    rq.set_limits("mail", rate="5/s", concurrency=4, group_concurrency=2)
    rq.set_group_limits("mail", "a", rate="1/s", concurrency=UNLIMITED)
    assert (
        inproc(
            "limits",
            "set",
            "mail",
            "--rate",
            "none",
            "--group-concurrency",
            "-",
            namespace=namespace,
        ).code
        == 0
    )
    info = rq.flow("mail")
    assert (info.rate, info.concurrency, info.group_concurrency) == (None, 4, None)
    ran = inproc("limits", "set", "mail", "-g", "a", "--concurrency", "none", namespace=namespace)
    assert ran.code == 0 and "rate 1/s, concurrency default" in ran.out
    own = rq.flow("mail", group="a").groups[0]
    assert (own.rate, own.concurrency) == (Rate(1), None)


def test_declare_sets_the_limits_of_a_queue_not_used_yet(rq: Quasar, namespace: str) -> None:
    grouped(rq)
    line = inproc("limits", "set", "later", "--rate", "1/s", namespace=namespace).one_error()
    assert "no queue 'later'" in line
    args = ["limits", "set", "later", "--rate", "1/s", "--declare", "--json"]
    assert inproc(*args, namespace=namespace).json()["rate"] == "1/s"
    assert rq.flow("later").rate == Rate(1)


@pytest.mark.parametrize(
    ("args", "said", "code"),
    [
        (["limits", "set", "mail"], "give a limit to set: --rate", 2),
        (["limits", "set", "mail", "--rate", "fast"], "a rate is '<limit>/<window>[+<burst>]'", 2),
        (["limits", "set", "mail", "--rate", "0/s"], "a rate's limit must be a whole number", 2),
        (["limits", "set", "mail", "--rate", "5/8d"], "a rate's window must be 1 ms to 7 days", 2),
        (["limits", "set", "mail", "--concurrency", "0"], "'0' is not a cap", 2),
        (["limits", "set", "mail", "--concurrency", "two"], "'two' is not a cap", 2),
        (["limits", "set", "mail", "--group-concurrency", "1000001"], "is not a cap", 2),
        (["limits", "set", "mail", "--rate", "unlimited"], "'unlimited' is a group's own", 2),
        (["limits", "set", "mail", "-g", "a", "--group-rate", "1/s"], "--group-rate is the", 2),
        (["limits", "set", "mail", "-g", "a b", "--rate", "1/s"], "'a b' is not a group", 2),
        (["limits", "set", "nope", "--rate", "1/s"], "no queue 'nope' in namespace", 1),
        (["limits", "set", "bad queue!", "--rate", "1/s"], "queue must be 1-64 characters", 2),
        (["limits", "show", "nope"], "no queue 'nope' in namespace", 1),
        (["limits", "show", "mail", "--groups", "1001"], "1001 is not in the range", 2),
        (["limits", "show", "mail", "-g", ""], "'' is not a group", 2),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    rq: Quasar, namespace: str, args: list[str], said: str, code: int
) -> None:
    grouped(rq)
    rq.set_limits("mail", rate="5/s", group_concurrency=2)
    before = snapshot(rq)
    ran = inproc(*args, namespace=namespace)
    assert said in ran.one_error()
    assert ran.code == code
    assert snapshot(rq) == before


@pytest.mark.parametrize(
    "command", [["limits", "show", "q"], ["limits", "set", "q", "--rate", "1/s"]]
)
def test_an_unreachable_server_is_one_line(command: list[str]) -> None:
    line = inproc(*command, url=f"redis://127.0.0.1:{closed_port()}/0").one_error()
    assert "cannot reach Redis at redis://127.0.0.1:" in line


def test_job_and_jobs_show_the_group(rq: Quasar, namespace: str) -> None:
    grouped(rq)
    assert inproc("job", "a1", "--json", namespace=namespace).json()["group"] == "a"
    assert inproc("job", "u0", "--json", namespace=namespace).json()["group"] is None
    shown = inproc("job", "a1", namespace=namespace).out.splitlines()
    assert ["group", "a"] in [line.split() for line in shown]
    assert not any(
        line.split()[:1] == ["group"]
        for line in inproc("job", "u0", namespace=namespace).out.splitlines()
    )
    page = inproc("jobs", "mail", "--json", namespace=namespace).json()
    assert {j["id"]: j["group"] for j in page["jobs"]} == {
        "a0": "a",
        "a1": "a",
        "b0": "b",
        "b1": "b",
        "u0": None,
    }
    table = inproc("jobs", "mail", namespace=namespace).out.splitlines()
    assert table[0].split()[:7] == [
        "id",
        "status",
        "task",
        "attempt",
        "priority",
        "group",
        "enqueued",
    ]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["b1"][5] == "b" and rows["u0"][5] == "-"
