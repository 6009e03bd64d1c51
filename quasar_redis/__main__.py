"""``python -m quasar_redis``: the ``quasar`` command line."""

from .cli import main

main(prog_name="quasar")
