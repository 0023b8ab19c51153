"""The result cap (docs/contracts.md#result-cap): one bound on every result a
model or a caller is handed, and the record of the full text it cut."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

#: Results longer than this many characters are cut to a head and a tail.
RESULT_CAP = 30_000

#: The media type of a job result's full text.
TEXT = "text/plain; charset=utf-8"


def excerpt(text: str, cap: int = RESULT_CAP) -> tuple[str, bool]:
    """``text`` cut to at most ``cap`` characters (head and tail kept); and whether it was."""
    if len(text) <= cap:
        return text, False
    marker = f"\n[... {len(text) - cap} characters omitted ...]\n"
    keep = max(0, cap - len(marker))
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :], True


@dataclass(frozen=True)
class Digest:
    """What an artifact records of a full text: its UTF-8 length and SHA-256."""

    byte_length: int
    sha256: str


def digest(text: str) -> Digest:
    """The byte length and SHA-256 of ``text`` in UTF-8."""
    data = text.encode("utf-8", "surrogatepass")
    return Digest(len(data), hashlib.sha256(data).hexdigest())
