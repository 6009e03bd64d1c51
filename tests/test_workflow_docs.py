"""docs/workflows.md: every Python example on the page runs as written, on the embedded server and
on the real Redis (its ``App("memory://")`` pointed at the server, in a namespace of its own)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .helpers import REDIS_URL, delete_namespace, real_redis

PAGE = Path(__file__).resolve().parent.parent / "docs" / "workflows.md"
#: What every example declares its application with: the embedded server.
EMBEDDED = 'App("memory://")'
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


def examples() -> list[tuple[str, str]]:
    """Each ```python block of the page, named by its number and the heading it is under."""
    text = PAGE.read_text(encoding="utf-8")
    found = []
    for number, match in enumerate(_BLOCK.finditer(text), 1):
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.M)
        where = re.sub(r"[^a-z]+", "-", headings[-1].lower()).strip("-") if headings else "top"
        found.append((f"{number}-{where}", match[1]))
    return found


def test_the_page_has_an_example_of_each_part() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "<!--" not in text, "a section of docs/workflows.md is not written yet"
    codes = "\n".join(code for _, code in examples())
    for used in ("chain(", "group(", "chord(", "open_batch(", ".progress(", "dependency_results("):
        assert used in codes, f"no example uses {used}"


@pytest.mark.parametrize(("name", "code"), examples(), ids=[name for name, _ in examples()])
def test_each_example_runs_as_written(name: str, code: str, backend: str, namespace: str) -> None:
    assert EMBEDDED in code, f"example {name} does not declare its app as {EMBEDDED}"
    if backend == "redis":
        real_redis().close()  # (skips, or fails under QUASAR_REQUIRE_REDIS=1, without one)
        code = code.replace(EMBEDDED, f"App({REDIS_URL!r}, namespace={namespace!r})")
    scope: dict[str, Any] = {"__name__": f"docs_workflows_{name.replace('-', '_')}"}
    try:
        exec(compile(code, f"docs/workflows.md, example {name}", "exec"), scope)
    finally:
        if "app" in scope:
            scope["app"].close()
        if backend == "redis":
            client = real_redis()
            delete_namespace(client, namespace)
            client.close()
