"""Addresses of sessions and entries, as tools and producers write them.

A session is addressed by its id, ``SID:HEAD`` (its current tip) or its
name; an exact entry by ``SID:SEQ`` (docs/collaboration.md#addresses).
Names are labels, ids are addresses: a name that matches nothing creates
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from chaz.domain.validation import MAX_SEQ
from chaz.errors import ValidationError

#: Longest address accepted (an id, a name of up to 255 characters and ``:HEAD``).
MAX_ADDRESS_CHARS = 300
HEAD = "HEAD"


class StartMode(StrEnum):
    """Where a new session's history starts."""

    #: An empty session.
    CLEAN = "clean"
    #: The caller's context, up to its current tip.
    INHERIT = "inherit"
    #: An exact entry of a session (``SID:SEQ``), or its tip (``SID:HEAD``).
    FORK = "fork"


@dataclass(frozen=True)
class StartFrom:
    """A parsed ``start_from``: a mode and, for a fork, the session and entry."""

    mode: StartMode
    session_ref: str | None = None
    #: The entry's seq; None for ``SID:HEAD`` (the source's tip when it is read).
    seq: int | None = None


def parse_start_from(value: str) -> StartFrom:
    """``"clean"``, ``"inherit"``, ``"SID:SEQ"`` or ``"SID:HEAD"``; else ``request.invalid``."""
    text = value.strip()
    if text in (StartMode.CLEAN, ""):
        return StartFrom(StartMode.CLEAN)
    if text == StartMode.INHERIT:
        return StartFrom(StartMode.INHERIT)
    ref, sep, point = text.rpartition(":")
    if not sep or not ref or len(text) > MAX_ADDRESS_CHARS:
        raise ValidationError(
            f"start_from must be 'clean', 'inherit', 'SID:SEQ' or 'SID:HEAD', not {value[:80]!r}",
            field="start_from",
        )
    if point == HEAD:
        return StartFrom(StartMode.FORK, ref, None)
    if not point.isascii() or not point.isdigit() or not 1 <= int(point) <= MAX_SEQ:
        raise ValidationError(
            f"start_from {value[:80]!r}: the part after ':' must be an entry's seq "
            "(a positive integer) or HEAD",
            field="start_from",
        )
    return StartFrom(StartMode.FORK, ref, int(point))


def parse_to(value: str) -> str:
    """The session reference in a ``to``: an id or name, ``:HEAD`` removed.

    ``to`` addresses a session, never an entry: ``SID:SEQ`` is refused and
    points to ``start_from``, which is how one forks at an entry.
    """
    text = value.strip()
    if not text or len(text) > MAX_ADDRESS_CHARS:
        raise ValidationError("to must name a session (an id, 'SID:HEAD' or a name)", field="to")
    ref, sep, point = text.rpartition(":")
    if sep and ref and point == HEAD:
        return ref
    if sep and ref and point.isascii() and point.isdigit():
        raise ValidationError(
            f"to={value[:80]!r} addresses an entry; to continues a session ('SID' or "
            "'SID:HEAD'); to fork at an entry, use start_from",
            field="to",
        )
    return text
