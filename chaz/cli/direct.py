"""The read commands' fast path: the client's reads, answered on the bare driver.

``chaz sessions ls``, ``chaz sessions show`` and ``chaz jobs ls`` spend most
of their time importing what a full client needs: pydantic-settings (every
setting), SQLAlchemy and the store's models, redis-py
(docs/performance.md#cli-read-commands-on-postgresql). :class:`Direct` does
what the client would for those reads (the same argument checks, the
operator's project, the same statements, the same models) with psycopg or
the standard library's sqlite3 alone, and only where the outcome is certain
to be the client's:

- the environment names no setting but the database and Redis URLs, the
  home, the principal and the project (settings that are all strings, which
  no validation can refuse), there is no ``.env`` file for pydantic-settings
  to read, and no API key is in play;
- the database URL is a plain ``postgresql+psycopg://`` one
  (:func:`chaz.store.migrate.connect_args`), or none (the embedded default's
  SQLite file), and the database is at the newest revision (else the client
  creates or migrates it).

Anything else, and any error on the way (a refused argument, a missing
session, a connection refused), leaves the command to the client, which
answers or fails exactly as it always has.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from chaz.cli.urls import check_redis_url, plain_environment
from chaz.domain.checks import MAX_SEQ, check_choice, check_int, check_limit, check_ref
from chaz.domain.kinds import JobStatus
from chaz.domain.principals import DEFAULT_PROJECT, check_project
from chaz.store.direct import DirectReads

if TYPE_CHECKING:
    # What the reads stand for: views (chaz.store.views) that build these
    # models, and import pydantic, only for a field a listing does not print.
    from chaz.domain.entries import Entry
    from chaz.domain.jobs import Job
    from chaz.domain.sessions import Session

#: ``client.sessions.queue``'s states: what runs, then what waits.
QUEUE_STATUSES = (
    JobStatus.RUNNING,
    JobStatus.STOPPING,
    JobStatus.WAITING_APPROVAL,
    JobStatus.QUEUED,
)


class Direct:
    """The client's reads for one operator's project, on :class:`DirectReads`."""

    def __init__(self, reads: DirectReads, project: str) -> None:
        self.reads = reads
        self.project = project

    @classmethod
    def open(cls, args: argparse.Namespace) -> Direct | None:
        """The fast path for this command's arguments and environment, or None."""
        if getattr(args, "api_key", None) is not None:
            return None
        env = plain_environment(os.environ)
        if env is None:
            return None
        project = getattr(args, "project", None)
        try:
            if env.get("CHAZ_REDIS_URL"):
                check_redis_url(env["CHAZ_REDIS_URL"])
            # The client checks the principal too; an operator's is any
            # principal name, and a refused one leaves the command to it.
            project = check_project(
                project if project is not None else env.get("CHAZ_PROJECT") or DEFAULT_PROJECT
            )
            _check_principal(getattr(args, "principal", None), env)
            reads = DirectReads.open(_database_url(getattr(args, "home", None), env), views=True)
        except Exception:
            # A refused setting, or the driver's own errors (a refused
            # connection, a bad password, a locked file): the client reports them.
            return None
        return cls(reads, project) if reads is not None else None

    def session(self, ref: str, field: str = "session") -> Session | None:
        """``client.sessions.get``: the project's session of an id or name."""
        return self.reads.session(check_ref(field, ref), project=self.project)

    def sessions(
        self, agent_id: str | None, limit: int, tree: str | None, archived: bool
    ) -> list[Session] | None:
        """``client.sessions.list``."""
        if agent_id is not None:
            check_ref("agent_id", agent_id)
        tree_id = None
        if tree is not None:
            root = self.session(tree, "tree")
            if root is None:
                return None
            tree_id = root.tree_id
        return self.reads.sessions(
            agent_id=agent_id,
            limit=check_limit("limit", limit),
            tree_id=tree_id,
            archived=bool(archived),
            project=self.project,
        )

    def show(self, ref: str, last: int | None) -> tuple[Session, list[Entry], list[Job]] | None:
        """What ``chaz sessions show`` reads: ``client.sessions.get``, then
        ``entries`` (the last ``last``, or all) and ``queue``."""
        session = self.session(ref)
        if session is None:
            return None
        after = 0 if last is None else max(0, session.last_seq - last)
        entries = self.reads.entries(
            session.id, after=check_int("after", after, low=0, high=MAX_SEQ)
        )
        queue = self.reads.jobs(
            session_id=session.id,
            statuses=QUEUE_STATUSES,
            limit=100,
            newest_first=False,
            project=None,
        )
        return session, entries, queue

    def jobs(
        self, session_id: str | None, status: str | None, limit: int, newest_first: bool
    ) -> list[Job] | None:
        """``client.jobs.list``."""
        limit = check_limit("limit", limit)
        statuses = (
            [check_choice("status", status, JobStatus, "job status")]
            if status is not None
            else None
        )
        sid = None
        if session_id is not None:
            session = self.session(check_ref("session", session_id))
            if session is None:
                return None
            sid = session.id
        return self.reads.jobs(
            session_id=sid,
            statuses=statuses,
            limit=limit,
            newest_first=newest_first,
            project=self.project,
        )


def _database_url(home: str | None, env: dict[str, str]) -> str:
    """``Settings.effective_database_url()`` of these settings, ``--home`` first."""
    if env.get("CHAZ_DATABASE_URL"):
        return env["CHAZ_DATABASE_URL"]
    where = Path(home) if home else Path(env.get("CHAZ_HOME", ".chaz"))
    return f"sqlite:///{(where.resolve() / 'chaz.db').as_posix()}"


def _check_principal(given: str | None, env: dict[str, str]) -> None:
    from chaz.domain.principals import DEFAULT_PRINCIPAL, check_principal

    check_principal(given if given is not None else env.get("CHAZ_PRINCIPAL") or DEFAULT_PRINCIPAL)
