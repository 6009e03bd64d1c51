"""The Lua scripts: found, assembled (``_lib.lua`` prepended) and hashed once per process.

In a wheel the scripts live in ``quasar_redis/lua/``; in a source checkout (editable install) in
the top-level ``lua/`` folder. Each script is a value whose SHA1 is computed once; clients call
EVALSHA and load the script on NOSCRIPT (restart, failover, SCRIPT FLUSH), then call again.
"""

from __future__ import annotations

import hashlib
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


@cache
def scripts() -> dict[str, Script]:
    """Every script by name, assembled and hashed (once per process)."""
    folder = lua_dir()
    lib = (folder / "_lib.lua").read_text(encoding="utf-8")
    out = {}
    for name in NAMES:
        body = (folder / f"{name}.lua").read_text(encoding="utf-8")
        source = f"{lib}\n-- ===== {name}.lua =====\n{body}"
        out[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest())
    return out
