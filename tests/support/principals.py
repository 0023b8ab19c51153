"""Test helpers for principals and projects, until every public entry takes them.

``session_in`` writes a session of another project (as an operator's client
would with ``chaz.Client(project=...)``); ``post_as`` admits a Message whose
turn runs for a principal with narrowed grants (as a client built with
``grants=`` would). Both go through the store and the admission the public
entries use.
"""

from __future__ import annotations

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.principals import Grant, grant_names
from chaz.store.types import Appended, JobFields
from chaz.usecases import admission


def session_in(
    client: chaz.Client,
    agent_id: str,
    project: str,
    name: str | None = None,
    *,
    tree_id: str | None = None,
    fork: tuple[str, int] | None = None,
) -> chaz.Session:
    """A new session of ``agent_id`` in ``project``, owned by ``user:<project>``.

    ``tree_id`` and ``fork`` can tie it to another project's session, as
    corrupt or forged rows would: the project rule alone must then hide it.
    """
    return client.services.store.create_session(
        agent_id,
        name=name,
        project=project,
        owner=f"user:{project}",
        tree_id=tree_id,
        fork=fork,
    )


def post_as(
    client: chaz.Client,
    session_id: str,
    text: str,
    *,
    sender: str = "user:alice",
    grants: list[Grant] | None = None,
    unattended: bool = False,
    caller_session_id: str | None = None,
) -> Appended:
    """Post ``text`` as ``sender`` holding ``grants`` (None: every grant): its turn's
    job carries them, so the turn's agent holds at most these."""
    fields = JobFields(
        owner=sender,
        grants=grant_names(None if grants is None else frozenset(grants)),
        unattended=unattended,
        caller_session_id=caller_session_id,
    )
    return admission.admit(
        client.services,
        session_id,
        NewEntry(EntryType.MESSAGE, sender, text),
        job_fields=fields,
    )
