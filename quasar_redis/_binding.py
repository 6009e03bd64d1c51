"""Checks of a task call made before anything is sent: the arguments against the function's
signature, the values against the app's serializer, and the name a task gets from its module."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .serializers import name_of

_SIMPLE = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD


class CallCheck:
    """The signature of a task's function, read once. A call of positional arguments only to a
    function of plain parameters is checked by counting them; any other call is bound."""

    __slots__ = ("fewest", "most", "qualname", "signature")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.qualname = getattr(fn, "__qualname__", repr(fn))
        try:
            self.signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # a callable without a signature Python can read
            self.signature = None
        params = [] if self.signature is None else list(self.signature.parameters.values())
        simple = self.signature is not None and all(p.kind is _SIMPLE for p in params)
        # (fewest, most) positional arguments when counting them is enough; (1, 0) otherwise
        self.fewest = sum(p.default is p.empty for p in params) if simple else 1
        self.most = len(params) if simple else 0

    def problem(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """What is wrong with calling the function with these arguments (None: nothing), in
        Python's words: "add() missing a required argument: 'b'"."""
        if self.signature is None or (not kwargs and self.fewest <= len(args) <= self.most):
            return None
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            return f"{self.qualname}() {exc}"
        return None

    def named(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Each argument under the name of its parameter (``args[1]`` for one of ``*args``)."""
        if self.signature is None:
            return {**{f"#{i}": a for i, a in enumerate(args)}, **kwargs}
        found: dict[str, Any] = {}
        bound = self.signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is _VAR_POSITIONAL:
                found.update({f"{name}[{i}]": v for i, v in enumerate(value)})
            elif kind is _VAR_KEYWORD:
                found.update(value)
            else:
                found[name] = value
        return found


def unencodable(serializer: Any, arguments: Mapping[str, Any], error: Exception) -> str:
    """Why a call's payload cannot be encoded, naming the first argument that cannot be (the
    ``error`` met encoding the whole payload when each argument can be on its own)."""
    for name, value in arguments.items():
        try:
            serializer.dumps(value)
        except (TypeError, ValueError, OverflowError) as exc:
            return f"argument {name!r} cannot be encoded as {name_of(serializer)}: {exc}"
    return f"the arguments cannot be encoded as {name_of(serializer)}: {error}"


def script_name_problem(fn: Callable[..., Any]) -> str | None:
    """Why a task named after its module would reach no worker: it is declared in a file run
    as a script (module ``__main__``), which a worker imports under the file's own name."""
    if getattr(fn, "__module__", None) != "__main__":
        return None
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    file = getattr(main, "__file__", None)
    module = spec.name if spec is not None else Path(file).stem if file else "its module"
    qualname = getattr(fn, "__qualname__", "task")
    return (
        f"task {qualname}() is declared in a script (module __main__): its jobs would be named "
        f"'__main__.{qualname}', which no worker that imports {module!r} knows. Import the task "
        f"from its module instead of running the file that declares it, or name it: "
        f"@app.task(name={qualname!r})"
    )
