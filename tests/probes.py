"""Worker processes with health endpoints, and the probes' answers, for ``test_worker_health``
and ``test_deploy_recipes``: a ``quasar worker`` command run as a process of its own (its output
kept in a file), and ``answer(url)``: the status and the body of a GET."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent


def answer(url: str) -> tuple[int, Any] | None:
    """The status and body (JSON decoded, when it is) of a GET of ``url``; None while nothing
    listens there."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except OSError:
        return None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


@dataclass
class Process:
    """A command run in ``cwd`` with ``env``; its output in ``log_path``."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls, command: Sequence[str], *, cwd: Path, env: dict[str, str], log_path: Path
    ) -> Process:
        # (the tests' own checkout first, wherever the command runs)
        env = {**os.environ, **env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        return cls(proc, log_path)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def answer(self, url: str) -> tuple[int, Any] | None:
        """``answer(url)``, failing the test if the process exited meanwhile."""
        if self.proc.poll() is not None:
            pytest.fail(f"exited ({self.proc.returncode}):\n{self.output()[-3000:]}")
        return answer(url)

    def wait_status(self, url: str, status: int, timeout: float = 60.0) -> Any:
        """The body of the first answer of ``url`` with ``status``."""

        def answered() -> tuple[int, Any] | None:
            got = self.answer(url)
            return got if got is not None and got[0] == status else None

        found = wait_for(answered, timeout, f"{url} to answer {status}", every=0.1)
        return found[1]

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (once), then the exit code (``wait_exit``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = 60.0) -> int:
        """The exit code (SIGKILL and a failure after ``timeout``)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            pytest.fail(f"did not stop in {timeout}s:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def quasar(*args: str) -> list[str]:
    """The ``quasar`` command line of this interpreter."""
    return [sys.executable, "-m", "quasar_redis", *args]
