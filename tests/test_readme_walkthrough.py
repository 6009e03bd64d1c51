"""README.md read the way tests/readme_walkthrough.py runs it (CI walks it through, stage 7),
without running it: every block is run or marked with a reason, every command that serves a
queue serves one that tasks.py declares, bare commands come after the virtualenv is activated,
the extras are installed from the checkout, and every link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .readme_walkthrough import (
    INSTALL,
    Block,
    WalkthroughError,
    check_output,
    commands,
    expected_lines,
    matches,
    parse,
)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ACTIVATE = ". .venv/bin/activate"
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def blocks() -> list[Block]:
    return parse(README.read_text(encoding="utf-8"))


def run_blocks() -> list[Block]:
    return [b for b in blocks() if not b.skip_reason]


def tasks_py() -> str:
    found = [b.code for b in blocks() if b.file_name == "tasks.py"]
    assert len(found) == 1, "README declares its tasks in one ```python block, # tasks.py"
    return found[0]


def test_every_block_is_run_or_marked_with_a_known_marker_and_a_reason() -> None:
    found = blocks()
    assert found, "no ```sh or ```python block found: the pattern is wrong"
    skipped = [b for b in found if b.skip_reason]
    assert all(len(b.skip_reason or "") > 10 for b in skipped), "say why a block is not run"
    assert len(skipped) < len(found) / 2, "most of README's blocks run"


def test_the_quick_start_has_its_two_commands_and_the_walk_through_its_install() -> None:
    first = [b.code for b in blocks() if b.section == "Quick start"]
    assert any(f"{INSTALL} && .venv/bin/quasar demo" in code for code in first)
    assert any(code.strip() == ".venv/bin/pytest" for code in first)
    assert sum(INSTALL in b.code for b in blocks()) == 1, "the one install the runner replaces"


def test_bare_quasar_and_python_come_after_the_virtualenv_is_activated() -> None:
    activated = False
    for block in run_blocks():
        lines = commands(block.code) if block.language == "sh" else []
        bare = [ln for ln in lines if re.match(r"\s*(quasar|python|pip)\b", ln)]
        assert activated or not bare, f"{block.describe()}: bare command before {ACTIVATE}"
        activated = activated or ACTIVATE in lines
        assert activated or block.language != "python" or block.file_name, block.describe()
    assert activated


def test_every_worker_serves_a_queue_that_tasks_py_declares() -> None:
    declared = set(re.findall(r"queue=\"(\w+)\"", tasks_py()))
    served = [
        (ln, queue)
        for block in blocks()
        if block.language == "sh"
        for ln in commands(block.code)
        if "quasar worker tasks:app" in ln
        for queue in re.findall(r"(?:-q|--queue) (\S+)", ln)
    ]
    assert served, "README runs no worker"
    assert [(ln, q) for ln, q in served if q not in declared] == []
    processes = [ln for ln, _ in served if "--processes" in ln]
    assert processes, "README shows --processes"
    code = tasks_py()
    for ln in processes:
        queue = re.findall(r"-q (\S+)", ln)[0]
        declaration = code[code.index(f'queue="{queue}"') :]
        assert re.search(r"\)\ndef \w+\(", declaration), f"{queue}: a plain-function task"


def test_extras_are_installed_from_the_checkout_with_extras_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    assert "quasar_redis[" not in text, "README installs from a checkout, not a published package"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = pyproject.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w+) = \[", table, re.M))
    installs = re.findall(r'pip install -e "\.\[([\w,]+)\]"', text)
    named = [extra for found in installs for extra in found.split(",")]
    assert named and set(named) <= extras


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and the site (mkdocs.yml's slugify) make it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_of_the_readme_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    links = [link for link in _LINK.findall(text) if not re.match(r"\w+://", link)]
    assert links, "no link found: the pattern is wrong"
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = (ROOT / path) if path else README
        if not target.exists():
            broken.append(link)
        elif anchor and target.is_file():
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            if anchor not in {slug(h) for h in headings}:
                broken.append(link)
    assert broken == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("```console\n$ quasar queues\n```\n", "README's are"),
        ("<!-- skip -->\n```sh\nquasar queues\n```\n", "unknown marker"),
        ("<!-- not run: -->\n```sh\nquasar queues\n```\n", "unknown marker"),
        ("<!-- run in background -->\n```sh\nquasar a\nquasar b\n```\n", "one sh command"),
    ],
)
def test_a_block_the_runner_cannot_run_is_refused(text: str, error: str) -> None:
    with pytest.raises(WalkthroughError, match=error):
        parse(text)


def test_markers_are_read_from_the_line_above_the_block() -> None:
    text = (
        "## A\n\n<!-- not run: installs a system package -->\n```sh\nsudo x\n```\n\n"
        "<!-- run in background -->\n```sh\nquasar worker tasks:app  # until stopped\n```\n\n"
        "## B\n\n```python\n# tasks.py\nx = 1\n```\n"
    )
    skip, background, file = parse(text)
    assert (skip.skip_reason, skip.section) == ("installs a system package", "A")
    assert background.background and not background.skip_reason
    assert (file.file_name, file.section) == ("tasks.py", "B")


def test_output_comments_are_checked_line_by_line() -> None:
    code = "x = 1\nprint(x)  # 1\nprint({'a': x, 'b': 2})  # {'a': 1, ...}\nprint(x)\n"
    assert expected_lines(code) == (3, [(0, "1"), (1, "{'a': 1, ...}")])
    block = Block(1, 1, "", "python", code)
    check_output(block, "1\n{'a': 1, 'b': 2}\nanything\n")
    with pytest.raises(WalkthroughError, match="README shows"):
        check_output(block, "1\n{'a': 2, 'b': 2}\nanything\n")
    with pytest.raises(WalkthroughError, match="2 lines printed, 3 expected"):
        check_output(block, "1\n{'a': 1}\n")
    assert matches("a ... c", "a b c") and not matches("a ... c", "a b d")


def test_readme_shows_output_that_the_walk_through_checks() -> None:
    shown = [expected_lines(b.code)[1] for b in run_blocks() if b.language == "python"]
    assert sum(len(s) for s in shown) >= 2
