"""A rollback run's admission and a running turn's write lock the same two rows
in opposite orders (the session's, then the job's; the job's, then the
session's). When PostgreSQL breaks that deadlock by aborting the admission,
the admission wrote nothing and is run again (chaz/usecases/multitask.py),
so the caller gets its run, not a 503. This test makes the deadlock happen on
purpose: a connection of its own plays the turn's write."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.multitask import Strategy
from chaz.domain.principals import LOCAL
from chaz.services import Services
from chaz.usecases import admission
from chaz.usecases.multitask import admit_displacing
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="quiet", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture
def services(stack: Stack) -> Iterator[Services]:
    if stack.kind != "server":
        pytest.skip("a deadlock between two row locks is PostgreSQL's (SQLite has one writer)")
    stack.client.agents.put(AGENT)
    svc = Services(stack.settings)
    yield svc
    svc.close()


def _plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _deadlocks(admin: psycopg.Connection[Any], db: str) -> int:
    row = admin.execute(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = %s", (db,)
    ).fetchone()
    return int(row[0]) if row else 0


def test_a_rollback_admission_aborted_by_a_deadlock_is_run_again(
    stack: Stack, services: Services
) -> None:
    session = stack.client.sessions.create(AGENT.id)
    first = admission.admit(services, session.id, NewEntry(EntryType.MESSAGE, "user:u", "first"))
    assert first.job is not None
    url = _plain(stack.settings.effective_database_url())
    db = url.rsplit("/", 1)[1]
    admin = psycopg.connect(url, autocommit=True)
    turn = psycopg.connect(url)
    before = _deadlocks(admin, db)
    try:
        # The turn's fenced write: its job's row first. It never detects the
        # deadlock itself (the admission's check, at the default 1 s, does).
        turn.execute("SET deadlock_timeout = '10min'")
        turn.execute("SELECT lease_token FROM jobs WHERE id = %s FOR UPDATE", (first.job.id,))

        result: dict[str, Any] = {}

        def rollback_run() -> None:
            try:
                result["done"] = admit_displacing(
                    services,
                    session.id,
                    NewEntry(EntryType.MESSAGE, "user:u", "after"),
                    Strategy.ROLLBACK,
                    principal=LOCAL,
                )
            except BaseException as exc:
                result["error"] = exc

        runner = threading.Thread(target=rollback_run)
        runner.start()
        # The admission holds the session's row and waits for the job's.
        deadline = time.monotonic() + 120
        while not admin.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            (db,),
        ).fetchone():
            assert runner.is_alive() and time.monotonic() < deadline, result
            time.sleep(0.02)
        # Then the turn's write wants the session's row: a cycle. PostgreSQL
        # aborts the admission, which lets this update through.
        turn.execute("UPDATE sessions SET last_seq = last_seq WHERE id = %s", (session.id,))
        turn.rollback()
        runner.join(120)
        assert not runner.is_alive()
    finally:
        turn.close()
    try:
        assert "error" not in result, result
        assert _deadlocks(admin, db) > before
    finally:
        admin.close()
    done = result["done"].done
    assert done.job is not None and done.entry.content == "after"
    assert services.store.get_job(first.job.id).rolled_back_at is not None
