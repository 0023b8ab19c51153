"""``python -m chaz.cli``: the same as the ``chaz`` command."""

from chaz.cli import main

main()
