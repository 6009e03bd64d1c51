"""Redis as deployments run it, started by a test on free ports and stopped by pid at its end:
a server that speaks only TLS (its CA and certificate made here with ``openssl``), and a primary
with a replica watched by three Redis Sentinels."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from .helpers import free_port, real_redis, server_bin, wait_for

SERVICE = "quasar-primary"


def _tools() -> str:
    """The server binary, once the real-Redis skip / fail rule passed and openssl is there."""
    real_redis().close()  # the same skip / fail rule as the other real-Redis tests
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not on PATH")
    return server_bin()


def _start(args: list[str], folder: Path, name: str) -> subprocess.Popen[bytes]:
    log = folder / f"{name}.log"
    return subprocess.Popen(
        [*args, "--logfile", str(log)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _answers(client: Any, proc: subprocess.Popen[bytes], log: Path) -> bool:
    if proc.poll() is not None:
        pytest.fail(f"redis-server exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


# --- TLS -----------------------------------------------------------------------------------------


@dataclass
class TlsRedis:
    """A redis-server on ``port`` that speaks TLS only, its certificate signed by the CA
    ``ca`` made for it (for 127.0.0.1 and localhost)."""

    port: int
    ca: Path

    def url(self, query: str = "") -> str:
        return f"rediss://127.0.0.1:{self.port}/0" + (f"?{query}" if query else "")

    @property
    def trusted_url(self) -> str:
        return self.url(f"ssl_ca_certs={self.ca}")


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server key and certificate it signed: (ca.pem, server.key, server.pem)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=quasar test CA")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1")  # fmt: skip
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    signing = ["-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-extfile", "san.cnf"]
    openssl("x509", "-req", "-in", "server.csr", *signing, "-out", "server.pem", "-days", "2")
    return folder / "ca.pem", folder / "server.key", folder / "server.pem"


@contextmanager
def tls_redis(folder: Path) -> Iterator[TlsRedis]:
    binary = _tools()
    ca, key, cert = make_certificates(folder)
    port = free_port()
    args = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
    args += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    args += ["--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]
    args += ["--save", "", "--appendonly", "no", "--dir", str(folder)]
    proc = _start(args, folder, "tls")
    server = TlsRedis(port, ca)
    client = redis.Redis.from_url(server.trusted_url, socket_timeout=2)
    try:
        wait_for(lambda: _answers(client, proc, folder / "tls.log"), 20, "a TLS redis-server")
        yield server
    finally:
        client.close()
        _stop([proc])


# --- Sentinel ------------------------------------------------------------------------------------


@dataclass
class SentinelGroup:
    """A primary and a replica on ``data_ports``, three sentinels on ``sentinel_ports`` watching
    them as ``SERVICE``."""

    data_ports: list[int]
    sentinel_ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def sentinel(self, port: int) -> Any:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, decode_responses=True)

    def primary_port(self) -> int | None:
        """The primary's port as the first sentinel names it."""
        with self.sentinel(self.sentinel_ports[0]) as s:
            found = s.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
        return int(found[1]) if found else None

    def role(self, port: int) -> str:
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=2) as node:
            role = node.execute_command("ROLE")[0]
        return role.decode() if isinstance(role, bytes) else str(role)

    def ready(self) -> bool:
        """The replica is in sync, and every sentinel knows the primary, its replica and the two
        other sentinels."""
        with redis.Redis(host="127.0.0.1", port=self.data_ports[1], socket_timeout=2) as node:
            if node.info("replication").get("master_link_status") != "up":
                return False
        for port in self.sentinel_ports:
            with self.sentinel(port) as s:
                fields = s.sentinel_master(SERVICE)  # (redis-py makes it a dict)
                if int(fields["num-slaves"]) < 1 or int(fields["num-other-sentinels"]) < 2:
                    return False
        return True


@contextmanager
def sentinel_group(folder: Path) -> Iterator[SentinelGroup]:
    binary = _tools()
    group = SentinelGroup([free_port(), free_port()], [free_port() for _ in range(3)])
    primary, replica = group.data_ports
    base = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)]
    base += ["--repl-diskless-sync-delay", "0"]
    try:
        group.procs.append(_start([binary, "--port", str(primary), *base], folder, "p"))
        follow = ["--replicaof", "127.0.0.1", str(primary)]
        group.procs.append(_start([binary, "--port", str(replica), *follow, *base], folder, "r"))
        for port in group.sentinel_ports:
            config = folder / f"sentinel-{port}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 2000\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
            )
            group.procs.append(_start([binary, str(config), "--sentinel"], folder, f"s{port}"))

        def up() -> bool:
            try:
                return group.ready()
            except redis.RedisError:
                return False

        wait_for(up, 60, "three sentinels that see the primary, its replica and each other", 0.2)
        yield group
    finally:
        _stop(group.procs)
