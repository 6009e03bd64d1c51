"""Job ids: one rule in Python and in the scripts, applied wherever an id is taken."""

from __future__ import annotations

import itertools
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar_redis import (
    App,
    ClaimRefused,
    DuplicateJob,
    InvalidArgument,
    InvalidJob,
    InvalidTaskCall,
    JobRefused,
    Quasar,
)
from quasar_redis._calls import Call, new_call_id
from quasar_redis._general import text
from quasar_redis._ids import ID_MAX_BYTES, REFUSED, id_error, refused_char
from quasar_redis._scripts import scripts

from .helpers import T0, applied, claimed, snapshot

LIB = Path(__file__).resolve().parent.parent / "lua" / "include" / "checks.lua"
CATEGORIES = {"Zs", "Zl", "Zp", "Cc", "Cf"}
#: Ids that must be refused: a non-breaking space, the line separator, a bidi override, a
#: zero-width space, a soft hyphen, a C1 control, a lone surrogate, and the ASCII cases.
BAD_IDS = ["a\u00a0b", "a\u2028b", "a\u202eb", "a\u200bb", "a\u00adb", "a\u0085b", "a\udc80b"]
BAD_IDS += ["a b", "a\tb", "a\x00b", "", "x" * (ID_MAX_BYTES + 1)]


def lua_table() -> list[tuple[int, int]]:
    source = LIB.read_text()
    body = re.search(r"local ID_REFUSED = \{(.*?)\}", source, re.S)
    assert body is not None
    numbers = [int(n, 16) for n in re.findall(r"0x([0-9A-Fa-f]+)", body.group(1))]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def test_python_and_lua_hold_the_same_table() -> None:
    assert lua_table() == list(REFUSED)
    assert all(low <= high for low, high in REFUSED)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(REFUSED))


def test_the_table_is_unicodes_whitespace_control_and_format_characters() -> None:
    """Every code point this Python's Unicode puts in those categories is refused, and every
    refused code point is in them (or not yet assigned in an older Unicode)."""
    for cp in range(0x110000):
        category = unicodedata.category(chr(cp))
        if category in CATEGORIES:
            assert refused_char(cp), hex(cp)
        elif refused_char(cp):
            assert category == "Cn", (hex(cp), category)


def lua_verdict(q: Quasar, raw: bytes) -> str:
    """The script's answer to an id sent as is, past every check of Python's: "ok" for an id it
    takes (no such job here), else the refusal's reason."""
    call: Call[Any] = Call(scripts()["get_job"], (new_call_id(), "", raw), lambda reply: reply)
    reply = q.execute(call)
    tag = text(reply[0])
    if tag == "MissingJob":
        return "ok"
    assert tag == "InvalidJob", reply
    return text(reply[1])


#: Text from all of Unicode, surrogates included, with the edge cases drawn often.
EDGES = st.sampled_from(["\u00a0", "\u2028", "\u202e", "\u200b", "\ufeff", "\ud800", " ", "\x7f"])
ANY_CHAR = st.characters(exclude_categories=())
IDS = st.text(st.one_of(ANY_CHAR, EDGES, st.characters(max_codepoint=0x7F)), max_size=40)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=st.one_of(IDS, st.binary(max_size=40)))
def test_python_and_the_scripts_agree_on_every_id(q: Quasar, value: str | bytes) -> None:
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    python = id_error(value, "job_id")
    lua = lua_verdict(q, raw)
    assert (python is None) == (lua == "ok"), (value, python, lua)
    if python is not None:
        assert lua == python  # worded alike
        with pytest.raises(InvalidArgument):
            q.get_job(value)  # type: ignore[arg-type]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=IDS)
def test_an_id_taken_can_be_named_as_a_dependency_and_comes_back(q: Quasar, value: str) -> None:
    before = snapshot(q)
    first = q.enqueue("s", id=value, now=T0)
    if id_error(value) is not None:
        assert isinstance(first, JobRefused) and isinstance(first.error, InvalidJob)
        assert snapshot(q) == before
        return
    if isinstance(first, JobRefused):  # drawn before in this namespace: the id is taken
        assert isinstance(first.error, DuplicateJob), first
    else:
        assert applied(first).id == value
    second = applied(q.enqueue("s", dependencies=[value], now=T0))
    assert second.dependencies == (value,)
    info = q.get_job(second.id, now=T0)
    assert info is not None and info.waiting_on == value
    found = q.get_job(value, now=T0)
    assert found is not None and found.job.id == value


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_id_is_refused_everywhere_and_changes_nothing(q: Quasar, bad: str) -> None:
    good = applied(q.enqueue("s", id="good", now=T0))
    before = snapshot(q)

    def refused(result: Any) -> str:
        assert isinstance(result, JobRefused | ClaimRefused), result
        assert isinstance(result.error, InvalidJob), result
        return result.error.reason

    assert refused(q.enqueue("s", id=bad, now=T0)).startswith("id ")
    assert refused(q.enqueue("s", dependencies=[bad], now=T0)).startswith("dependency ")
    assert refused(q.claim_job(bad, "w", 1000, now=T0)).startswith("job_id ")
    assert refused(q.cancel(bad, now=T0)).startswith("job_id ")
    assert refused(q.retry(bad, now=T0)).startswith("job_id ")
    assert refused(q.expire(bad, 0, now=T0)).startswith("job_id ")
    with pytest.raises(InvalidArgument, match="job_id"):
        q.get_job(bad, now=T0)
    assert snapshot(q) == before
    assert claimed(q.claim_job(good.id, "w", 1000, now=T0)).job.id == "good"


@pytest.mark.parametrize("script", ["claim_job", "cancel", "retry", "expire", "get_job"])
@pytest.mark.parametrize("bad", [b"a\xc2\xa0b", b"a\xe2\x80\xaeb", b"a\xed\xb2\x80b", b"\xff"])
def test_the_scripts_refuse_a_bad_id_sent_past_python(q: Quasar, script: str, bad: bytes) -> None:
    """A client that skips Python's check (another language, an old version) gets the same
    refusal from the script itself, before anything is read or written."""
    before = snapshot(q)
    rest: dict[str, tuple[str, ...]] = {"claim_job": ("w", "1000"), "expire": ("0",), "get_job": ()}
    rest |= {"cancel": ("", "r"), "retry": ("", "r")}
    args: tuple[str | bytes, ...] = (new_call_id(), str(T0), bad, *rest[script])
    reply = q.execute(Call(scripts()[script], args, lambda r: r))
    assert text(reply[0]) == "InvalidJob" and text(reply[1]).startswith("job_id must"), reply
    assert snapshot(q) == before


def test_bytes_ids_are_utf8_text_or_refused(q: Quasar) -> None:
    job = applied(q.enqueue("s", id="caf\u00e9".encode(), now=T0))  # type: ignore[arg-type]
    assert job.id == "caf\u00e9"
    found = q.get_job(b"caf\xc3\xa9", now=T0)  # type: ignore[arg-type]
    assert found is not None and found.job.id == "caf\u00e9"
    before = snapshot(q)
    result = q.enqueue("s", id=b"caf\xe9", now=T0)  # type: ignore[arg-type]  # Latin-1
    assert isinstance(result, JobRefused) and isinstance(result.error, InvalidJob)
    assert result.error.reason == "id must be UTF-8 text"
    assert snapshot(q) == before


def test_ids_beyond_ascii_that_the_rule_takes(q: Quasar) -> None:
    for value in ["caf\u00e9", "\u65e5\u672c", "emoji-\U0001f600", "\u05d0\u05d1"]:
        assert applied(q.enqueue("s", id=value, now=T0)).id == value
        child = applied(q.enqueue("s", dependencies=[value], now=T0))
        assert child.dependencies == (value,)


def test_a_page_cursor_that_no_page_returned_is_refused(q: Quasar) -> None:
    with pytest.raises(InvalidArgument, match="cursor"):
        q.page_jobs("default", "available", after="\udc80")
    with pytest.raises(InvalidArgument, match="cursor"):
        q.page_jobs("default", "available", after="caf\u00e9")


def test_the_task_api_refuses_a_bad_id_before_sending(backend: str, namespace: str) -> None:
    from .helpers import app_url

    with app_url(backend, namespace) as url, App(url, namespace=namespace) as app:

        @app.task(name="t")
        def task() -> None:
            return None

        for bad in ["a\u00a0b", "a\udc80b"]:
            with pytest.raises(InvalidTaskCall, match="id must"):
                task.options(id=bad).enqueue()
            with pytest.raises(InvalidArgument, match="dependency must"):
                task.options(depends_on=[bad]).enqueue()
        assert app.client.counts("default").available == 0
