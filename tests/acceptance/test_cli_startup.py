"""What ``chaz`` loads before it answers: start-up cost is a matter of imports.

The figures are measured in benchmarks/cli_startup.py, never asserted here;
these tests pin the cause instead: which heavy libraries a command imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import chaz
from chaz.cli.context import Context
from chaz.cli.parsers.entries import POSTABLE_TYPES
from chaz.cli.parsers.jobs import JOB_STATUSES
from chaz.domain.entries import EntryType
from chaz.domain.jobs import JobStatus
from tests.acceptance.test_cli import cli_env
from tests.support.cli import CHILD, run_in_process
from tests.support.stack import Stack

#: Libraries that take a noticeable share of a second to import.
HEAVY = ("alembic", "celery", "kombu", "sqlalchemy", "redis", "rich", "pydantic")
#: A setting the read commands' fast path does not read itself (chaz/cli/direct.py):
#: with it, a read takes the full client's path, whose imports these tests pin too.
FULL_PATH = {"CHAZ_LEASE_SECONDS": "10"}


def imported(*args: str, home: Path, **extra: str) -> set[str]:
    """Every module ``chaz ARGS`` imported (from ``python -X importtime``)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "chaz.cli", *args],
        env={**cli_env(home=home), **extra},
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


def loaded_modules(*args: str, home: Path, **extra: str) -> set[str]:
    """Top-level packages ``chaz ARGS`` imported."""
    return {name.split(".")[0] for name in imported(*args, home=home, **extra)}


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
    loaded = loaded_modules("sessions", "ls", home=home, **FULL_PATH)
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
        names = imported(*args, home=home, **FULL_PATH)
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


# -- the read commands' fast path (chaz/cli/direct.py) ---------------------------

#: What the fast path never loads: the full client's libraries.
FULL_CLIENT = ("sqlalchemy", "redis", "pydantic_settings", "alembic", "celery", "kombu", "rich")


def _populate(client: chaz.Client) -> dict[str, str]:
    """Sessions of every shape in two projects, with jobs in several states."""
    client.agents.put(chaz.AgentSpec(id="reader", script=[{"steps": [{"echo": True}]}]))
    client.agents.put(chaz.AgentSpec(id="other", script=[{"steps": [{"echo": True}]}]))
    plain = client.sessions.create("reader", name="plain")
    for text in ("one", "two", "three"):
        client.sessions.post(plain.id, text, sender="user:alice")
    room = client.sessions.create("reader", name="room", members=["other"])
    client.sessions.post(room.id, "@other hi", sender="user:bob")
    fork = client.sessions.fork(plain.id, 2, name="fork")
    gone = client.sessions.create("other", name="gone")
    client.sessions.archive(gone.id, reason="done")
    queued = client.jobs.list(session_id=plain.id)
    client.jobs.cancel(queued[-1].id, reason="not needed")
    elsewhere = chaz.Client(client.settings, migrate=False, project="elsewhere")
    try:
        elsewhere.sessions.create("reader", name="plain")
    finally:
        elsewhere.close()
    return {"plain": plain.id, "room": room.id, "fork": fork.id, "gone": gone.id}


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "chaz.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _loaded(stderr: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def _imported_names(stderr: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def _without_importtime(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("import time:"))


# Twenty commands a stack, each on both paths: the embedded half runs with the
# other stacks' tests (docs/testing.md#two-stacks); the read-time goal is PostgreSQL's.
@pytest.mark.parametrize(
    "kind", ["server", pytest.param("embedded", marks=pytest.mark.second_stack)]
)
def test_the_read_commands_answer_without_the_full_client(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    if kind == "server":
        pg_url, redis_url = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
        stack = Stack.server(home, pg_url, redis_url)
        plain_env = cli_env(home=home, CHAZ_DATABASE_URL=pg_url, CHAZ_REDIS_URL=redis_url)
    else:
        stack = Stack.embedded(home)
        plain_env = cli_env(home=home)
    try:
        ids = _populate(stack.client)
    finally:
        stack.close()  # the reads need no Redis: the embedded one stops here
    # Any other setting sends a command down the full path (the one it always took).
    full_env = {**plain_env, **FULL_PATH}
    cwd = tmp_path
    # Which path answered each command run in this process: the fast path
    # answers without ever building the client.
    answered: list[str] = []
    original = Context.read

    def read(self: Context, direct: Any, full: Any) -> Any:
        found = original(self, direct, full)
        answered.append("fast" if self._client is None else "full")
        return found

    monkeypatch.setattr(Context, "read", read)
    reads = [
        ["sessions", "ls"],
        ["--json", "sessions", "ls"],
        ["sessions", "ls", "--archived"],
        ["sessions", "ls", "--agent", "reader", "--limit", "2"],
        ["--json", "sessions", "ls", "--tree", "plain"],
        ["--project", "elsewhere", "sessions", "ls"],
        ["sessions", "show", ids["plain"]],
        ["--json", "sessions", "show", ids["plain"]],
        ["sessions", "show", "room", "--last", "1"],
        ["--json", "sessions", "show", ids["fork"]],
        ["sessions", "show", "gone"],
        ["jobs", "ls"],
        ["--json", "jobs", "ls", "--session", "plain"],
        ["jobs", "ls", "--status", "cancelled"],
        ["jobs", "ls", "--status", "queued", "--limit", "1"],
        # Refused or missing: the fast path leaves them to the client.
        ["sessions", "show", "nope"],
        ["--json", "sessions", "ls", "--tree", "nope"],
        ["jobs", "ls", "--session", ""],
        ["sessions", "ls", "--limit", "0"],
        ["--principal", "nobody", "sessions", "ls"],
        ["sessions", "show", "fork"],
    ]
    # Both paths of every command, in this process: the same exit, stdout and stderr.
    for args in reads:
        answered.clear()
        fast = run_in_process(*args, env=plain_env)
        full = run_in_process(*args, env=full_env)
        assert (fast.returncode, fast.stdout, fast.stderr) == (
            full.returncode,
            full.stdout,
            full.stderr,
        ), args
        if fast.returncode == 0:
            assert fast.stdout.strip(), args
            if not CHILD:
                assert answered == ["fast", "full"], args
    # And as the console script, for a few: the fast path loads none of the
    # full client's libraries, the full path does, and they print the same.
    for args in (reads[1], reads[7], reads[12], reads[15]):
        fast = _run(args, plain_env, cwd)
        full = _run(args, full_env, cwd)
        assert (fast.returncode, fast.stdout) == (full.returncode, full.stdout), args
        assert _without_importtime(fast.stderr) == _without_importtime(full.stderr), args
        assert "sqlalchemy" in _loaded(full.stderr), args
        if fast.returncode == 0:
            assert not _loaded(fast.stderr) & set(FULL_CLIENT), args
    # In text, the fast path prints its rows without building a pydantic model
    # (chaz/store/views.py): pydantic and the domain's models are not imported.
    for args in (reads[0], reads[6], reads[8], reads[11]):
        fast = _run(args, plain_env, cwd)
        assert fast.returncode == 0, fast.stderr
        loaded = _loaded(fast.stderr)
        assert not loaded & {"pydantic", "pydantic_core", "sqlalchemy"}, args
        names = _imported_names(fast.stderr)
        assert not names & {"chaz.domain.entries", "chaz.domain.jobs", "chaz.domain.sessions"}
    # A .env file could name any setting: pydantic-settings reads it, on the full path.
    (cwd / ".env").write_text("CHAZ_LEASE_SECONDS=10\n")
    run = _run(["sessions", "ls"], plain_env, cwd)
    assert run.returncode == 0 and "plain" in run.stdout
    assert "pydantic_settings" in _loaded(run.stderr)
