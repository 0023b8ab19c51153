"""``Store``: the one facade through which chaz reads and writes the database.

It owns no statement of its own. Its flat operations (``store.append``,
``store.get_job``, ``store.archive_session``, ...) come from the concept
classes it is composed of, each a small set of named operations over the
one :class:`~chaz.store.db.Database` they share; the tables with stores of
their own are reached as attributes (``store.deliveries``, ``store.events``,
..., ``store.schedules``).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from chaz.store.agents import Agents, SpecCache
from chaz.store.artifacts import ArtifactStore
from chaz.store.commands import Commands
from chaz.store.context import Context
from chaz.store.core import Writes
from chaz.store.db import Database, PoolOptions
from chaz.store.deliveries import DeliveryStore
from chaz.store.directory import SessionDirectory
from chaz.store.entries import Entries
from chaz.store.events import EventLog
from chaz.store.inbox import Inbox
from chaz.store.jobs import Jobs
from chaz.store.projects import ProjectStore
from chaz.store.rooms import RoomStore
from chaz.store.sessions import Sessions

if TYPE_CHECKING:
    from chaz.store.approvals import ApprovalStore
    from chaz.store.keys import KeyStore
    from chaz.store.schedules import ScheduleStore
    from chaz.store.search import SearchStore
    from chaz.store.todos import TodoStore
    from chaz.store.webhooks import WebhookStore


class Store(Writes, Context, Entries, Jobs, Sessions, SessionDirectory, Agents, Inbox, Commands):
    """Typed access to the chaz database: every concept's operations over one
    :class:`Database`."""

    def __init__(self, url: str, pool: PoolOptions | None = None) -> None:
        self.db = Database(url, pool)
        self.specs = SpecCache()

    @property
    def url(self) -> str:
        """The database URL."""
        return self.db.url

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (migrations, and tests that look at rows)."""
        return self.db.engine

    def close(self) -> None:
        """Release pooled connections."""
        self.db.close()

    @cached_property
    def approvals(self) -> ApprovalStore:
        """Tool calls waiting for a person's decision (docs/approvals.md)."""
        # Imported when first used, as keys and search: few processes need them.
        from chaz.store.approvals import ApprovalStore

        return ApprovalStore(self.db)

    @cached_property
    def keys(self) -> KeyStore:
        """API keys, stored as their hashes (docs/security.md#api-keys)."""
        from chaz.store.keys import KeyStore

        return KeyStore(self.db)

    @cached_property
    def deliveries(self) -> DeliveryStore:
        """Reads of deliveries, and their standalone writes."""
        return DeliveryStore(self.db)

    @cached_property
    def search(self) -> SearchStore:
        """Listing and lexical search of a project's sessions (docs/sessions.md)."""
        from chaz.store.search import SearchStore

        return SearchStore(self.db)

    @cached_property
    def artifacts(self) -> ArtifactStore:
        """Records of results longer than the cap, and their retention."""
        return ArtifactStore(self.db)

    @cached_property
    def events(self) -> EventLog:
        """Sessions' append-only event logs (chaz/store/events.py)."""
        return EventLog(self.db)

    @cached_property
    def rooms(self) -> RoomStore:
        """Rooms' members (chaz/store/rooms.py, docs/rooms.md)."""
        return RoomStore(self.db)

    @cached_property
    def todos(self) -> TodoStore:
        """Sessions' checklists, kept by the planning tools (chaz/store/todos.py)."""
        # Imported when first used, as schedules and webhooks: a worker's start
        # and its turns without the planning tools never need them.
        from chaz.store.todos import TodoStore

        return TodoStore(self.db)

    @cached_property
    def schedules(self) -> ScheduleStore:
        """Agent-owned schedules and their fires' ledger (chaz/store/schedules.py)."""
        from chaz.store.schedules import ScheduleStore

        return ScheduleStore(self.db)

    @cached_property
    def projects(self) -> ProjectStore:
        """Projects' limits, cached briefly per process (chaz/store/projects.py)."""
        return ProjectStore(self.db)

    @cached_property
    def webhooks(self) -> WebhookStore:
        """Runs' webhook deliveries (the outbox) and signing secrets (docs/http.md#webhooks)."""
        from chaz.store.webhooks import WebhookStore

        return WebhookStore(self.db)
