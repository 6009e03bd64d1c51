"""A task call is checked before anything is sent: arguments the function cannot take are
refused at enqueue (``InvalidTaskCall``, an ``InvalidArgument``) and nothing reaches Redis; a
task declared in a file run as a script is refused when it is declared."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from quasar_redis import (
    App,
    ConfigurationError,
    InvalidArgument,
    InvalidJob,
    InvalidTaskCall,
    JobRefusedError,
    NewJob,
    Task,
    Unique,
)

from .helpers import REDIS_URL, app_url, snapshot


@pytest.fixture
def app(backend: str, namespace: str) -> Iterator[App]:
    with app_url(backend, namespace) as url, App(url, namespace=namespace) as made:
        yield made


def add(a: int, b: int) -> int:
    return a + b


def greet(name: str, *, greeting: str = "hello") -> str:
    return f"{greeting} {name}"


def many(*items: int, **labels: str) -> int:
    return len(items) + len(labels)


def refused(app: App, call: Any) -> InvalidTaskCall:
    """The refusal ``call()`` raises; nothing of the namespace is in Redis after it."""
    before = snapshot(app.client)
    with pytest.raises(InvalidTaskCall) as caught:
        call()
    assert snapshot(app.client) == before == {}
    error = caught.value
    assert isinstance(error, InvalidArgument) and isinstance(error, JobRefusedError)
    assert isinstance(error.error, InvalidJob)
    return error


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        ((1,), {}, "missing a required argument: 'b'"),
        ((1, 2, 3), {}, "3 positional arguments given, but it takes 2"),
        ((1, 2), {"c": 3}, "unexpected keyword argument 'c'"),
        ((1,), {"a": 2}, "multiple values for argument 'a'"),
    ],
)
def test_arguments_the_function_cannot_take_are_refused_at_enqueue(
    app: App, args: tuple[Any, ...], kwargs: dict[str, Any], says: str
) -> None:
    task: Task[..., Any] = app.task(add, name="add")
    error = refused(app, lambda: task.enqueue(*args, **kwargs))
    reason = f"{says}; the function is add(a: int, b: int) -> int"
    assert str(error) == f"task 'add': {reason}"
    assert error.task == "add" and error.error.reason == reason


def test_keyword_only_and_variadic_signatures_are_bound(app: App) -> None:
    hello: Task[..., Any] = app.task(greet, name="greet")
    counted = app.task(many, name="many")
    assert "2 positional arguments given, but it takes 1 (greeting by keyword only)" in str(
        refused(app, lambda: hello.enqueue("a", "hi"))
    )
    assert hello.enqueue("a", greeting="hi").info() is not None
    assert counted.enqueue(1, 2, 3, x="y").info() is not None
    assert counted.enqueue().info() is not None


def test_task_job_and_enqueue_many_refuse_before_sending(app: App) -> None:
    task: Task[..., Any] = app.task(add, name="add")
    refused(app, lambda: task.job(1))
    refused(app, lambda: app.enqueue_many([task.job(1, 2), task.job(b=2)]))
    assert [h.info() is not None for h in app.enqueue_many([task.job(1, 2)])] == [True]


def test_aenqueue_refuses_too(app: App) -> None:
    task: Task[..., Any] = app.task(add, name="add")

    async def scenario() -> None:
        try:
            await task.aenqueue(1)
        finally:
            await app.aclose()

    refused(app, lambda: asyncio.run(scenario()))


def test_the_signature_is_read_once_per_task(app: App) -> None:
    task: Task[..., Any] = app.task(add, name="add")
    assert task.call_check is task.call_check
    assert task.call_check.fewest == 2 and task.call_check.most == 2  # counted, not bound


def test_keyword_calls_of_plain_parameters_are_checked_as_binding_would() -> None:
    # A function of plain parameters: a call with keywords is looked up, not bound, and takes
    # exactly what binding takes (a call that does not fit is bound, for Python's own words);
    # its arguments are named as binding names them.
    import inspect
    import itertools

    from quasar_redis._binding import CallCheck

    def fn(a: int, b: int, c: int = 3, d: int = 4) -> None: ...

    check, signature = CallCheck(fn), inspect.signature(fn)
    for given in range(6):
        for n in range(4):
            for keys in itertools.combinations("abcde", n):
                args, kwargs = tuple(range(given)), dict.fromkeys(keys, 0)
                try:
                    signature.bind(*args, **kwargs)
                    takes = True
                except TypeError:
                    takes = False
                assert check._fits(args, kwargs) is takes, (args, kwargs)
                assert (check.problem(args, kwargs) is None) is takes
                if takes:  # each argument under its parameter's name, in their order
                    named = check.named(args, kwargs)
                    bound = signature.bind(*args, **kwargs).arguments
                    assert list(named.items()) == list(bound.items())


def in_a_script(fn: Any) -> Any:
    """``fn`` as if declared in a file run as a script (``python tasks.py``)."""
    fn.__module__ = "__main__"
    return fn


def test_a_tasks_job_holds_each_option_in_its_own_field(app: App) -> None:
    """A task builds its job's fields by position: each option lands in the field of its name."""

    @app.task(name="opts", queue="q9", priority=3, max_attempts=7)
    def opts(x: int) -> None:
        del x

    variant = opts.options(
        id="job-1", delay=2.5, run_at=None, depends_on=["d1"], on_dependency_failure="run",
        deadline=4_000_000_000.0, dedup=Unique("k"), input_revision=2, group="g1", batch="b1",
    )  # fmt: skip
    made = variant.job(5)
    expected = NewJob(
        stage="opts", payload=made.payload, id="job-1", queue="q9", input_ref="inline",
        input_revision=2, dependencies=["d1"], priority=3, max_attempts=7, available_at=None,
        delay_ms=2_500, on_dependency_failure="run", flow=None, deadline=4_000_000_000_000,
        expires_in_ms=None, dedup=Unique("k"), group="g1", batch="b1",
    )  # fmt: skip
    assert made == expected
    later = opts.options(run_at=3_000_000_000.0, expires_in=60.0, flow="f1").job(6)
    assert (later.available_at, later.expires_in_ms, later.flow) == (
        3_000_000_000_000,
        60_000,
        "f1",
    )
    assert (later.queue, later.priority, later.max_attempts, later.delay_ms) == ("q9", 3, 7, None)


def test_a_task_declared_in_a_script_is_refused_with_what_to_do() -> None:
    app = App(REDIS_URL)  # (declaring connects to nothing)

    def send(to: str) -> None: ...

    with pytest.raises(ConfigurationError) as caught:
        app.task(in_a_script(send))
    message = str(caught.value)
    assert "__main__" in message and "@app.task(name=" in message and "Import the task" in message
    assert app.tasks == {}
    named = app.task(in_a_script(send), name="send")  # a name the worker uses too: fine
    assert app.tasks == {"send": named}


def test_a_script_on_the_embedded_server_may_declare_tasks() -> None:
    def send(to: str) -> None: ...

    app = App("memory://")
    assert app.task(in_a_script(send)).name.startswith("__main__.")


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"delay": float("inf")}, "delay must be a finite number of seconds, not inf"),
        ({"delay": float("nan")}, "delay must be a finite number of seconds, not nan"),
        ({"run_at": float("-inf")}, "run_at must be a finite number of seconds, not -inf"),
    ],
)
def test_a_time_that_is_no_number_of_seconds_is_refused(
    app: App, options: dict[str, Any], says: str
) -> None:
    task: Task[..., Any] = app.task(add, name="add")
    assert refused(app, lambda: task.options(**options).enqueue(1, 2)).error.reason == says


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"max_attempts": 0}, "max_attempts must be positive"),
        ({"queue": ""}, "queue must be 1-64 characters"),
    ],
)
def test_an_option_given_is_checked_not_replaced_by_the_tasks_own(
    app: App, options: dict[str, Any], says: str
) -> None:
    task: Task[..., Any] = app.task(add, name="add", max_attempts=5, queue="q")
    with pytest.raises(JobRefusedError) as caught:
        task.options(**options).enqueue(1, 2)
    assert isinstance(caught.value.error, InvalidJob) and says in caught.value.error.reason
    assert snapshot(app.client) == {}
