"""A check of the Redis URL setting, and which settings the environment names:
shared by the full path and the fast ones (:mod:`chaz.cli.direct`, ``chaz worker``)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from chaz.errors import ConfigError

#: The settings the fast path reads itself: strings, which Settings never refuses.
PLAIN_SETTINGS = frozenset(
    {"CHAZ_DATABASE_URL", "CHAZ_REDIS_URL", "CHAZ_HOME", "CHAZ_PRINCIPAL", "CHAZ_PROJECT"}
)


def plain_environment(environ: dict[str, str] | os._Environ[str]) -> dict[str, str] | None:
    """The ``CHAZ_*`` settings of ``environ`` (names upper-cased), or None when
    any other is set, one is set twice (pydantic-settings ignores case), or a
    ``.env`` file could add more."""
    if Path(".env").exists():
        return None
    found: dict[str, str] = {}
    for key, value in environ.items():
        name = key.upper()
        if not name.startswith("CHAZ_"):
            continue
        if name not in PLAIN_SETTINGS or name in found:
            return None
        found[name] = value
    return found


def check_redis_url(url: str) -> None:
    """Refuse a Redis URL whose port or scheme cannot be used (``config.invalid``)."""
    # mask_url is imported only to word a refusal: chaz.settings loads
    # pydantic-settings, which a read on the fast path (chaz.cli.direct) skips.
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        from chaz.settings import mask_url

        raise ConfigError(
            f"CHAZ_REDIS_URL {mask_url(url)!r} is not a usable Redis URL: {exc}"
        ) from exc
    if parts.scheme not in _REDIS_SCHEMES:
        from chaz.settings import mask_url

        raise ConfigError(
            f"CHAZ_REDIS_URL {mask_url(url)!r} is not a usable Redis URL: the scheme "
            f"must be one of {', '.join(sorted(_REDIS_SCHEMES))}"
        )


_REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
