"""The durable store: SQLAlchemy models, migrations and the repository.

The database is the source of truth (DESIGN invariant 1): sessions, entries,
jobs and the rest are rows; Redis only coordinates.
"""

from chaz.store.facade import Store

__all__ = ["Store"]
