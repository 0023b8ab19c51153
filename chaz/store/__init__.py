"""The durable store: SQLAlchemy models, migrations, and ``Store``, the facade
composed of one class per concept over one shared ``Database``
(docs/store.md).

The database is the source of truth (docs/contracts.md#invariant-1):
sessions, entries, jobs and the rest are rows; Redis only coordinates.
"""

from chaz.store.facade import Store

__all__ = ["Store"]
