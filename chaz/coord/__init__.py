"""Coordination state in Redis: lane leases, quota counters, cancel flags, pub/sub.

Nothing here is the record: all of it can be rebuilt from the database (see
:mod:`chaz.reconcile`). Every change that touches more than one key is one Lua
script, so it is atomic. The key schema is documented in :mod:`chaz.coord.keys`.
"""
