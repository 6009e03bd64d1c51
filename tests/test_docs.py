"""What the documentation states about the code, checked against the code: the exception tree of
``quasar_redis.errors``, the API reference's coverage of the public surface, and the source files
the docs and the Lua comments point to."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import quasar_redis
from quasar_redis import errors

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "docs" / "api"

#: A class of the tree: its indent (4 columns a level, past the root's) and its name.
_NODE = re.compile(r"^    ((?:[│ ]   )*)[├└]── (\w+)")
#: A class outside the tree: its name and its base, ``Snooze (Exception)``.
_OUTSIDE = re.compile(r"^    (\w+) \((\w+)\)  ")


def modules() -> list[ModuleType]:
    """Every module of the package, imported (its extras are in the test extra)."""
    found = [quasar_redis]
    for info in pkgutil.walk_packages(quasar_redis.__path__, "quasar_redis."):
        if not info.name.endswith("__main__"):
            found.append(importlib.import_module(info.name))
    return found


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class a caller can meet: each under ``QuasarError``, wherever it is
    defined, and each other one the package defines and names in a public ``__all__``."""
    found: dict[str, type[BaseException]] = {}
    for module in modules():
        public = not any(part.startswith("_") for part in module.__name__.split("."))
        for name, value in vars(module).items():
            if not (inspect.isclass(value) and issubclass(value, BaseException)):
                continue
            if not value.__module__.startswith("quasar_redis"):
                continue
            exported = public and name in getattr(module, "__all__", ())
            if issubclass(value, errors.QuasarError) or exported:
                found[value.__name__] = value
    return found


def test_the_error_tree_names_every_exception_a_caller_can_meet() -> None:
    doc = errors.__doc__ or ""
    known = exception_classes()
    path: list[str] = ["QuasarError"]  # the classes above the line read, root first
    drawn = {"QuasarError"}
    for line in doc.splitlines():
        node, outside = _NODE.match(line), _OUTSIDE.match(line)
        if node:
            depth, name = len(node.group(1)) // 4 + 1, node.group(2)
            del path[depth:]
            assert name in known, f"the tree names {name}, which the package does not define"
            assert known[path[-1]] in known[name].__bases__, f"{name} drawn under {path[-1]}"
            path.append(name)
            drawn.add(name)
        elif outside:
            name, base = outside.groups()
            assert name in known and base in {b.__name__ for b in known[name].__bases__}, line
            drawn.add(name)
    assert sorted(set(known) - drawn) == [], "add them to the docstring of quasar_redis.errors"


def documented() -> set[str]:
    """The public names the API reference pages show: each ``::: quasar_redis.NAME``, and the
    members of each module a page shows whole."""
    names: set[str] = set()
    for page in API.glob("*.md"):
        for target in re.findall(r"^::: quasar_redis\.(\w+)$", page.read_text(), re.MULTILINE):
            if target in quasar_redis.__all__:
                names.add(target)
                continue
            module = importlib.import_module(f"quasar_redis.{target}")
            names |= set(getattr(module, "__all__", ()))
            names |= {
                n
                for n, v in vars(module).items()
                if getattr(v, "__module__", "") == module.__name__
            }
    return names


def test_the_api_reference_shows_every_public_name() -> None:
    missing = set(quasar_redis.__all__) - {"__version__"} - documented()
    assert missing == set(), f"add these to a page of docs/api/: {sorted(missing)}"


def test_every_source_file_the_docs_and_the_lua_name_exists() -> None:
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "lua").glob("*.lua")]
    named = {
        (path.name, found)
        for path in texts
        for found in re.findall(r"quasar_redis/[\w/]+\.py", path.read_text())
    }
    assert named, "no source file named: the pattern is wrong"
    assert {(where, name) for where, name in named if not (ROOT / name).is_file()} == set()
