"""chaz: a distributed runtime for LLM agent sessions on Celery, Redis and PostgreSQL.

>>> import chaz
>>> with chaz.embedded(workers=2) as client:  # doctest: +SKIP
...     client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
"""

from chaz.client import Client
from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.entries import Entry, EntryType
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.embedded import embedded
from chaz.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "AgentSpec",
    "Client",
    "Entry",
    "EntryType",
    "Job",
    "JobStatus",
    "Limits",
    "Session",
    "Settings",
    "__version__",
    "embedded",
]
