"""Who acts, in which project, with which grants (docs/security.md).

Every call carries a :class:`Principal`: a name (``user:NAME``,
``agent:ID`` or ``system:NAME``), the project it acts in, and the grants it
holds there. Sessions, jobs, deliveries, schedules and artifacts belong to
one project; nothing crosses projects.

An agent acting in a turn holds the intersection of its own grants
(``AgentSpec.grants``) and those of whoever started the turn (the job's
``grants``), and whatever it hands on (a sub-agent, a message, a
follow-up) carries that intersection: grants only ever narrow along a
chain of turns.

This module is rules only: no I/O. Keys are hashed and looked up by
:mod:`chaz.store.keys`; the checks are made by the use cases.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from chaz.errors import Forbidden, ValidationError


class Grant(StrEnum):
    """What a principal may do in a project."""

    #: Read sessions, entries, jobs, results, deliveries, schedules, events.
    HISTORY_READ = "history.read"
    #: Create sessions, post to them, fork and rename them.
    SESSION_WRITE = "session.write"
    #: Start sub-agents (``agent``, ``spawn_agent``, forks from a turn).
    AGENT_SPAWN = "agent.spawn"
    #: Message another session (``agent(to=)``, ``send_message``).
    MESSAGE_SEND = "message.send"
    #: Cancel jobs and every other execution control command.
    RUNTIME_CONTROL = "runtime.control"
    #: Archive sessions and branches.
    SESSION_ARCHIVE = "session.archive"
    #: Add, change, pause and remove schedules.
    SCHEDULE_MANAGE = "schedule.manage"
    #: Decide approval requests.
    APPROVAL_DECIDE = "approval.decide"


ALL_GRANTS: frozenset[Grant] = frozenset(Grant)

DEFAULT_PROJECT = "default"
DEFAULT_PRINCIPAL = "user:local"
#: Whom a person's write through an operator's client is from when it names
#: no sender: the producer API and the CLI alike (docs/sessions.md#senders).
DEFAULT_PERSON = "user:you"

#: ``kind:name``; the name is an agent id, a user or a system component.
PRINCIPAL = re.compile(r"(user|agent|system):[A-Za-z0-9_.@\-]{1,128}")
#: Lower-case, so ``Acme`` and ``acme`` cannot be two tenants.
PROJECT = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,63}")


def check_principal(value: object) -> str:
    """A principal name, or ``request.invalid`` naming ``principal``."""
    if not isinstance(value, str) or not PRINCIPAL.fullmatch(value):
        raise ValidationError(
            "principal must be user:NAME, agent:ID or system:NAME "
            "(letters, digits, _ . @ -, at most 128)",
            field="principal",
        )
    return value


def check_project(value: object) -> str:
    """A project name, or ``request.invalid`` naming ``project``."""
    if not isinstance(value, str) or not PROJECT.fullmatch(value):
        raise ValidationError(
            "project must be 1-64 of a-z 0-9 _ . - starting with a letter or digit",
            field="project",
        )
    return value


def parse_grants(values: Iterable[object] | None) -> frozenset[Grant] | None:
    """Grants from names (None stays None: every grant); unknown ones are
    ``request.invalid`` naming ``grants``."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [v.strip() for v in values.split(",") if v.strip()]
    out: set[Grant] = set()
    for value in values:
        try:
            out.add(Grant(str(value)))
        except ValueError:
            known = ", ".join(sorted(g.value for g in Grant))
            raise ValidationError(
                f"unknown grant {value!r}; grants are: {known}", field="grants"
            ) from None
    return frozenset(out)


def grant_names(grants: frozenset[Grant] | None) -> list[str] | None:
    """The stored form of a grant set: sorted names, None for every grant."""
    if grants is None or grants == ALL_GRANTS:
        return None
    return sorted(g.value for g in grants)


def narrow(a: frozenset[Grant] | None, b: frozenset[Grant] | None) -> frozenset[Grant] | None:
    """The intersection of two grant sets, where None is every grant."""
    if a is None:
        return b
    if b is None:
        return a
    return a & b


@dataclass(frozen=True)
class Principal:
    """Who acts: a name, the project it acts in, and its grants there."""

    name: str = DEFAULT_PRINCIPAL
    project: str = DEFAULT_PROJECT
    grants: frozenset[Grant] = field(default=ALL_GRANTS)
    #: Whether it came from a database credential (trusted with install-wide
    #: configuration, such as saving agents) rather than an API key.
    operator: bool = True

    def __post_init__(self) -> None:
        check_principal(self.name)
        check_project(self.project)

    def has(self, grant: Grant) -> bool:
        """Whether the principal holds ``grant`` in its project."""
        return grant in self.grants

    def require(self, grant: Grant, action: str) -> None:
        """Raise ``auth.forbidden`` unless the principal holds ``grant``.

        Checked before the target is looked up, so the refusal says nothing
        about whether the target exists.
        """
        if grant not in self.grants:
            raise Forbidden(
                f"{self.name} may not {action} in project {self.project}: it lacks {grant.value}",
                grant=grant.value,
                project=self.project,
            )

    def require_operator(self, action: str) -> None:
        """Raise ``auth.forbidden`` for an API-key principal: install-wide
        configuration needs the database credential."""
        if not self.operator:
            raise Forbidden(
                f"{self.name} may not {action}: it needs an operator's client, not an API key"
            )

    def same_project(self, project: str | None) -> bool:
        """Whether an object of ``project`` (None: the default) is this principal's."""
        return (project or DEFAULT_PROJECT) == self.project


#: The single-user default: every grant in the default project.
LOCAL = Principal()


def turn_grants(
    agent_grants: frozenset[Grant] | None, job_grants: frozenset[Grant] | None
) -> frozenset[Grant]:
    """What an agent holds in a turn: its own grants and its starter's, intersected."""
    both = narrow(agent_grants, job_grants)
    return ALL_GRANTS if both is None else both
