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
``projects``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import SecretStr

from chaz.client.admin import Keys, Projects
from chaz.client.agents import Agents
from chaz.client.approvals import Approvals
from chaz.client.base import backend_errors
from chaz.client.deliveries import Deliveries
from chaz.client.events import Events
from chaz.client.jobs import Jobs
from chaz.client.schedules import Schedules
from chaz.client.sessions import Sessions
from chaz.client.webhooks import Webhooks
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
from chaz.services import Services
from chaz.settings import Settings
from chaz.store.migrate import upgrade

if TYPE_CHECKING:
    from chaz.runtime.registry import ToolRegistry

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
        self._tools = tools
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


@backend_errors
def _authenticated(services: Services, api_key: object) -> Principal:
    """The principal an API key stands for (``auth.unauthenticated`` if none)."""
    if isinstance(api_key, SecretStr):
        api_key = api_key.get_secret_value()
    return services.store.keys.authenticate(api_key)
