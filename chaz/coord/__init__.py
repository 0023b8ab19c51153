"""Coordination state in Redis, one module per concept.

Lanes (:mod:`~chaz.coord.lanes`), quota counters (:mod:`~chaz.coord.quotas`),
tree capacity (:mod:`~chaz.coord.capacity`), a turn's start and end signals
(:mod:`~chaz.coord.signals`), cancel flags (:mod:`~chaz.coord.flags`),
idempotency claims (:mod:`~chaz.coord.claims`) and pub/sub
(:mod:`~chaz.coord.pubsub`). Nothing here is the record: all of it can be
rebuilt from the database (see :mod:`chaz.usecases.reconcile`). Every change that
touches more than one key is one Lua script under ``lua/``, loaded by
:mod:`~chaz.coord.scripts`, so it is atomic. The key schema is
:mod:`chaz.coord.keys`, the one list of every key.
"""
