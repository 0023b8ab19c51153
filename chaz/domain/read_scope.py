"""Which sessions one viewer may read: the rule, apart from the reads that build it."""

from __future__ import annotations

from dataclasses import dataclass

from chaz.domain.principals import DEFAULT_PROJECT
from chaz.domain.sessions import Session


@dataclass(frozen=True)
class ReadScope:
    """The sessions one viewer may read: its tree, and sessions of other trees below it."""

    viewer_session_id: str
    tree_id: str
    #: Sessions of other trees that descend from the viewer (usually none).
    below: frozenset[str]
    #: The viewer's project: nothing outside it is ever readable.
    project: str = DEFAULT_PROJECT

    def allows(self, session: Session) -> bool:
        """Whether the viewer may read ``session``'s history."""
        if session.project != self.project:
            return False
        return session.tree_id == self.tree_id or session.id in self.below
