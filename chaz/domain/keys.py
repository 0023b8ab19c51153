"""API keys: their plaintext form, their hash, and the principal one stands for
(docs/security.md#api-keys).

A key's plaintext is ``chz_<id>_<secret>``: ``id`` is the row's id (16 hex
digits), ``secret`` 32 random bytes, URL-safe base64. Only the SHA-256 of the
whole plaintext is stored, so a copy of the database lets nobody act with a
key; the plaintext is shown once, when the key is made.

Rules only, no I/O: :mod:`chaz.store.keys` stores and looks the keys up.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from chaz.domain.principals import ALL_GRANTS, Principal, parse_grants
from chaz.errors import Unauthenticated

PREFIX = "chz_"
#: The whole plaintext: the prefix, a row id, an underscore, the secret. The
#: secret is URL-safe base64 (``A-Z a-z 0-9 - _``), 43 characters for 32 bytes.
PLAINTEXT = re.compile(r"chz_(?P<id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_\-]{43})")
#: One message for every refusal, so a caller cannot tell an unknown key
#: from a revoked or malformed one.
REFUSED = "the API key is not valid"
#: The longest label a key may carry.
MAX_LABEL_CHARS = 255


def new_secret() -> str:
    """A fresh secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def plaintext(key_id: str, secret: str) -> str:
    """The key a holder presents: ``chz_<id>_<secret>``."""
    return f"{PREFIX}{key_id}_{secret}"


def key_hash(text: str) -> str:
    """What is stored of a key: the SHA-256 of its plaintext, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse(text: object) -> tuple[str, str]:
    """The ``(id, hash)`` of a presented key, or ``auth.unauthenticated`` if it is
    not of the form :data:`PLAINTEXT` (the same refusal as an unknown key)."""
    if not isinstance(text, str):
        raise refused()
    found = PLAINTEXT.fullmatch(text)
    if found is None:
        raise refused()
    return found["id"], key_hash(text)


def refused() -> Unauthenticated:
    """The one error of a key that is unknown, malformed or revoked."""
    return Unauthenticated(REFUSED)


class ApiKey(BaseModel):
    """A stored API key, without its hash (which never leaves the store)."""

    model_config = ConfigDict(frozen=True)

    id: str
    principal: str
    project: str
    #: Sorted grant names; None: every grant.
    grants: list[str] | None
    label: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def revoked(self) -> bool:
        """Whether the key was revoked (it authenticates nobody)."""
        return self.revoked_at is not None

    def as_principal(self) -> Principal:
        """Who a client holding this key acts as: never an operator."""
        grants = parse_grants(self.grants)
        return Principal(
            name=self.principal,
            project=self.project,
            grants=ALL_GRANTS if grants is None else grants,
            operator=False,
        )
