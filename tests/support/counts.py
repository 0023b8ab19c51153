"""Row counts of many tables in one statement.

The property and input tests check that a refused call leaves every table as
it was, around each of thousands of generated calls; a ``COUNT`` per table
was most of their time (a round trip each), one statement is one.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Table, func, select
from sqlalchemy.engine import Engine


def row_counts(engine: Engine, tables: Iterable[Table]) -> dict[str, int]:
    """How many rows each table holds, read in one ``SELECT`` of scalar subqueries."""
    tables = list(tables)
    query = select(
        *(select(func.count()).select_from(t).scalar_subquery().label(t.name) for t in tables)
    )
    with engine.connect() as conn:
        row = conn.execute(query).one()
    return {t.name: int(n or 0) for t, n in zip(tables, row, strict=True)}
