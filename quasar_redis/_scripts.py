"""The Lua scripts: found, assembled (``_lib.lua`` prepended) and hashed once per process.

In a wheel the scripts are the package resource ``quasar_redis/lua/`` (read through
``importlib.resources``); in a source checkout (editable install) they are the top-level ``lua/``
folder. The same sources are served two ways:

- as one Redis Functions library (Redis 7+, Valkey): ``_lib.lua`` and every script, loaded once
  with ``FUNCTION LOAD`` and called with ``FCALL``. Redis runs a library's definitions once, at
  load, so a call pays only for its own work;
- as one script per operation (Redis 6.2, and where functions are refused): EVALSHA, loaded on
  NOSCRIPT (restart, failover, SCRIPT FLUSH), then called again.

Every script ends with ``return run_call(KEYS, ARGV, main)``: in a script that is the call; in
the library it becomes the registration of ``main`` as the function ``quasar_<version>_<name>``,
``<version>`` being a hash of the sources, so that clients of different versions sharing one
server each find their own functions.

Only the parts of ``_lib.lua`` a script uses are prepended to it: Redis runs a script's whole
chunk on every call, and each ``local function`` and table it defines costs time on every call
(about 12 us for the whole library), so a script carries the definitions it reaches and no more.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigurationError

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

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
    "report_claim",
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
    function: str = ""  # its name in the function library


@dataclass(frozen=True, slots=True)
class Library:
    name: str
    source: str = field(repr=False)


ENDING = "return run_call(KEYS, ARGV, main)"


def lua_dir() -> Traversable:
    """The folder holding the ``.lua`` files: the package's ``lua`` resource (a wheel), else the
    top-level ``lua/`` of the source checkout this module runs from (an editable install)."""
    packaged = resources.files(__package__) / "lua"
    checkout = Path(__file__).resolve().parent.parent / "lua"
    for candidate in (packaged, checkout):
        if (candidate / "_lib.lua").is_file():
            return candidate
    raise ConfigurationError(f"the Lua scripts are missing (looked in {packaged} and {checkout})")


_DEFINES = re.compile(r"^local\s+(?:function\s+(\w+)|([\w ,]+?)\s*(?:=|$))", re.MULTILINE)
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


def _sources() -> tuple[str, dict[str, str]]:
    folder = lua_dir()
    lib = (folder / "_lib.lua").read_text(encoding="utf-8")
    bodies = {name: (folder / f"{name}.lua").read_text(encoding="utf-8") for name in NAMES}
    for name, body in bodies.items():
        if body.rstrip().splitlines()[-1] != ENDING:
            raise ConfigurationError(f"{name}.lua must end with {ENDING!r}")
    return lib, bodies


@cache
def library() -> Library:
    """The function library: ``_lib.lua`` once, then each script in a block of its own."""
    lib, bodies = _sources()
    version = hashlib.sha1((lib + "".join(bodies.values())).encode()).hexdigest()[:12]
    name = f"quasar_{version}"
    parts = [
        f"#!lua name={name}\n",
        lib,
        "\nlocal function register(name, main)\n"
        "  redis.register_function(name, function(keys, args)\n"
        "    return run_call(keys, args, main)\n"
        "  end)\n"
        "end\n",
    ]
    for script, body in bodies.items():
        block = body.rstrip()[: -len(ENDING)] + f'register("{name}_{script}", main)\n'
        parts.append(f"\n-- ===== {script}.lua =====\ndo\n{block}end\n")
    return Library(name, "".join(parts))


@cache
def scripts() -> dict[str, Script]:
    """Every script by name, assembled and hashed (once per process)."""
    lib, bodies = _sources()
    prefix = library().name
    out = {}
    for name, body in bodies.items():
        source = assemble(lib, f"\n-- ===== {name}.lua =====\n{body}")
        sha = hashlib.sha1(source.encode()).hexdigest()
        out[name] = Script(name, source, sha, f"{prefix}_{name}")
    return out
