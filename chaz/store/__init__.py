"""The durable store: SQLAlchemy models, migrations, and ``Store``, the facade
composed of one class per concept over one shared ``Database``
(docs/store.md).

The database is the source of truth (docs/contracts.md#invariant-1): sessions, entries,
jobs and the rest are rows; Redis only coordinates.

:class:`Store` is imported on first use: ``chaz worker`` checks the migrations
(:mod:`chaz.store.migrate`, :mod:`chaz.store.db`) before it execs Celery, and
the facade's models and statements would only delay that exec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaz.store.facade import Store

__all__ = ["Store"]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from chaz.store.facade import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
