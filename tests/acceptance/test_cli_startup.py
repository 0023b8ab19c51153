"""What ``chaz`` loads before it answers: start-up cost is a matter of imports.

The figures are measured in benchmarks/cli_startup.py, never asserted here;
these tests pin the cause instead: which heavy libraries a command imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chaz.cli.parsers.entries import POSTABLE_TYPES
from chaz.cli.parsers.jobs import JOB_STATUSES
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from tests.acceptance.test_cli import cli_env

#: Libraries that take a noticeable share of a second to import.
HEAVY = ("alembic", "celery", "kombu", "sqlalchemy", "redis", "rich", "pydantic")


def imported(*args: str, home: Path) -> set[str]:
    """Every module ``chaz ARGS`` imported (from ``python -X importtime``)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "chaz.cli", *args],
        env=cli_env(home=home),
        cwd=home.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    names = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def loaded_modules(*args: str, home: Path) -> set[str]:
    """Top-level packages ``chaz ARGS`` imported."""
    return {name.split(".")[0] for name in imported(*args, home=home)}


def test_help_and_version_load_no_heavy_library(tmp_path: Path) -> None:
    for args in (["--help"], ["--version"], ["sessions", "--help"]):
        loaded = loaded_modules(*args, home=tmp_path / "home")
        assert "chaz" in loaded
        assert sorted(loaded & set(HEAVY)) == [], args


def test_config_connects_to_nothing_and_loads_only_settings(tmp_path: Path) -> None:
    loaded = loaded_modules("config", home=tmp_path / "home")
    assert sorted(loaded & set(HEAVY)) == ["pydantic"]


def test_a_read_command_loads_neither_alembic_nor_celery(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # The first command migrates the new database: that one may need Alembic.
    loaded_modules("sessions", "ls", home=home)
    loaded = loaded_modules("sessions", "ls", home=home)
    assert "sqlalchemy" in loaded
    assert not loaded & {"alembic", "celery", "kombu", "rich"}


def test_the_read_commands_load_no_tool_migration_worker_or_terminal_library(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    spec = tmp_path / "agent.json"
    spec.write_text(json.dumps({"id": "reader", "script": [{"steps": [{"echo": True}]}]}))
    run = subprocess.run(
        [sys.executable, "-m", "chaz.cli", "agents", "put", str(spec)],
        env=cli_env(home=home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    made = subprocess.run(
        [sys.executable, "-m", "chaz.cli", "sessions", "new", "reader"],
        env=cli_env(home=home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    sid = made.stdout.strip()
    for args in (["sessions", "ls"], ["sessions", "show", sid], ["jobs", "ls"]):
        names = imported(*args, home=home)
        # What a read needs: the settings, the store and its driver.
        assert {"chaz.settings", "chaz.store.facade", "sqlalchemy"} <= names, args
        # What it never does: migrate, send a task, draw on a terminal, run
        # or check a tool (the client loads its tool registry on first use).
        loaded = {name.split(".")[0] for name in names}
        assert not loaded & {"alembic", "celery", "kombu", "rich"}, args
        assert not {n for n in names if n == "chaz.tools" or n.startswith("chaz.tools.")}, args
        assert "chaz.cli.processes" not in names, args


def test_the_parser_offers_the_domain_values() -> None:
    # The parser spells these out so that it needs no pydantic model.
    assert list(JOB_STATUSES) == [s.value for s in JobStatus]
    assert list(POSTABLE_TYPES) == [EntryType.MESSAGE.value, EntryType.DIRECTIVE.value]
