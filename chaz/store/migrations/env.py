"""Alembic environment: runs on the connection chaz hands it (see chaz.store.migrate)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from chaz.store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:  # `alembic` run by hand with -x url=...
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("give the database: alembic -x url=postgresql+psycopg://...")
    with create_engine(url).connect() as conn:
        _run(conn)
        conn.commit()
