"""The process-wide bundle of connections chaz works through.

One :class:`Services` per process (producer or worker) holds the settings,
the store, the Redis client and what is built on it (lanes, the lease
keeper), and the dispatcher. It holds connections, not behaviour: writing to
a session is :mod:`chaz.admission`'s, running a turn :mod:`chaz.turns`'.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import redis

from chaz.coord.lanes import Lanes, LeaseKeeper
from chaz.coord.redis import connect
from chaz.dispatch import Dispatcher
from chaz.settings import Settings
from chaz.store.repo import Store

if TYPE_CHECKING:
    from chaz.admission import Admission


class Services:
    """Store, Redis and broker for one process; cheap to share across threads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

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

    @cached_property
    def admission(self) -> Admission:
        """Quota counters and tree capacity."""
        from chaz.admission import Admission

        return Admission(self)

    def close(self) -> None:
        """Release every connection this bundle opened."""
        for name in ("store", "redis", "dispatcher"):
            obj = self.__dict__.pop(name, None)
            if obj is not None:
                obj.close()
