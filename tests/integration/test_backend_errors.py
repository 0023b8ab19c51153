"""An unreachable backend is a chaz error with a stable code, not a driver exception."""

from __future__ import annotations

from pathlib import Path

import pytest

import chaz
from chaz.errors import BackendUnavailable
from chaz.plumbing.faults import is_transient
from chaz.settings import Settings
from tests.conftest import free_port


def test_unreachable_redis_is_backend_unavailable(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None, home=tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0"
    )
    client = chaz.Client(settings)
    client.agents.put(chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]))
    s = client.sessions.create(agent_id="echo")
    with pytest.raises(BackendUnavailable) as err:
        client.sessions.post(s.id, "hi", sender="user:a")
    assert err.value.code == "backend.unavailable" and err.value.retryable
    # Nothing was written: the admission never reached the database.
    assert client.sessions.entries(s.id) == []
    client.close()


def test_unreachable_database_is_backend_unavailable(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none"
    settings = Settings(_env_file=None, home=tmp_path, database_url=url)
    client = chaz.Client(settings, migrate=False)
    with pytest.raises(BackendUnavailable):
        client.agents.list()
    client.close()


def test_a_pool_with_no_free_connection_is_backend_unavailable(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    # One pooled connection, held by the test: the client's next read waits
    # CHAZ_DB_POOL_TIMEOUT for it, then fails with a chaz code, not
    # SQLAlchemy's pool TimeoutError. Once the connection is back, it works.
    settings = Settings(
        _env_file=None,
        home=tmp_path,
        database_url=pg_url,
        redis_url=redis_url,
        db_pool_size=1,
        db_pool_timeout=0.2,
    )
    client = chaz.Client(settings)
    try:
        held = client.services.store.engine.connect()
        with pytest.raises(BackendUnavailable) as err:
            client.agents.list()
        assert err.value.retryable and "CHAZ_DB_POOL_TIMEOUT" in err.value.message
        assert is_transient(err.value.__cause__ or err.value)
        held.close()
        assert isinstance(client.agents.list(), list)
    finally:
        client.close()
