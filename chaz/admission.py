"""The admission use case: a write that admits a job, under its quotas.

The Redis side lives in :mod:`chaz.coord` (:mod:`chaz.coord.quotas`,
:mod:`chaz.coord.capacity`, :mod:`chaz.coord.signals`); the limits in force
are :func:`chaz.domain.limits.resolve_limits`.
"""

from __future__ import annotations

# Deprecated: ``Services.append`` still imports resolve_limits from here.
# Remove when the admission write path moves into this module (issue 8 merge).
from chaz.domain.limits import resolve_limits as resolve_limits
