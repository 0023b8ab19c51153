"""The process-wide bundle of connections chaz works through.

One :class:`Services` per process (producer or worker) holds the settings,
the store, the Redis client and what is built on it (one object per
coordination concept: lanes and the lease keeper, quotas, tree capacity,
turn signals, cancel flags, idempotency claims), and the dispatcher. It
holds connections, not behaviour: writing to a session is
:mod:`chaz.usecases.admission`'s, running a turn :mod:`chaz.turns`'.
"""

from __future__ import annotations

import os
import threading
from functools import cached_property

import redis

from chaz.coord.capacity import TreeCapacity
from chaz.coord.claims import IdempotencyClaims
from chaz.coord.flags import CancelFlags, CancelWatcher
from chaz.coord.inbox import InboxFlags
from chaz.coord.lanes import Lanes, LeaseKeeper
from chaz.coord.pubsub import Subscriber
from chaz.coord.quotas import Quotas
from chaz.coord.redis import connect
from chaz.coord.signals import TurnSignals
from chaz.plumbing.dispatch import Dispatcher
from chaz.settings import Settings
from chaz.store.db import PoolOptions
from chaz.store.facade import Store

#: Sessions whose project :meth:`Services.coord_project` remembers (then it starts over).
PROJECTS_REMEMBERED = 100_000


class Services:
    """Store, Redis and broker for one process; cheap to share across threads."""

    def __init__(self, settings: Settings, *, db_threads: int | None = None) -> None:
        """``db_threads``: how many of this process's threads use the database at
        once (a worker's turn threads and its fixed ones); it sizes the pool
        unless CHAZ_DB_POOL_SIZE does."""
        self.settings = settings
        self.db_threads = db_threads
        self._subscriber: Subscriber | None = None
        self._subscriber_lock = threading.Lock()
        self._projects: dict[str, str] = {}
        self._projects_lock = threading.Lock()

    @property
    def pool(self) -> PoolOptions:
        """The PostgreSQL pool this process's store opens."""
        return PoolOptions.of(self.settings, self.db_threads)

    @cached_property
    def store(self) -> Store:
        """The database."""
        return Store(self.settings.effective_database_url(), self.pool)

    @cached_property
    def redis(self) -> redis.Redis:
        """The Redis client (coordination state and pub/sub)."""
        return connect(self.settings)

    @cached_property
    def clustered(self) -> bool:
        """Whether coordination runs on a Redis Cluster (CHAZ_REDIS_CLUSTER)."""
        return self.settings.redis_cluster

    def coord_project(self, session_id: str) -> str:
        """The project whose bucket holds ``session_id``'s coordination keys,
        for a caller that has only the session id: on a cluster, read once
        from the database and remembered (a session never changes project);
        on a single Redis no key carries it, and this is ``""`` without a read."""
        if not self.clustered:
            return ""
        with self._projects_lock:
            known = self._projects.get(session_id)
        if known is not None:
            return known
        project = self.store.get_session(session_id).project
        with self._projects_lock:
            if len(self._projects) >= PROJECTS_REMEMBERED:
                self._projects.clear()
            self._projects[session_id] = project
        return project

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
        """Per-session and per-project quota counters."""
        return Quotas(
            self.redis,
            lambda session_id: self.store.job_counts(session_id),
            lambda project: self.store.projects.counts(project),
        )

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
    def cancel_watcher(self) -> CancelWatcher:
        """Sets the cancel tokens of the turns this process runs
        (docs/runtime.md#preemptive-cancel)."""
        return CancelWatcher(self.redis)

    @cached_property
    def claims(self) -> IdempotencyClaims:
        """Single-flight claims on idempotency keys."""
        return IdempotencyClaims(self.redis)

    @cached_property
    def inbox(self) -> InboxFlags:
        """Inbox flags: which sessions have messages waiting."""
        return InboxFlags(self.redis)

    @property
    def subscriber(self) -> Subscriber:
        """The one pubsub connection this process's waiting calls share
        (``wait_for_reply``, ``watch``); started on first use.

        A forked child gets its own on its first use: the parent's reader
        thread does not exist in the child, and its connection is the
        parent's (the child leaves both alone).
        """
        sub = self._subscriber
        if sub is not None and sub.pid == os.getpid():
            return sub
        if sub is not None:
            # Forked: the parent's lock may have been held by one of its
            # threads at the fork, and nobody here would release it.
            self._subscriber_lock = threading.Lock()
        with self._subscriber_lock:
            sub = self._subscriber
            if sub is None or sub.pid != os.getpid():
                sub = self._subscriber = Subscriber(self.redis)
            return sub

    def close(self) -> None:
        """Release every connection this bundle opened (the shared subscription's
        reader thread ends)."""
        with self._subscriber_lock:
            sub, self._subscriber = self._subscriber, None
        if sub is not None and sub.pid == os.getpid():
            sub.close()
        for name in ("store", "redis", "dispatcher"):
            obj = self.__dict__.pop(name, None)
            if obj is not None:
                obj.close()
