"""The producer API: ``chaz.Client`` and its ``agents``, ``sessions``, ``jobs`` and ``events``.

Everything returned is a pydantic model; every error is a
:class:`chaz.errors.ChazError` with a stable ``code``. Every argument passes
the rules of :mod:`chaz.domain.validation` before anything is read or
written, so bad input is ``request.invalid`` (naming the field) or
``request.too_large`` on SQLite and PostgreSQL alike, and never reaches a
database driver.

Every call acts as the client's principal, in its project (docs/security.md):
its grant is checked first, and objects of another project are answered as
missing ones.
"""

from __future__ import annotations

import builtins
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, ParamSpec, TypeVar, overload

import redis
import sqlalchemy.exc
from pydantic import BaseModel, ConfigDict, SecretStr

from chaz.access import branches, discovery
from chaz.coord.partials import Partial
from chaz.domain.addresses import parse_to
from chaz.domain.agents import AgentSpec, Limits
from chaz.domain.approvals import Approval, check_permission_mode
from chaz.domain.deliveries import (
    Delivery,
    Reply,
    RequestStatus,
    request_status,
    result_key,
    stored_states,
)
from chaz.domain.entries import Entry, EntryType, KeyScope, agent_sender, parse_sender
from chaz.domain.events import Event
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.keys import ApiKey
from chaz.domain.principals import (
    ALL_GRANTS,
    DEFAULT_PRINCIPAL,
    DEFAULT_PROJECT,
    Grant,
    Principal,
    check_principal,
    check_project,
    grant_names,
    parse_grants,
)
from chaz.domain.projects import Project
from chaz.domain.rooms import MAX_BURST_BUDGET, check_members
from chaz.domain.schedules import Schedule, ScheduleFire
from chaz.domain.search import SearchResult, SessionPage
from chaz.domain.sessions import ArchivedBy, NameSource, Origin, Session, missing_session
from chaz.domain.validation import (
    MAX_SEQ,
    check_choice,
    check_content,
    check_entry_type,
    check_idempotency_key,
    check_int,
    check_json,
    check_limit,
    check_ref,
    check_seconds,
    check_session_name,
    check_text,
)
from chaz.errors import (
    AmbiguousName,
    AttachMismatch,
    BackendUnavailable,
    DeliveryNotFound,
    Forbidden,
    SessionNotFound,
    Timeout,
    ValidationError,
)
from chaz.runtime.registry import ToolRegistry
from chaz.services import Services
from chaz.settings import Settings
from chaz.store.migrate import upgrade
from chaz.store.types import Appended, JobFields
from chaz.tools import default_registry
from chaz.usecases import admission, compaction, event_log
from chaz.usecases import approvals as approval_cases
from chaz.usecases import deliveries as delivery_cases
from chaz.usecases import projects as project_cases
from chaz.usecases.control import cancel, job_output, wait_terminal
from chaz.usecases.watch import watch as _watch

P = ParamSpec("P")
R = TypeVar("R")
_C = TypeVar("_C", bound=type)


def _backend_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Report an unreachable Redis or database as a chaz error with a stable code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise BackendUnavailable(f"Redis is unavailable: {exc}") from exc
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as exc:
            raise BackendUnavailable(f"the database is unavailable: {exc.orig}") from exc
        except sqlalchemy.exc.TimeoutError as exc:
            # Not a driver error: the pool had no free connection in time.
            raise BackendUnavailable(
                "the database is unavailable: no pooled connection was free within "
                "CHAZ_DB_POOL_TIMEOUT (raise CHAZ_DB_POOL_SIZE, or the database is slow)"
            ) from exc

    return wrapper


def _translating(cls: _C) -> _C:
    """Apply :func:`_backend_errors` to every public method of a namespace."""
    for name, value in list(vars(cls).items()):
        if callable(value) and not name.startswith("_"):
            setattr(cls, name, _backend_errors(value))
    return cls


class Client:
    """Entry point of the producer API. ``Client()`` reads the ``CHAZ_*`` settings.

    Every call acts as :attr:`principal` (docs/security.md). With ``api_key``
    (or ``CHAZ_API_KEY``, when no ``principal``, ``project`` or ``grants`` is
    given) it is the key's principal, project and grants, and not an
    operator; a revoked, unknown or malformed key is ``auth.unauthenticated``.
    Otherwise the client holds the database credentials and is an operator:
    it acts as ``principal`` (else ``CHAZ_PRINCIPAL``, else ``user:local``)
    in ``project`` (else ``CHAZ_PROJECT``, else ``default``) with ``grants``
    (names; default every grant).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        migrate: bool = True,
        tools: ToolRegistry | None = None,
        principal: str | None = None,
        project: str | None = None,
        grants: Iterable[str] | str | None = None,
        api_key: str | SecretStr | None = None,
    ) -> None:
        # Read now, not once per process: a program that changes CHAZ_* between
        # two clients (or starts an embedded stack, then a fleet) gets what it set.
        self.settings = settings or Settings()
        operator = _operator(self.settings, principal, project, grants, api_key)
        self.services = Services(self.settings)
        #: The tools agents may be given: what ``agents.put`` checks names against.
        self.tools = tools or default_registry()
        try:
            if migrate:
                upgrade(self.services.store.engine)
            #: Who this client acts as, in which project, with which grants.
            self.principal: Principal = operator or _authenticated(
                self.services, api_key if api_key is not None else self.settings.api_key
            )
        except BaseException:
            self.services.close()
            raise
        who = self.principal
        self.agents = Agents(self.services, self.tools, who)
        self.sessions = Sessions(self.services, who)
        self.jobs = Jobs(self.services, who)
        self.deliveries = Deliveries(self.services, who)
        self.events = Events(self.services, who)
        self.schedules = Schedules(self.services, who)
        self.approvals = Approvals(self.services, who)
        self.keys = Keys(self.services, who)
        self.projects = Projects(self.services, who)

    def close(self) -> None:
        """Release connections."""
        self.services.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _operator(
    settings: Settings,
    principal: object,
    project: object,
    grants: Iterable[str] | str | None,
    api_key: object,
) -> Principal | None:
    """The operator principal the arguments and settings name, or None when an
    API key is to be authenticated instead (docs/security.md#principals-and-projects)."""
    named = principal is not None or project is not None or grants is not None
    if api_key is not None and named:
        raise ValidationError(
            "an api_key carries its own principal, project and grants: give one or the other",
            field="api_key",
        )
    if api_key is not None or (not named and settings.api_key is not None):
        return None
    held = parse_grants(grants)
    return Principal(
        name=check_principal(
            principal if principal is not None else settings.principal or DEFAULT_PRINCIPAL
        ),
        project=check_project(
            project if project is not None else settings.project or DEFAULT_PROJECT
        ),
        grants=ALL_GRANTS if held is None else held,
        operator=True,
    )


@_backend_errors
def _authenticated(services: Services, api_key: object) -> Principal:
    """The principal an API key stands for (``auth.unauthenticated`` if none)."""
    if isinstance(api_key, SecretStr):
        api_key = api_key.get_secret_value()
    return services.store.keys.authenticate(api_key)


class _Acting:
    """What every namespace shares: the services, and the principal it acts as.

    Each public method checks its grant first, before anything is looked up,
    and finds objects only in the principal's project: one of another
    project is answered exactly as a missing one (docs/security.md).
    """

    def __init__(self, services: Services, principal: Principal) -> None:
        self._svc = services
        self._principal = principal

    @property
    def _project(self) -> str:
        return self._principal.project

    def _may(self, grant: Grant, action: str) -> None:
        self._principal.require(grant, action)

    def _sender(self, sender: str | None, operator_default: str | None = None) -> str:
        """Whom a write is from: ``sender`` if this principal may write as it.

        An operator's client writes as anyone (``None``: ``operator_default``,
        else itself); an API-key client writes only as its own principal, so
        it cannot pose as a person or an agent (``auth.forbidden``)."""
        principal = self._principal
        if sender is None:
            sender = operator_default if principal.operator and operator_default else principal.name
        parse_sender(check_text("sender", sender))
        if not principal.operator and sender != principal.name:
            raise Forbidden(
                f"{principal.name} may not write as {sender}: an API key writes as itself",
                sender=sender,
            )
        return sender

    def _session(self, ref: str, field: str = "session") -> Session:
        """The session of an id or exact name, in the principal's project."""
        return self._svc.store.get_session(check_ref(field, ref), project=self._project)

    def _job(self, execution_id: str) -> Job:
        """The job of an id, in the principal's project."""
        return self._svc.store.get_job(
            check_ref("execution_id", execution_id), project=self._project
        )


@_translating
class Agents(_Acting):
    """Saved agent configurations (install-wide: only an operator changes them)."""

    def __init__(self, services: Services, tools: ToolRegistry, principal: Principal) -> None:
        super().__init__(services, principal)
        self._tools = tools

    def put(self, spec: AgentSpec | Mapping[str, Any]) -> AgentSpec:
        """Create or replace an agent (an AgentSpec, or its fields as a mapping); its
        tools must exist. An API-key client may not (``auth.forbidden``)."""
        self._principal.require_operator("save agents")
        spec = AgentSpec.parse(spec)
        unknown = set(spec.tools) - set(self._tools.names())
        if unknown:
            raise ValidationError(
                f"unknown tools {sorted(unknown)}; known: {self._tools.names()}",
                field="tools",
            )
        return self._svc.store.put_agent(spec)

    def put_many(self, specs: builtins.list[AgentSpec]) -> builtins.list[AgentSpec]:
        """Create or replace several agents at once: all are checked first, then all
        are saved in one transaction, so a bad one leaves every agent as it was.
        An API-key client may not (``auth.forbidden``)."""
        self._principal.require_operator("save agents")
        known = set(self._tools.names())
        for i, spec in enumerate(specs):
            unknown = set(spec.tools) - known
            if unknown:
                raise ValidationError(
                    f"agent [{i}] {spec.id!r}: unknown tools {sorted(unknown)}; "
                    f"known: {self._tools.names()}",
                    index=i,
                    agent_id=spec.id,
                )
        return self._svc.store.put_agents(specs)

    def get(self, agent_id: str) -> AgentSpec:
        """One agent."""
        return self._svc.store.get_agent(check_ref("agent_id", agent_id))

    def list(self) -> builtins.list[AgentSpec]:
        """Every agent."""
        return self._svc.store.list_agents()


@_translating
class Sessions(_Acting):
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
            unattended=bool(unattended),
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
        # seed 002's session_rename refuses a trashed one.
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
        a missing one. ``sender`` defaults to ``user:user`` for an operator's
        client; an API-key client writes only as its own principal (its
        default), so it cannot pose as a person or an agent.
        """
        self._may(Grant.SESSION_WRITE, "post to sessions")
        check_ref("session", session_id)
        etype = check_entry_type(type)
        cap = self._svc.settings.max_content_bytes
        content = check_content(etype, content, max_bytes=cap)
        sender = self._sender(sender, operator_default="user:user")
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
            )

        started = time.monotonic()
        if idempotency_key is not None or not self._svc.store.admits(etype, sender):
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
    ) -> Iterator[Entry]: ...

    @overload
    def watch(
        self, session_id: str, after: int = 0, timeout: float | None = None, *, partial: bool
    ) -> Iterator[Entry | Partial]: ...

    def watch(
        self,
        session_id: str,
        after: int = 0,
        timeout: float | None = None,
        *,
        partial: bool = False,
    ) -> Iterator[Entry] | Iterator[Entry | Partial]:
        """Backlog then live entries, in seq order, with no gap and no duplicate.

        With ``partial=True``, also :class:`~chaz.Partial` events (live text of
        answers being streamed, never stored) between the entries, as they are
        heard (docs/sessions.md#watching).
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
        )

    def wait_for_reply(self, session_id: str, after: int = 0, timeout: float = 60.0) -> Entry:
        """The agent's reply (Message) or Error for the turn that entry ``after`` started.

        If that entry started no turn, the first reply or Error after it.
        """
        self._may(Grant.HISTORY_READ, "read sessions")
        after = _seq("after", after)
        timeout = check_seconds("timeout", timeout)
        sid, agent_id = self._waited_session(session_id)
        me = agent_sender(agent_id)
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
                entry.type is EntryType.MESSAGE and entry.sender == me
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


def _status(value: object) -> JobStatus:
    return check_choice("status", value, JobStatus, "job status")


class Attachment(BaseModel):
    """An attach pointer followed to its target: what ``sessions.attachment`` returns."""

    model_config = ConfigDict(frozen=True)

    pointer: Entry
    session_id: str
    head_seq: int
    status: str
    entries: list[Entry]


_DIRECTIONS = ("in", "out", "both")


@_translating
class Deliveries(_Acting):
    """Hand-offs between sessions (docs/collaboration.md#deliveries)."""

    def get(self, delivery_id: str) -> Delivery:
        """One delivery (of the principal's project)."""
        self._may(Grant.HISTORY_READ, "read deliveries")
        return self._svc.store.deliveries.get(
            check_ref("delivery_id", delivery_id), project=self._project
        )

    def list(
        self,
        session_id: str,
        *,
        direction: str = "both",
        limit: int = 100,
        status: str | None = None,
    ) -> builtins.list[Delivery]:
        """Deliveries into (``in``), out of (``out``) or both ways of a session, newest first.

        ``status`` keeps those in one lifecycle status (``accepted``,
        ``delivering``, ``consumed``, ``failed``: docs/sessions.md#sending-between-sessions).
        """
        self._may(Grant.HISTORY_READ, "read deliveries")
        if direction not in _DIRECTIONS:
            raise ValidationError(
                f"direction must be one of {list(_DIRECTIONS)}", field="direction"
            )
        session = self._session(session_id)
        limit = check_limit("limit", limit)
        if status is None:
            return self._svc.store.deliveries.list(
                session.id, direction=direction, limit=limit, project=self._project
            )
        wanted = check_choice("status", status, RequestStatus, "status")
        found = self._svc.store.deliveries.requests(
            session.id, direction=direction, states=stored_states(wanted), limit=limit * 5
        )
        kept = [d for d, js in found if request_status(d.state, js) is wanted]
        return kept[:limit]

    # -- seed 002's requests (docs/sessions.md#sending-between-sessions) -------

    def send(
        self,
        target_session_id: str,
        message: str,
        *,
        reply: str = "none",
        sender: str | None = None,
        from_session: str | None = None,
    ) -> Delivery:
        """A person's ``session_send``: ``message`` runs as its own FIFO turn in the
        session ``target_session_id`` (an id, not a name, of the principal's
        project), carrying the principal's grants. Needs ``session.write``.

        ``reply="completion"`` freezes the turn's result (final text and
        artifact references) on the request (:meth:`result`), and delivers
        it once into ``from_session`` if given. Returns the request (its id
        is the ``requestId``) right after its commit. Nothing is written when
        it is refused: ``session.not_found``, ``session.archived``,
        ``topology.self``, ``request.invalid`` or a quota error. ``sender``
        defaults to the principal; an API-key client sends only as itself.
        """
        self._may(Grant.SESSION_WRITE, "send to sessions")
        target = check_ref("target_session_id", target_session_id)
        content = check_content(
            EntryType.DIRECTIVE, message, max_bytes=self._svc.settings.max_content_bytes
        )
        if reply not in (Reply.NONE.value, Reply.COMPLETION.value):
            raise ValidationError("reply must be 'none' or 'completion'", field="reply")
        mode = Reply(reply)
        sender = self._sender(sender)
        origin = check_ref("from_session", from_session) if from_session is not None else None
        done = delivery_cases.send_request(
            self._svc,
            target,
            content,
            reply=mode,
            sender=sender,
            from_session_id=origin,
            principal=self._principal,
        )
        return done.delivery

    def result(self, request_id: str) -> Delivery | None:
        """The result delivered back for a request, or None (none yet, or no
        session to deliver it to: then :meth:`get`'s ``metadata["result"]``)."""
        request = self.get(request_id)
        return self._svc.store.deliveries.by_key(result_key(request.id))

    def status(self, delivery_id: str) -> str:
        """A request's or result's lifecycle: ``accepted``, ``delivering``,
        ``consumed`` or ``failed`` (docs/sessions.md#sending-between-sessions)."""
        found = self._svc.store.deliveries.with_job_status(self.get(delivery_id).id)
        if found is None:
            raise DeliveryNotFound(f"no delivery {delivery_id!r}", delivery_id=delivery_id)
        return request_status(found[0].state, found[1]).value


@_translating
class Jobs(_Acting):
    """Executions: observe and control admitted turns (of the principal's project)."""

    def get(self, execution_id: str) -> Job:
        """One job."""
        self._may(Grant.HISTORY_READ, "read jobs")
        return self._job(execution_id)

    def list(
        self,
        session_id: str | None = None,
        status: JobStatus | str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> builtins.list[Job]:
        """Jobs, optionally of one session or in one state, in admission order.

        ``newest_first`` reverses the order, so that ``limit`` keeps the latest
        (``limit``: 1 to 10,000).
        """
        self._may(Grant.HISTORY_READ, "read jobs")
        limit = check_limit("limit", limit)
        statuses = [_status(status)] if status is not None else None
        if session_id is not None:
            check_ref("session", session_id)
        sid = self._session(session_id).id if session_id else None
        return self._svc.store.list_jobs(
            session_id=sid,
            statuses=statuses,
            limit=limit,
            newest_first=newest_first,
            project=self._project,
        )

    def wait(self, execution_id: str, timeout: float = 60.0) -> Job:
        """Block until the job is terminal; :class:`chaz.errors.Timeout` otherwise."""
        self._may(Grant.HISTORY_READ, "read jobs")
        timeout = check_seconds("timeout", timeout)
        return wait_terminal(self._svc, self._job(execution_id).id, timeout)

    def output(
        self, execution_id: str, *, block: bool = True, timeout: float = 30.0, full: bool = False
    ) -> dict[str, Any]:
        """The job's state and bounded result (the API twin of the ``job_output`` tool).

        ``full=True`` returns the whole result instead of its excerpt, or
        :class:`chaz.errors.ArtifactNotFound` once retention cut it
        (docs/contracts.md#result-cap).
        """
        self._may(Grant.HISTORY_READ, "read jobs")
        timeout = check_seconds("timeout", timeout)
        execution_id = self._job(execution_id).id
        return job_output(
            self._svc, execution_id, None, block=bool(block), timeout=timeout, full=bool(full)
        )

    def cancel(
        self,
        execution_id: str,
        *,
        expected_version: int | None = None,
        command_id: str | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        """The ``execution.cancel`` command (docs/contracts.md#cancel). Returns its outcome.

        Needs ``runtime.control``; a job of another project is ``auth.forbidden``
        and nothing changes (docs/security.md#execution-control).
        """
        return cancel(
            self._svc,
            execution_id,
            expected_version=expected_version,
            command_id=command_id,
            reason=reason,
            principal=self._principal,
        )


#: Event ids are 64-bit integers in the database.
_MAX_EVENT_ID = 2**63 - 1


@_translating
class Events(_Acting):
    """Sessions' event logs: deliveries, job state changes, archive changes, renames."""

    def list(self, session_id: str, after: int = 0, limit: int = 100) -> builtins.list[Event]:
        """The session's events with ``id > after``, in id order (``limit``: 1 to 10,000).

        Resuming with ``after=`` the last id returned never skips an event.
        """
        self._may(Grant.HISTORY_READ, "read events")
        after = check_int("after", after, low=0, high=_MAX_EVENT_ID)
        limit = check_limit("limit", limit)
        session = self._session(session_id)
        return self._svc.store.events.list(session.id, after=after, limit=limit)

    def follow(
        self, session_id: str, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        """The events after ``after``, then live ones as they are recorded, in id
        order with no gap and no duplicate; forever, or until ``timeout`` seconds."""
        self._may(Grant.HISTORY_READ, "read events")
        after = check_int("after", after, low=0, high=_MAX_EVENT_ID)
        if timeout is not None:
            timeout = check_seconds("timeout", timeout)
        session = self._session(session_id)
        return _iterating(event_log.follow(self._svc, session.id, after=after, timeout=timeout))


@_translating
class Schedules(_Acting):
    """Agent-owned schedules and their ledgers (docs/schedules.md).

    A person manages any agent's schedules here; an agent manages its own
    with the ``schedule_*`` tools. Fields are those of
    :class:`chaz.domain.schedules.Schedule` that a caller sets (``kind``,
    ``prompt``, ``target``, ``cron``/``timezone``, ``interval_seconds``,
    ``run_at``, ``session_id``, ``name``, ``enabled``, ``expires_at``,
    ``max_fires``, ``overlap``, ``missed``, ``max_failures``); each is
    checked, and a refused one is ``request.invalid`` naming it.

    Changes need ``schedule.manage``, reads ``history.read``; only schedules
    of the principal's project are found (docs/security.md).
    """

    def add(self, agent_id: str, *, unattended: bool = False, **fields: Any) -> Schedule:
        """A new schedule owned by ``agent_id``; it waits for its first slot.

        It belongs to the principal's project, and its fires start turns with
        the principal's grants; ``unattended``: under the unattended policy.
        """
        self._may(Grant.SCHEDULE_MANAGE, "add schedules")
        return self._svc.store.schedules.add(
            agent_id,
            fields,
            project=self._project,
            principal=self._principal.name,
            grants=grant_names(self._principal.grants),
            unattended=bool(unattended),
        )

    def update(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change fields of a schedule (``enabled=True`` resumes a disabled one afresh)."""
        self._may(Grant.SCHEDULE_MANAGE, "change schedules")
        return self._svc.store.schedules.update(
            check_ref("schedule", schedule_id), changes, project=self._project
        )

    def pause(self, schedule_id: str) -> Schedule:
        """Stop a schedule firing (``enabled=False``)."""
        return self.update(schedule_id, enabled=False)

    def resume(self, schedule_id: str) -> Schedule:
        """Fire again from the next slot, with its failure count cleared."""
        return self.update(schedule_id, enabled=True)

    def remove(self, schedule_id: str) -> Schedule:
        """Delete a schedule and its ledger; the schedule as it was."""
        self._may(Grant.SCHEDULE_MANAGE, "remove schedules")
        return self._svc.store.schedules.remove(
            check_ref("schedule", schedule_id), project=self._project
        )

    def get(self, schedule_id: str) -> Schedule:
        """One schedule, or ``schedule.not_found``."""
        self._may(Grant.HISTORY_READ, "read schedules")
        return self._svc.store.schedules.get(
            check_ref("schedule", schedule_id), project=self._project
        )

    def list(self, agent_id: str | None = None) -> builtins.list[Schedule]:
        """Every schedule (of one agent), oldest first."""
        self._may(Grant.HISTORY_READ, "read schedules")
        return self._svc.store.schedules.list(agent_id, project=self._project)

    def fires(self, schedule_id: str, limit: int = 100) -> builtins.list[ScheduleFire]:
        """A schedule's ledger, newest slot first: slot, fired at, session, job, outcome."""
        self._may(Grant.HISTORY_READ, "read schedules")
        sid = check_ref("schedule", schedule_id)
        self._svc.store.schedules.get(sid, project=self._project)
        return self._svc.store.schedules.fires(sid, limit=check_limit("limit", limit))


@_translating
class Approvals(_Acting):
    """Tool calls waiting for a person's decision (docs/approvals.md), of the
    principal's project."""

    def decide(
        self, request_id: str, decision: str, *, by: str | None = None
    ) -> approval_cases.Decided:
        """``approve`` or ``deny`` a request: the first decision takes effect and
        resumes the turn; a later one (or one after the timeout) is recorded
        and changes nothing (``effective`` False).

        Needs ``approval.decide``. ``by`` (default: the principal) is whom the
        decision is recorded under; an API-key client decides only as itself.
        """
        return approval_cases.decide(
            self._svc, request_id, decision, by=by, principal=self._principal
        )

    def pending(self, session_id: str | None = None) -> builtins.list[Approval]:
        """Requests waiting for a decision (of one session), oldest first."""
        self._may(Grant.HISTORY_READ, "read approvals")
        if session_id is not None:
            session_id = self._session(session_id, "session_id").id
        return approval_cases.pending(self._svc, session_id, principal=self._principal)

    def get(self, request_id: str) -> Approval:
        """One request of the project, or ``approval.not_found`` (also for
        another project's)."""
        self._may(Grant.HISTORY_READ, "read approvals")
        return approval_cases.get(self._svc, request_id, principal=self._principal)


@_translating
class Keys(_Acting):
    """API keys (docs/security.md#api-keys): only an operator's client manages them."""

    def create(
        self,
        principal: str,
        project: str,
        grants: Iterable[str] | str | None,
        label: str | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key acting as ``principal`` in ``project`` with ``grants`` (names,
        or a comma-separated string; None: every grant). Returns the key and
        its plaintext ``chz_<id>_<secret>``, which is shown only here: only
        its SHA-256 is stored."""
        self._principal.require_operator("create API keys")
        return self._svc.store.keys.create(principal, project, grants, label)

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent); it authenticates nobody from now on."""
        self._principal.require_operator("revoke API keys")
        return self._svc.store.keys.revoke(key_id)

    def list(self, project: str | None = None) -> builtins.list[ApiKey]:
        """Keys (of one project), oldest first, without their hashes."""
        self._principal.require_operator("list API keys")
        return self._svc.store.keys.list(project)


def _iterating(items: Iterator[R]) -> Iterator[R]:
    """``items``, with a backend failure while iterating reported as a chaz error too."""
    step = _backend_errors(items.__next__)
    try:
        while True:
            try:
                item = step()
            except StopIteration:
                return
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


@_translating
class Projects(_Acting):
    """Projects' quotas: live turns and turns ever admitted (docs/security.md#project-quotas).

    An operator's client reads and sets any project's; an API-key client reads
    only its own.
    """

    def get(self, project: str) -> Project:
        """One project's limits (as stored and in force) and its use of them."""
        return project_cases.get(self._svc, project, principal=self._principal)

    def set_limits(
        self, project: str, max_live: int | None = None, max_jobs: int | None = None
    ) -> Project:
        """Set both limits of ``project``: a number, ``-1`` for no limit, None
        for the default (``CHAZ_PROJECT_MAX_LIVE`` / ``CHAZ_PROJECT_MAX_JOBS``).
        Needs an operator's client."""
        return project_cases.set_limits(
            self._svc, project, max_live, max_jobs, principal=self._principal
        )

    def list(self) -> builtins.list[Project]:
        """Every project with limits or sessions (an operator's client), by id."""
        return project_cases.list_projects(self._svc, principal=self._principal)
