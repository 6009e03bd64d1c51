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

Each script carries the Redis commands it may run (``commands``, read from its source), which
``run_call`` checks against the caller's ACL before anything is written (Redis 7+).

Only the parts of ``_lib.lua`` a script uses are prepended to it: Redis runs a script's whole
chunk on every call, and each ``local function`` and table it defines costs time on every call
(about 12 us for the whole library), so a script carries the definitions it reaches and no more.

A script may also use a top-level definition of another script, by name: an edge that two
scripts apply lives in the script it is named after (report.lua applies complete.lua's
``complete_job``). The script using it gets it prepended like the library's parts; the function
library defines it once, after ``_lib.lua``, and leaves it out of its own script's block.
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
    "cascade",
    "retry",
    "prune",
    "purge",
    "get",
    "counts",
    "list",
    "pause",
    "resume",
    "queues",
    "announce",
    "retire",
    "workers",
)

#: Flags of the functions (Redis 7 reads them at FUNCTION LOAD; a script without flags runs under
#: Redis's older rules). ``no-writes``: the call only reads, so it runs on a full Redis (and a
#: replica). ``allow-oom``: the call runs on a full Redis: prune and purge delete, and cancel
#: rewrites a job in place (plus a call record and an event) so that an operator can drain a
#: full queue, and cascade carries on what a cancel left; heartbeat rewrites a lease's expiry in
#: place (plus a call record), so that a full Redis does not take the leases of running jobs or
#: of finished ones whose outcome waits for room; pause and resume add or remove one set
#: member (an operator stops or restarts a queue in an incident); retire and workers only
#: delete. The rest is refused whole, before it writes anything. Scripts (EVALSHA) carry no
#: flags: a
#: ``#!lua`` line would break them on Redis 6.2 and fakeredis; there Redis refuses only a
#: script's first write, so reads and prune run on a full Redis too.
FLAGS = {
    "get": "no-writes",
    "counts": "no-writes",
    "list": "no-writes",
    "prune": "allow-oom",
    "purge": "allow-oom",
    "cancel": "allow-oom",
    "heartbeat": "allow-oom",
    "cascade": "allow-oom",
    "queues": "no-writes",
    "pause": "allow-oom",
    "resume": "allow-oom",
    "retire": "allow-oom",
    "workers": "allow-oom",
}


#: The Redis commands the scripts run, by kind: a script flagged ``no-writes`` is checked for its
#: reads alone (its shared ending could write, but never does). A command in neither set is
#: caught by the tests before it ships (tests/test_acl.py), so that the ACL roles
#: (``quasar_redis.acl``) follow the scripts.
_READ_NAMES = "EXISTS GET HGET HGETALL HMGET LRANGE SCARD SISMEMBER SMEMBERS SRANDMEMBER TIME TYPE"
_WRITE_NAMES = "DEL HDEL HINCRBY HSET HSETNX INCRBY LPUSH LTRIM PEXPIRE RENAME RPOP RPUSH SADD SET"
READS = frozenset(f"{_READ_NAMES} ZCARD ZCOUNT ZRANGE ZRANGEBYSCORE ZRANK ZSCORE".split())
WRITES = frozenset(f"{_WRITE_NAMES} SPOP SREM XADD ZADD ZREM ZREMRANGEBYSCORE".split())


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str = field(repr=False)
    sha: str
    function: str = ""  # its name in the function library
    uses: tuple[str, ...] = ()  # the Redis commands it may run, checked against the caller's ACL


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


_DEFINES = re.compile(r"^local\s+(?:function\s+(\w+)|([\w ,]+?)\s*(?:=|$))")
_NOT_CODE = re.compile(r"""--[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""")
_WORD = re.compile(r"(?<![.:\w])[A-Za-z_]\w*")  # a name, not a field (h.at) nor a method


@dataclass(frozen=True, slots=True)
class _Block:
    """A top-level definition of a file (with the comments just above it)."""

    file: str
    names: frozenset[str]
    text: str


def _cut(text: str) -> list[tuple[frozenset[str], str]]:
    """One block per top-level ``local``, after one for what comes before the first (a header)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("local ")]
    cuts = []
    for n, start in enumerate(starts):
        floor, cut = starts[n - 1] + 1 if n else 0, start
        while cut > floor and lines[cut - 1].startswith("--"):
            cut -= 1  # the comment above a definition belongs to it
        cuts.append(cut)
    cuts.append(len(lines))
    blocks = [(frozenset[str](), "".join(lines[: cuts[0]]))]
    for n, start in enumerate(starts):
        match = _DEFINES.match(lines[start])
        names: set[str] = set()
        if match:
            names = {match.group(1)} if match.group(1) else set(re.findall(r"\w+", match.group(2)))
        blocks.append((frozenset(names), "".join(lines[cuts[n] : cuts[n + 1]])))
    return blocks


class _Pool:
    """Every top-level definition of ``_lib.lua`` and of the scripts, and which uses which.

    A script may use a definition of another script (report.lua applies complete.lua's
    ``complete_job``): such a definition is shared as the library's are. A name is defined once
    in all the files (``main`` aside, every script's own).
    """

    def __init__(self, lib: str, bodies: dict[str, str]) -> None:
        self.bodies = bodies
        self.blocks: list[_Block] = []
        owner: dict[str, int] = {}
        for file, text in {"_lib": lib, **bodies}.items():
            for names, block in _cut(text):
                for name in names - {"main"}:
                    if name in owner:
                        other = self.blocks[owner[name]].file
                        raise ConfigurationError(f"{name} is defined in {other}.lua and {file}.lua")
                    owner[name] = len(self.blocks)
                self.blocks.append(_Block(file, names, block))
        self.uses = [self._uses(b, owner) for b in self.blocks]
        self.order: list[int] = []
        self._placed: set[int] = set()
        for i in range(len(self.blocks)):
            self._visit(i, set())

    def _uses(self, block: _Block, owner: dict[str, int]) -> frozenset[int]:
        words = set(_WORD.findall(_NOT_CODE.sub(" ", block.text))) - block.names
        found = {owner[w] for w in words if w in owner}
        if block.file == "_lib":  # the library stands alone
            found = {i for i in found if self.blocks[i].file == "_lib"}
        return frozenset(found)

    def _visit(self, i: int, path: set[int]) -> None:
        """Appends block i to the order after every block it uses."""
        if i in self._placed:
            return
        if i in path:
            file = self.blocks[i].file
            raise ConfigurationError(f"the Lua definitions of {file}.lua use each other")
        path.add(i)
        for used in sorted(self.uses[i]):
            self._visit(used, path)
        path.discard(i)
        self.order.append(i)
        self._placed.add(i)

    def reach(self, start: set[int]) -> set[int]:
        """The blocks ``start`` uses, and those they use, ``start`` included."""
        found, todo = set(start), list(start)
        while todo:
            for used in self.uses[todo.pop()] - found:
                found.add(used)
                todo.append(used)
        return found

    def of(self, file: str) -> set[int]:
        return {i for i, b in enumerate(self.blocks) if b.file == file}

    def script(self, name: str, title: str = "") -> str:
        """The script ``name`` after the definitions of other files it reaches, in order."""
        own = self.of(name)
        wanted = self.reach(own) - own
        if self.reach(wanted) & own:
            raise ConfigurationError(f"{name}.lua uses a definition that uses one of its own")
        head = "".join(self.blocks[i].text for i in self.order if i in wanted)
        return head + title + self.bodies[name]

    def shared(self) -> list[int]:
        """The scripts' definitions another script reaches, in order."""
        found: set[int] = set()
        for i, block in enumerate(self.blocks):
            elsewhere = {u for u in self.uses[i] if self.blocks[u].file != block.file}
            found |= self.reach(elsewhere)
        return [i for i in self.order if i in found and self.blocks[i].file != "_lib"]

    def rest(self, name: str, shared: set[int]) -> str:
        """The script ``name`` without its shared definitions."""
        return "".join(self.blocks[i].text for i in sorted(self.of(name) - shared))


_LITERAL_CALL = re.compile(r'redis\.p?call\(\s*"([A-Z_]+)"')
_OTHER_CALL = re.compile(r'redis\.p?call\(\s*[^"\s]')
_COMMAND = re.compile(r'"([A-Z_]+)"')


def _code(source: str) -> str:
    """``source`` without its comments (strings kept)."""
    return _NOT_CODE.sub(lambda m: m.group() if m.group()[0] in "\"'" else " ", source)


def commands(source: str) -> tuple[frozenset[str], list[str]]:
    """The Redis commands a Lua source may run: those named in ``redis.call`` / ``redis.pcall``,
    and at the call sites of its wrappers (a definition that passes a command it was given to
    ``redis.call``, as ``zread(ctx, "ZRANGE", ...)`` does); and the wrapper calls whose command
    is not a literal (which no scan can follow)."""
    code = _code(source)
    found = set(_LITERAL_CALL.findall(code))
    wrappers: set[str] = set()
    for names, block in _cut(code):
        if _OTHER_CALL.search(block):
            wrappers |= names
    unknown = []
    for name in sorted(wrappers):
        for match in re.finditer(rf"(?<![\w.:])(?<!function ){name}\(([^)]*)\)", code):
            command = _COMMAND.search(match.group(1))
            if command is None:
                unknown.append(match.group())
            else:
                found.add(command.group(1))
    return frozenset(found), unknown


def uses(name: str, source: str) -> tuple[str, ...]:
    """The commands the script ``name`` (assembled as ``source``) may run, sorted."""
    found, _ = commands(source)
    if FLAGS.get(name) == "no-writes":
        found -= WRITES
    return tuple(sorted(found))


def _lua_list(items: tuple[str, ...]) -> str:
    return "{" + ", ".join(f'"{item}"' for item in items) + "}"


def assemble(lib: str, body: str) -> str:
    """``body`` after the definitions of ``lib`` it reaches, in the library's order."""
    return _Pool(lib, {"script": body}).script("script")


def _sources() -> tuple[str, dict[str, str]]:
    folder = lua_dir()
    lib = (folder / "_lib.lua").read_text(encoding="utf-8")
    bodies = {name: (folder / f"{name}.lua").read_text(encoding="utf-8") for name in NAMES}
    for name, body in bodies.items():
        if body.rstrip().splitlines()[-1] != ENDING:
            raise ConfigurationError(f"{name}.lua must end with {ENDING!r}")
    return lib, bodies


@cache
def _pool() -> _Pool:
    return _Pool(*_sources())


@cache
def library() -> Library:
    """The function library: ``_lib.lua``, the scripts' shared definitions, then each script's
    own in a block of its own (so each script's locals are its own)."""
    lib, bodies = _sources()
    pool = _pool()
    sources = lib + "".join(bodies.values()) + repr(sorted(FLAGS.items()))
    version = hashlib.sha1(sources.encode()).hexdigest()[:12]
    name = f"quasar_{version}"
    parts = [f"#!lua name={name}\n", lib]
    shared = pool.shared()
    for n, i in enumerate(shared):
        block = pool.blocks[i]
        if n == 0 or pool.blocks[shared[n - 1]].file != block.file:
            parts.append(f"\n-- ===== {block.file}.lua, shared =====\n")
        parts.append(block.text)
    parts.append(
        "\nlocal function register(name, main, flags, uses)\n"
        "  redis.register_function{function_name = name, flags = flags,\n"
        "    callback = function(keys, args) return run_call(keys, args, main, uses) end}\n"
        "end\n"
    )
    for script in bodies:
        own = pool.rest(script, set(shared)).rstrip()
        flags = f'"{FLAGS[script]}"' if script in FLAGS else ""
        listed = _lua_list(uses(script, pool.script(script)))
        own = own[: -len(ENDING)] + f'register("{name}_{script}", main, {{{flags}}}, {listed})\n'
        parts.append(f"\n-- ===== {script}.lua =====\ndo\n{own}end\n")
    return Library(name, "".join(parts))


@cache
def scripts() -> dict[str, Script]:
    """Every script by name, assembled and hashed (once per process)."""
    pool = _pool()
    prefix = library().name
    out = {}
    for name in pool.bodies:
        source = pool.script(name, f"\n-- ===== {name}.lua =====\n").rstrip()
        used = uses(name, source)
        source = source[: -len(ENDING)] + f"return run_call(KEYS, ARGV, main, {_lua_list(used)})\n"
        sha = hashlib.sha1(source.encode()).hexdigest()
        out[name] = Script(name, source, sha, f"{prefix}_{name}", used)
    return out
