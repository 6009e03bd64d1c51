"""Checks of a task call made before anything is sent: the arguments against the function's
signature, the values against the app's serializer, and the name a task gets from its module."""

from __future__ import annotations

import difflib
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .serializers import name_of

_SIMPLE = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, _SIMPLE)

#: What a call's check is given in place of the argument the call receives first (its value is
#: known only when the job runs: a step of a chain).
RECEIVED = object()


class CallCheck:
    """The signature of a task's function, read once. A call to a function of plain parameters
    is checked by counting its positional arguments and looking its keywords up (as Python
    binds them); any other call, and one that does not fit, is bound."""

    __slots__ = ("fewest", "most", "names", "qualname", "required", "signature")

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
        #: a function of plain parameters: their names, and each one without a default
        self.names = tuple(p.name for p in params) if simple else None
        self.required = (
            tuple((i, p.name) for i, p in enumerate(params) if p.default is p.empty)
            if simple
            else ()
        )

    def problem(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """What is wrong with calling the function with these arguments (None: nothing): an
        unexpected keyword first (with the parameter it may have meant), then too many
        positional arguments, else Python's own words; each followed by the signature."""
        if self.signature is None or (not kwargs and self.fewest <= len(args) <= self.most):
            return None
        if kwargs and self._fits(args, kwargs):
            return None
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            what = _unexpected(self.signature, kwargs) or _too_many(self.signature, args)
            text = f"{what or exc}; the function is {self.name}{shown(self.signature)}"
            if args and args[0] is RECEIVED:
                text += " (its first argument is the previous step's result)"
            return text
        return None

    def _fits(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """Whether a function of plain parameters takes these arguments: no more positional
        ones than it has parameters, each keyword one of the parameters after them, and every
        parameter without a default given."""
        names, given = self.names, len(args)
        if names is None or given > len(names):
            return False
        rest = names[given:]
        return all(key in rest for key in kwargs) and all(
            i < given or name in kwargs for i, name in self.required
        )

    @property
    def name(self) -> str:
        """The function's own name (``send_receipt``, of ``Mailer.send_receipt`` too)."""
        return self.qualname.rpartition(".")[2]

    def named(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Each argument under the name of its parameter (``args[1]`` for one of ``*args``)."""
        if self.signature is None:
            return {**{f"#{i}": a for i, a in enumerate(args)}, **kwargs}
        if self.names is not None and self._fits(args, kwargs):  # (what binding gives, in order)
            given = len(args)
            return {
                name: args[i] if i < given else kwargs[name]
                for i, name in enumerate(self.names)
                if i < given or name in kwargs
            }
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


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'email'?)`` for the name of ``known`` closest to ``name``, if one is."""
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unexpected(signature: inspect.Signature, kwargs: Mapping[str, Any]) -> str | None:
    """The first keyword the function does not take, with the parameter it may have meant."""
    params = signature.parameters
    if any(p.kind is _VAR_KEYWORD for p in params.values()):
        return None
    takes = [n for n, p in params.items() if p.kind is not _VAR_POSITIONAL]
    for name in kwargs:
        param = params.get(name)
        if param is not None and param.kind is not inspect.Parameter.POSITIONAL_ONLY:
            continue
        return f"unexpected keyword argument {name!r}{did_you_mean(name, takes)}"
    return None


def _too_many(signature: inspect.Signature, args: Sequence[Any]) -> str | None:
    """Too many positional arguments, counted against the parameters that take one."""
    params = signature.parameters.values()
    if any(p.kind is _VAR_POSITIONAL for p in params):
        return None
    most = sum(p.kind in _POSITIONAL for p in params)
    if len(args) <= most:
        return None
    named = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    only = f" ({', '.join(named)} by keyword only)" if named else ""
    return f"{len(args)} positional arguments given, but it takes {most}{only}"


class _Text(str):
    """An annotation kept as text (``from __future__ import annotations``), shown unquoted."""

    def __repr__(self) -> str:
        return str(self)


def shown(signature: inspect.Signature) -> str:
    """A signature as its source reads: ``(order_id: int, email: str) -> None``."""

    def plain(annotation: Any) -> Any:
        return _Text(annotation) if isinstance(annotation, str) else annotation

    params = [p.replace(annotation=plain(p.annotation)) for p in signature.parameters.values()]
    return str(
        signature.replace(parameters=params, return_annotation=plain(signature.return_annotation))
    )


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
