"""``chaz worker`` reads its settings without pydantic-settings only where the
values are exactly ``Settings``' (chaz/cli/worker.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaz.cli.worker import (
    DEFAULT_CONCURRENCY,
    DEFAULT_HOME,
    WorkerSettings,
    plain_worker_settings,
    unchecked_worker_settings,
)
from chaz.settings import Settings


def test_the_defaults_are_the_settings_defaults() -> None:
    assert Settings.model_fields["home"].default == Path(DEFAULT_HOME)
    assert Settings.model_fields["worker_concurrency"].default == DEFAULT_CONCURRENCY


def _full(
    home: str | None, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> WorkerSettings:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    settings = Settings(home=Path(home)) if home else Settings()
    return WorkerSettings(
        home=settings.home.resolve(),
        concurrency=settings.worker_concurrency,
        database_url=settings.effective_database_url(),
        embedded_redis=settings.embedded_redis,
    )


@pytest.mark.parametrize(
    ("home", "environ"),
    [
        (None, {}),
        (None, {"CHAZ_HOME": "h"}),
        ("elsewhere", {"CHAZ_HOME": "h"}),
        (None, {"chaz_home": "lower", "CHAZ_PROJECT": "p", "CHAZ_PRINCIPAL": "user:x"}),
        (None, {"CHAZ_DATABASE_URL": "postgresql+psycopg://u:pw@127.0.0.1:5432/db"}),
        (None, {"CHAZ_REDIS_URL": "redis://127.0.0.1:6379/3"}),
        (
            "x",
            {
                "CHAZ_DATABASE_URL": "postgresql+psycopg://127.0.0.1/db",
                "CHAZ_REDIS_URL": "unix:///tmp/r.sock",
            },
        ),
    ],
)
def test_a_plain_environment_reads_as_settings_would(
    home: str | None,
    environ: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.upper().startswith("CHAZ_")]:
        monkeypatch.delenv(name)
    plain = plain_worker_settings(home, environ)
    assert plain is not None
    assert plain == _full(home, environ, monkeypatch)


@pytest.mark.parametrize(
    "environ",
    [
        {"CHAZ_WORKER_CONCURRENCY": "3"},
        {"CHAZ_METRICS_PORT": "9809"},
        {"CHAZ_HOME": "a", "chaz_home": "b"},
        {"CHAZ_DATABASE_URL": ""},
        {"CHAZ_REDIS_URL": ""},
        {"CHAZ_DATABASE_URL": "postgresql://u@h/db"},
        {"CHAZ_DATABASE_URL": "sqlite:////tmp/x.db"},
        {"CHAZ_REDIS_URL": "http://x"},
        {"CHAZ_REDIS_URL": "redis://h:notaport/0"},
    ],
)
def test_anything_else_is_left_to_settings(
    environ: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert plain_worker_settings(None, environ) is None


def test_a_dotenv_file_is_left_to_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("CHAZ_WORKER_CONCURRENCY=2\n")
    assert plain_worker_settings(None, {}) is None


@pytest.mark.parametrize(
    ("home", "environ"),
    [
        (None, {"CHAZ_WORKER_CONCURRENCY": "3", "CHAZ_SHUTDOWN_GRACE_SECONDS": "5"}),
        ("x", {"CHAZ_HOME": "h", "CHAZ_METRICS_PORT": "9809", "chaz_worker_concurrency": "12"}),
        (
            None,
            {
                "CHAZ_DATABASE_URL": "postgresql+psycopg://u:pw@127.0.0.1:5432/db",
                "CHAZ_REDIS_URL": "redis://127.0.0.1:6379/3",
                "CHAZ_RECONCILE_SECONDS": "30",
                "CHAZ_PROJECT": "p",
            },
        ),
    ],
)
def test_with_other_settings_the_four_values_read_as_settings_would(
    home: str | None,
    environ: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The exec'd worker checks the others (workers/__main__.py).
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.upper().startswith("CHAZ_")]:
        monkeypatch.delenv(name)
    unchecked = unchecked_worker_settings(home, environ)
    assert unchecked is not None
    assert unchecked == _full(home, environ, monkeypatch)


@pytest.mark.parametrize(
    "environ",
    [
        {"CHAZ_WORKER_CONCURRENCY": "0"},
        {"CHAZ_WORKER_CONCURRENCY": " 3"},
        {"CHAZ_WORKER_CONCURRENCY": "+3"},
        {"CHAZ_WORKER_CONCURRENCY": "three"},
        {"CHAZ_METRICS_PORT": "1", "chaz_metrics_port": "2"},
        {"CHAZ_METRICS_PORT": "1", "CHAZ_DATABASE_URL": ""},
        {"CHAZ_METRICS_PORT": "1", "CHAZ_DATABASE_URL": "postgresql://u@h/db"},
        {"CHAZ_METRICS_PORT": "1", "CHAZ_REDIS_URL": "http://x"},
    ],
)
def test_values_only_pydantic_reads_are_left_to_settings_in_the_command(
    environ: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert unchecked_worker_settings(None, environ) is None


def test_with_a_dotenv_file_the_command_reads_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("CHAZ_HOME=elsewhere\n")
    assert unchecked_worker_settings(None, {"CHAZ_METRICS_PORT": "1"}) is None
