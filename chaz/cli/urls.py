"""A check of the Redis URL setting, shared by the full path and the fast one."""

from __future__ import annotations

from urllib.parse import urlsplit

from chaz.errors import ConfigError


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
