"""The test suite's own report of its servers: a full PostgreSQL is full, not missing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import PG_ADMIN
from tests.support.servers import postgres_admin


@pytest.fixture
def full_role() -> Iterator[str]:
    """A role PostgreSQL lets no connection in for, as a full server does."""
    name = f"chaz_full_{uuid.uuid4().hex[:8]}"
    with postgres_admin(PG_ADMIN) as admin:
        admin.execute(f'CREATE ROLE "{name}" LOGIN CONNECTION LIMIT 0')
    try:
        yield name
    finally:
        with postgres_admin(PG_ADMIN) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{name}"')


def test_a_full_postgresql_fails_the_test_and_says_it_is_full(full_role: str) -> None:
    url = PG_ADMIN.replace("postgresql://postgres@", f"postgresql://{full_role}@")
    with pytest.raises(pytest.fail.Exception) as info:
        postgres_admin(url)
    assert "is full" in str(info.value) and "not reachable" not in str(info.value)


def test_a_postgresql_that_answers_gives_a_connection() -> None:
    with postgres_admin(PG_ADMIN) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
