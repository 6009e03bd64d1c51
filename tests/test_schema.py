"""The Lua states what ``_schema`` declares, and Python takes it from there.

The scripts keep their own copies where they use them (a table in a script costs nothing per
call; a lookup in a generated one would), so each copy is read out of the Lua here and compared
with the declaration: the job hash's defaults and integer fields, its blobs and states, every
field a script names, the per-item argument layouts of an enqueue and a report, what a claim's
lease writes and what a new job holds. On the Python side, the call builders send each item in
its declared order, and no function spells a job field's key but ``_schema`` and the readers of
replies named in ``READERS``. (The key words of ``_keys`` are held to the Lua by
tests/test_keys.py.)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from quasar_redis import _args, _fast, _general, _schema
from quasar_redis import _types as t
from quasar_redis._call_base import NewJob
from quasar_redis._dedup import Throttle
from quasar_redis._enqueue_calls import _job_group

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua"
PACKAGE = ROOT / "quasar_redis"
#: The functions that read a job's fields out of a reply (what the reply carries), by module.
#: The two derivations of ``_fast`` (``parse_claimed``, ``created_job``) are not among them: they
#: take every key from ``_schema``.
READERS = {
    "_fast.py": {"_state", "_job_from_fields"},
    "_general.py": {"_state", "_fields", "general_job"},
}


def lua(path: str) -> str:
    return (LUA / path).read_text()


def function(source: str, name: str) -> str:
    """The text of a Lua function, from its ``local function`` line to its closing ``end``."""
    start = source.index(f"local function {name}(")
    return source[start : source.index("\nend\n", start)]


def table(source: str, name: str) -> dict[str, str]:
    """The entries of ``local NAME = {k = v, ...}`` (values as written)."""
    body = re.search(rf"local {name} = \{{(.*?)\}}", source, re.DOTALL)
    assert body is not None, name
    return dict(re.findall(r"(\w+) = (\"[^\"]*\"|\w+)", body.group(1)))


def strings(entries: dict[str, str]) -> dict[str, bytes]:
    return {k: v.strip('"').encode() for k, v in entries.items() if v.startswith('"')}


def test_the_lua_defaults_are_the_declared_ones() -> None:
    job = lua("include/job.lua")
    assert strings(table(job, "DEFAULTS")) == _schema.DEFAULTS
    new_table = strings(dict(re.findall(r"(\w+) = (\"[^\"]*\")", function(job, "new_job_table"))))
    assert new_table == _schema.DEFAULTS
    # What enqueue leaves unstored: the same values, or a value a new job always has.
    enqueue = lua("enqueue.lua")
    unstored = re.findall(r'if h\.(\w+) ~= "([^"]*)"', function(job, "new_fields"))
    always = strings(table(function(enqueue, "write_one"), "h"))
    assert {k: v.encode() for k, v in unstored} | {
        k: always[k] for k in _schema.DEFAULTS.keys() - dict(unstored).keys()
    } == _schema.DEFAULTS
    assert _general.DEFAULTS is _schema.DEFAULTS


def test_the_lua_integer_fields_blobs_and_states_are_the_declared_ones() -> None:
    job = lua("include/job.lua")
    assert set(table(job, "NUMERIC")) == _schema.NUMERIC
    assert set(table(job, "BLOBS")) == set(_schema.BLOBS)
    assert f"local BLOB_CHUNKS = {_schema.BLOB_CHUNKS}\n" in job
    assert set(table(job, "STATE_NEEDS")) == set(_schema.STATE.values())


def test_every_job_field_a_script_names_is_declared() -> None:
    named: set[str] = set()
    for path in LUA.rglob("*.lua"):
        named |= set(re.findall(r"\bh\.([a-z]+)\b", path.read_text()))
    keys = set(_schema.KEY.values())
    assert named <= keys, named - keys
    listed = re.search(
        r"-- Job hash fields.*?:\n(.*?)\n-- Memory", lua("include/core.lua"), re.DOTALL
    )
    assert listed is not None
    assert set(re.findall(r"(?:--   |, |/ )([a-z]{1,3}) ", listed[1])) - {"not"} == keys
    layout = (ROOT / "docs" / "redis-layout.md").read_text()
    rows = layout.split("## The job hash")[1].split("\n\n")[2].splitlines()[2:]
    assert {key for row in rows for key in re.findall(r"`([a-z]+)`", row.split("|")[1])} == keys


def test_an_enqueue_item_is_read_by_the_declared_layout() -> None:
    enqueue = lua("enqueue.lua")
    read = re.findall(r"(\w+) = args\[b \+ (\d+)\]", function(enqueue, "read_group"))
    assert [name for name, _ in read] == list(_schema.ENQUEUE_ITEM)
    assert [int(i) for _, i in read] == list(range(1, len(_schema.ENQUEUE_ITEM) + 1))
    assert f"local GROUP = {len(_schema.ENQUEUE_ITEM)}\n" in enqueue
    # (a plain job's call, read into locals by name, "_" for one not read:
    # lua/include/plain_enqueue.lua; the whole group in its fast)
    plain = lua("include/plain_enqueue.lua")
    unpacked = re.findall(r"local (id, [\w,\s]+?) =\s+unpack\(args, 8, (\d+)\)", plain)
    assert len(unpacked) == 2
    for names, last in unpacked:
        read = re.split(r",\s*", names)
        assert len(read) == int(last) - 7
        declared = list(_schema.ENQUEUE_ITEM)[: len(read)]
        assert [n for n, d in zip(read, declared, strict=True) if n not in (d, "_")] == []
    whole = 7 + len(_schema.ENQUEUE_ITEM)
    assert f"unpack(args, 8, {whole})" in function(plain, "fast")
    assert f"#args ~= {whole} " in function(plain, "fast")


def test_a_report_item_is_read_by_the_declared_layout() -> None:
    report = lua("report_many.lua")
    item = function(report, "report_item")
    token = re.search(r"local t = \{(.*?)\}", item)
    assert token is not None
    token_at = map(int, re.findall(r"\d+", token[1]))
    positions = dict(zip(_schema.TOKEN, token_at, strict=True))
    rest = re.search(r"local (call, [\w, ]+) = (args\[o \+ 1\].*)\n", item)
    assert rest is not None
    rest_at = map(int, re.findall(r"args\[o \+ (\d+)\]", rest[2]))
    positions |= dict(zip(rest[1].split(", "), rest_at, strict=True))
    assert positions == {name: i + 1 for i, name in enumerate(_schema.REPORT_ITEM)}
    assert f"local REPORT_GROUP = {len(_schema.REPORT_ITEM)}\n" in report
    # The token's order is a lease holder's own call's too.
    assert "{args[3], args[4], args[5], args[6], args[7], args[8]}" in lua("include/lease.lua")


def test_a_claim_writes_the_declared_lease_and_an_enqueue_the_declared_new_job() -> None:
    lease = re.search(
        r"move\(ctx, id, h, grant\.now, \{(.*?)\}", lua("include/lease.lua"), re.DOTALL
    )
    assert lease is not None
    # (and pd "0" for a job found blocked whose dependencies all succeeded: never one in a reply)
    assert set(re.findall(r"(\w+) = ", lease[1])) - {"pd"} == set(_schema.LEASE_WRITES)
    assert re.search(r'\bst = "L"', lease[1]) and _schema.STATE["leased"] == "L"
    new_job = strings(table(function(lua("enqueue.lua"), "write_one"), "h"))
    key = _schema.KEY
    assert new_job[key["attempt"]] == _schema.DEFAULTS[key["attempt"]]
    assert new_job[key["fencing_version"]] == _schema.DEFAULTS[key["fencing_version"]]
    assert new_job[key["state"]] == _schema.STATE["waiting"].encode()


def test_the_call_builders_send_each_item_in_the_declared_order() -> None:
    job = NewJob(
        "stage-1",
        7,
        "job-1",
        "queue-1",
        "ref-1",
        2,
        ("dep-1",),
        5,
        4,
        None,
        9,
        "cancel",
        dedup=Throttle("key-1", 5),
        group="group-1",
    )
    group = _job_group(job)
    assert not isinstance(group, t.InvalidJob)
    assert dict(zip(_schema.ENQUEUE_ITEM, group, strict=True)) == {
        "id": "job-1",
        "queue": "queue-1",
        "stage": "stage-1",
        "payload": b"\x07",
        "input_ref": "ref-1",
        "input_revision": "2",
        "dependencies": "dep-1",
        "priority": "5",
        "max_attempts": "4",
        "available_at": "",
        "delay": "9",
        "odf": "cancel",
        "made": "",
        "deadline": "",
        "expires_in": "",
        "dedup": "throttle 5 key-1",
        "group": "group-1",
        "batch": "",
    }
    token = t.LeaseToken("j", 1, "w", 2, 3, "n")
    sent = dict(zip(_schema.TOKEN, ("j", "1", "w", "2", "3", "n"), strict=True))
    outcomes: dict[t.Outcome, tuple[str | bytes, ...]] = {
        t.Complete(token, None, "out"): ("complete", "out", b"", "", ""),
        t.Complete(token, 5, "out", 60): ("complete", "out", b"\x05", "60", ""),
        t.Fail(token, "r", 7, "K", "tb"): ("fail", "r", "7", "K", "tb"),
        t.PermanentFail(token, "r", "K", "tb"): ("permanent_fail", "r", "", "K", "tb"),
        t.Release(token, 9): ("release", "9", "", "", ""),
        t.Release(token, 9, 4): ("release", "9", "4", "", ""),
    }
    for outcome, (call, a, b, k, d) in outcomes.items():
        item = _args.outcome_group(outcome)
        assert not isinstance(item, t.JobRefused)
        want = {"call": call, **sent, "a": a, "b": b, "k": k, "d": d}
        assert dict(zip(_schema.REPORT_ITEM, item, strict=True)) == want


def spelled(tree: ast.AST, keys: set[str] | None = None) -> list[tuple[int, str]]:
    """Where code spells a job field's key (any text when ``keys`` is None) as a bytes value, or
    as a text value it looks up (``x["st"]``, ``x.get("st")``, ``"st" in x``; a key of one letter
    only as bytes: ``payload.get("a")`` is a task call's arguments)."""
    found = []
    for node in ast.walk(tree):
        looked_up: list[ast.expr] = []
        if isinstance(node, ast.Subscript):
            looked_up.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            looked_up.extend(node.args[:1] if node.func.attr in ("get", "pop") else ())
        elif isinstance(node, ast.Compare):
            looked_up.append(node.left)
        elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            looked_up.append(node)
        for value in looked_up:
            if isinstance(value, ast.Constant) and isinstance(value.value, str | bytes):
                text = value.value.decode() if isinstance(value.value, bytes) else value.value
                if keys is None or (text in keys and (len(text) > 1 or value is node)):
                    found.append((value.lineno, text))
    return found


def readers_of(module: ast.Module, name: str) -> list[ast.FunctionDef]:
    names = READERS.get(name, set())
    return [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name in names]


def test_only_the_schema_and_the_named_readers_spell_a_job_field() -> None:
    keys = set(_schema.KEY.values())
    keys |= {f"{blob}{i}" for blob in _schema.BLOBS for i in range(2, _schema.BLOB_CHUNKS + 1)}
    found: dict[str, list[tuple[int, str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_schema.py" or {"cli", "dashboard"} & set(path.parts):
            continue  # (the CLI and the dashboard read _views, never a reply)
        module = ast.parse(path.read_text())
        for reader in readers_of(module, path.name):
            reader.body = []  # a reader's own spelling is what it reads of a reply
        if where := spelled(module, keys):
            found[str(path.relative_to(ROOT))] = where
    assert found == {}
    # The readers look up declared keys only (and read as the general reading does:
    # tests/test_parse_fast.py).
    values = {*_schema.STATE.values(), "", "cancel", "block"}
    for name in READERS:
        for reader in readers_of(ast.parse((PACKAGE / name).read_text()), name):
            assert {text for _, text in spelled(reader)} - values <= keys, reader.name


def test_the_derivations_take_the_lease_from_the_schema() -> None:
    assert tuple(key.encode() for key in _schema.LEASE_WRITES) == _fast.LEASE_KEYS_B


def test_the_schedule_fields_are_those_the_lua_reads_in_order() -> None:
    text = (LUA / "include" / "schedule.lua").read_text()
    found = re.search(r"local SCHEDULE_FIELDS = \{([^}]*)\}", text)
    assert found is not None
    assert re.findall(r'"(\w+)"', found.group(1)) == list(_schema.SCHEDULE_FIELDS)
