"""Identifiers and clocks, in one place so tests and storage agree on them."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def new_id() -> str:
    """A random 64-bit id in hex: unique enough for rows, short enough to type."""
    return secrets.token_hex(8)


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; chaz stores UTC, so say so."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)
