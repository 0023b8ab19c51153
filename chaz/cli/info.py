"""``chaz config``: a command that connects to nothing, kept apart so it loads fast.

The other commands' modules bring in the domain models; printing the
settings needs only :mod:`chaz.settings`.
"""

from __future__ import annotations

from chaz.cli.context import Context
from chaz.cli.exits import EXIT_OK


def cmd_config(ctx: Context) -> int:
    """Print the effective settings with passwords and keys masked."""
    values = ctx.settings.masked()
    if ctx.out.json_mode:
        ctx.out.json(values)
    else:
        ctx.out.fields("settings", sorted(values.items()))
    return EXIT_OK
