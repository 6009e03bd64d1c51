"""The package's shape, read from its source with ``ast``: no import circle between its modules,
no module over 500 lines, no class over 300 (lines of source, a class's decorators included).

The import graph has an edge from module A to module B when A has an ``import`` statement that
names B, anywhere in A: at module level or inside a function (an import deferred into a function
still ties the two modules together). Not counted: imports under ``if TYPE_CHECKING:``, which
never run, and ``importlib.import_module`` calls (the embedded server and the worker, loaded
only when asked for). ``from package import name`` is an edge to the module ``package.name``
when there is one, else to the package itself; importing ``a.b`` is not an edge to ``a``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "quasar_redis"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, but those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, ast.If) and _type_checking(child):
            for other in child.orelse:
                yield from imports(other)
        else:
            yield from imports(child)


def imported(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The package's modules that ``node``, in the module ``name`` at ``path``, imports."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & known
    base = node.module or ""
    if node.level:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    found = {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return found & known


def import_graph() -> dict[str, set[str]]:
    """Each module of the package, and the package's modules it imports."""
    paths = modules()
    known = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges = set().union(*(imported(name, path, node, known) for node in imports(tree)))
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports (its first module repeated at its end), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph[module]):
            if (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if (cycle := visit(module)) is not None:
            return cycle
    return None


def test_the_package_has_no_import_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_circle_and_the_graph_sees_deferred_imports() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .app import App\n"
        "def later():\n    from ._hooks import Hooks\n"
    )
    found = [ast.unparse(node) for node in imports(ast.parse(source))]
    assert found == ["from typing import TYPE_CHECKING", "from ._hooks import Hooks"]
    graph = import_graph()
    assert "quasar_redis.app" in graph["quasar_redis"]
    assert "quasar_redis.app" not in graph["quasar_redis._tasks"]  # only if TYPE_CHECKING


MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300


def measured() -> dict[str, Path]:
    found = modules()
    assert "quasar_redis.worker._lifecycle" in found, "the worker's modules are measured too"
    return found


def test_no_module_is_over_500_lines() -> None:
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in measured().items()
    }
    over = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_class_is_over_300_lines() -> None:
    over = {}
    for name, path in measured().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > MAX_CLASS_LINES:
                    over[f"{name}.{node.name}"] = lines
    assert over == {}, f"classes over {MAX_CLASS_LINES} lines: {over}"
