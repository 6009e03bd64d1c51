"""What a user is told when something is wrong in the first hour: a server that wants a password
not given one, a wrong password, a database number the server does not have, a wait for a result
that timed out, a call its task's function cannot take, a task setting out of range.

Each is a typed error whose message names what was wrong and what to do, the same from both
clients (over RESP2 and RESP3, whose refusals differ in redis-py) and from the ``quasar``
command line, which says it in one line, exits 1 and does not try again (counted by the
connections the server received, never by time).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from redis.exceptions import AuthenticationWrongNumberOfArgsError

from quasar_redis import (
    App,
    AuthenticationError,
    ClaimApplied,
    ConfigurationError,
    InvalidArgument,
    InvalidTaskCall,
    JobHandle,
    JobRefusedError,
    JobTimeoutError,
    MissingDependency,
    NoSuchDatabase,
    QuasarError,
    RedisUnavailable,
    Task,
    _waits,
    chain,
    chord,
)
from quasar_redis._access import refusal
from quasar_redis._urls import redact_text
from quasar_redis.cli import main

from .helpers import NO_URL
from .locked_redis import PASSWORD, WRONG, LockedRedis, closed_port, locked
from .servers import RedisServer, server_in

__all__ = ["locked"]  # (the fixture)

#: The protocols redis-py speaks: RESP2 refuses with NOAUTH (or "unauthenticated multibulk
#: length" for a long first command), RESP3 with "HELLO must be called ...".
PROTOCOLS = ("2", "3")
KINDS = ("sync", "asyncio")
#: Each protocol through each client.
CASES = list(itertools.product(PROTOCOLS, KINDS))


def send_receipt(order_id: int, email: str) -> str:
    return f"{order_id} {email}"


def app_of(url: str) -> tuple[App, Task[..., Any]]:
    app = App(url, namespace="error-messages")
    task = app.task(send_receipt, queue="emails", name="send_receipt")
    return app, task


def raised(kind: str, app: App, sync: Callable[[], Any], aio: Callable[[], Awaitable[Any]]) -> Any:
    """The exception ``sync()`` raises, or on the asyncio client ``await aio()``."""
    if kind == "sync":
        with pytest.raises(Exception) as caught:
            sync()
        app.close()
        return caught.value

    async def scenario() -> BaseException:
        try:
            await aio()
        except Exception as exc:
            return exc
        finally:
            await app.aclose()
        raise AssertionError("nothing raised")

    return asyncio.run(scenario())


def enqueue_refusal(url: str, kind: str) -> Any:
    app, task = app_of(url)
    return raised(kind, app, lambda: task.enqueue(1, "a@b"), lambda: task.aenqueue(1, "a@b"))


def wait_refusal(url: str, kind: str) -> Any:
    """What a wait for a result raises: at once, not after its timeout."""
    app, _ = app_of(url)
    handle = JobHandle(app, "some-job")
    return raised(kind, app, lambda: handle.result(60), lambda: handle.aresult(60))


def refusals(url: str, kind: str) -> list[Any]:
    """What an enqueue and a wait for a result raise."""
    return [enqueue_refusal(url, kind), wait_refusal(url, kind)]


# --- a password wanted, or refused ----------------------------------------------------------


@pytest.mark.parametrize(("protocol", "kind"), CASES)
def test_a_server_that_wants_a_password_says_how_to_give_it(
    locked: LockedRedis, protocol: str, kind: str
) -> None:
    url = f"redis://127.0.0.1:{locked.port}/0?protocol={protocol}"
    for error in refusals(url, kind):
        assert isinstance(error, AuthenticationError), repr(error)
        assert str(error).startswith("this Redis needs a password: give it in the URL"), error
        assert "redis://:PASSWORD@host:port/db" in str(error)


@pytest.mark.parametrize(("protocol", "kind"), CASES)
@pytest.mark.parametrize("user", ["", "nobody"])
def test_a_wrong_password_or_an_unknown_user_is_said_so(
    locked: LockedRedis, protocol: str, kind: str, user: str
) -> None:
    password = WRONG if not user else PASSWORD
    url = f"{locked.url(user, password)}?protocol={protocol}"
    error = enqueue_refusal(url, kind)
    assert isinstance(error, AuthenticationError), repr(error)
    assert str(error).startswith("Redis refused the user or password ("), error
    assert password not in str(error)


# --- a database the server does not have ----------------------------------------------------


@pytest.fixture(scope="module")
def two_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of 2 databases (0 and 1), with a user that may not run CONFIG."""
    folder = tmp_path_factory.mktemp("two-databases")
    with server_in(folder, durable=False, config=("--databases", "2")) as server:
        server.start()
        admin: Any = redis.Redis.from_url(server.url)
        admin.execute_command("ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "+@all", "-config")
        admin.close()
        yield server


@pytest.mark.parametrize(("protocol", "kind"), CASES)
def test_a_database_the_server_lacks_is_a_configuration_error(
    two_databases: RedisServer, protocol: str, kind: str
) -> None:
    url = f"redis://127.0.0.1:{two_databases.port}/5?protocol={protocol}"
    for error in refusals(url, kind):
        assert isinstance(error, NoSuchDatabase) and isinstance(error, ConfigurationError)
        assert error.database == 5
        assert str(error) == (
            "Redis has no database 5 (it has 2: 0 to 1; see `databases` in redis.conf): pick "
            "one that exists in the URL's path (redis://host:port/0)"
        )


@pytest.mark.parametrize("kind", KINDS)
def test_a_database_the_server_lacks_is_told_where_config_is_refused(
    two_databases: RedisServer, kind: str
) -> None:
    url = f"redis://noconfig:pw@127.0.0.1:{two_databases.port}/5"
    error = enqueue_refusal(url, kind)
    assert isinstance(error, NoSuchDatabase), repr(error)
    assert str(error).startswith(
        "Redis has no database 5 (a server has 16 by default, 0 to 15, or as many as "
        "`databases` in redis.conf says): "
    ), error


# --- the command line: one line, exit 1, no retry -------------------------------------------

TASKS = """
from quasar_redis import App

app = App(namespace="error-messages")


@app.task(queue="emails")
def send(to: str) -> str:
    return to
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "error_tasks.py").write_text(TASKS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("error_tasks", None)


def connections(server: Any) -> int:
    """How many connections the server has received so far."""
    return int(server.info("stats")["total_connections_received"])


def run_cli(command: str, url: str) -> Result:
    if command == "queues":
        args = ["queues", "--redis-url", url]
    else:  # (a connect timeout long enough that a retry at start would be seen)
        args = ["worker", "error_tasks:app", "-q", "emails", "--burst", "--connect-timeout", "30"]
        args += ["--redis-url", url]
    return CliRunner().invoke(main, args, env=dict(NO_URL))


def one_error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("command", ["queues", "worker"])
def test_the_cli_says_a_password_is_wanted_once(
    locked: LockedRedis, project: Path, command: str
) -> None:
    admin = redis.Redis.from_url(locked.url())
    before = connections(admin)
    line = one_error_line(run_cli(command, f"redis://127.0.0.1:{locked.port}/0"))
    assert "this Redis needs a password: give it in the URL" in line, line
    assert connections(admin) - before <= 3  # (a retry at start would make dozens)
    line = one_error_line(run_cli(command, locked.url("", WRONG)))
    assert "Redis refused the user or password" in line and WRONG not in line, line


@pytest.mark.parametrize("command", ["queues", "worker"])
def test_the_cli_says_a_database_is_missing_once(
    two_databases: RedisServer, project: Path, command: str
) -> None:
    admin = redis.Redis.from_url(two_databases.url)
    before = connections(admin)
    line = one_error_line(run_cli(command, f"redis://127.0.0.1:{two_databases.port}/5"))
    assert (
        f"Redis at redis://127.0.0.1:{two_databases.port}/5: Redis has no database 5 (it has 2"
        in line
    )
    assert connections(admin) - before <= 3  # (a retry at start would make dozens)


# --- a wait for a result that timed out -----------------------------------------------------


def timed_out(kind: str, handle: JobHandle, timeout: float) -> JobTimeoutError:
    if kind == "sync":
        with pytest.raises(JobTimeoutError) as caught:
            handle.result(timeout)
        return caught.value

    async def scenario() -> JobTimeoutError:
        try:
            with pytest.raises(JobTimeoutError) as caught:
                await handle.aresult(timeout)
            return caught.value
        finally:
            await handle.app.aclose()

    return asyncio.run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_result_wait_that_times_out_names_the_job_and_where_it_stands(
    app: App, kind: str
) -> None:
    task = app.task(send_receipt, queue="emails", name="send_receipt")
    waiting = task.options(id="waiting-one").enqueue(1, "a@b")
    later = task.options(id="later-one", delay=3600).enqueue(2, "b@c")
    blocked = task.options(id="blocked-one", depends_on=[waiting]).enqueue(3, "c@d")
    error = timed_out(kind, waiting, 0.2)
    assert isinstance(error, TimeoutError)
    assert (error.job_id, error.timeout) == ("waiting-one", 0.2)
    assert str(error) == (
        "job 'waiting-one' did not finish within 0.2 s: it is still waiting in queue 'emails' "
        "(no worker has claimed it: `quasar workers` lists the queues each worker serves, "
        "`quasar queues` those paused)"
    )
    assert "it is scheduled to run at 20" in str(timed_out(kind, later, 0.05))
    assert "it is blocked on job 'waiting-one'" in str(timed_out(kind, blocked, 0.05))
    claimed = app.client.claim("emails", "worker-7", 60_000)
    assert isinstance(claimed, ClaimApplied) and claimed.claim.job.id == "waiting-one"
    running = str(timed_out(kind, waiting, 0.05))
    assert "it is running (attempt 1 of 3) on worker 'worker-7'" in running, running
    token = claimed.claim.token
    app.client.fail(token, "worker-7", "SMTP busy", retry_delay_ms=3_600_000, kind="SmtpBusy")
    retrying = str(timed_out(kind, waiting, 0.05))
    assert "attempt 1 of 3 failed (SMTP busy); it is retried at 20" in retrying, retrying
    assert retrying.endswith(" in queue 'emails'"), retrying


def test_a_chord_wait_that_times_out_names_its_callback(app: App) -> None:
    task = app.task(send_receipt, queue="emails", name="send_receipt")
    collect = app.task(collect_all, queue="emails", name="collect_all")
    handle = chord([task.s(1, "a@b"), task.s(2, "b@c")], collect.s()).enqueue()
    with pytest.raises(JobTimeoutError) as caught:
        handle.result(0.1)
    assert caught.value.job_id == handle.last.id
    assert "it waits for 2 member(s) of chord" in str(caught.value)


def collect_all(results: list[str]) -> int:
    return len(results)


# --- a call its task's function cannot take -------------------------------------------------

SIGNATURE = "the function is send_receipt(order_id: int, email: str) -> str"


def test_an_unknown_keyword_is_named_with_the_parameter_meant(app: App) -> None:
    task: Task[..., Any] = app.task(send_receipt, queue="emails", name="send_receipt")
    said = "task 'send_receipt': unexpected keyword argument 'mail' (did you mean 'email'?); "
    calls: list[Callable[[], Any]] = [
        lambda: task.enqueue(42, mail="a@b"),
        lambda: task.job(42, mail="a@b"),
        lambda: app.enqueue_many([task.job(42, mail="a@b")]),
        lambda: chain(task.s(42, mail="a@b"), task.s(1)).enqueue(),
    ]
    for call in calls:
        with pytest.raises(InvalidTaskCall) as caught:
            call()
        assert str(caught.value) == said + SIGNATURE

    async def scenario() -> None:
        try:
            with pytest.raises(InvalidTaskCall) as caught:
                await task.aenqueue(42, mail="a@b")
            assert str(caught.value) == said + SIGNATURE
        finally:
            await app.aclose()

    asyncio.run(scenario())


def test_too_many_positional_arguments_are_counted(app: App) -> None:
    task: Task[..., Any] = app.task(send_receipt, queue="emails", name="send_receipt")
    with pytest.raises(InvalidTaskCall) as caught:
        task.enqueue(42, "a@b", "extra")
    said = "task 'send_receipt': 3 positional arguments given, but it takes 2; "
    assert str(caught.value) == said + SIGNATURE
    with pytest.raises(InvalidTaskCall) as caught:  # a later step: the result comes first
        chain(task.s(42, "a@b"), task.s(1, "b@c")).enqueue()
    assert str(caught.value) == (
        "task 'send_receipt': 3 positional arguments given, but it takes 2; "
        f"{SIGNATURE} (its first argument is the previous step's result)"
    )


# --- a task setting out of range ------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ({"max_attempts": 0}, "max_attempts must be >= 1: got 0"),
        ({"lease_ms": 0}, "lease_ms must be None or milliseconds >= 1: got 0"),
        ({"result_ttl": -1}, "result_ttl must be None or seconds >= 0: got -1"),
    ],
)
def test_a_task_setting_out_of_range_names_the_task_and_the_value(
    setting: dict[str, Any], said: str
) -> None:
    app = App("memory://", namespace="error-messages")
    with pytest.raises(InvalidArgument) as caught:
        app.task(send_receipt, name="send_receipt", **setting)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == f"task 'send_receipt': {said}"


# --- an enqueue Redis refused, and an option or a name mistaken -----------------------------


def test_a_refused_enqueue_names_the_task_the_queue_and_why(app: App) -> None:
    task: Task[..., Any] = app.task(send_receipt, queue="emails", name="send_receipt")
    with pytest.raises(JobRefusedError) as caught:
        task.options(depends_on=["no-such-job"]).enqueue(1, "a@b")
    assert str(caught.value) == (
        "task 'send_receipt': enqueue to queue 'emails' refused: its dependency 'no-such-job' "
        "does not exist (never enqueued, or pruned) (MissingDependency)"
    )
    assert caught.value.error == MissingDependency("no-such-job")
    twice = [task.options(id="same").job(1, "a@b"), task.options(id="same").job(2, "b@c")]
    with pytest.raises(JobRefusedError) as caught:
        app.enqueue_many(twice)
    assert str(caught.value) == (
        "task 'send_receipt' (id 'same'): enqueue to queue 'emails' refused: job 'same' exists "
        "already, or is twice in the batch (DuplicateJob); job 1 of a batch of 2: nothing of it "
        "enqueued"
    )


def test_an_unknown_option_and_a_name_declared_twice_are_named(app: App) -> None:
    task: Task[..., Any] = app.task(send_receipt, queue="emails", name="send_receipt")
    with pytest.raises(TypeError) as caught:
        task.options(max_atempts=5)
    assert str(caught.value).startswith(
        "task 'send_receipt': options() has no option 'max_atempts' (did you mean "
        "'max_attempts'?); the options: id, queue, priority, max_attempts,"
    )
    with pytest.raises(QuasarError) as declared:
        app.task(send_receipt, name="send_receipt")
    assert str(declared.value) == (
        "a task named 'send_receipt' is declared twice: give one of them a name of its own "
        "(@app.task(name=...))"
    )


def test_the_url_forms_messages_show_are_not_taken_for_credentials() -> None:
    said = "give it in the URL (redis://:PASSWORD@host:port/db, or redis://USER:PASSWORD@host)"
    assert redact_text(said) == said
    assert redact_text("redis://:PASSWORDS@host") == "redis://:***@host"
    assert redact_text("redis://USER:hunter2@host") == "redis://USER:***@host"


def test_a_password_where_the_server_has_none_is_said_so(two_databases: RedisServer) -> None:
    url = f"redis://:some-pw@127.0.0.1:{two_databases.port}/0?protocol=2"  # (AUTH: RESP2)
    error = enqueue_refusal(url, "sync")
    assert isinstance(error, AuthenticationError), repr(error)
    assert str(error).startswith("the URL gives a password, but this Redis has none set"), error


@pytest.mark.parametrize(
    ("error", "kind", "said"),
    [
        (
            redis.ResponseError("NOAUTH Authentication required."),
            AuthenticationError,
            "needs a password",
        ),
        (
            redis.AuthenticationError("Authentication required."),
            AuthenticationError,
            "needs a password",
        ),
        (
            redis.ResponseError("Protocol error: unauthenticated multibulk length"),
            AuthenticationError,
            "needs a password",
        ),
        (
            redis.ResponseError("WRONGPASS invalid username-password pair"),
            AuthenticationError,
            "refused the user or password",
        ),
        (
            AuthenticationWrongNumberOfArgsError("wrong number"),
            AuthenticationError,
            "before Redis 6",
        ),
        (redis.ResponseError("ERR invalid DB index"), NoSuchDatabase, "no database 3"),
        (redis.ResponseError("job 'noauth-1' is not DB index is out of range"), None, ""),
        (redis.ConnectionError("Connection refused"), None, ""),
    ],
)
def test_what_each_refusal_is_read_as(error: Exception, kind: type | None, said: str) -> None:
    found = refusal(error, 3)
    assert (found is None) if kind is None else isinstance(found, kind), repr(found)
    assert said in str(found)


def test_a_wait_given_up_on_an_unreachable_redis_names_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_waits, "OUTAGE_S", 0.0)  # (given up at the first failure)
    app = App(f"redis://127.0.0.1:{closed_port()}/0", namespace="error-messages")
    with pytest.raises(RedisUnavailable) as caught:
        JobHandle(app, "some-job").result()
    app.close()
    assert str(caught.value).startswith("waiting for job 'some-job': Redis was away for 0s: ")
