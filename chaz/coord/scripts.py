"""Loads the Lua scripts of ``chaz/coord/lua/`` and registers them on a client.

Each script is one file, ``lua/NAME.lua``, opening with a comment header
that states its KEYS, its ARGV and what it returns. A rule that several
scripts apply is written once, as a Lua local function in a helper file
``lua/_HELPER.lua``; a script that calls helpers names them on a header line
``-- uses: HELPER ...`` and :func:`source` prepends them, so each script
sent to Redis is self-contained. The keys the scripts touch are those of
:mod:`chaz.coord.keys`.
"""

from __future__ import annotations

import functools
import importlib.resources

import redis
from redis.commands.core import Script

_USES = "-- uses:"


@functools.cache
def _read(name: str) -> str:
    lua = importlib.resources.files("chaz.coord").joinpath("lua")
    return lua.joinpath(f"{name}.lua").read_text(encoding="utf-8")


def uses(name: str) -> list[str]:
    """The helpers script ``name`` declares on its ``-- uses:`` line, in order."""
    for line in _read(name).splitlines():
        if line.startswith(_USES):
            return line[len(_USES) :].split()
    return []


@functools.cache
def source(name: str) -> str:
    """The Lua text of script ``name``, with the helpers it uses prepended."""
    helpers = [_read(f"_{helper}") for helper in uses(name)]
    return "".join(helpers) + _read(name)


def register(client: redis.Redis, name: str) -> Script:
    """Register script ``name`` on ``client`` (called by EVALSHA, loaded on first use)."""
    return client.register_script(source(name))


def limit_arg(limit: int | None) -> int:
    """A limit as the scripts take it: ``-1`` for none."""
    return -1 if limit is None else limit
