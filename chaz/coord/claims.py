"""Idempotency claims: single flight for admissions that carry an idempotency key.

``chaz:idem:{sid}:{key}`` is held while one caller admits with that key;
a concurrent retry that finds it taken waits for the first caller's entry
instead of reserving quota itself. The claim only spares spurious quota
refusals: duplicates are prevented by the unique key in the database
whether or not it exists. See docs/coordination.md#idempotency-claims.
"""

from __future__ import annotations

import redis

from chaz.coord import keys

#: How long a claim outlives a caller that died before releasing it.
CLAIM_TTL_SECONDS = 30


class IdempotencyClaims:
    """Single-flight claims on idempotency keys."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def take(self, session_id: str, key: str, ttl_seconds: int = CLAIM_TTL_SECONDS) -> bool:
        """Claim ``key`` in the session; False if another caller holds it.

        ``key`` is the idempotency key as the database scopes it (for
        example ``user:KEY``), so claims of different scopes never meet.
        """
        return bool(
            self.client.set(keys.idempotency_claim(session_id, key), "1", nx=True, ex=ttl_seconds)
        )

    def release(self, session_id: str, key: str) -> None:
        """Drop the claim (the admission ended, however it ended)."""
        self.client.delete(keys.idempotency_claim(session_id, key))

    def held(self, session_id: str, key: str) -> bool:
        """Whether someone holds the claim (a waiting retry asks this)."""
        return bool(self.client.exists(keys.idempotency_claim(session_id, key)))
