"""The producer API over HTTP: what ``chaz.Client(url=..., api_key=...)`` is made
of (docs/http.md#producer).

The same namespaces, method names, arguments, return models and error
classes as the in-process client, spoken to a ``chaz serve``'s producer
routes with ``httpx``. Nothing here imports SQLAlchemy or opens a database or
Redis connection: a process with only the URL and a key is the tenant
boundary an API key promises (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from chaz.client.remote.agents import RemoteAgents
from chaz.client.remote.approvals import RemoteApprovals
from chaz.client.remote.deliveries import RemoteDeliveries
from chaz.client.remote.events import RemoteEvents
from chaz.client.remote.jobs import RemoteJobs
from chaz.client.remote.namespaces import Unavailable
from chaz.client.remote.schedules import RemoteSchedules
from chaz.client.remote.sessions import RemoteSessions
from chaz.client.remote.transport import Transport
from chaz.domain.principals import Grant, Principal

__all__ = ["Remote", "connect"]

#: The in-process namespaces the producer routes do not carry yet: each is
#: there, and every call of it is ``request.unsupported`` naming it.
NOT_YET = ("keys", "projects")


@dataclass
class Remote:
    """A connected remote client's parts: its transport, its principal, its namespaces."""

    transport: Transport
    principal: Principal
    agents: RemoteAgents
    sessions: RemoteSessions
    jobs: RemoteJobs
    deliveries: RemoteDeliveries
    events: RemoteEvents
    schedules: RemoteSchedules
    approvals: RemoteApprovals


def connect(url: str, api_key: str | None) -> Remote:
    """Connect to the chaz serve at ``url`` with ``api_key`` (None: the embedded
    default's loopback listener, which needs none) and learn who the key is:
    an unknown or revoked key is ``auth.unauthenticated`` here, at once."""
    transport = Transport(url, api_key)
    try:
        who = transport.call("GET", "/whoami")
        principal = Principal(
            name=who["name"],
            project=who["project"],
            grants=frozenset(Grant(g) for g in who["grants"]),
            operator=bool(who["operator"]),
        )
    except BaseException:
        transport.close()
        raise
    return Remote(
        transport,
        principal,
        RemoteAgents(transport),
        RemoteSessions(transport),
        RemoteJobs(transport),
        RemoteDeliveries(transport),
        RemoteEvents(transport),
        RemoteSchedules(transport),
        RemoteApprovals(transport),
    )


def unavailable(namespace: str) -> Unavailable:
    """A namespace the producer routes do not carry yet (see :data:`NOT_YET`)."""
    return Unavailable(namespace)
