"""The Lua scripts: found, assembled and hashed once per process.

In a wheel the scripts are the package resource ``quasar_redis/lua/`` (read through
``importlib.resources``); in a source checkout (editable install) they are the top-level ``lua/``
folder: one script per operation, named after the client method that sends it (the folder is
the list of them: ``names()``), and in ``lua/include/`` the steps they share, one file per
concern. Each file declares the files it uses on a line ``-- uses: core, job`` and takes their
definitions by name (``local fmt = Core.fmt``; a script may take another script's the same way:
``Complete.complete_job``). The loader follows the lines, nothing else, and refuses a use not
declared, a file declared and not used, an unknown file, a name the file does not define, files
that use each other, and a name defined in two files. The same sources are served two ways:

- as one Redis Functions library (Redis 7+, Valkey), loaded once with ``FUNCTION LOAD`` and called
  with ``FCALL``: every file another uses becomes a table (``local Core = (function() ... return
  {fmt = fmt, ...} end)()``), then each script is registered from a function of its own, so each
  file's locals are its own and count against Lua's limit of 200 there. Redis runs a library's
  definitions once, at load, so a call pays only for its own work;
- as one script per operation (Redis 6.2, and where functions are refused): EVALSHA, loaded on
  NOSCRIPT (restart, failover, SCRIPT FLUSH), then called again. Redis runs a script's whole chunk
  on every call, and each definition and table it makes costs time on every call (about 12 us
  for all the shared steps), so a script is flat: the definitions it reaches, in the files it
  uses, then its own text without its ``local fmt = Core.fmt`` lines.

Every script ends with ``return run_call(KEYS, ARGV, main)``: in a script that is the call; in
the library it becomes the registration of ``main`` as the function ``quasar_<version>_<name>``,
``<version>`` being a hash of the sources, so that clients of different versions sharing one
server each find their own functions.

Each script carries the Redis commands it may run (``commands``, read from the definitions it
reaches), which ``run_call`` checks against the caller's ACL before anything is written (Redis
7+).
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

#: Flags of the functions (Redis 7 reads them at FUNCTION LOAD; a script without flags runs under
#: Redis's older rules). ``no-writes``: the call only reads, so it runs on a full Redis (and a
#: replica). ``allow-oom``: the call runs on a full Redis: prune and purge delete, and cancel
#: rewrites a job in place (plus a call record and an event) so that an operator can drain a
#: full queue, and resume_cascades carries on what a cancel left; heartbeat rewrites a lease's
#: expiry in place (plus a call record), so that a full Redis does not take the leases of
#: running jobs or of finished ones whose outcome waits for room; pause and resume add or remove
#: one set member (an operator stops or restarts a queue in an incident); retire and workers
#: only delete; change_schedule sets or deletes one field of a schedule, or deletes it (an
#: operator stops a schedule in an incident); set_limits sets a few fields of a queue's flow (an
#: operator slows a queue down in an incident). The rest is refused whole, before it writes
#: anything. Scripts (EVALSHA) carry no flags: a ``#!lua`` line would break them on Redis 6.2 and
#: fakeredis; there Redis refuses only a script's first write, so reads and prune run on a full
#: Redis too.
FLAGS = {
    "get_job": "no-writes",
    "counts": "no-writes",
    "list_jobs": "no-writes",
    "prune": "allow-oom",
    "purge": "allow-oom",
    "cancel": "allow-oom",
    "heartbeat": "allow-oom",
    "resume_cascades": "allow-oom",
    "queues": "no-writes",
    "pause": "allow-oom",
    "resume": "allow-oom",
    "retire": "allow-oom",
    "workers": "allow-oom",
    "schedules": "no-writes",
    "flow": "no-writes",
    "dependencies": "no-writes",
    "batch": "no-writes",
    "batch_results": "no-writes",
    "set_limits": "allow-oom",
    "change_schedule": "allow-oom",
}


#: The Redis commands the scripts run, by kind: a script flagged ``no-writes`` is checked for its
#: reads alone (its shared ending could write, but never does). A command in neither set is
#: caught by the tests before it ships (tests/test_acl.py), so that the ACL roles
#: (``quasar_redis.acl``) follow the scripts.
_READ_NAMES = (
    "EXISTS GET HEXISTS HGET HGETALL HMGET LRANGE SCARD SISMEMBER SMEMBERS SRANDMEMBER TIME TYPE"
)
_WRITE_NAMES = "DEL HDEL HINCRBY HSET HSETNX INCRBY LPUSH LTRIM PEXPIRE RENAME RPOP RPUSH SADD SET"
READS = frozenset(f"{_READ_NAMES} HLEN ZCARD ZCOUNT ZRANGE ZRANGEBYSCORE ZRANK ZSCORE".split())
WRITES = frozenset(f"{_WRITE_NAMES} SPOP SREM UNLINK XADD ZADD ZREM ZREMRANGEBYSCORE".split())


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
#: A script may define ``fast(keys, args)`` as well: a way of its commonest call, tried first, that
#: checks the permissions it needs itself; it returns nil, having written nothing, for run_call
#: to run the call (lua/include/plain_enqueue.lua).
FAST = "fast"


def lua_dir() -> Traversable:
    """The folder holding the ``.lua`` files: the package's ``lua`` resource (a wheel), else the
    top-level ``lua/`` of the source checkout this module runs from (an editable install)."""
    packaged = resources.files(__package__) / "lua"
    checkout = Path(__file__).resolve().parent.parent / "lua"
    for candidate in (packaged, checkout):
        if (candidate / "include" / "core.lua").is_file():
            return candidate
    raise ConfigurationError(f"the Lua scripts are missing (looked in {packaged} and {checkout})")


_DEFINES = re.compile(r"^local\s+(?:function\s+(\w+)|([\w ,]+?)\s*(?:=|$))")
_NOT_CODE = re.compile(r"""--[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""")
_WORD = re.compile(r"(?<![.:\w])[A-Za-z_]\w*")  # a name, not a field (h.at) nor a method
_DECLARED = re.compile(r"^-- uses:(.*)$", re.M)
_MODULE_USE = re.compile(r"(?<![.:\w])([A-Z][a-z]\w*)\.(\w+)")  # Core.fmt, not CASCADE.step
_ALIASES = re.compile(r"local\s+([\w, ]+?)\s*=\s*([\w., ]+?)\s*")


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


def title(name: str) -> str:
    """The table a file's definitions are reached through: ``Core`` for core.lua, ``PermanentFail``
    for permanent_fail.lua."""
    return "".join(part.capitalize() for part in name.split("_"))


@dataclass(frozen=True, slots=True)
class _File:
    """An include file or a script: its text, what it declares it uses, what it defines."""

    name: str
    text: str
    declared: tuple[str, ...]
    names: tuple[str, ...]  # its top-level definitions, in order

    @property
    def code(self) -> str:
        """The text without the ending of a script."""
        if self.text.rstrip().endswith(ENDING):
            return self.text.rstrip()[: -len(ENDING)]
        return self.text

    def module(self, code: str = "", names: list[str] | None = None) -> str:
        """The file (or of it ``code``, defining ``names``) as a table of its definitions, made
        by a function of its own (so its locals are its own, and count against Lua's limit
        there)."""
        fields = ", ".join(f"{n} = {n}" for n in (self.names if names is None else names))
        code = (code or self.code).rstrip()
        return f"local {title(self.name)} = (function()\n{code}\nreturn {{{fields}}}\nend)()\n"


def _read(name: str, text: str) -> _File:
    lines = _DECLARED.findall(text)
    if len(lines) > 1:
        raise ConfigurationError(f"{name}.lua has more than one '-- uses:' line")
    declared = tuple(w for w in re.split(r"[\s,]+", lines[0] if lines else "") if w)
    names: list[str] = []
    for defined, _ in _cut(text):
        names += sorted(defined - set(names))
    return _File(name, text, declared, tuple(names))


class _Files:
    """Every include file and script, checked: each declares (``-- uses: core, job``) the files
    whose definitions it reaches (``Core.fmt``), and no other; no two files use each other."""

    def __init__(self, includes: dict[str, str], bodies: dict[str, str]) -> None:
        for name in includes.keys() & bodies.keys():
            raise ConfigurationError(f"{name}.lua is both an include file and a script")
        self.includes = list(includes)
        self.scripts = list(bodies)
        self.files = {n: _read(n, t) for n, t in {**includes, **bodies}.items()}
        self.by_title = {title(n): n for n in self.files}
        for file in self.files.values():
            self._check(file)
        for name in self.files:
            self.order([name])
        # each top-level definition by (file, name): its text, and the definitions it names
        self.blocks: dict[tuple[str, str], tuple[str, set[tuple[str, str]]]] = {}
        self.aliases: set[tuple[str, str]] = set()  # (file, name) of local fmt = Core.fmt
        self.aliases_of: dict[str, set[str]] = {name: set() for name in self.files}
        for file in self.files.values():
            for names, text in _cut(file.text):
                self._link(file, names, text)
        owner: dict[str, str] = {}
        for name, defined in self.files.items():
            for n in set(defined.names) - self.aliases_of[name] - {"main", FAST}:
                if n in owner:
                    raise ConfigurationError(f"{n} is defined in {owner[n]}.lua and {name}.lua")
                owner[n] = name

    def _check(self, file: _File) -> None:
        for used in file.declared:
            if used not in self.files:
                raise ConfigurationError(f"{file.name}.lua uses {used}, which is no Lua file")
        reached = set()
        for table, name in _MODULE_USE.findall(_NOT_CODE.sub(" ", file.text)):
            if table not in self.by_title:
                continue
            used = self.by_title[table]
            if used not in file.declared:
                raise ConfigurationError(f"{file.name}.lua uses {table}.{name} but not {used}")
            if name not in self.files[used].names:
                raise ConfigurationError(f"{file.name}.lua uses {table}.{name}: no such definition")
            reached.add(used)
        for unused in sorted(set(file.declared) - reached):
            raise ConfigurationError(f"{file.name}.lua declares {unused} but does not use it")

    def order(self, start: list[str]) -> list[str]:
        """``start`` and the files they use, and those they use, each after what it uses."""
        order: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in path:
                cycle = " -> ".join((*path[path.index(name) :], name))
                raise ConfigurationError(f"the Lua files use each other: {cycle}")
            if name not in order:
                for used in self.files[name].declared:
                    visit(used, (*path, name))
                order.append(name)

        for name in start:
            visit(name, ())
        return order

    def script(self, name: str) -> str:
        """The script ``name`` after the definitions of the files it uses that it reaches, flat
        (Redis runs a script's whole text on every call: each definition, table and alias it
        carries costs time on every call, used or not). Names are unique across the files, and
        an alias keeps its name: ``local fmt = Core.fmt`` goes, ``fmt`` is defined above."""
        found = self._reach(name)
        head = ""
        for used in self.order([name])[:-1]:
            keys = [k for k in self.blocks if k[0] == used and k in found and k[1]]
            texts = dict.fromkeys(self.blocks[k][0] for k in keys if k not in self.aliases)
            head += f"\n-- ===== {used}.lua =====\n" + "".join(texts)
        own = [t for n, t in _cut(self.files[name].text) if not n & self.aliases_of[name]]
        return f"{head}\n-- ===== {name}.lua =====\n" + "".join(own)

    def shared(self) -> list[str]:
        """The files some other file uses (every include file a script reaches, and the scripts
        another script applies), each after what it uses."""
        used = {u for f in self.files.values() for u in f.declared}
        return [n for n in self.order(self.scripts) if n in used]

    def reached(self, name: str) -> str:
        """The definitions the script ``name`` reaches (its own, those of the files it uses that
        it names, and those these name, ...), for the scan of the Redis commands it may run."""
        found = self._reach(name)
        return "".join(dict.fromkeys(self.blocks[k][0] for k in self.blocks if k in found))

    def _reach(self, name: str) -> set[tuple[str, str]]:
        """The definitions the script ``name`` reaches."""
        todo = [(name, n) for n in (*self.files[name].names, "")]
        found = set(todo)
        while todo:
            key = todo.pop()
            for used in self.blocks.get(key, ("", set()))[1] - found:
                found.add(used)
                todo.append(used)
        return found

    def _link(self, file: _File, names: frozenset[str], text: str) -> None:
        """Each name of a top-level definition: its text, and the definitions it names."""
        code = _NOT_CODE.sub(" ", text).strip()
        aliases = _ALIASES.fullmatch(code)
        if aliases and all(_MODULE_USE.fullmatch(r) for r in aliases.group(2).split(", ")):
            pairs = zip(aliases.group(1).split(", "), aliases.group(2).split(", "), strict=True)
            for alias, target in pairs:  # local fmt, num = Core.fmt, Core.num
                table, used = target.split(".")
                if alias != used:
                    raise ConfigurationError(f"{file.name}.lua: {alias} = {target} is renamed")
                self.blocks[file.name, alias] = (text, {(self.by_title[table], used)})
                self.aliases.add((file.name, alias))
                self.aliases_of[file.name].add(alias)
            return
        own = set(file.names) - names
        found = {(file.name, w) for w in _WORD.findall(code) if w in own}
        found |= {(self.by_title[t], n) for t, n in _MODULE_USE.findall(code) if t in self.by_title}
        for name in names or {""}:
            self.blocks[file.name, name] = (text, found)


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
    """The commands the script ``name`` (its definitions reached: ``source``) may run, sorted."""
    found, _ = commands(source)
    if FLAGS.get(name) == "no-writes":
        found -= WRITES
    return tuple(sorted(found))


def _lua_list(items: tuple[str, ...]) -> str:
    return "{" + ", ".join(f'"{item}"' for item in items) + "}"


def _lua_names(folder: Traversable) -> list[str]:
    return sorted(p.name[: -len(".lua")] for p in folder.iterdir() if p.name.endswith(".lua"))


@cache
def names() -> tuple[str, ...]:
    """Every script's name, sorted: the ``.lua`` files of the scripts' folder, which is the one
    list of them (each name is the client method that sends the script: docs/contributing.md)."""
    return tuple(_lua_names(lua_dir()))


def _sources() -> tuple[dict[str, str], dict[str, str]]:
    folder = lua_dir()
    include = folder / "include"
    includes = {n: (include / f"{n}.lua").read_text(encoding="utf-8") for n in _lua_names(include)}
    bodies = {name: (folder / f"{name}.lua").read_text(encoding="utf-8") for name in names()}
    for name, body in bodies.items():
        if body.rstrip().splitlines()[-1] != ENDING:
            raise ConfigurationError(f"{name}.lua must end with {ENDING!r}")
    return includes, bodies


@cache
def _files() -> _Files:
    return _Files(*_sources())


@cache
def library() -> Library:
    """The function library: every file another uses, each a table of its definitions, in order;
    then each script registered, its definitions in a function of their own (so each script's
    locals are its own)."""
    files = _files()
    texts = [files.files[n].text for n in (*files.includes, *files.scripts)]
    version = hashlib.sha1(("".join(texts) + repr(sorted(FLAGS.items()))).encode()).hexdigest()
    name = f"quasar_{version[:12]}"
    parts = [f"#!lua name={name}\n"]
    shared = files.shared()
    parts += [f"\n-- ===== {n}.lua =====\n{files.files[n].module()}" for n in shared]
    parts.append(
        "\nlocal function register(name, flags, uses, main, fast)\n"
        "  local run_call = Call.run_call\n"
        "  local callback = function(keys, args) return run_call(keys, args, main, uses) end\n"
        "  if fast then\n"
        "    callback = function(keys, args)\n"
        "      return fast(keys, args) or run_call(keys, args, main, uses)\n"
        "    end\n"
        "  end\n"
        "  redis.register_function{function_name = name, flags = flags, callback = callback}\n"
        "end\n"
    )
    for script in files.scripts:
        flags = f'"{FLAGS[script]}"' if script in FLAGS else ""
        listed = _lua_list(uses(script, files.reached(script)))
        ran = ["main", FAST] if FAST in files.files[script].names else ["main"]
        main = ", ".join(f"{title(script)}.{n}" for n in ran)
        if script not in shared:
            code = files.files[script].code.rstrip()
            main = f"(function()\n{code}\nreturn {', '.join(ran)}\nend)()"
        call = f'register("{name}_{script}", {{{flags}}}, {listed}, {main})'
        parts.append(f"\n-- ===== {script}.lua =====\n{call}\n")
    return Library(name, "".join(parts))


@cache
def scripts() -> dict[str, Script]:
    """Every script by name, assembled and hashed (once per process)."""
    files = _files()
    prefix = library().name
    out = {}
    for name in files.scripts:
        source = files.script(name).rstrip()
        used = uses(name, files.reached(name))
        call = f"run_call(KEYS, ARGV, main, {_lua_list(used)})"
        if FAST in files.files[name].names:
            call = f"fast(KEYS, ARGV) or {call}"
        source = source[: -len(ENDING)] + f"return {call}\n"
        sha = hashlib.sha1(source.encode()).hexdigest()
        out[name] = Script(name, source, sha, f"{prefix}_{name}", used)
    return out
