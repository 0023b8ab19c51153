"""``client.sessions``: create, post into, read, watch, fork, search and compact
sessions, and manage rooms (docs/sessions.md, docs/rooms.md)."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, overload

from chaz import tracing
from chaz.access import branches, discovery
from chaz.client.base import Acting, translating
from chaz.coord.partials import Partial
from chaz.domain.addresses import parse_to
from chaz.domain.agents import Limits
from chaz.domain.approvals import check_permission_mode
from chaz.domain.entries import Attachment, Entry, EntryType, KeyScope, is_agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.principals import DEFAULT_PERSON, Grant, Principal, grant_names
from chaz.domain.rooms import MAX_BURST_BUDGET, check_members
from chaz.domain.search import SearchResult, SessionPage
from chaz.domain.sessions import ArchivedBy, NameSource, Origin, Session, missing_session
from chaz.domain.validation import (
    MAX_SEQ,
    check_content,
    check_entry_type,
    check_flag,
    check_idempotency_key,
    check_int,
    check_json,
    check_limit,
    check_ref,
    check_seconds,
    check_session_name,
    check_text,
)
from chaz.errors import AmbiguousName, AttachMismatch, SessionNotFound, Timeout, ValidationError
from chaz.services import Services
from chaz.store.types import Appended, JobFields
from chaz.usecases import admission, compaction
from chaz.usecases.stop import stop_session
from chaz.usecases.watch import watch as _watch


@translating
class Sessions(Acting):
    """Sessions: create, post into, read and watch (of the principal's project)."""

    def __init__(self, services: Services, principal: Principal) -> None:
        super().__init__(services, principal)
        #: Session id -> its agent, for the sessions found in the principal's
        #: project by a wait (see _waited_session).
        self._known: dict[str, str] = {}
        #: Session id -> (seq, job id, monotonic time before its admission)
        #: of this client's latest new entry there (see wait_for_reply).
        self._posted: dict[str, tuple[int, str | None, float]] = {}

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
        """A new session of ``agent_id`` (names are unique labels; ids are addresses).

        With ``members`` (saved agents besides the host ``agent_id``, unique,
        at most 16) it is a room (docs/rooms.md); ``burst_budget`` is the
        room's (default ``CHAZ_ROOM_BURST_BUDGET``, else 6). ``unattended``
        runs its turns under the unattended policy; ``permission_mode="bypass"``
        lets ``unless_auto_approved`` tools run unasked (docs/approvals.md).
        Needs ``session.write``; the session is the principal's, in its project.
        """
        self._may(Grant.SESSION_WRITE, "create sessions")
        check_ref("agent_id", agent_id)
        if name is not None:
            name = check_session_name(name)
        if members is not None:
            members = _room_members(agent_id, members)
        if burst_budget is not None:
            if members is None:
                raise ValidationError(
                    "burst_budget is a room's setting: give members too", field="burst_budget"
                )
            burst_budget = check_int("burst_budget", burst_budget, low=0, high=MAX_BURST_BUDGET)
        return self._svc.store.create_session(
            agent_id,
            name=name,
            limits=None if limits is None else Limits.parse(limits, "limits"),
            members=members,
            burst_budget=burst_budget,
            unattended=check_flag("unattended", unattended),
            permission_mode=check_permission_mode(permission_mode),
            project=self._project,
            owner=self._principal.name,
        )

    # -- rooms (docs/rooms.md) ------------------------------------------------

    def add_member(self, ref: str, agent_id: str) -> Session:
        """Add a saved agent to a room (an id or name); a plain session becomes a room.

        Records a ``room.member_added`` event; adding a member twice changes nothing.
        Needs ``session.write``.
        """
        self._may(Grant.SESSION_WRITE, "change rooms")
        session = self._session(ref)
        check_ref("agent_id", agent_id)
        return self._svc.store.rooms.add_member(session.id, agent_id)

    def rooms(self, limit: int = 50, *, archived: bool = False) -> builtins.list[Session]:
        """Rooms (sessions with members), newest first (``limit``: 1 to 10,000)."""
        self._may(Grant.HISTORY_READ, "list rooms")
        return self._svc.store.rooms.list(
            limit=check_limit("limit", limit), archived=bool(archived), project=self._project
        )

    def remove_member(self, ref: str, agent_id: str) -> Session:
        """Remove a member from a room (``room.member_removed``); the host cannot leave.
        Needs ``session.write``."""
        self._may(Grant.SESSION_WRITE, "change rooms")
        session = self._session(ref)
        check_ref("agent_id", agent_id)
        return self._svc.store.rooms.remove_member(session.id, agent_id)

    def get(self, ref: str) -> Session:
        """A session by id or name."""
        self._may(Grant.HISTORY_READ, "read sessions")
        return self._session(ref)

    def list(
        self,
        agent_id: str | None = None,
        limit: int = 50,
        *,
        tree: str | None = None,
        archived: bool = False,
    ) -> builtins.list[Session]:
        """Sessions, newest first (``limit``: 1 to 10,000).

        ``tree``: only the tree of this session (an id or name); ``archived``:
        the archived sessions instead of the others (archived ones are hidden
        from the normal listing).
        """
        self._may(Grant.HISTORY_READ, "list sessions")
        if agent_id is not None:
            check_ref("agent_id", agent_id)
        tree_id = self._session(tree, "tree").tree_id if tree is not None else None
        return self._svc.store.list_sessions(
            agent_id=agent_id,
            limit=check_limit("limit", limit),
            tree_id=tree_id,
            archived=bool(archived),
            project=self._project,
        )

    def archive(self, ref: str, reason: str = "") -> Session:
        """Archive a session (an id, ``SID:HEAD`` or name), for every reader.

        Idempotent: the first ``archived_at`` stays, and a person's reason
        outranks an automatic one (docs/collaboration.md#archive).
        Running work continues; the session takes no new deliveries and
        leaves the normal listings; its history stays. Needs ``session.archive``.
        """
        self._may(Grant.SESSION_ARCHIVE, "archive sessions")
        target = self._address(check_ref("session", ref))
        session, _ = branches.archive(self._svc, target.id, reason=reason, by=ArchivedBy.MANUAL)
        return session

    def stop(
        self, session_id: str, *, command_id: str | None = None, reason: str = ""
    ) -> dict[str, Any]:
        """Stop a session: withdraw its inbox, cancel its queued jobs and its running
        turn, each with its descendants (docs/executions.md#stop).

        Never interrupts another session's turn but those descendants. Needs
        ``runtime.control``; another project's session is ``session.not_found``.
        A repeated ``command_id`` returns the first outcome and changes nothing
        more. The outcome: ``{"action": "session.stop", "session_id",
        "cancelled", "cascaded", "withdrawn", "paused", "changed"}``.
        """
        return stop_session(
            self._svc,
            session_id,
            principal=self._principal,
            command_id=command_id,
            reason=reason,
        )

    def _address(self, ref: str) -> Session:
        """The session an address names in the principal's project: its id or
        ``SID:HEAD``, its name, or a prefix of exactly one non-archived name.

        The rule of :func:`chaz.access.branches.resolve_target`, with every lookup
        kept to the project, so neither a miss nor an ambiguity can tell of
        another project's sessions.
        """
        key = parse_to(ref)
        try:
            return self._session(key)
        except SessionNotFound:
            pass
        matches = self._svc.store.sessions_by_name_prefix(
            key, limit=branches.MAX_CANDIDATES + 1, project=self._project
        )
        if not matches:
            raise missing_session(key)
        if len(matches) > 1:
            shown = matches[: branches.MAX_CANDIDATES]
            more = "" if len(matches) <= branches.MAX_CANDIDATES else " (and more)"
            raise AmbiguousName(
                f"{key!r} matches several sessions{more}: "
                + ", ".join(f"{s.name!r} ({branches.address(s)})" for s in shown)
                + "; address one by its id or full name",
                field="to",
                candidates=[{"to": branches.address(s), "name": s.name} for s in shown],
            )
        return matches[0]

    def rename(self, ref: str, name: str) -> Session:
        """Give a session a name of a person's choosing (``conflict.name_taken`` if used).

        The name is trimmed and has 1 to 255 characters (``request.invalid``);
        a missing session is ``session.not_found``, an archived one
        ``session.archived``. Automatic naming never overwrites it
        (docs/collaboration.md#names); it starts no turn. Needs ``session.write``.
        """
        self._may(Grant.SESSION_WRITE, "rename sessions")
        name = check_session_name(check_text("name", name).strip())
        session = self._session(ref)
        # live_only: an archived session is refused (session.archived), as
        # session_rename does (docs/contracts.md#session-tools).
        done = self._svc.store.rename_session(
            session.id, name, source=NameSource.USER, live_only=True
        )
        assert done is not None, "an unconditional rename always writes"
        return done

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
        """Write an entry. A Message from a non-agent, or a Directive, admits a turn.

        Raises :class:`chaz.errors.QueueFull` or :class:`chaz.errors.JobsExhausted`
        when the turn cannot be admitted; then nothing is written. Content must
        be text of at most ``CHAZ_MAX_CONTENT_BYTES`` (``request.too_large``),
        not blank for a Message, Directive or Summary; ``metadata`` a JSON
        object; the same ``idempotency_key`` with a different request is
        :class:`chaz.errors.IdempotencyMismatch`.

        Needs ``session.write``. The turn it admits belongs to the principal
        and carries its grants; a session of another project is answered as
        a missing one. ``sender`` defaults to ``user:you``
        (:data:`~chaz.domain.principals.DEFAULT_PERSON`, as ``chaz send``) for
        an operator's client; an API-key client writes only as its own
        principal (its default), so it cannot pose as a person or an agent.

        With tracing on, the post is a ``chaz.post`` span, the root of its
        turn's trace (or a child of the caller's: docs/operations.md#tracing).
        """
        args = (session_id, content, sender, type, metadata, idempotency_key)
        if not tracing.on():
            return self._post(*args)
        with tracing.span("chaz.post", {"chaz.session_id": session_id}) as span:
            entry = self._post(*args)
            span.set_attributes(
                {"chaz.entry_id": entry.id, "chaz.entry.type": entry.type.value}
                | ({"chaz.job_id": entry.job_id} if entry.job_id else {})
            )
            return entry

    def _post(
        self,
        session_id: str,
        content: str,
        sender: str | None,
        type: EntryType | str,
        metadata: dict[str, Any] | None,
        idempotency_key: str | None,
    ) -> Entry:
        self._may(Grant.SESSION_WRITE, "post to sessions")
        check_ref("session", session_id)
        etype = check_entry_type(type)
        cap = self._svc.settings.max_content_bytes
        content = check_content(etype, content, max_bytes=cap)
        sender = self._sender(sender, operator_default=DEFAULT_PERSON)
        metadata = check_json("metadata", metadata, max_bytes=cap)
        idempotency_key = check_idempotency_key(idempotency_key)
        fields = JobFields(owner=self._principal.name, grants=grant_names(self._principal.grants))

        def write(sid: str) -> Appended:
            return admission.write(
                self._svc,
                sid,
                etype,
                sender,
                content,
                metadata=metadata,
                idempotency_key=idempotency_key,
                key_scope=KeyScope.USER,
                job_fields=fields,
                project=self._project,
                admits=admits,
            )

        started = time.monotonic()
        # The processing rule is asked once: here, and handed to the write.
        admits = self._svc.store.admits(etype, sender)
        if idempotency_key is not None or not admits:
            # Only an admission checks the project under its lock; a replay (and
            # its mismatch error) or a plain append happens before or without
            # one, so the session is found in the project first.
            return self._posted_now(write(self._session(session_id).id), started)
        try:
            return self._posted_now(write(session_id), started)
        except SessionNotFound:
            # Not an id: perhaps a name. Resolving only now keeps the common
            # case (an id) to one transaction.
            session = self._session(session_id)
            if session.id == session_id:
                raise
            return self._posted_now(write(session.id), started)

    def _posted_now(self, done: Appended, started: float) -> Entry:
        """Remember a new entry's seq and job, and that it committed after
        ``started`` (``time.monotonic()``), for a wait on it (see wait_for_reply)."""
        entry = done.entry
        if done.created:  # a replay's entry committed long ago: not after `started`
            if len(self._posted) >= _KNOWN_SESSIONS:
                self._posted.clear()
            self._posted[entry.session_id] = (entry.seq, entry.job_id, started)
        return entry

    def entries(
        self, session_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Entry]:
        """The session's entries with ``seq > after``, in order (``limit``: 1 to 10,000)."""
        self._may(Grant.HISTORY_READ, "read sessions")
        after = _seq("after", after)
        if limit is not None:
            limit = check_limit("limit", limit)
        session = self._session(session_id)
        return self._svc.store.entries(session.id, after=after, limit=limit)

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
        """Backlog then live entries, in seq order, with no gap and no duplicate.

        With ``partial=True``, also :class:`~chaz.Partial` events (live text of
        answers being streamed, never stored) between the entries, as they are
        heard (docs/sessions.md#watching). ``stop``: asked about once a second
        (and at each item); once it answers true the watch ends.
        """
        self._may(Grant.HISTORY_READ, "read sessions")
        after = _seq("after", after)
        if timeout is not None:
            timeout = check_seconds("timeout", timeout)
        session = self._session(session_id)
        return _watch(
            self._svc.store,
            self._svc.redis,
            session.id,
            after=after,
            timeout=timeout,
            partial=partial,
            subscriber=self._svc.subscriber,
            stop=stop,
        )

    def wait_for_reply(self, session_id: str, after: int = 0, timeout: float = 60.0) -> Entry:
        """The agent's reply (Message) or Error for the turn that entry ``after`` started.

        In a room that turn may be any member's (the one the entry mentions):
        its Message is the reply, whoever wrote it. If that entry started no
        turn, the first agent's Message or Error after it.
        """
        self._may(Grant.HISTORY_READ, "read sessions")
        after = _seq("after", after)
        timeout = check_seconds("timeout", timeout)
        sid, _ = self._waited_session(session_id)
        job_id: str | None = None
        posted = self._posted.get(sid)
        mine = posted is not None and posted[0] == after and after > 0
        if mine and posted is not None:
            # This client wrote entry ``after``: its job is known, and if the
            # shared subscription has heard every message of the session since
            # before that write, everything after it comes (or came) through
            # it: no database read before the wait.
            job_id = posted[1]
        # Else one read for the trigger (entry ``after``) and the backlog after
        # it, through the shared subscription (in force before the read).
        for entry in _watch(
            self._svc.store,
            self._svc.redis,
            sid,
            after=after if mine else max(after - 1, 0),
            timeout=timeout,
            poll=WAIT_POLL_SECONDS,
            subscriber=self._svc.subscriber,
            written_after=posted[2] if mine and posted is not None else None,
        ):
            if entry.seq <= after:
                if entry.type in _TRIGGERS:
                    job_id = entry.job_id
                continue
            if job_id is not None and entry.job_id != job_id:
                continue
            if entry.type is EntryType.ERROR or (
                entry.type is EntryType.MESSAGE and is_agent_sender(entry.sender)
            ):
                return entry
        raise Timeout(
            f"no reply in session {sid} after seq {after} within {timeout:g}s",
            session_id=sid,
        )

    def _waited_session(self, ref: str) -> tuple[str, str]:
        """``(id, agent_id)`` of the session a wait names, in the principal's project.

        A session's id, project and agent never change and a session is never
        deleted, so what one read found for an id stays true: a producer that
        waits on the same session again (post, wait, post, wait) reads it once.
        """
        known = self._known.get(ref)
        if known is not None:
            return ref, known
        session = self._session(ref)
        if session.id == ref:  # a name can move to another session: only ids are kept
            if len(self._known) >= _KNOWN_SESSIONS:
                self._known.clear()
            self._known[ref] = session.agent_id
        return session.id, session.agent_id

    def fork(
        self,
        session_id: str,
        at: int,
        *,
        agent_id: str | None = None,
        name: str | None = None,
    ) -> Session:
        """A new session forked at entry ``at`` of ``session_id`` (docs/collaboration.md#forks).

        Its context reads through the source's history up to that entry (a
        pointer, not a copy): ``forked_from`` is ``"SID:SEQ"``. It runs
        ``agent_id`` (default: the source's agent) and, unless ``name`` is
        given, gets an automatic name. It starts no job; post to it. Needs
        ``session.write``; the source must be of the principal's project.
        """
        self._may(Grant.SESSION_WRITE, "fork sessions")
        source = self._session(session_id)
        seq = check_int("at", at, low=1, high=max(1, source.last_seq))
        if source.last_seq < 1:
            raise ValidationError(f"session {source.id} has no entry to fork at", field="at")
        if agent_id is not None:
            check_ref("agent_id", agent_id)
        if name is not None:
            name = check_session_name(name)
        label = f"fork of {source.name or source.id}"
        return self._svc.store.create_session(
            agent_id or source.agent_id,
            name=name,
            fork=(source.id, seq),
            origin=Origin.FORK,
            names=[label[:255], *(f"{label[:250]}-{n}" for n in range(2, 21))],
            project=self._project,
            owner=self._principal.name,
        )

    def attachment(self, session_id: str, seq: int) -> Attachment:
        """Follow the attach pointer at entry ``seq`` of ``session_id`` to its target.

        The pointer is read where it is stored; a pointer whose recorded
        source is not the session it is read from is refused
        (``attach.mismatch``), never resolved by searching. The target is
        ``(session_id, head_seq)``, its entries are read up to that head.
        """
        self._may(Grant.HISTORY_READ, "read sessions")
        session = self._session(session_id)
        seq = _seq("seq", seq)
        found = self._svc.store.entries(session.id, after=seq - 1, until=seq)
        if not found or found[0].type is not EntryType.ATTACH:
            raise ValidationError(
                f"entry {seq} of session {session.id} is not an attach pointer", field="seq"
            )
        pointer = found[0]
        attach = pointer.metadata.get("attach") or {}
        if pointer.metadata.get("source_session_id") != session.id or not attach.get("session_id"):
            raise AttachMismatch(
                f"the pointer at {session.id}:{seq} does not belong to this session",
                session_id=session.id,
                seq=seq,
            )
        # A pointer never crosses projects; if a target somehow did, it is missing.
        target = self._session(str(attach["session_id"])).id
        head = int(attach.get("head_seq") or 0)
        return Attachment(
            pointer=pointer,
            session_id=target,
            head_seq=head,
            status=str(attach.get("status", "")),
            entries=self._svc.store.entries(target, until=head),
        )

    def queue(self, session_id: str) -> builtins.list[Job]:
        """What runs and what waits in the session, in admission order."""
        self._may(Grant.HISTORY_READ, "read sessions")
        session = self._session(session_id)
        return self._svc.store.list_jobs(
            session_id=session.id,
            statuses=[
                JobStatus.RUNNING,
                JobStatus.STOPPING,
                JobStatus.WAITING_APPROVAL,
                JobStatus.QUEUED,
            ],
        )

    def page(
        self,
        agent_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> SessionPage:
        """A page of the project's sessions that are not archived, most recently
        active first (``limit``: 1 to 100); pass ``next_cursor`` back for the next
        page (docs/sessions.md#session_list). Needs ``history.read``."""
        self._may(Grant.HISTORY_READ, "list sessions")
        return discovery.list_sessions(
            self._svc, project=self._project, agent_id=agent_id, limit=limit, cursor=cursor
        )

    def search(
        self,
        query: str,
        agent_id: str | None = None,
        limit: int = 10,
    ) -> builtins.list[SearchResult]:
        """At most ``limit`` (1 to 50) distinct sessions of the project whose
        messages, name or description match ``query``, best first
        (docs/sessions.md#session_search). Needs ``history.read``."""
        self._may(Grant.HISTORY_READ, "search sessions")
        return discovery.search_sessions(
            self._svc, query, project=self._project, agent_id=agent_id, limit=limit
        )

    def compact(self, session_id: str, *, timeout: float = 60.0) -> Entry | None:
        """Write a Summary made by the session's own model; later turns start from it.

        The Summary stands for the context since the previous one
        (docs/sessions.md#compaction). None when there is nothing since the
        latest Summary (a no-op). Waits up to ``timeout`` seconds for a
        running turn of the session to end; turns admitted meanwhile run
        after it. ``session.not_found``, ``session.archived``, or
        ``session.busy`` (retryable) when the lane stayed held. Needs
        ``session.write``.
        """
        self._may(Grant.SESSION_WRITE, "compact sessions")
        timeout = check_seconds("timeout", timeout)
        return compaction.compact(self._svc, self._session(session_id).id, timeout=timeout)


_TRIGGERS = (EntryType.MESSAGE, EntryType.DIRECTIVE)

#: How long a quiet ``wait_for_reply`` goes between database re-reads. The
#: shared subscription announces its reconnections (the re-read then comes at
#: once), so this is only for a publish lost with the connection healthy (a
#: writer that died between its commit and its publish): a turn that waits in
#: the queue does not cost its waiter a database read per second.
WAIT_POLL_SECONDS = 5.0

#: How many sessions a client remembers for its waits (then it starts over).
_KNOWN_SESSIONS = 10_000


def _room_members(host: str, members: object) -> builtins.list[str]:
    """A room's members as given, checked (strings; not the host; unique; at most 16)."""
    if not isinstance(members, builtins.list | tuple):
        raise ValidationError("members must be a list of agent ids", field="members")
    checked = [check_ref("members", m) for m in members]
    try:
        return check_members(host, checked)
    except ValueError as exc:
        raise ValidationError(str(exc), field="members") from exc


def _seq(field: str, value: object) -> int:
    return check_int(field, value, low=0, high=MAX_SEQ)
