"""``quasar worker MODULE:APP`` and every ``--app``: the application it names, or one line
that says what is wrong.

A path instead of a module name, a module that does not import (a syntax error, an exception at
import: the error and the file and line it came from), or an attribute that is not an ``App``:
each is a usage error of one line (``Mistake``: exit 2).
"""

from __future__ import annotations

import importlib
import os
import sys

from .._origins import origin
from .._urls import redact_text
from ..app import App
from ._options import Mistake

EXAMPLE = "tasks:app, or myproject.tasks:app"


def load_app(path: str) -> App:
    """The ``App`` named by ``MODULE:ATTRIBUTE`` (the current folder is importable), for
    ``quasar worker`` and every command's ``--app``."""
    module_name, attribute = split_app_path(path)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises at import: one line, not a traceback
        raise Mistake(import_error(module_name, exc)) from None
    app = getattr(module, attribute, None)
    if app is None:
        raise Mistake(f"module {module_name!r} has no attribute {attribute!r}")
    if not isinstance(app, App):
        raise Mistake(f"{path!r} is a {type(app).__name__}, not a quasar_redis App")
    return app


def split_app_path(path: str) -> tuple[str, str]:
    """``MODULE:ATTRIBUTE`` split in two, each checked to be a name; ``Mistake`` if not."""
    module_name, colon, attribute = path.partition(":")
    if any(sep in module_name for sep in ("/", "\\")) or module_name.endswith(".py"):
        stem = os.path.splitext(os.path.basename(module_name.rstrip("/\\")))[0] or "tasks"
        raise Mistake(
            f"{path!r}: MODULE is a module name, not a file path (run from the folder that "
            f"holds it: quasar worker {stem}:{attribute or 'app'})"
        )
    if not colon or not _dotted(module_name) or not attribute.isidentifier():
        raise Mistake(f"{path!r}: expected MODULE:APP, e.g. {EXAMPLE}")
    return module_name, attribute


def _dotted(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def import_error(module_name: str, exc: BaseException) -> str:
    """One line for an import that failed: the module, where (file:line), and the error."""
    where = origin(exc)
    at = f" ({where})" if where else ""
    if isinstance(exc, SyntaxError):
        detail = f"SyntaxError: {exc.msg}"
    elif isinstance(exc, ModuleNotFoundError) and exc.name == module_name:
        return f"cannot import {module_name!r}: no such module (is the current folder right?)"
    else:
        detail = f"{type(exc).__name__}: {exc}"
    return redact_text(f"cannot import {module_name!r}{at}: {detail}")
