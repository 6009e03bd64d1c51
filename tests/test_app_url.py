"""Where an App runs: the URL given, else the environment's, else a refusal; and what it closes."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from quasar_redis import App, ConfigurationError, Connector
from quasar_redis.cli import main

from .helpers import NO_URL, REDIS_URL, delete_namespace, real_redis

NOBODY = "redis://127.0.0.1:1/0"  # no server listens there


@pytest.fixture
def no_url(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in NO_URL:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.fixture
def on_real_redis(namespace: str) -> Iterator[str]:
    """The real server's URL; the namespace's keys are deleted after the test."""
    client = real_redis()
    try:
        yield REDIS_URL
    finally:
        delete_namespace(client, namespace)
        client.close()


def enqueue_one(app: App) -> str:
    @app.task(name="noop")
    def noop() -> None: ...

    return noop.enqueue().id


def test_an_app_without_a_url_refuses_its_first_connection_and_names_the_variable(
    no_url: pytest.MonkeyPatch,
) -> None:
    app = App()  # declared, tasks too, without a URL: nothing connects yet
    task = app.task(name="noop")(lambda: None)
    connector = Connector()
    for connect in (task.enqueue, lambda: app.client, connector.sync, lambda: connector.url):
        with pytest.raises(ConfigurationError) as refused:
            connect()
        assert "QUASAR_REDIS_URL" in str(refused.value)
        assert "memory://" in str(refused.value)  # how to ask for the embedded server
    no_url.setenv("QUASAR_REDIS_URL", "")  # set but empty: as good as unset
    with pytest.raises(ConfigurationError, match="QUASAR_REDIS_URL"):
        App().client.redis.ping()


def test_a_url_that_is_not_text_is_refused_at_once_and_says_what_to_give() -> None:
    client = real_redis()
    try:
        for wrong in (client, b"redis://127.0.0.1:6379/0", 6379):
            for make in (App, Connector):
                with pytest.raises(ConfigurationError) as refused:
                    make(wrong)  # type: ignore[arg-type]
                text = str(refused.value)
                assert type(wrong).__qualname__ in text
                assert "redis://" in text and "Quasar(client, namespace)" in text
    finally:
        client.close()


def test_quasar_redis_url_comes_before_redis_url(
    no_url: pytest.MonkeyPatch, on_real_redis: str, namespace: str
) -> None:
    no_url.setenv("QUASAR_REDIS_URL", on_real_redis)
    no_url.setenv("REDIS_URL", NOBODY)
    with App(namespace=namespace) as app:
        assert app.connector.url == on_real_redis and not app.connector.embedded
        job_id = enqueue_one(app)
    with App(on_real_redis, namespace=namespace) as seen:
        assert seen.handle(job_id).info() is not None  # in the server other processes see


def test_redis_url_is_taken_without_quasar_redis_url(
    no_url: pytest.MonkeyPatch, on_real_redis: str, namespace: str
) -> None:
    no_url.setenv("REDIS_URL", on_real_redis)
    with App(namespace=namespace) as app:
        assert app.connector.url == on_real_redis
        assert app.handle(enqueue_one(app)).info() is not None


def test_a_url_given_comes_before_the_environment(no_url: pytest.MonkeyPatch) -> None:
    no_url.setenv("QUASAR_REDIS_URL", NOBODY)
    assert App("memory://").connector.embedded
    assert Connector("memory://").url == "memory://"


def test_memory_runs_on_an_embedded_server_private_to_the_app(no_url: pytest.MonkeyPatch) -> None:
    with App("memory://") as app, App("memory://") as other:
        assert app.connector.embedded
        job_id = enqueue_one(app)
        assert app.handle(job_id).info() is not None
        assert other.handle(job_id).info() is None

        async def through_asyncio() -> bool:
            async with app:
                return await app.aclient().get_job(job_id) is not None  # the same server

        assert asyncio.run(through_asyncio())


def opened(name: str) -> int:
    """How many connections named ``name`` the real server has."""
    client = real_redis()
    try:
        return sum(1 for c in client.client_list() if c.get("name") == name)
    finally:
        client.close()


def all_closed(name: str) -> bool:
    """Whether the connections named ``name`` are gone within 2 s (they go as it reads EOF)."""
    deadline = time.monotonic() + 2
    while opened(name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def named_url(name: str) -> str:
    return f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}client_name={name}"


def test_with_closes_the_sync_client(namespace: str) -> None:
    real_redis().close()  # skip (or fail under QUASAR_REQUIRE_REDIS=1) without a server
    name = f"quasar-test-{uuid.uuid4().hex[:8]}"
    with App(named_url(name), namespace=namespace) as app:
        app.client.counts("default")
        assert opened(name) == 1
    assert all_closed(name)


def test_async_with_closes_the_asyncio_and_sync_clients(namespace: str) -> None:
    real_redis().close()
    name = f"quasar-test-{uuid.uuid4().hex[:8]}"

    async def main() -> tuple[int, bool]:
        async with App(named_url(name), namespace=namespace) as app:
            await app.aclient().counts("default")
            app.client.counts("default")
            before = opened(name)
        return before, all_closed(name)  # (while the app is referenced: nothing closed by GC)

    assert asyncio.run(main()) == (2, True)


# --- the command line ------------------------------------------------------------------------


def test_the_cli_reads_quasar_redis_url_first(on_real_redis: str, namespace: str) -> None:
    env = {"QUASAR_REDIS_URL": on_real_redis, "REDIS_URL": NOBODY}
    result = CliRunner().invoke(main, ["example", "--namespace", namespace], env=env)
    assert result.exit_code == 0, result.output
    assert f"namespace {namespace!r} on {on_real_redis}" in result.output


def test_the_cli_takes_memory_as_a_url() -> None:
    args = ["example", "--redis-url", "memory://", "--namespace", "mem"]
    result = CliRunner().invoke(main, args, env={"QUASAR_REDIS_URL": NOBODY})
    assert result.exit_code == 0, result.output
    assert "namespace 'mem' on an embedded fakeredis server" in result.output


def test_events_refuses_the_embedded_server() -> None:
    args = ["events", "--redis-url", "memory://", "--namespace", "ns", "--no-follow"]
    result = CliRunner().invoke(main, args, env=NO_URL)
    assert result.exit_code == 2
    assert "memory:// is an embedded server of one process" in result.output
