"""How a process's PostgreSQL pool is sized (docs/capacity.md#postgresql-connections)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.pool import QueuePool

from chaz.services import Services
from chaz.settings import Settings
from chaz.store.db import DEFAULT_POOL_SIZE, PoolOptions, make_engine

URL = "postgresql+psycopg://u@127.0.0.1:1/none"


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, home=Path("/nonexistent"), database_url=URL, **values)


def test_a_producer_gets_the_default_pool_and_no_overflow() -> None:
    assert Services(_settings()).pool == PoolOptions(DEFAULT_POOL_SIZE, 0, 5)


def test_a_worker_sizes_its_pool_to_its_threads() -> None:
    assert Services(_settings(), db_threads=18).pool.size == 18


def test_the_settings_win_over_the_threads() -> None:
    pool = Services(
        _settings(db_pool_size=40, db_max_overflow=5, db_prepared_statements=False),
        db_threads=18,
    ).pool
    assert pool == PoolOptions(40, 5, None)


def test_the_engine_takes_the_pool() -> None:
    # Building an engine connects to nothing: the pool opens connections lazily.
    engine = make_engine(URL, PoolOptions(7, 2, None))
    try:
        assert isinstance(engine.pool, QueuePool)
        assert engine.pool.size() == 7
        assert engine.pool._max_overflow == 2
    finally:
        engine.dispose()
