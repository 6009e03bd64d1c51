"""Where an error in the user's code came from, as ``file:line`` for a one-line message."""

from __future__ import annotations

import os
import traceback

#: The package's own folder: frames in it are not the user's.
PACKAGE = os.path.dirname(os.path.abspath(__file__))


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
