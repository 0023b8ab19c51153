"""Which database URLs the read commands' fast path reads itself (chaz.store.migrate.connect_args).

The fast path and ``chaz worker``'s migrations check must pass psycopg
exactly what SQLAlchemy would, so they take only plain URLs and leave every
other one (options, sockets, IPv6, other drivers) to SQLAlchemy: None here.
"""

from __future__ import annotations

import pytest

from chaz.store.migrate import connect_args


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql+psycopg://postgres@127.0.0.1:5432/test",
            {"user": "postgres", "host": "127.0.0.1", "port": "5432", "dbname": "test"},
        ),
        (
            "postgresql+psycopg://chaz:s%40cr%2Ft@db.internal/chaz",
            {"user": "chaz", "password": "s@cr/t", "host": "db.internal", "dbname": "chaz"},
        ),
        ("postgresql+psycopg://db/chaz", {"host": "db", "dbname": "chaz"}),
        ("postgresql+psycopg:///chaz", {"dbname": "chaz"}),
    ],
)
def test_a_plain_url_gives_what_sqlalchemy_would(url: str, expected: dict[str, str]) -> None:
    assert connect_args(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://u@h/db?sslmode=require",
        "postgresql+psycopg://u@[::1]:5432/db",
        "postgresql+psycopg://u@h1,h2/db",
        "postgresql+psycopg://u@h:notaport/db",
        "postgresql+psycopg://u@h/",
        "postgresql+psycopg://u@h/d%62",
        "postgresql://u@h/db",
        "postgresql+asyncpg://u@h/db",
        "sqlite:///chaz.db",
        "",
    ],
)
def test_any_other_url_is_left_to_sqlalchemy(url: str) -> None:
    assert connect_args(url) is None


@pytest.mark.parametrize("table", ["sessions", "entries", "jobs"])
def test_the_direct_reader_parses_every_json_and_timestamp_column_of_the_models(
    table: str,
) -> None:
    # chaz.store.direct keeps its own list of the columns SQLite stores as text
    # (JSON, timestamps) that SQLAlchemy would parse; a column added to the
    # models must be added there too, or the fast path answers it unparsed.
    from sqlalchemy import JSON, DateTime

    from chaz.store import direct
    from chaz.store.models import Base

    columns = Base.metadata.tables[table].columns
    assert set(direct._JSON[table]) == {c.name for c in columns if isinstance(c.type, JSON)}
    assert set(direct._TIMES[table]) == {c.name for c in columns if isinstance(c.type, DateTime)}
