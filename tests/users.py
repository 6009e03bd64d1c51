"""Users of the session's private server for the tests of permissions (users are server-wide:
never made on the shared server): each with its roles' rules (``quasar_redis.acl.setuser``), on
a server without functions the rules that take scripts instead."""

from __future__ import annotations

import uuid
from typing import Any

import redis

from quasar_redis.acl import scripts_instead, setuser

from .helpers import delete_namespace
from .servers import RedisServer


class Users:
    """Makes users on the private server (deleted at the end) and clients logged in as them."""

    def __init__(self, server: RedisServer, namespace: str) -> None:
        self.url, self.namespace = server.url, namespace
        self.admin: Any = redis.Redis.from_url(server.url)
        self.names: list[str] = []
        self.opened: list[redis.Redis] = []

    def make(
        self,
        roles: list[str],
        *,
        without: tuple[str, ...] = (),
        keys: list[str] | None = None,
        paths: Any = "both",
    ) -> Any:
        """A client of a new user of ``roles`` on the namespace, lacking ``without`` (rules,
        such as "+xadd"); ``keys``: its key patterns instead of the namespace's."""
        name, password = f"u-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex

        def words_of(paths: Any) -> list[str]:
            words = setuser(name, roles, [self.namespace], password=password, paths=paths)
            words = [w for w in words if w not in without]
            if keys is not None:
                words = [w for w in words if not w.startswith("~")] + keys
            return words

        try:
            self.admin.execute_command(*words_of(paths))
        except redis.ResponseError as exc:  # (a server without functions: Redis 6.2)
            if not scripts_instead(exc, paths):
                raise
            self.admin.execute_command(*words_of("scripts"))
        self.names.append(name)
        client: Any = redis.Redis.from_url(self.url, username=name, password=password)
        self.opened.append(client)
        return client

    def url_of(self, client: redis.Redis) -> str:
        kw = client.connection_pool.connection_kwargs
        return f"redis://{kw['username']}:{kw['password']}@127.0.0.1:{kw['port']}/0"

    def grant(self, client: redis.Redis, *words: str) -> None:
        self.admin.execute_command(
            "ACL", "SETUSER", client.connection_pool.connection_kwargs["username"], *words
        )

    def close(self) -> None:
        for client in self.opened:
            client.close()
        for name in self.names:
            self.admin.execute_command("ACL", "DELUSER", name)
        delete_namespace(self.admin, self.namespace)
        self.admin.close()
