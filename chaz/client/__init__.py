"""The producer API: ``chaz.Client``, with one module per namespace (``agents``, ``sessions``, ...).

Everything returned is a pydantic model; every error is a
:class:`chaz.errors.ChazError` with a stable ``code``. Every argument passes
the rules of :mod:`chaz.domain.validation` before anything is read or
written, so bad input is ``request.invalid`` (naming the field) or
``request.too_large`` on SQLite and PostgreSQL alike, and never reaches a
database driver.

Every call acts as the client's principal, in its project (docs/security.md):
its grant is checked first, and objects of another project are answered as
missing ones.

Each namespace is a module of this package over :mod:`chaz.client.base`
(the principal it acts as, backend errors as chaz errors): ``agents``,
``sessions`` (rooms, search and compaction too), ``jobs``, ``deliveries``,
``events``, ``schedules``, ``approvals``, and ``admin`` (``keys``,
``projects``). ``Client(url=..., api_key=...)`` is the same API over a
``chaz serve`` (:mod:`chaz.client.remote`, docs/http.md#producer); the
in-process namespaces and their database and Redis are then never loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from pydantic import SecretStr

from chaz.domain.principals import (
    ALL_GRANTS,
    DEFAULT_PRINCIPAL,
    DEFAULT_PROJECT,
    Principal,
    check_principal,
    check_project,
    parse_grants,
)
from chaz.errors import ValidationError
from chaz.settings import Settings, check_http_url

if TYPE_CHECKING:
    from chaz.client.admin import Keys, Projects
    from chaz.client.agents import Agents
    from chaz.client.approvals import Approvals
    from chaz.client.deliveries import Deliveries
    from chaz.client.events import Events
    from chaz.client.jobs import Jobs
    from chaz.client.schedules import Schedules
    from chaz.client.sessions import Sessions
    from chaz.client.webhooks import Webhooks
    from chaz.runtime.registry import ToolRegistry
    from chaz.services import Services

__all__ = ["Client"]


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

    With ``url`` (or ``CHAZ_URL``) the client speaks HTTP to that ``chaz
    serve`` and holds no database or Redis settings: the namespaces are the
    same methods with the same models and errors, as the key's principal
    (``principal``, ``project``, ``grants`` and ``tools`` are the server's:
    giving one is ``request.invalid``); ``services`` is absent.
    """

    #: The namespaces (in-process, or their HTTP twins for a ``url`` client).
    agents: Agents
    sessions: Sessions
    jobs: Jobs
    deliveries: Deliveries
    events: Events
    schedules: Schedules
    approvals: Approvals
    keys: Keys
    projects: Projects
    #: The database and Redis (an in-process client only).
    services: Services

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
        url: str | None = None,
    ) -> None:
        # Read now, not once per process: a program that changes CHAZ_* between
        # two clients (or starts an embedded stack, then a fleet) gets what it set.
        self.settings = settings or Settings()
        self._tools = tools
        self._close: Any = None
        given_url = url is not None
        server = url if given_url else self.settings.url
        if server is not None:
            self._connect(server, api_key, principal, project, grants, tools, given_url)
        else:
            self._in_process(migrate, principal, project, grants, api_key)

    def _in_process(
        self,
        migrate: bool,
        principal: str | None,
        project: str | None,
        grants: Iterable[str] | str | None,
        api_key: str | SecretStr | None,
    ) -> None:
        """The namespaces over this process's own database and Redis connections."""
        # Imported here: a client of a chaz serve never loads SQLAlchemy or Redis.
        from chaz.client.admin import Keys, Projects
        from chaz.client.agents import Agents
        from chaz.client.approvals import Approvals
        from chaz.client.deliveries import Deliveries
        from chaz.client.events import Events
        from chaz.client.jobs import Jobs
        from chaz.client.schedules import Schedules
        from chaz.client.sessions import Sessions
        from chaz.client.webhooks import Webhooks
        from chaz.services import Services
        from chaz.store.migrate import upgrade

        operator = _operator(self.settings, principal, project, grants, api_key)
        self.services = Services(self.settings)
        self._close = self.services.close
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
        self.agents = Agents(self.services, lambda: self.tools, who)
        self.sessions = Sessions(self.services, who)
        self.jobs = Jobs(self.services, who)
        self.deliveries = Deliveries(self.services, who)
        self.events = Events(self.services, who)
        self.schedules = Schedules(self.services, who)
        self.approvals = Approvals(self.services, who)
        self.keys = Keys(self.services, who)
        self.projects = Projects(self.services, who)
        self.webhooks = Webhooks(self.services, who)

    def _connect(
        self,
        url: str,
        api_key: str | SecretStr | None,
        principal: str | None,
        project: str | None,
        grants: Iterable[str] | str | None,
        tools: ToolRegistry | None,
        given_url: bool,
    ) -> None:
        """The namespaces over a chaz serve's producer routes (docs/http.md#producer):
        the key is the principal, project and grants; no database, no Redis."""
        from chaz.client import remote

        if given_url:
            try:
                url = check_http_url(check_text_url(url))
            except ValueError as exc:
                raise ValidationError(f"url {exc}", field="url") from None
        named = [n for n, v in (("principal", principal), ("project", project)) if v is not None]
        if grants is not None:
            named.append("grants")
        if tools is not None:
            named.append("tools")
        if named:
            raise ValidationError(
                f"a client of a chaz serve acts as its api_key: {named[0]} is the server's",
                field=named[0],
            )
        key = api_key if api_key is not None else self.settings.api_key
        if isinstance(key, SecretStr):
            key = key.get_secret_value()
        if key is not None and not isinstance(key, str):
            raise ValidationError("api_key must be a string", field="api_key")
        connected = remote.connect(url, key)
        self._close = connected.transport.close
        self.principal = connected.principal
        # The HTTP twins have the in-process namespaces' methods (a test
        # compares their signatures); typed as them for the caller.
        self.agents = cast("Agents", connected.agents)
        self.sessions = cast("Sessions", connected.sessions)
        self.jobs = cast("Jobs", connected.jobs)
        self.deliveries = cast("Deliveries", connected.deliveries)
        self.events = cast("Events", connected.events)
        self.schedules = cast("Schedules", connected.schedules)
        self.approvals = cast("Approvals", connected.approvals)
        self.keys = cast("Keys", remote.unavailable("keys"))
        self.projects = cast("Projects", remote.unavailable("projects"))
        self.webhooks = cast("Webhooks", remote.unavailable("webhooks"))

    @property
    def tools(self) -> ToolRegistry:
        """The tools agents may be given: what ``agents.put`` checks names against
        (the built-in ones unless ``tools`` was given)."""
        if self._tools is None:
            # Loaded on first use: a command that only reads never imports the tools.
            from chaz.tools import default_registry

            self._tools = default_registry()
        return self._tools

    def close(self) -> None:
        """Release connections."""
        if self._close is not None:
            self._close()

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


def check_text_url(value: object) -> str:
    """``value`` if it is a string (``ValueError`` otherwise)."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _authenticated(services: Services, api_key: object) -> Principal:
    """The principal an API key stands for (``auth.unauthenticated`` if none)."""
    from chaz.client.base import backend_errors

    if isinstance(api_key, SecretStr):
        api_key = api_key.get_secret_value()
    return backend_errors(services.store.keys.authenticate)(api_key)
