"""A server of a test's own (``QUASAR_TEST_SERVER_BIN``: ``redis-server`` by default), on a free
port: for a test that kills and restarts its server, and for the tests that change what the whole
server holds (SCRIPT FLUSH, FUNCTION DELETE), which on the shared server would pull the scripts
from under another copy of the suite running beside this one."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from .helpers import SERVER_VERSION, free_port, real_redis, server_bin, wait_for

#: What lets a server of a test's own take DEBUG: off by default since Redis 7 (and in Valkey);
#: Redis 6.2 always takes it and knows no such option.
DEBUG_ON = ("--enable-debug-command", "local") if SERVER_VERSION >= (7,) else ()


@dataclass
class RedisServer:
    """A ``redis-server`` in ``folder``; ``durable``: AOF on, fsynced as ``fsync`` says
    (``always``: before every reply, for a test that kills it and counts what survived), else no
    persistence at all. ``config``: more ``--name value`` arguments, kept across restarts."""

    folder: Path
    durable: bool = True
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    fsync: str = "always"
    config: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [server_bin(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", self.fsync] if self.durable else []
        args += ["--dir", str(self.folder), "--logfile", str(self.folder / "redis.log")]
        args += self.config
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        # (a probe of the server starting: a short timeout of its own, so that each try is quick)
        client = redis.Redis.from_url(self.url, socket_timeout=2)
        try:
            wait_for(lambda: self._answers(client), 20, f"redis-server on port {self.port}", 0.05)
        finally:
            client.close()

    def _answers(self, client: redis.Redis) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = (self.folder / "redis.log").read_text(errors="replace")
            pytest.fail(f"redis-server exited ({self.proc.returncode}):\n{log[-3000:]}")
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def log(self) -> str:
        """What the server logged (every start of it, in order)."""
        path = self.folder / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextlib.contextmanager
def server_in(
    folder: Path, *, durable: bool, fsync: str = "always", config: tuple[str, ...] = ()
) -> Iterator[RedisServer]:
    """A server (not started yet) kept in ``folder``, killed at the end; the same skip / fail
    rule as the other real-Redis tests."""
    real_redis().close()
    server_bin()
    folder.mkdir(exist_ok=True)
    server = RedisServer(folder, durable, fsync=fsync, config=config)
    try:
        yield server
    finally:
        server.kill()
