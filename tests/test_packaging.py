"""What the package costs a producer to import, and where its version comes from."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from click.testing import CliRunner

import quasar_redis
from quasar_redis.cli import main

LOADED = (
    "import sys; "
    "print(sorted({m.split('.')[0] for m in sys.modules} & {'fakeredis', 'lupa'}), flush=True)"
)


def test_importing_the_package_loads_neither_fakeredis_nor_lupa() -> None:
    # A fresh interpreter: this one has loaded both for the embedded backend of other tests.
    code = "\n".join(
        [
            "import quasar_redis",
            LOADED,
            "import quasar_redis.cli",  # what `quasar worker` loads
            LOADED,
            "quasar_redis.App('memory://').client.enqueue('s')",  # asked for: now loaded
            LOADED,
        ]
    )
    argv = [sys.executable, "-c", code]
    run = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[]", "[]", "['fakeredis', 'lupa']"]


def test_the_version_is_written_once() -> None:
    # pyproject.toml reads __version__ from quasar_redis/__init__.py: the installed metadata and
    # the command line say the same.
    assert quasar_redis.__version__ == importlib.metadata.version("quasar_redis")
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert quasar_redis.__version__ in result.output
