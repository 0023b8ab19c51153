"""What every route of the HTTP server shares: the services, and who a request
acts as (docs/http.md#auth)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Body, Depends, Request

from chaz.domain.entries import Entry, EntryType, Said
from chaz.domain.jobs import ACTIVE
from chaz.domain.principals import ALL_GRANTS, DEFAULT_PRINCIPAL, DEFAULT_PROJECT, Principal
from chaz.domain.sessions import Session, missing_session
from chaz.domain.validation import check_ref
from chaz.errors import Unauthenticated
from chaz.server.awaited import Gate
from chaz.server.convo import Conversations
from chaz.server.keycache import KeyCache
from chaz.services import Services

#: The header that carries an API key (LangGraph's clients send theirs there).
KEY_HEADER = "x-api-key"


@dataclass
class Server:
    """One app's services and its rule for requests without a key.

    ``anonymous``: a request without a key acts as the operator (only on the
    embedded default's loopback listener, which ``chaz serve`` decides)."""

    services: Services
    anonymous: bool = False
    #: Keys authenticated in the last ``CHAZ_HTTP_KEY_CACHE_SECONDS`` (chaz/server/keycache.py).
    keys: KeyCache = field(init=False)
    #: Each thread's values as last answered (chaz/server/convo.py).
    conversations: Conversations = field(init=False, default_factory=Conversations)
    #: The threads of runs' waits (chaz/server/awaited.py).
    gate: Gate = field(init=False)

    def __post_init__(self) -> None:
        self.gate = Gate(self.services.pool.size, self.services.pool.timeout)
        self.keys = KeyCache(
            self.services.store.keys.authenticate, self.services.settings.http_key_cache_seconds
        )

    def known(self, key: str | None) -> Principal | None:
        """Who a request with ``key`` acts as, if that needs no database read
        (no key, or one authenticated moments ago); else None."""
        if key is None:
            return self._keyless()
        return self.keys.cached(key)

    def principal(self, key: str | None) -> Principal:
        """Who a request with ``key`` (the header's value, or None) acts as."""
        if key is None:
            return self._keyless()
        return self.keys.authenticate(key)

    def _keyless(self) -> Principal:
        if not self.anonymous:
            raise Unauthenticated(f"an API key is required in the {KEY_HEADER} header")
        settings = self.services.settings
        return Principal(
            name=DEFAULT_PRINCIPAL,
            project=settings.project or DEFAULT_PROJECT,
            grants=ALL_GRANTS,
            operator=True,
        )


@dataclass
class Call:
    """One request: the server's services and the principal it acts as."""

    services: Services
    principal: Principal
    #: The replica's copies of threads' values (None: always read them).
    conversations: Conversations | None = None
    #: The threads of runs' waits (None: a gate of its own).
    gate: Gate | None = None

    def thread(self, thread_id: str) -> Session:
        """The live session a thread id names, in the principal's project.

        Only an id (not a name) names a thread, and an archived session is a
        deleted thread: each is answered exactly like a missing one."""
        session = self.services.store.get_session(
            check_ref("thread_id", thread_id), project=self.principal.project
        )
        if session.id != thread_id or session.archived_at is not None:
            raise missing_session(thread_id)
        return session

    def busy(self, session_id: str) -> bool:
        """Whether a turn of the session runs or waits (its thread is ``busy``)."""
        return bool(self.services.store.list_jobs(session_id=session_id, statuses=ACTIVE, limit=1))

    def conversation(self, session_id: str) -> list[Entry]:
        """The session's Messages and Directives, in seq order, but those a
        rollback hid (chaz/domain/multitask.py)."""
        return self.services.store.entries(
            session_id, types=(EntryType.MESSAGE, EntryType.DIRECTIVE), visible=True
        )

    def said(self, session_id: str, until: int | None = None) -> list[Said]:
        """:meth:`conversation` (up to seq ``until``) with only what a thread's
        values show of each entry (no metadata or timestamps): cheaper to read
        and to build, for every answer that is only values."""
        return self.services.store.said(
            session_id, (EntryType.MESSAGE, EntryType.DIRECTIVE), visible=True, until=until
        )


def server_of(request: Request) -> Server:
    """The :class:`Server` of the app that took ``request``."""
    server: Server = request.app.state.chaz
    return server


async def call(request: Request) -> Call:
    """The :class:`Call` of a request: its key authenticated (a dependency)."""
    return await call_of(server_of(request), request.headers)


async def call_of(server: Server, headers: Mapping[str, str]) -> Call:
    """The :class:`Call` of a request to ``server`` with ``headers``.

    A key authenticated moments ago is answered on the event loop; only a
    database read goes to a worker thread."""
    key = headers.get(KEY_HEADER)
    principal = server.known(key)
    if principal is None:
        principal = await anyio.to_thread.run_sync(server.principal, key)
    return Call(server.services, principal, server.conversations, server.gate)


#: A route's caller: the request's key authenticated.
Caller = Annotated[Call, Depends(call)]
#: A route's JSON body, checked by :mod:`chaz.server.fields` (None when empty).
Payload = Annotated[Any, Body()]
