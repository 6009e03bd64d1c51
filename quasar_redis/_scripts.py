"""The Lua scripts: found, assembled (``_lib.lua`` prepended) and hashed once per process.

In a wheel the scripts live in ``quasar_redis/lua/``; in a source checkout (editable install) in
the top-level ``lua/`` folder. Each script is a value whose SHA1 is computed once; clients call
EVALSHA and load the script on NOSCRIPT (restart, failover, SCRIPT FLUSH), then call again.

Only the parts of ``_lib.lua`` a script uses are prepended to it: Redis runs a script's whole
chunk on every call, and each ``local function`` and table it defines costs time on every call
(about 12 us for the whole library), so a script carries the definitions it reaches and no more.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from .errors import ConfigurationError

NAMES = (
    "enqueue",
    "claim",
    "claim_job",
    "complete",
    "fail",
    "permanent_fail",
    "heartbeat",
    "release",
    "report",
    "expire",
    "sweep",
    "promote",
    "cancel",
    "retry",
    "prune",
    "get",
    "counts",
    "list",
)


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str = field(repr=False)
    sha: str


def lua_dir() -> Path:
    """The folder holding the ``.lua`` files, in a wheel or in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "lua", here.parent / "lua"):
        if (candidate / "_lib.lua").is_file():
            return candidate
    raise ConfigurationError(f"the Lua scripts are missing (looked in {here / 'lua'})")


_DEFINES = re.compile(r"^local\s+(?:function\s+(\w+)|([\w\s,]+?)\s*=)", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z_]\w*")


def _blocks(lib: str) -> list[tuple[set[str], str]]:
    """The library cut at each top-level ``local`` (with the comments just above it)."""
    lines = lib.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("local ")]
    blocks: list[tuple[set[str], str]] = []
    begin = 0
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        while end > start + 1 and lines[end - 1].startswith("--"):
            end -= 1  # the comment above the next definition belongs to it
        text = "".join(lines[begin:end])
        match = _DEFINES.search("".join(lines[start:end]))
        names = set()
        if match:
            names = {match.group(1)} if match.group(1) else set(re.findall(r"\w+", match.group(2)))
        blocks.append((names, text))
        begin = end
    return blocks


def assemble(lib: str, body: str) -> str:
    """``body`` after the definitions of ``lib`` it reaches, in the library's order."""
    blocks = _blocks(lib)
    defined = {name: i for i, (names, _) in enumerate(blocks) for name in names}
    wanted: set[int] = set()
    todo = [w for w in _WORD.findall(body) if w in defined]
    while todo:
        i = defined[todo.pop()]
        if i not in wanted:
            wanted.add(i)
            todo.extend(w for w in _WORD.findall(blocks[i][1]) if w in defined)
    return "".join(text for i, (_, text) in enumerate(blocks) if i in wanted) + body


@cache
def scripts() -> dict[str, Script]:
    """Every script by name, assembled and hashed (once per process)."""
    folder = lua_dir()
    lib = (folder / "_lib.lua").read_text(encoding="utf-8")
    out = {}
    for name in NAMES:
        body = (folder / f"{name}.lua").read_text(encoding="utf-8")
        source = assemble(lib, f"\n-- ===== {name}.lua =====\n{body}")
        out[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest())
    return out
