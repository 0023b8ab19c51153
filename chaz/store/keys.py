"""The ``api_keys`` table: keys stored as their SHA-256, looked up by it
(docs/security.md#api-keys).

The plaintext of a key exists only in :meth:`KeyStore.create`'s answer; the
table holds its hash, so reading the database does not yield a usable key.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select, update

from chaz.domain import keys
from chaz.domain.keys import ApiKey
from chaz.domain.principals import (
    Principal,
    check_principal,
    check_project,
    grant_names,
    parse_grants,
)
from chaz.domain.validation import check_ref, check_text
from chaz.errors import ApiKeyNotFound
from chaz.ids import as_utc, new_id, utcnow
from chaz.store.models import ApiKeyRow

if TYPE_CHECKING:
    from chaz.store.db import Database

API_KEYS = ApiKeyRow.__table__
#: Every column but the hash: what a read hands back.
_SHOWN = [c for c in API_KEYS.c if c.name != "key_hash"]


def as_key(row: Any) -> ApiKey:
    """An ``api_keys`` row (without its hash) as an :class:`ApiKey`."""
    return ApiKey(
        id=row["id"],
        principal=row["principal"],
        project=row["project"],
        grants=row["grants"],
        label=row["label"],
        created_at=as_utc(row["created_at"]),
        revoked_at=as_utc(row["revoked_at"]) if row["revoked_at"] is not None else None,
    )


class KeyStore:
    """Create, authenticate, revoke and list API keys (``Store.keys``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(
        self,
        principal: str,
        project: str,
        grants: Iterable[object] | str | None,
        label: str | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key for ``principal`` in ``project`` holding ``grants`` (None:
        every grant); the key and its plaintext, which is not kept anywhere."""
        principal = check_principal(principal)
        project = check_project(project)
        names = grant_names(parse_grants(grants))
        if label is not None:
            label = check_text("label", label, max_chars=keys.MAX_LABEL_CHARS)
        key_id = new_id()
        text = keys.plaintext(key_id, keys.new_secret())
        row = {
            "id": key_id,
            "key_hash": keys.key_hash(text),
            "principal": principal,
            "project": project,
            "grants": names,
            "label": label,
            "created_at": utcnow(),
            "revoked_at": None,
        }
        with self._db.write() as conn:
            conn.execute(insert(API_KEYS).values(**row))
        return as_key(row), text

    def authenticate(self, text: object) -> Principal:
        """The principal a presented key stands for.

        An unknown, malformed or revoked key is ``auth.unauthenticated``, with
        one message for all three.
        """
        key_id, digest = keys.parse(text)
        stmt = select(*_SHOWN).where(API_KEYS.c.key_hash == digest)
        with self._db.read() as conn:
            row = conn.execute(stmt).mappings().first()
        if row is None or row["id"] != key_id or row["revoked_at"] is not None:
            raise keys.refused()
        return as_key(row).as_principal()

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key: it authenticates nobody from now on. Revoking it again
        changes nothing (the first ``revoked_at`` stays); an unknown id is
        ``key.not_found``."""
        key_id = check_ref("key_id", key_id)
        with self._db.write() as conn:
            conn.execute(
                update(API_KEYS)
                .where(API_KEYS.c.id == key_id, API_KEYS.c.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            row = conn.execute(select(*_SHOWN).where(API_KEYS.c.id == key_id)).mappings().first()
        if row is None:
            raise ApiKeyNotFound(f"no API key {key_id!r}", key_id=key_id)
        return as_key(row)

    def list(self, project: str | None = None) -> builtins.list[ApiKey]:
        """Keys (of one project), oldest first; revoked ones too, marked so."""
        stmt = select(*_SHOWN).order_by(API_KEYS.c.created_at, API_KEYS.c.id)
        if project is not None:
            stmt = stmt.where(API_KEYS.c.project == check_project(project))
        with self._db.read() as conn:
            return [as_key(r) for r in conn.execute(stmt).mappings()]
