"""Acceptance: ``chaz doctor`` on real stacks, run as a subprocess.

All well with a worker and a beat; a missing beat, an old schema revision and
an unreachable Redis each fail their own check, name the fix, exit 1, and
print no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from alembic import command

from chaz.coord import keys
from chaz.coord.redis import connect
from chaz.store.db import make_engine
from chaz.store.migrate import alembic_config, current_revision, head_revision, upgrade
from tests.acceptance.test_cli import chaz_cli, cli_env
from tests.conftest import PG_ADMIN, free_port
from tests.support.stack import Stack

CHECKS = ["settings", "database", "redis", "queues", "workers", "reconcile", "beat"]


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``chaz doctor ARGS``, checked to end without a traceback."""
    result = chaz_cli("doctor", *args, env=env)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def doctor_json(env: dict[str, str]) -> tuple[int, dict[str, dict[str, Any]]]:
    """Exit status and the checks of ``chaz doctor --json``, by name (in order)."""
    result = doctor(env, "--json")
    rows = json.loads(result.stdout)
    assert [r["check"] for r in rows] == CHECKS
    for r in rows:
        assert set(r) == {"check", "ok", "detail", "fix"}
        assert r["ok"] or r["fix"], r
    return result.returncode, {r["check"]: r for r in rows}


def line_of(text: str, check: str) -> list[str]:
    """The line of ``check`` in doctor's text output, and its fix line if any."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.split(maxsplit=1)[1:] and line.split()[1] == f"{check}:":
            after = lines[i + 1 : i + 2]
            return [line, *(a for a in after if a.strip().startswith("fix:"))]
    raise AssertionError(f"no {check} line in:\n{text}")


def test_all_well_with_a_worker_and_a_beat(stack: Stack) -> None:
    stack.client  # noqa: B018 - migrates the embedded database
    stack.workers(1, beat=True)
    redis = connect(stack.settings)
    # The beat ticks, and its reconciler runs on the worker: wait for both records.
    stack.wait_for(lambda: redis.exists(keys.beat_heartbeat()), 60, "a beat heartbeat")
    stack.wait_for(lambda: redis.exists(keys.reconciled()), 60, "a reconciler pass")
    env = cli_env(settings=stack.settings)
    status, checks = doctor_json(env)
    assert status == 0, checks
    assert all(c["ok"] for c in checks.values()), checks
    assert f"revision {head_revision()} (head)" in checks["database"]["detail"]
    for queue in ("chaz.turns", "chaz.control", "chaz.schedules"):
        assert queue in checks["queues"]["detail"]
        assert queue in checks["workers"]["detail"]
    assert checks["workers"]["detail"].startswith("1 live")
    text = doctor(env)
    assert text.returncode == 0, text.stdout
    assert [line.split()[0] for line in text.stdout.splitlines()] == ["ok"] * len(CHECKS)


def test_no_beat_fails_the_beat_check_with_its_fix(stack: Stack) -> None:
    stack.client  # noqa: B018
    stack.workers(1)  # no beat, so no reconciler either
    env = cli_env(settings=stack.settings)
    status, checks = doctor_json(env)
    assert status == 1
    assert checks["workers"]["ok"], checks["workers"]
    assert not checks["beat"]["ok"]
    assert "no beat ticked" in checks["beat"]["detail"]
    assert "celery -A workers beat" in checks["beat"]["fix"]
    assert "chaz worker --beat" in checks["beat"]["fix"]
    assert not checks["reconcile"]["ok"]
    text = doctor(env)
    assert text.returncode == 1
    beat = line_of(text.stdout, "beat")
    assert beat[0].startswith("PROBLEM")
    assert "chaz worker --beat" in beat[1]


@pytest.mark.slow
def test_a_stopped_beat_fails_once_its_heartbeat_lapses(embedded_stack: Stack) -> None:
    embedded_stack.client  # noqa: B018
    embedded_stack.workers(1)  # takes turns; beat runs in the housekeeper only
    housekeeper = embedded_stack.housekeeper()
    redis = connect(embedded_stack.settings)
    embedded_stack.wait_for(lambda: redis.exists(keys.beat_heartbeat()), 60, "a beat heartbeat")
    env = cli_env(settings=embedded_stack.settings)
    _, checks = doctor_json(env)
    assert checks["beat"]["ok"], checks["beat"]
    housekeeper.stop()
    # No tick renews the heartbeat now: wait for it to lapse, then ask.
    embedded_stack.wait_for(
        lambda: not redis.exists(keys.beat_heartbeat()), 60, "the heartbeat to lapse"
    )
    status, checks = doctor_json(env)
    assert status == 1
    assert checks["workers"]["ok"], checks["workers"]
    assert not checks["beat"]["ok"]
    assert "celery -A workers beat" in checks["beat"]["fix"]


def test_no_worker_fails_the_workers_check(embedded_stack: Stack) -> None:
    embedded_stack.client  # noqa: B018
    status, checks = doctor_json(cli_env(settings=embedded_stack.settings))
    assert status == 1
    assert checks["redis"]["ok"] and checks["queues"]["ok"]
    assert not checks["workers"]["ok"]
    assert checks["workers"]["detail"] == "no worker answers"
    assert "chaz worker" in checks["workers"]["fix"]


def test_an_old_schema_revision_names_chaz_migrate(embedded_stack: Stack, tmp_path: Path) -> None:
    embedded_stack.client  # noqa: B018 - the stack's own Redis answers
    old = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{old}")
    upgrade(engine)
    cfg = alembic_config()
    with engine.connect().execution_options(chaz_write=True) as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "-1")
        conn.commit()
    previous = current_revision(engine)
    engine.dispose()
    assert previous is not None and previous != head_revision()
    env = cli_env(settings=embedded_stack.settings, CHAZ_DATABASE_URL=f"sqlite:///{old}")
    status, checks = doctor_json(env)
    assert status == 1
    database = checks["database"]
    assert not database["ok"]
    assert f"at revision {previous}, not the head {head_revision()}" in database["detail"]
    assert database["fix"] == "run `chaz migrate`"
    assert checks["redis"]["ok"]
    text = doctor(env)
    assert text.returncode == 1
    assert line_of(text.stdout, "database")[1].strip() == "fix: run `chaz migrate`"
    # The fix it names works.
    assert chaz_cli("migrate", env=env).returncode == 0
    _, checks = doctor_json(env)
    assert checks["database"]["ok"], checks["database"]


def test_a_missing_database_file_names_chaz_migrate(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "chaz.db"
    env = cli_env(home=tmp_path / "home", CHAZ_DATABASE_URL=f"sqlite:///{missing}")
    status, checks = doctor_json(env)
    assert status == 1
    assert checks["database"]["detail"] == f"no database file at {missing}"
    assert checks["database"]["fix"] == "run `chaz migrate`"
    # The doctor only looks: it created nothing.
    assert not missing.parent.exists()


def test_a_missing_postgresql_database_says_to_create_it(tmp_path: Path) -> None:
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    name = f"chaz_doctor_missing_{os.getpid()}"
    env = cli_env(home=tmp_path / "home", CHAZ_DATABASE_URL=f"{base}/{name}")
    status, checks = doctor_json(env)
    assert status == 1
    database = checks["database"]
    assert not database["ok"]
    assert f"the server has no database {name!r}" in database["detail"]
    assert database["fix"].startswith("create it (`createdb ")
    assert database["fix"].endswith(f" {name}`), then run `chaz migrate`")


def test_unreachable_redis_fails_clearly(tmp_path: Path) -> None:
    port = free_port()
    env = cli_env(home=tmp_path / "home", CHAZ_REDIS_URL=f"redis://127.0.0.1:{port}/0")
    status, checks = doctor_json(env)
    assert status == 1
    redis_check = checks["redis"]
    assert not redis_check["ok"]
    assert f"redis://127.0.0.1:{port}/0 does not answer" in redis_check["detail"]
    assert redis_check["fix"] == "start Redis, or correct CHAZ_REDIS_URL"
    for name in ("queues", "workers", "reconcile", "beat"):
        assert not checks[name]["ok"]
        assert checks[name]["detail"] == "not checked: the redis check failed"
    text = doctor(env)
    assert text.returncode == 1
    assert line_of(text.stdout, "redis")[0].startswith("PROBLEM  redis:")
    assert text.stderr == ""


def test_a_bridge_in_chaz_bridges_is_checked_whatever_redis_says(tmp_path: Path) -> None:
    # A bridge's check reads only its metrics (docs/bridges.md#health); the
    # Matrix tests check a live one, and a stale one, in test_bridge_matrix.py.
    bridge = f"http://127.0.0.1:{free_port()}/metrics"  # nothing answers there
    env = cli_env(
        home=tmp_path / "home",
        CHAZ_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
        CHAZ_BRIDGES=bridge,
    )
    result = doctor(env, "--json")
    assert result.returncode == 1
    rows = json.loads(result.stdout)
    assert [r["check"] for r in rows] == [*CHECKS, f"bridge {bridge}"]
    last = rows[-1]
    assert not last["ok"] and last["detail"].startswith("no metrics:")
    assert "CHAZ_BRIDGES" in last["fix"]


def test_invalid_settings_are_a_failed_check_not_an_error(tmp_path: Path) -> None:
    env = cli_env(home=tmp_path / "home", CHAZ_RECONCILE_SECONDS="-1")
    status, checks = doctor_json(env)
    assert status == 1
    assert not checks["settings"]["ok"]
    assert "reconcile_seconds" in checks["settings"]["detail"]
    assert all(not c["ok"] for c in checks.values())


def test_a_usage_error_exits_2(tmp_path: Path) -> None:
    result = doctor(cli_env(home=tmp_path / "home"), "--no-such-option")
    assert result.returncode == 2
