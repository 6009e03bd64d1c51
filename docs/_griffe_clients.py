"""A griffe extension for the API reference: the clients' methods made from ``Operations``.

``Quasar`` and ``AsyncQuasar`` declare most methods as ``claim = blocking(Operations.claim)``
(``coroutine(...)`` in the asyncio client), which a reader of the source sees as attributes. At
run time each is the method ``Operations.claim`` documents (``_operations.public``); this shows
it so in the reference: its parameters and docstring, returning what the call's result is.
"""

from __future__ import annotations

from typing import Any

import griffe

#: The class of each client, and its wrapper: ``coroutine`` makes async methods.
CLIENTS = {"client.Quasar": "blocking", "aio.AsyncQuasar": "coroutine"}


class ClientOperations(griffe.Extension):
    """Turns ``name = blocking(Operations.name)`` members into the methods they are."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "quasar_redis":
            return
        operations = pkg["_operations.Operations"]
        for path, wrapper in CLIENTS.items():
            client = pkg[path]
            for name, member in list(client.members.items()):
                if wrapped(member, wrapper):
                    client.set_member(name, method(operations[name], member, wrapper))


def wrapped(member: griffe.Object | griffe.Alias, wrapper: str) -> bool:
    """Whether ``member`` is an attribute whose value is ``wrapper(Operations.<its name>)``."""
    value = getattr(member, "value", None)
    return (
        isinstance(value, griffe.ExprCall)
        and str(value.function) == wrapper
        and [str(a) for a in value.arguments] == [f"Operations.{member.name}"]
    )


def method(build: griffe.Function, member: griffe.Object | griffe.Alias, wrapper: str) -> Any:
    """The method sending what ``build`` makes, where ``member`` stands in the source."""
    returns = build.returns
    if isinstance(returns, griffe.ExprSubscript) and str(returns.left) == "Call":
        returns = returns.slice  # (the method returns the call's result)
    parameters = griffe.Parameters(
        *(
            griffe.Parameter(p.name, annotation=p.annotation, kind=p.kind, default=p.default)
            for p in build.parameters
        )
    )
    made = griffe.Function(
        member.name,
        lineno=member.lineno,
        endlineno=member.endlineno,
        parameters=parameters,
        returns=returns,
    )
    if build.docstring is not None:
        made.docstring = griffe.Docstring(
            build.docstring.value, lineno=build.docstring.lineno, parent=made
        )
    if wrapper == "coroutine":
        made.labels.add("async")
    return made
