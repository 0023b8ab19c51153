"""Artifacts: the record that a job's result was longer than the result cap.

The full text itself stays in ``jobs.result`` (docs/contracts.md#result-cap);
an artifact says who owns it, how long it is and its hash, and exists only
while the full text does. Retention deletes the artifact and cuts the result
down to its excerpt in one transaction.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from chaz.domain.results import RESULT_CAP

#: The marker :func:`chaz.domain.results.excerpt` puts between head and tail.
_MARKER = re.compile(r"\n\[\.\.\. \d+ characters omitted \.\.\.\]\n")
#: Its length without the digits.
_MARKER_CHARS = len("\n[...  characters omitted ...]\n")


class Artifact(BaseModel):
    """A full job result longer than the cap: owner, media type, size and hash."""

    model_config = ConfigDict(frozen=True)

    id: str
    #: The job (execution) whose ``result`` is the full text.
    job_id: str
    #: The session that owns it: the job's own session.
    session_id: str
    media_type: str
    #: Length of the full text in UTF-8 bytes.
    byte_length: int
    #: SHA-256 of the full text in UTF-8, in hex.
    sha256: str
    created_at: datetime

    def summary(self) -> dict[str, Any]:
        """What ``job_output`` tells a reader about it."""
        return {
            "id": self.id,
            "media_type": self.media_type,
            "byte_length": self.byte_length,
            "sha256": self.sha256,
        }


def is_excerpt(text: str, cap: int = RESULT_CAP) -> bool:
    """Whether ``text`` has exactly the shape :func:`~chaz.domain.results.excerpt` gives a cut.

    A result that retention cut is stored as its excerpt, with no artifact
    left to say so: this tells it from a result that was always short. An
    excerpt is exactly ``cap`` characters long with the marker where the head
    ends, which an uncut text has only if it was made to look like one.
    """
    if len(text) != cap:
        return False
    for digits in range(1, 20):
        length = _MARKER_CHARS + digits
        head = (cap - length) * 2 // 3
        if head >= 0 and _MARKER.fullmatch(text, head, head + length):
            return True
    return False
