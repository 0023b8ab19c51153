"""chaz: a distributed runtime for LLM agent sessions on Celery, Redis and PostgreSQL.

>>> import chaz
>>> with chaz.embedded(workers=2) as client:  # doctest: +SKIP
...     client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))

The public names are imported on first use: ``import chaz`` stays cheap for
the CLI, which must answer (and catch Ctrl-C) before SQLAlchemy and Celery load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaz.client import Client
    from chaz.coord.partials import Partial
    from chaz.domain.agents import AgentSpec, Limits
    from chaz.domain.entries import Entry, EntryType
    from chaz.domain.jobs import Job, JobStatus
    from chaz.domain.sessions import Session
    from chaz.settings import Settings
    from chaz.stack import embedded

__version__ = "0.1.0"

_EXPORTS = {
    "AgentSpec": "chaz.domain.agents",
    "Client": "chaz.client",
    "Entry": "chaz.domain.entries",
    "EntryType": "chaz.domain.entries",
    "Job": "chaz.domain.jobs",
    "JobStatus": "chaz.domain.jobs",
    "Limits": "chaz.domain.agents",
    "Partial": "chaz.coord.partials",
    "Session": "chaz.domain.sessions",
    "Settings": "chaz.settings",
    "embedded": "chaz.stack",
}

__all__ = [
    "AgentSpec",
    "Client",
    "Entry",
    "EntryType",
    "Job",
    "JobStatus",
    "Limits",
    "Partial",
    "Session",
    "Settings",
    "__version__",
    "embedded",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chaz' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
