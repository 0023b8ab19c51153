"""The migration fast path reads the newest revision from the files' text; Alembic agrees."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from chaz.store.migrate import alembic_config, bundled_head


def test_bundled_head_is_alembics_head() -> None:
    assert bundled_head() == ScriptDirectory.from_config(alembic_config()).get_current_head()
