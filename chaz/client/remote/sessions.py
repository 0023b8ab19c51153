"""``client.sessions`` over HTTP: the in-process namespace's methods, each one
route of ``chaz serve`` (docs/http.md#producer)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic import TypeAdapter

from chaz import tracing
from chaz.client.remote.errors import error_of
from chaz.client.remote.namespaces import RemoteNamespace, given, opened, segment, waited
from chaz.domain.agents import Limits
from chaz.domain.entries import Attachment, Entry, EntryType
from chaz.domain.jobs import Job
from chaz.domain.search import SearchResult, SessionPage
from chaz.domain.sessions import Session
from chaz.errors import ChazError, ValidationError

if TYPE_CHECKING:
    from chaz.coord.partials import Partial


class RemoteSessions(RemoteNamespace):
    """Sessions, as :class:`chaz.client.sessions.Sessions`, over HTTP."""

    _namespace = "sessions"

    def create(
        self,
        agent_id: str,
        name: str | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        *,
        members: builtins.list[str] | None = None,
        burst_budget: int | None = None,
        unattended: bool = False,
        permission_mode: str = "default",
    ) -> Session:
        """``Sessions.create``."""
        if isinstance(limits, Limits):
            limits = limits.model_dump(mode="json", exclude_unset=True)
        body = given(
            agent_id=agent_id,
            name=name,
            limits=limits,
            members=members,
            burst_budget=burst_budget,
        )
        body.update(unattended=unattended, permission_mode=permission_mode)
        return Session.model_validate(self._http.call("POST", "/sessions", body=body))

    def get(self, ref: str) -> Session:
        """``Sessions.get``: a session by id or name."""
        return Session.model_validate(self._http.call("GET", f"/sessions/{segment('ref', ref)}"))

    def list(
        self,
        agent_id: str | None = None,
        limit: int = 50,
        *,
        tree: str | None = None,
        archived: bool = False,
    ) -> builtins.list[Session]:
        """``Sessions.list``."""
        params = {"agent_id": agent_id, "limit": limit, "tree": tree, "archived": archived}
        found = self._http.call("GET", "/sessions", params=params)
        return [Session.model_validate(s) for s in found]

    def archive(self, ref: str, reason: str = "") -> Session:
        """``Sessions.archive``."""
        path = f"/sessions/{segment('session', ref)}/archive"
        return Session.model_validate(self._http.call("POST", path, body={"reason": reason}))

    def stop(
        self, session_id: str, *, command_id: str | None = None, reason: str = ""
    ) -> dict[str, Any]:
        """``Sessions.stop``: the outcome."""
        path = f"/sessions/{segment('session_id', session_id)}/stop"
        body = {**given(command_id=command_id), "reason": reason}
        outcome: dict[str, Any] = self._http.call("POST", path, body=body)
        return outcome

    def rename(self, ref: str, name: str) -> Session:
        """``Sessions.rename``."""
        path = f"/sessions/{segment('session', ref)}/rename"
        return Session.model_validate(self._http.call("POST", path, body={"name": name}))

    def post(
        self,
        session_id: str,
        content: str,
        *,
        sender: str | None = None,
        type: EntryType | str = EntryType.MESSAGE,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Entry:
        """``Sessions.post``: write an entry (a Message admits a turn)."""
        kind = type.value if isinstance(type, EntryType) else type
        body = {
            "content": content,
            "type": kind,
            **given(sender=sender, metadata=metadata, idempotency_key=idempotency_key),
        }
        path = f"/sessions/{segment('session', session_id)}/entries"
        # The root of the turn's trace, its context in the request's headers.
        with tracing.span("chaz.post", {"chaz.session_id": session_id, "chaz.remote": True}):
            return Entry.model_validate(self._http.call("POST", path, body=body))

    def entries(
        self, session_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Entry]:
        """``Sessions.entries``: ``seq > after``, in order."""
        path = f"/sessions/{segment('session', session_id)}/entries"
        found = self._http.call("GET", path, params={"after": after, "limit": limit})
        return [Entry.model_validate(e) for e in found]

    @overload
    def watch(
        self,
        session_id: str,
        after: int = 0,
        timeout: float | None = None,
        *,
        partial: Literal[False] = False,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Entry]: ...

    @overload
    def watch(
        self,
        session_id: str,
        after: int = 0,
        timeout: float | None = None,
        *,
        partial: bool,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Entry | Partial]: ...

    def watch(
        self,
        session_id: str,
        after: int = 0,
        timeout: float | None = None,
        *,
        partial: bool = False,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Entry] | Iterator[Entry | Partial]:
        """``Sessions.watch``: backlog then live entries (and partials), as the
        server's watch yields them. The request is made now, so a bad argument
        or a missing session raises here, as in-process. ``stop`` is asked at
        each event and each of the server's pings (every 15 s)."""
        path = f"/sessions/{segment('session', session_id)}/watch"
        params = {"after": after, "timeout": timeout, "partial": partial}
        return _watched(opened(self._http, path, params), stop)

    def wait_for_reply(self, session_id: str, after: int = 0, timeout: float = 60.0) -> Entry:
        """``Sessions.wait_for_reply``: the reply or Error of the turn entry
        ``after`` started; ``timeout`` (:class:`chaz.errors.Timeout`) otherwise."""
        path = f"/sessions/{segment('session', session_id)}/reply"
        body = {"after": after, "timeout": timeout}
        return Entry.model_validate(self._http.call("POST", path, body=body, wait=waited(timeout)))

    def fork(
        self,
        session_id: str,
        at: int,
        *,
        agent_id: str | None = None,
        name: str | None = None,
    ) -> Session:
        """``Sessions.fork``."""
        path = f"/sessions/{segment('session', session_id)}/fork"
        body = {"at": at, **given(agent_id=agent_id, name=name)}
        return Session.model_validate(self._http.call("POST", path, body=body))

    def queue(self, session_id: str) -> builtins.list[Job]:
        """``Sessions.queue``: what runs and what waits, in admission order."""
        path = f"/sessions/{segment('session', session_id)}/queue"
        return [Job.model_validate(j) for j in self._http.call("GET", path)]

    def add_member(self, ref: str, agent_id: str) -> Session:
        """``Sessions.add_member``."""
        path = f"/sessions/{segment('session', ref)}/members"
        return Session.model_validate(self._http.call("POST", path, body={"agent_id": agent_id}))

    def remove_member(self, ref: str, agent_id: str) -> Session:
        """``Sessions.remove_member``."""
        path = f"/sessions/{segment('session', ref)}/members/{segment('agent_id', agent_id)}"
        return Session.model_validate(self._http.call("DELETE", path))

    def rooms(self, limit: int = 50, *, archived: bool = False) -> builtins.list[Session]:
        """``Sessions.rooms``: newest first."""
        found = self._http.call("GET", "/rooms", params={"limit": limit, "archived": archived})
        return [Session.model_validate(s) for s in found]

    def attachment(self, session_id: str, seq: int) -> Attachment:
        """``Sessions.attachment``: the attach pointer at ``seq`` followed."""
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise ValidationError("seq must be an integer", field="seq")
        path = f"/sessions/{segment('session', session_id)}/attachments/{seq}"
        return Attachment.model_validate(self._http.call("GET", path))

    def page(
        self, agent_id: str | None = None, limit: int = 20, cursor: str | None = None
    ) -> SessionPage:
        """``Sessions.page``: one page, most recently active first."""
        params = {"agent_id": agent_id, "limit": limit, "cursor": cursor}
        return _PAGE.validate_python(self._http.call("GET", "/page", params=params))

    def search(
        self, query: str, agent_id: str | None = None, limit: int = 10
    ) -> builtins.list[SearchResult]:
        """``Sessions.search``: best first."""
        params = {"query": query, "agent_id": agent_id, "limit": limit}
        return _RESULTS.validate_python(self._http.call("GET", "/search", params=params))

    def compact(self, session_id: str, *, timeout: float = 60.0) -> Entry | None:
        """``Sessions.compact``: the Summary written, or None (nothing to compact)."""
        path = f"/sessions/{segment('session', session_id)}/compact"
        found = self._http.call("POST", path, body={"timeout": timeout}, wait=waited(timeout))
        return None if found is None else Entry.model_validate(found)


#: The search and listing results are dataclasses: pydantic rebuilds them.
_PAGE = TypeAdapter(SessionPage)
_RESULTS = TypeAdapter(list[SearchResult])


def _watched(
    events: Generator[tuple[str, Any], None, None], stop: Callable[[], bool] | None
) -> Iterator[Entry | Partial]:
    """The watch's items from its events; an ``error`` event is raised as its error."""
    try:
        for name, data in events:
            if stop is not None and stop():
                return
            if name == "entry":
                yield Entry.model_validate(data)
            elif name == "partial":
                # Imported only for a watch that streams partials.
                from chaz.coord.partials import Partial

                yield Partial.model_validate(data)
            elif name == "error":
                raise _error(data)
            elif name == "end":
                return
    finally:
        events.close()


def _error(body: object) -> ChazError:
    return error_of(500, json.dumps(body).encode())
