"""Migrations on a fresh SQLite file and a fresh PostgreSQL database: idempotent,
safe to run from several processes at once, and equal to the models."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy.exc
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from chaz.store import statements as st
from chaz.store.db import make_engine
from chaz.store.migrate import alembic_config, current_revision, is_current_postgres, upgrade
from chaz.store.models import Base
from chaz.store.search import SEARCH_INDEXES, SEARCH_TABLES
from tests.conftest import PG_ADMIN, ROOT, _unavailable

HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()
TABLES = {
    "agents",
    "sessions",
    "entries",
    "jobs",
    "commands",
    "deliveries",
    "events",
    "artifacts",
    "todos",
    "schedules",
    "schedule_fires",
    "approvals",
    "projects",
    "api_keys",
    "webhooks",
    "webhook_secrets",
    "alembic_version",
}


@pytest.fixture(scope="module")
def pg_admin() -> str:
    try:
        psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        _unavailable("PostgreSQL", exc)
    return PG_ADMIN


def _fresh_pg(admin_url: str) -> Iterator[str]:
    name = f"chaz_mig_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a new SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{(tmp_path / 'fresh.db').as_posix()}"
    else:
        yield from _fresh_pg(request.getfixturevalue("pg_admin"))


@pytest.fixture
def engine(fresh_url: str) -> Iterator[Engine]:
    e = make_engine(fresh_url)
    try:
        yield e
    finally:
        e.dispose()


def _modelled(name: str | None, type_: str, _parents: Any) -> bool:
    # Search's FTS5 tables (SQLite) and trigram indexes (PostgreSQL) are made by
    # migration 0008 outside the models: exactly those are left out.
    if type_ == "table":
        return name not in SEARCH_TABLES
    if type_ == "index":
        return name not in SEARCH_INDEXES
    return True


def schema_diff(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": _modelled}
        )
        return list(compare_metadata(ctx, Base.metadata))


def table_names(engine: Engine) -> set[str]:
    """The tables of the models (search's FTS5 tables left out)."""
    return set(inspect(engine).get_table_names()) - SEARCH_TABLES


def search_objects(engine: Engine) -> set[str]:
    """Search's tables (SQLite) or indexes (PostgreSQL) that exist."""
    insp = inspect(engine)
    if engine.dialect.name == "sqlite":
        return set(insp.get_table_names()) & SEARCH_TABLES
    names = {i["name"] or "" for t in ("entries", "sessions") for i in insp.get_indexes(t)}
    return names & SEARCH_INDEXES


def test_upgrade_is_idempotent_and_matches_the_models(engine: Engine) -> None:
    assert HEAD is not None
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == HEAD
    upgrade(engine)  # a second run is a no-op
    assert current_revision(engine) == HEAD
    assert table_names(engine) == TABLES
    assert schema_diff(engine) == []
    expected = (
        {"entries_fts", "sessions_fts"} if engine.dialect.name == "sqlite" else SEARCH_INDEXES
    )
    assert expected <= search_objects(engine)


def test_the_comparison_can_see_a_difference(engine: Engine) -> None:
    """The check above is not vacuous: a schema that drifts from the models is reported."""
    upgrade(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_jobs_project_status")
        conn.exec_driver_sql("CREATE TABLE stray (id INTEGER PRIMARY KEY)")
    diff = schema_diff(engine)
    kinds = {d[0] if isinstance(d, tuple) else d[0][0] for d in diff}
    assert "add_index" in kinds and "remove_table" in kinds, diff


def test_the_head_job_query_can_use_the_partial_index(engine: Engine) -> None:
    """The head-job query names the unfinished states as the partial index's own
    predicate (literals), so the planner may use ``ix_jobs_session_active`` even
    in a prepared statement's generic plan (PostgreSQL) and at all (SQLite)."""
    upgrade(engine)
    sql = str(st.HEAD.compile(engine))
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, ("s", 1, 0)).all()
        else:
            # A generic plan is what psycopg's prepared statement ends up with;
            # bind parameters there would rule the partial index out.
            conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            prepared = sql.replace("%(sid)s", "$1").replace("%(param_1)s", "$2")
            conn.exec_driver_sql(f"PREPARE head(text, int) AS {prepared}")
            plan = conn.exec_driver_sql("EXPLAIN EXECUTE head('s', 1)").all()
    assert "ix_jobs_session_active" in " ".join(str(r[-1]) for r in plan), plan


def test_a_context_read_probes_the_jobs_by_key_even_planned_on_empty_tables(
    engine: Engine,
) -> None:
    """A context read checks each entry's job for a rollback (``st.VISIBLE``) by
    a lookup per entry, never a scan of ``jobs``: a plan made while the tables
    were empty and never analyzed (a fresh database; the generic plan a
    worker's connection prepares then and keeps) once scanned the whole
    table for every entry read, a cost that grew with the table and the
    context (docs/performance.md#postgresql-work-per-turn)."""
    upgrade(engine)
    values = {"sid": "s", "tid": "t", "upto": 5, "window": 512, "lim": 10}
    compiled = st.CONTEXT.params(values).compile(
        engine, compile_kwargs={"render_postcompile": True}
    )
    sql = str(compiled)
    bound: dict[str, Any] = values | {f"type_1_{i}": t for i, t in enumerate(st.CONTEXT_TYPES, 1)}
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            positional = tuple(bound.get(n, 0) for n in compiled.positiontup or ())
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, positional).all()
            details = [str(r[-1]) for r in plan if " jobs" in str(r[-1])]
            assert details and all(d.startswith("SEARCH") for d in details), plan
            return
        order: list[str] = []
        for name in re.findall(r"%\((\w+)\)s", sql):
            if name not in order:
                order.append(name)
                sql = sql.replace(f"%({name})s", f"${len(order)}")
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.exec_driver_sql(f"PREPARE context AS {sql}")
        args = ", ".join(f"'{bound[n]}'" for n in order)
        plan = conn.exec_driver_sql(f"EXPLAIN EXECUTE context({args})").all()
    text_plan = "\n".join(str(r[0]) for r in plan)
    assert "Seq Scan on jobs" not in text_plan, text_plan
    assert "Index" in text_plan.split("SubPlan", 1)[-1], text_plan


def test_the_partial_session_indexes_serve_their_readers(engine: Engine) -> None:
    """Migration 0021 made ``ix_sessions_parent_job_id`` (and on PostgreSQL the
    trigram indexes of a session's name and description) partial, ``IS NOT
    NULL``: a reader's comparison implies the predicate, so its plan (a
    generic one, as prepared, on PostgreSQL) may still use them."""
    upgrade(engine)
    by_parent = "SELECT count(*) FROM sessions WHERE parent_job_id = "
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + by_parent + "?", ("j",)).all()
            assert "ix_sessions_parent_job_id" in " ".join(str(r[-1]) for r in plan), plan
            return
        conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        conn.exec_driver_sql(f"PREPARE parent(text) AS {by_parent} $1")
        conn.exec_driver_sql(
            "PREPARE card(text) AS SELECT id FROM sessions "
            "WHERE name ILIKE $1 ESCAPE '\\' OR description ILIKE $1 ESCAPE '\\'"
        )
        plans = [
            " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN EXECUTE {q}").all())
            for q in ("parent('j')", "card('%%abc%%')")
        ]
    assert "ix_sessions_parent_job_id" in plans[0], plans
    assert "ix_sessions_name_trgm" in plans[1], plans
    assert "ix_sessions_description_trgm" in plans[1], plans


def test_unique_constraints_exist_in_the_migrated_schema(engine: Engine) -> None:
    # Idempotency rests on these (docs/contracts.md#invariant-6); they must come from the migration.
    upgrade(engine)
    insp = inspect(engine)

    def uniques(table: str) -> set[tuple[str | None, ...]]:
        found: set[tuple[str | None, ...]] = {
            tuple(u["column_names"]) for u in insp.get_unique_constraints(table)
        }
        found |= {tuple(i["column_names"]) for i in insp.get_indexes(table) if i["unique"]}
        return found

    assert {("session_id", "seq"), ("session_id", "key_scope", "idempotency_key")} <= uniques(
        "entries"
    )
    assert {("trigger_entry_id",), ("session_id", "ordinal")} <= uniques("jobs")
    # Names are unique per project (migration 0010), not across the install.
    assert ("project", "name") in uniques("sessions")
    assert ("name",) not in uniques("sessions")


_SESSION = (
    "INSERT INTO sessions (id, agent_id, name, tree_id, call_depth, last_seq, last_ordinal, "
    "created_at, room_burst, project, owner, unattended, permission_mode) VALUES "
    "(:id, 'a', :name, :id, 0, 0, 0, CURRENT_TIMESTAMP, 0, :project, 'user:x', false, 'default')"
)


def test_names_per_project_keep_rows_search_and_foreign_keys(engine: Engine) -> None:
    """0010 on a database with rows: SQLite copies ``sessions`` (rowids change),
    and its search index, triggers and the rows that reference it come through."""
    upgrade(engine, "0009")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO agents (id, spec, created_at, updated_at) "
            "VALUES ('a', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
        )
        for sid, name, project in [("s0", "gone", "acme"), ("s1", "main", "acme")]:
            conn.execute(text(_SESSION), {"id": sid, "name": name, "project": project})
        conn.exec_driver_sql(
            "INSERT INTO entries (id, session_id, seq, type, sender, content, metadata, "
            "created_at, key_scope) VALUES ('e1', 's1', 1, 'message', 'user:x', 'hello', '{}', "
            "CURRENT_TIMESTAMP, 'user')"
        )
        # A gap in the rowids, which the copy closes.
        conn.exec_driver_sql("DELETE FROM sessions WHERE id = 's0'")
    upgrade(engine)
    assert schema_diff(engine) == []
    with engine.begin() as conn:
        conn.execute(text(_SESSION), {"id": "s2", "name": "main", "project": "default"})
        conn.exec_driver_sql("UPDATE sessions SET description = 'zebra notes' WHERE id = 's1'")
    with pytest.raises(sqlalchemy.exc.IntegrityError), engine.begin() as conn:
        conn.execute(text(_SESSION), {"id": "s3", "name": "main", "project": "acme"})
    with pytest.raises(sqlalchemy.exc.IntegrityError), engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO entries (id, session_id, seq, type, sender, content, metadata, "
            "created_at, key_scope) VALUES ('e2', 'nowhere', 1, 'message', 'user:x', 'x', '{}', "
            "CURRENT_TIMESTAMP, 'user')"
        )
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:

            def found(term: str) -> set[str]:
                return set(
                    conn.execute(
                        text(
                            "SELECT s.id FROM sessions_fts JOIN sessions s "
                            "ON s.rowid = sessions_fts.rowid WHERE sessions_fts MATCH :t"
                        ),
                        {"t": term},
                    ).scalars()
                )

            assert found("zebra") == {"s1"}
            assert found("main") == {"s1", "s2"}
            assert found("gone") == set()


CHILD = """
import sys, time
from chaz.store.db import make_engine
from chaz.store.migrate import upgrade
url, start_at = sys.argv[1], float(sys.argv[2])
engine = make_engine(url)
time.sleep(max(0.0, start_at - time.time()))
upgrade(engine)
engine.dispose()
print("migrated")
"""


def test_upgrade_from_four_processes_at_once(fresh_url: str) -> None:
    # Every child imports first, then all start the upgrade at the same instant.
    start_at = time.time() + 2.5
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, fresh_url, str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    outcomes = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outcomes, strict=True):
        assert p.returncode == 0, err
        assert out.strip() == "migrated"
    engine = make_engine(fresh_url)
    try:
        assert current_revision(engine) == HEAD
        assert table_names(engine) == TABLES
        assert schema_diff(engine) == []
        with engine.connect() as conn:
            versions = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        assert [v[0] for v in versions] == [HEAD]
    finally:
        engine.dispose()


def test_is_current_postgres_reads_the_version_with_psycopg_alone(pg_admin: str) -> None:
    # chaz worker asks this before it execs Celery (chaz/cli/processes.py):
    # True only at the newest revision; anything else leaves it to the engine.
    for url in _fresh_pg(pg_admin):
        assert not is_current_postgres(url)  # no version table yet
        engine = make_engine(url)
        try:
            upgrade(engine, "0001")
            assert not is_current_postgres(url)  # behind
            upgrade(engine)
            assert is_current_postgres(url)
        finally:
            engine.dispose()
        assert not is_current_postgres(f"{url}?sslmode=disable")  # options: SQLAlchemy's
        assert not is_current_postgres(url.rsplit("/", 1)[0] + "/chaz_no_such_database")
