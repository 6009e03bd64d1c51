"""``quasar worker MODULE:APP``: the application it names, or one line that says what is wrong.

A path instead of a module name, a module that does not import (a syntax error, an exception at
import: the error and the file and line it came from), or an attribute that is not an ``App``:
each is a ``click.ClickException`` of one line.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import click

from ._urls import redact_text
from .app import App

EXAMPLE = "tasks:app, or myproject.tasks:app"
PACKAGE = os.path.dirname(os.path.abspath(__file__))


def load_app(path: str) -> App:
    """The ``App`` named by ``MODULE:ATTRIBUTE`` (the current folder is importable)."""
    module_name, attribute = split_app_path(path)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises at import: one line, not a traceback
        raise click.ClickException(import_error(module_name, exc)) from None
    app = getattr(module, attribute, None)
    if app is None:
        raise click.ClickException(f"module {module_name!r} has no attribute {attribute!r}")
    if not isinstance(app, App):
        raise click.ClickException(f"{path!r} is a {type(app).__name__}, not a quasar_redis App")
    return app


def split_app_path(path: str) -> tuple[str, str]:
    """``MODULE:ATTRIBUTE`` split in two, each checked to be a name; ClickException if not."""
    module_name, colon, attribute = path.partition(":")
    if any(sep in module_name for sep in ("/", "\\")) or module_name.endswith(".py"):
        stem = os.path.splitext(os.path.basename(module_name.rstrip("/\\")))[0] or "tasks"
        raise click.ClickException(
            f"{path!r}: MODULE is a module name, not a file path (run from the folder that "
            f"holds it: quasar worker {stem}:{attribute or 'app'})"
        )
    if not colon or not _dotted(module_name) or not attribute.isidentifier():
        raise click.ClickException(f"{path!r}: expected MODULE:APP, e.g. {EXAMPLE}")
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


def origin(exc: BaseException) -> str:
    """``file:line`` of the error: a syntax error's own, else the last frame of the user's code
    (under the current folder, outside installed packages), else the traceback's last frame; the
    file relative to the current folder when under it."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{_shown(exc.filename)}:{exc.lineno}"
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<frozen")  # (importlib's own)
    ]
    if not frames:
        return ""
    users = [frame for frame in frames if _users(frame.filename)]
    frame = (users or frames)[-1]
    return f"{_shown(frame.filename)}:{frame.lineno}"


def _users(filename: str) -> bool:
    path = os.path.abspath(filename)
    return (
        path.startswith(os.getcwd() + os.sep)
        and not path.startswith(PACKAGE + os.sep)
        and "site-packages" not in path
    )


def _shown(filename: str) -> str:
    try:
        shown = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if shown.startswith("..") else shown
