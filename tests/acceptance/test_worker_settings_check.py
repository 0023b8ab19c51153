"""``chaz worker`` with settings beyond the plain ones leaves their check to the
worker it execs, which builds them anyway (chaz/cli/worker.py): a refused
setting ends the start in the command's words, output mode and exit status,
and the command itself never loads pydantic-settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from chaz.cli.context import load_settings
from chaz.errors import ConfigError
from chaz.store.migrate import bundled_head
from tests.acceptance.test_cli import cli_env
from tests.conftest import PG_ADMIN, free_port

#: The command under ``-X importtime``: what it imports is on stderr, and the
#: worker it execs (a plain ``python``) adds none of those lines.
TRACED = [sys.executable, "-X", "importtime", "-m", "chaz.cli"]


def _run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, list[str], list[str]]:
    """Exit status, the command's imports, and the other stderr lines but the ``exec:`` note."""
    done = subprocess.run(
        [*TRACED, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=180
    )
    lines = done.stderr.splitlines()
    imports = [line.split("|")[-1].strip() for line in lines if line.startswith("import time:")]
    rest = [line for line in lines if not line.startswith(("import time:", "exec: "))]
    return done.returncode, imports, rest


def _refusal(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ConfigError:
    """What the command said of these settings when it read them itself."""
    for name in [n for n in os.environ if n.upper().startswith("CHAZ_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("CHAZ_"):
            monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        load_settings(None)
    return refused.value


def test_a_refused_setting_ends_the_start_as_the_command_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    env = cli_env(
        home=tmp_path / "home",
        CHAZ_REDIS_URL=redis_url,
        CHAZ_WORKER_CONCURRENCY="2",
        CHAZ_RECONCILE_SECONDS="soon",
    )
    expected = _refusal(env, monkeypatch)
    # The first start migrates the new database (Alembic loads the settings).
    status, _, rest = _run(["--json", "worker"], env, tmp_path)
    assert status == 2
    assert [json.loads(line) for line in rest] == [{"error": expected.to_dict()}]

    status, imports, rest = _run(["worker"], env, tmp_path)
    assert status == 2
    assert rest == [f"error [config.invalid]: {expected.message}"]
    assert "pydantic_settings" not in imports and "chaz.settings" not in imports


def test_accepted_settings_reach_celery(tmp_path: Path, redis_url: str) -> None:
    # `-- --help`: Celery's worker command prints its usage and exits, after
    # the check let the start through.
    env = cli_env(
        home=tmp_path / "home",
        CHAZ_REDIS_URL=redis_url,
        CHAZ_WORKER_CONCURRENCY="2",
        CHAZ_RECONCILE_SECONDS="30",
    )
    subprocess.run([*TRACED, "migrate"], env=env, cwd=tmp_path, check=True, timeout=180)
    done = subprocess.run(
        [*TRACED, "worker", "--", "--help"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "--concurrency" in done.stdout
    imports = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert imports and not any(line.endswith("pydantic_settings") for line in imports)


def test_on_postgresql_the_worker_brings_the_schema_up_to_date(
    tmp_path: Path, redis_url: str
) -> None:
    # The worker imports psycopg anyway; the command, checking nothing, need not.
    name = f"chaz_wcheck_{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    try:
        env = cli_env(
            home=tmp_path / "home",
            CHAZ_DATABASE_URL=f"{base}/{name}",
            CHAZ_REDIS_URL=redis_url,
            CHAZ_WORKER_CONCURRENCY="2",
        )
        done = subprocess.run(
            [*TRACED, "worker", "--", "--help"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        imports = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
        assert imports and not any(line.endswith(" psycopg") for line in imports)
        with psycopg.connect(f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}") as conn:
            version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        assert version == [(bundled_head(),)]
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_database_the_worker_cannot_reach_ends_the_start_as_the_command_would(
    tmp_path: Path, redis_url: str
) -> None:
    env = cli_env(
        home=tmp_path / "home",
        CHAZ_DATABASE_URL=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none",
        CHAZ_REDIS_URL=redis_url,
        CHAZ_WORKER_CONCURRENCY="2",
    )
    status, _, rest = _run(["worker"], env, tmp_path)
    assert status == 1
    assert len(rest) == 1 and rest[0].startswith("error [backend.unavailable]: OperationalError")
    status, _, rest = _run(["--json", "worker"], env, tmp_path)
    assert status == 1
    assert [json.loads(line)["error"]["code"] for line in rest] == ["backend.unavailable"]
