"""Small modules and classes (docs/workers.md, "How the worker is built"), measured with ``ast``.

Asserted for the worker's package; the rest of the package is printed (``pytest -s``) as what is
still to split, without failing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "quasar_redis"
MODULE_MAX = 500
CLASS_MAX = 300


def oversized(path: Path) -> list[str]:
    """What in the module at ``path`` is over its bound: the module, and each class."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(ROOT).as_posix()
    found = []
    lines = len(text.splitlines())
    if lines > MODULE_MAX:
        found.append(f"{name}: {lines} lines (module, at most {MODULE_MAX})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > CLASS_MAX:
                found.append(f"{name}: class {node.name}, {size} lines (at most {CLASS_MAX})")
    return found


def test_every_worker_module_and_class_is_small() -> None:
    worker = sorted((PACKAGE / "worker").glob("*.py"))
    assert worker, "no worker modules found"
    assert [x for path in worker for x in oversized(path)] == []


def test_the_rest_of_the_package_is_listed() -> None:
    rest = [p for p in sorted(PACKAGE.rglob("*.py")) if (PACKAGE / "worker") not in p.parents]
    found = [x for path in rest for x in oversized(path)]
    print("\n".join(["over the bounds, outside quasar_redis/worker/:", *found]))
    assert rest
