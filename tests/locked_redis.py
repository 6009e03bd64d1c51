"""A ``redis-server`` that wants a password, with ACL users, for the tests of refused credentials
and of redaction: started on a free port for a test module, stopped by pid at its end."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from .helpers import free_port, real_redis, server_bin, wait_for

PASSWORD = "s3cret-pw"
WRONG = "hunter2-pw"


@dataclass
class LockedRedis:
    """A redis-server that wants a password, with ACL users: ``confined`` may use only keys
    ``other:*``; ``mute`` may run no command."""

    port: int
    proc: subprocess.Popen[bytes]

    def url(self, user: str = "", password: str = PASSWORD) -> str:
        return f"redis://{user}:{password}@127.0.0.1:{self.port}/0"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedRedis]:
    real_redis().close()  # the same skip / fail rule as the other real-Redis tests
    folder = tmp_path_factory.mktemp("locked")
    port = free_port()
    args = [server_bin(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--requirepass", PASSWORD, "--dir", str(folder)]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    server = LockedRedis(port, proc)
    client: Any = redis.Redis.from_url(server.url(), socket_timeout=2)
    try:
        wait_for(lambda: _answers(client, proc), 20, f"redis-server on port {port}")
        client.execute_command("ACL", "SETUSER", "confined", "on", f">{PASSWORD}", "~other:*")
        client.execute_command("ACL", "SETUSER", "confined", "+@all")
        client.execute_command("ACL", "SETUSER", "mute", "on", f">{PASSWORD}", "~*", "-@all")
        yield server
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _answers(client: Any, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"redis-server exited ({proc.returncode})"
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def closed_port() -> int:
    """A port nothing listens on (bound a moment ago, then freed)."""
    return free_port()
