"""Session listing and search, the parts without a database: queries, cursors,
snippets and the shapes results take (docs/sessions.md).

A query is a list of *terms*: words split on whitespace, or an exact phrase in
double quotes. A text matches when it contains every term, case-insensitively,
as a substring (trigram matching: an identifier such as ``foo_bar.baz()`` or a
Chinese phrase is one term). Terms shorter than :data:`MIN_INDEXED` characters
cannot use the trigram indexes; a query made only of such terms is answered by
a bounded scan (:data:`SHORT_SCAN_ROWS`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chaz.domain.validation import check_int, check_text, invalid
from chaz.errors import RequestTooLarge

#: Characters of a query: longer ones are ``request.too_large``.
MAX_QUERY_CHARS = 512
#: Terms of a query: more are ``request.invalid``.
MAX_TERMS = 16
#: The shortest term a trigram index can look up.
MIN_INDEXED = 3
#: A page of ``session_list``: at most this many sessions.
MAX_LIST_LIMIT = 100
#: A ``session_search``: at most this many sessions.
MAX_SEARCH_LIMIT = 50
#: Message matches shown per session (the best ranked).
MATCHES_PER_SESSION = 3
#: A short query (every term under three characters) cannot use an index: it
#: reads at most this many Messages of the visible sessions, those of the most
#: recently active sessions first (docs/sessions.md#short-queries).
SHORT_SCAN_ROWS = 20000
#: Matching messages a PostgreSQL search ranks (taken through the trigram
#: index, in no particular order); a query that matches more is ranked among
#: these, which bounds its cost (docs/sessions.md#ranking-and-the-limit).
PG_CANDIDATES = 500
#: Characters of text shown around a hit, and the marks around the hit.
SNIPPET_CHARS = 160
HIT_OPEN, HIT_CLOSE = "«", "»"
#: Snippet windows are read from this far before the first hit.
SNIPPET_LEAD = 60


@dataclass(frozen=True)
class Query:
    """A parsed search query: its terms, each matched as a substring."""

    text: str
    terms: tuple[str, ...]

    @property
    def indexed(self) -> tuple[str, ...]:
        """Terms long enough for a trigram index."""
        return tuple(t for t in self.terms if len(t) >= MIN_INDEXED)

    @property
    def short(self) -> tuple[str, ...]:
        """Terms too short for an index: checked on the rows the index found."""
        return tuple(t for t in self.terms if len(t) < MIN_INDEXED)

    @property
    def is_short(self) -> bool:
        """Whether no term can use an index (the bounded scan answers it)."""
        return not self.indexed


def parse_query(value: object) -> Query:
    """The terms of ``value``; ``request.invalid`` (field ``query``) for a blank
    query, a NUL or a lone surrogate, or too many terms, ``request.too_large``
    for one longer than :data:`MAX_QUERY_CHARS`."""
    text = check_text("query", value)
    if len(text) > MAX_QUERY_CHARS:
        raise RequestTooLarge(
            f"query is longer than {MAX_QUERY_CHARS} characters",
            field="query",
            max_chars=MAX_QUERY_CHARS,
        )
    terms: list[str] = []
    # A quote opens a phrase that runs to the next quote (or the end).
    for phrase, word in re.findall(r'"([^"]*)"?|(\S+)', text):
        term = phrase.strip() if phrase else word.strip('"')
        term = " ".join(term.split())
        if term and term.casefold() not in {t.casefold() for t in terms}:
            terms.append(term)
    if not terms and text.strip():
        # Only quotes: they are what is searched for.
        terms.append(" ".join(text.split()))
    if not terms:
        raise invalid("query", "query must contain a word or a phrase")
    if len(terms) > MAX_TERMS:
        raise invalid("query", f"query has more than {MAX_TERMS} terms", max=MAX_TERMS)
    return Query(text, tuple(terms))


def check_list_limit(value: object) -> int:
    """``session_list``'s ``limit``: 1 to :data:`MAX_LIST_LIMIT`."""
    return check_int("limit", value, low=1, high=MAX_LIST_LIMIT)


def check_search_limit(value: object) -> int:
    """``session_search``'s ``limit``: 1 to :data:`MAX_SEARCH_LIMIT`."""
    return check_int("limit", value, low=1, high=MAX_SEARCH_LIMIT)


@dataclass(frozen=True)
class Cursor:
    """A position in the listing: after the session ``(active, session_id)``."""

    active: datetime
    session_id: str

    def encode(self) -> str:
        """The opaque form handed to callers."""
        raw = json.dumps([self.active.isoformat(), self.session_id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, value: object) -> Cursor:
        """A cursor from :meth:`encode`; ``request.invalid`` (field ``cursor``) otherwise."""
        text = check_text("cursor", value, max_chars=200)
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            active, session_id = json.loads(raw)
            when = datetime.fromisoformat(active)
        except (binascii.Error, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise invalid("cursor", "cursor is not one this listing returned") from exc
        if not isinstance(session_id, str) or when.tzinfo is None:
            raise invalid("cursor", "cursor is not one this listing returned")
        return cls(when, session_id)


def _pattern(terms: tuple[str, ...]) -> re.Pattern[str]:
    # Longest first, so a term inside another is not marked inside it.
    ordered = sorted(terms, key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in ordered), re.IGNORECASE)


def snippet(text: str, terms: tuple[str, ...], *, cut_before: bool = False) -> str:
    """Up to :data:`SNIPPET_CHARS` of ``text`` around its first hit, every hit
    marked ``«like this»``; ``…`` where text was cut.

    ``cut_before``: ``text`` is a window read from inside a longer text, with
    text before it left out (so it starts with ``…`` whatever is cut here).
    """
    flat = " ".join(text.split())
    pattern = _pattern(terms)
    first = pattern.search(flat)
    start = 0
    if first is not None and first.start() > SNIPPET_LEAD // 2:
        start = first.start() - SNIPPET_LEAD // 2
    window = flat[start : start + SNIPPET_CHARS]
    marked = pattern.sub(lambda m: f"{HIT_OPEN}{m.group(0)}{HIT_CLOSE}", window)
    prefix = "…" if start > 0 or cut_before else ""
    suffix = "…" if start + SNIPPET_CHARS < len(flat) else ""
    return prefix + marked + suffix


@dataclass(frozen=True)
class MessageMatch:
    """A Message that matched: where, and the text around the hit."""

    message_id: str
    snippet: str
    timestamp: datetime

    def to_dict(self) -> dict[str, Any]:
        """The tool result's form."""
        return {
            "messageId": self.message_id,
            "snippet": self.snippet,
            "timestamp": self.timestamp.isoformat(),
        }


@dataclass(frozen=True)
class MetadataMatch:
    """A session field (``name`` or ``description``) that matched."""

    field: str
    snippet: str

    def to_dict(self) -> dict[str, Any]:
        """The tool result's form."""
        return {"field": self.field, "snippet": self.snippet}


@dataclass(frozen=True)
class SessionCard:
    """A session as listings and search results show it."""

    session_id: str
    name: str | None
    description: str | None
    agent_id: str
    turn_count: int
    last_activity: datetime
    #: Whether it is the calling session.
    own: bool

    def to_dict(self) -> dict[str, Any]:
        """The tool result's form."""
        return {
            "sessionId": self.session_id,
            "name": self.name,
            "description": self.description,
            "agent": self.agent_id,
            "turnCount": self.turn_count,
            "lastActivity": self.last_activity.isoformat(),
            "own": self.own,
        }


@dataclass(frozen=True)
class SessionPage:
    """One page of ``session_list``; ``next_cursor`` is None on the last page."""

    sessions: list[SessionCard]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        """The tool result's form."""
        return {
            "sessions": [s.to_dict() for s in self.sessions],
            "nextCursor": self.next_cursor,
        }


@dataclass(frozen=True)
class SearchResult:
    """One session found by ``session_search``, with its evidence."""

    session: SessionCard
    matches: list[MessageMatch]
    metadata_matches: list[MetadataMatch]

    def to_dict(self) -> dict[str, Any]:
        """The tool result's form."""
        return {
            **self.session.to_dict(),
            "matches": [m.to_dict() for m in self.matches],
            "metadataMatches": [m.to_dict() for m in self.metadata_matches],
        }
