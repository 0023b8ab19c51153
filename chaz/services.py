"""The process-wide bundle of connections chaz works through.

One :class:`Services` per process (producer or worker) holds the store, the
Redis client, the lanes and the dispatcher. Writing an entry goes through
:meth:`Services.append`, which commits first and publishes second.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any

import redis

from chaz.coord import keys
from chaz.coord.capacity import TreeCapacity
from chaz.coord.claims import IdempotencyClaims
from chaz.coord.flags import CancelFlags
from chaz.coord.lanes import Lanes, LeaseKeeper
from chaz.coord.pubsub import publish
from chaz.coord.quotas import Quotas
from chaz.coord.redis import connect
from chaz.coord.signals import TurnSignals
from chaz.dispatch import Dispatcher
from chaz.domain.entries import EntryType, KeyScope
from chaz.runtime.tools import ToolRegistry
from chaz.settings import Settings
from chaz.store.repo import Admitting, Appended, Fence, Finish, JobFields, Store


class Services:
    """Store, Redis and broker for one process; cheap to share across threads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()

    @cached_property
    def store(self) -> Store:
        """The database."""
        return Store(self.settings.effective_database_url())

    @cached_property
    def redis(self) -> redis.Redis:
        """The Redis client (coordination state and pub/sub)."""
        return connect(self.settings)

    @cached_property
    def lanes(self) -> Lanes:
        """Session lane leases."""
        return Lanes(self.redis)

    @cached_property
    def lease_keeper(self) -> LeaseKeeper:
        """Renews the lane leases of the turns this process runs."""
        return LeaseKeeper(self.lanes, self.settings.lease_seconds)

    @cached_property
    def dispatcher(self) -> Dispatcher:
        """Wake-up sender."""
        return Dispatcher(self.settings)

    # The store-backed callables read ``self.store`` when called, not when
    # built: the store stays lazy, and one reopened after close() is used.

    @cached_property
    def quotas(self) -> Quotas:
        """Per-session quota counters."""
        return Quotas(self.redis, lambda session_id: self.store.job_counts(session_id))

    @cached_property
    def capacity(self) -> TreeCapacity:
        """Per-tree live slots and waiting sets."""
        return TreeCapacity(
            self.redis,
            lambda tree_id: self.store.active_jobs(tree_id=tree_id),
            lambda job_ids: self.store.get_jobs(job_ids),
        )

    @cached_property
    def signals(self) -> TurnSignals:
        """A turn's start and end signals."""
        return TurnSignals(self.redis, self.settings.lease_seconds)

    @cached_property
    def flags(self) -> CancelFlags:
        """Cancel flags of running jobs."""
        return CancelFlags(self.redis)

    @cached_property
    def claims(self) -> IdempotencyClaims:
        """Single-flight claims on idempotency keys."""
        return IdempotencyClaims(self.redis)

    @property
    def admission(self) -> Quotas:
        """Deprecated: the quotas, under their old name. Remove once ``append``
        uses :attr:`quotas` (issue 8 merge)."""
        return self.quotas

    @cached_property
    def tools(self) -> ToolRegistry:
        """Every tool agents may be given."""
        from chaz.tools import default_registry

        return default_registry()

    def append(
        self,
        session_id: str,
        type: EntryType,
        sender: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        key_scope: KeyScope = KeyScope.RUNTIME,
        job_id: str | None = None,
        admit: bool | None = None,
        job_fields: JobFields | None = None,
        fence: Fence | None = None,
        finish: Finish | None = None,
        durable: bool = True,
    ) -> Appended:
        """Commit an entry (and its job), then publish it and wake a worker.

        When the entry admits a job, its quota is reserved inside the write
        transaction, before the entry is inserted, and refunded if the commit
        does not happen: a rejected admission raises, rolls back and leaves
        the session unchanged. ``durable=False`` is for a turn's audit
        entries (see :meth:`chaz.store.Store.append`); admissions are durable.
        ``key_scope`` is the runtime's unless a producer gave the key.
        """
        if admit is None:
            admit = self.store.admits(type, sender)
        write = functools.partial(
            self.store.append,
            session_id,
            type,
            sender,
            content,
            metadata=metadata,
            idempotency_key=idempotency_key,
            key_scope=key_scope,
            job_id=job_id,
            job_fields=job_fields,
            fence=fence,
            finish=finish,
            durable=durable,
            precheck=False,
        )
        if not admit:
            # No quota at stake: the unique key in the database settles a
            # repeated idempotency key without a read first.
            return self._announce(write(admit=False))
        from chaz.admission import resolve_limits

        replay = functools.partial(
            self.store.replay,
            session_id,
            idempotency_key,
            key_scope,
            type,
            sender,
            content,
            metadata,
        )
        if idempotency_key is not None:
            found = replay()
            if found is not None:
                return found
        claim = None
        if idempotency_key is not None:
            # Concurrent retries of one request: the first admits, the others
            # wait for its entry instead of spending (or being refused) quota.
            claim = keys.idempotency_claim(session_id, f"{key_scope.value}:{idempotency_key}")
            if not self.redis.set(claim, "1", nx=True, ex=30):
                found = self._await_idempotent(claim, replay)
                if found is not None:
                    return found
                claim = None
            else:
                # The first caller may have committed and dropped its claim
                # between our read above and our claim: look again.
                found = replay()
                if found is not None:
                    self.redis.delete(claim)
                    return found
        reserved = False

        def reserve(seen: Admitting) -> None:
            # Inside the write transaction, with the session row locked: a
            # refusal raises and rolls the entry back; one transaction, not
            # a read of the session and agent followed by the write.
            nonlocal reserved
            limits = resolve_limits(self.settings, seen.session, seen.agent)
            self.admission.reserve(seen.session.id, limits, seen.job_counts)
            reserved = True

        try:
            done = write(admit=True, on_admit=reserve)
        except BaseException:
            if reserved:
                # Counted, but the commit did not happen.
                self.admission.refund(session_id)
            raise
        finally:
            if claim:
                self.redis.delete(claim)
        if reserved and not done.created:
            self.admission.refund(session_id)
        return self._announce(done)

    def _await_idempotent(
        self, claim: str, replay: Callable[[], Appended | None], timeout: float = 10.0
    ) -> Appended | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = replay()
            if found is not None:
                return found
            if not self.redis.exists(claim):
                # The first caller gave up (refused or failed): look once more.
                return replay()
            time.sleep(0.01)
        return None

    def _announce(self, done: Appended) -> Appended:
        """After the commit: publish a new entry, and wake a worker for a new job."""
        if done.created:
            publish(self.redis, done.entry)
            if done.job is not None:
                self.dispatcher.wake(done.entry.session_id, done.job.id)
        return done

    def close(self) -> None:
        """Release every connection this bundle opened."""
        for name in ("store", "redis", "dispatcher"):
            obj = self.__dict__.pop(name, None)
            if obj is not None:
                obj.close()
