"""README.md walked through: every ```sh and ```python block run in order, as written, in a fresh
temporary folder, against a real Redis, in a namespace of its own that is deleted at the end.

    python tests/readme_walkthrough.py README.md --venv DIR [--redis-url URL]

How each block runs:

- A ```python block whose first line is ``# NAME.py`` is written to that file (``tasks.py``); any
  other ```python block runs as ``python -`` in the folder, with the ``python`` of the shell's
  ``PATH`` at that point. Each top-level ``print(...)`` line writes one line; one that ends with
  an output comment (``print(x)  # {'order': 42, ...}``) must print that text (``...`` stands
  for anything).
- A ```sh block runs in ``bash`` with ``set -euo pipefail``; what it exports (``. .venv/bin/
  activate``) holds for the blocks after it.
- An HTML comment on the line above a block says how else to run it: ``<!-- not run: REASON -->``
  skips it (a system package, a checkout's test suite), ``<!-- run in background -->`` starts its
  one command, waits for its first line of output, and at the end of the block's section (the next
  ``## `` heading) checks that it still runs, stops it with SIGTERM and wants it to end by it
  (exit code 0, or the signal's own end where the command keeps SIGTERM's default).

One substitution, and only one: README's install, ``python3 -m venv .venv && .venv/bin/pip install
-e ".[test]"``, needs a checkout; here ``.venv`` is a link to ``--venv``, a virtualenv where the
built wheel is installed (with its ``dashboard`` and ``prometheus`` extras), and the install is not
run. The environment holds ``QUASAR_REDIS_URL`` (``--redis-url``) and ``QUASAR_NAMESPACE`` (a fresh
``readme-<random>``) from the first block on, and no ``PYTHONPATH`` or ``REDIS_URL``.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

#: The install line of README's quick start, and what runs instead (see the module docstring).
INSTALL = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]"'
INSTALLED = "true"  # (.venv: the given virtualenv, where the built wheel is installed)
#: The languages of README's blocks: each is run, or marked with the reason it is not.
LANGUAGES = ("sh", "python")
NOT_RUN = "not run: "
BACKGROUND = "run in background"
BLOCK_TIMEOUT_S = 300.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
_MARKER = re.compile(r"^<!--\s*(.*?)\s*-->$")
_FILE = re.compile(r"^# ([\w/]+\.py)\n")
_PRINT = re.compile(r"^print\(.*\)(?:\s+#\s(?P<expected>.*))?$")


class WalkthroughError(Exception):
    """A block that cannot be parsed, or that did not run as README says."""


@dataclass(frozen=True)
class Block:
    """One fenced block of README: where it is, its language and code, and how to run it."""

    number: int
    line: int
    section: str
    language: str
    code: str
    skip_reason: str | None = None
    background: bool = False

    @property
    def file_name(self) -> str | None:
        """The file a ```python block is written to (its first line ``# NAME.py``), or None."""
        found = _FILE.match(self.code) if self.language == "python" else None
        return found[1] if found else None

    def describe(self) -> str:
        first = self.code.strip().splitlines()[0] if self.code.strip() else ""
        return f"block {self.number} (line {self.line}, {self.language}): {first[:70]}"


def marker_of(text: str, start: int) -> str | None:
    """The HTML comment on the line just above the block that starts at ``start``, if any."""
    before = text[:start].rstrip("\n").rsplit("\n", 1)[-1]
    found = _MARKER.match(before.strip())
    return found[1] if found else None


def parse(text: str) -> list[Block]:
    """Every fenced block of ``text``, in order; WalkthroughError for a block of a language the
    walk-through cannot run, an unknown marker, a ``not run`` without its reason, or a background
    block of more than one command."""
    blocks = []
    for number, fence in enumerate(_FENCE.finditer(text), 1):
        line = text.count("\n", 0, fence.start()) + 1
        headings = re.findall(r"^## (.+)$", text[: fence.start()], re.M)
        section = headings[-1] if headings else ""
        language, code = fence[1], fence[2]
        if language not in LANGUAGES:
            raise WalkthroughError(f"line {line}: a ```{language} block; README's are {LANGUAGES}")
        marker = marker_of(text, fence.start())
        block = Block(number, line, section, language, code)
        if marker is None:
            blocks.append(block)
        elif marker.startswith(NOT_RUN) and marker[len(NOT_RUN) :].strip():
            blocks.append(replace(block, skip_reason=marker[len(NOT_RUN) :].strip()))
        elif marker == BACKGROUND:
            if language != "sh" or len(commands(code)) != 1:
                raise WalkthroughError(f"line {line}: a background block is one sh command")
            blocks.append(replace(block, background=True))
        else:
            raise WalkthroughError(
                f"line {line}: unknown marker <!-- {marker} -->; known: "
                f"<!-- {NOT_RUN}REASON -->, <!-- {BACKGROUND} -->"
            )
    return blocks


def commands(code: str) -> list[str]:
    """The command lines of a sh block (comments and blank lines left out)."""
    return [ln for ln in code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def expected_lines(code: str) -> tuple[int, list[tuple[int, str]]]:
    """How many lines a python block prints (one per top-level ``print(...)`` line), and the
    output comments among them: (the printed line's index, the text it must match)."""
    prints = [_PRINT.match(ln) for ln in code.splitlines() if ln.startswith("print(")]
    shown = [(i, m["expected"]) for i, m in enumerate(prints) if m and m["expected"]]
    return len(prints), shown


def matches(expected: str, got: str) -> bool:
    """Whether ``got`` is the output comment ``expected``, each ``...`` standing for anything."""
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, got) is not None


def check_output(block: Block, stdout: str) -> None:
    count, shown = expected_lines(block.code)
    got = stdout.splitlines()
    if shown and len(got) != count:
        raise WalkthroughError(f"{block.describe()}: {len(got)} lines printed, {count} expected")
    for index, expected in shown:
        if not matches(expected, got[index]):
            raise WalkthroughError(
                f"{block.describe()}: printed {got[index]!r}, README shows {expected!r}"
            )


class Background:
    """A block's command running until the end of its section."""

    def __init__(self, block: Block, folder: Path, env: dict[str, str]) -> None:
        self.block = block
        self.log_path = folder.parent / f"background-{block.number}.log"
        self.log: IO[bytes] = self.log_path.open("wb")
        self.process = subprocess.Popen(
            ["bash", "-c", f"set -euo pipefail\nexec {commands(block.code)[0]}"],
            cwd=folder,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_started(self) -> None:
        """Until its first line of output; WalkthroughError if it ends first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while "\n" not in self.output():
            if self.process.poll() is not None:
                self.fail(f"ended (exit code {self.process.returncode}) as it started")
            if time.monotonic() > deadline:
                self.fail(f"printed nothing in {START_TIMEOUT_S:.0f}s")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, and an end by it wanted; WalkthroughError if it had ended before."""
        if self.process.poll() is not None:
            self.fail(f"ended (exit code {self.process.returncode}) before its section did")
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            self.fail(f"still running {STOP_TIMEOUT_S:.0f}s after SIGTERM")
        self.log.close()
        if code not in (0, -signal.SIGTERM):
            self.fail(f"exit code {code} after SIGTERM")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def fail(self, what: str) -> None:
        raise WalkthroughError(f"{self.block.describe()}: {what}\n{self.output()}")


class Walkthrough:
    """README's blocks run in one folder, one environment carried from block to block."""

    def __init__(self, folder: Path, venv: Path, redis_url: str, namespace: str) -> None:
        self.folder = folder
        self.env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "REDIS_URL"}}
        self.env.pop("VIRTUAL_ENV", None)
        self.env |= {"QUASAR_REDIS_URL": redis_url, "QUASAR_NAMESPACE": namespace}
        self.env_file = folder.parent / "env"
        self.background: list[Background] = []
        (folder / ".venv").symlink_to(venv.resolve(), target_is_directory=True)

    def run(self, blocks: list[Block]) -> None:
        for i, block in enumerate(blocks):
            started = time.monotonic()
            self.run_block(block)
            took = time.monotonic() - started
            how = f"not run: {block.skip_reason}" if block.skip_reason else f"ok, {took:.1f}s"
            print(f"{block.describe()}: {how}", flush=True)
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            if following is None or following.section != block.section:
                self.end_section()

    def run_block(self, block: Block) -> None:
        if block.skip_reason:
            return
        if block.background:
            running = Background(block, self.folder, self.env)
            self.background.append(running)
            running.wait_started()
        elif block.file_name:
            (self.folder / block.file_name).write_text(block.code)
        elif block.language == "python":
            check_output(block, self.execute(block, ["python", "-"], block.code))
        else:
            script = f"set -euo pipefail\n{block.code.replace(INSTALL, INSTALLED)}\n"
            script += f'env -0 > "{self.env_file}"\n'
            self.execute(block, ["bash", "-c", script], None)
            pairs = self.env_file.read_bytes().split(b"\0")
            self.env = dict(p.decode().split("=", 1) for p in pairs if b"=" in p)

    def execute(self, block: Block, argv: list[str], stdin: str | None) -> str:
        """Run ``argv`` in the folder; its standard output, or WalkthroughError if it fails."""
        program = shutil.which(argv[0], path=self.env.get("PATH")) or argv[0]
        try:
            done = subprocess.run(
                [program, *argv[1:]],
                check=False,
                cwd=self.folder,
                env=self.env,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise WalkthroughError(f"{block.describe()}: over {BLOCK_TIMEOUT_S:.0f}s") from exc
        sys.stdout.write(done.stdout[-4000:])
        if done.returncode != 0:
            raise WalkthroughError(
                f"{block.describe()}: exit code {done.returncode}\n{done.stdout}{done.stderr}"
            )
        return done.stdout

    def end_section(self) -> None:
        while self.background:
            self.background.pop(0).stop()

    def abandon(self) -> None:
        for running in self.background:
            running.kill()
        self.background.clear()


def delete_namespace(redis_url: str, namespace: str) -> int:
    """Delete the keys of ``namespace`` and of its partitions (SCAN by pattern, never FLUSHDB)."""
    import redis  # (of the virtualenv that runs this file: the wheel's own dependency)

    client = redis.Redis.from_url(redis_url)
    try:
        patterns = (f"quasar:{{{namespace}}}*", f"quasar:{{{namespace}/*")
        keys = [k for p in patterns for k in client.scan_iter(match=p, count=1000)]
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        return len(keys)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("readme", type=Path)
    parser.add_argument("--venv", type=Path, required=True, help="where the wheel is installed")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("QUASAR_REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="the Redis the blocks use (default: QUASAR_REDIS_URL, else 127.0.0.1:6379/0)",
    )
    args = parser.parse_args(argv)
    blocks = parse(args.readme.read_text(encoding="utf-8"))
    namespace = f"readme-{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="quasar-readme-") as tmp:
        folder = Path(tmp) / "walk"
        folder.mkdir()
        walk = Walkthrough(folder, args.venv, args.redis_url, namespace)
        print(f"{args.readme}: {len(blocks)} blocks, in {folder}, namespace {namespace}")
        try:
            walk.run(blocks)
        except WalkthroughError as exc:
            print(f"\nREADME WALK-THROUGH FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            walk.abandon()
            deleted = delete_namespace(args.redis_url, namespace)
            print(f"namespace {namespace}: {deleted} keys deleted")
    ran = sum(1 for b in blocks if not b.skip_reason)
    print(f"README walked through: {ran} blocks run, {len(blocks) - ran} marked not run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
