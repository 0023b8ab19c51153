"""``chaz worker``'s fast path: the command line starting with ``worker`` is
parsed by a parser that holds only that command (chaz.cli.main._worker_parser),
and the command loads nothing it does not use before its exec
(docs/performance.md#worker-start-up)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaz.cli.main import _worker_parser, build_parser


def _parse(make: Any, argv: list[str]) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            args, extra = make().parse_known_args(argv)
            got: Any = (sorted((k, repr(v)) for k, v in vars(args).items() if k != "func"), extra)
            got = (got, args.func.__name__)
        except SystemExit as exc:
            got = ("exit", exc.code)
    return got, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["worker"],
        ["worker", "--concurrency", "3", "--json", "--home", "/tmp/h", "--loglevel", "INFO"],
        ["worker", "--beat", "--", "-O", "fair"],
        ["worker", "--principal", "user:a", "--project", "p", "--dry-run"],
        ["worker", "--metrics-port", "9809", "--metrics-addr", "127.0.0.1"],
        ["worker", "--autoscale", "4,2"],
        ["worker", "--conc", "3"],
        ["worker", "--concurrency", "x"],
        ["worker", "--metrics-port", "0"],
        ["worker", "--metrics-addr", "nowhere"],
        ["worker", "--help"],
    ],
)
def test_the_worker_parser_reads_a_worker_line_as_the_full_one_does(argv: list[str]) -> None:
    # Same namespace and extra arguments, or the same exit status, help and error.
    assert _parse(_worker_parser, argv) == _parse(build_parser, argv)


def test_chaz_worker_loads_neither_the_other_groups_commands_nor_the_stack(tmp_path: Path) -> None:
    # Up to its exec: the embedded stack's module (the Redis server's, the
    # workers' processes), the embedded Redis's and dataclasses' inspect stay out.
    code = (
        "import os, sys\n"
        "class Exec(BaseException): pass\n"
        "def execvpe(*a): raise Exec\n"
        "os.execvpe = execvpe\n"
        "from chaz.cli.main import run\n"
        "try:\n"
        "    run(['worker', '--concurrency', '2'])\n"
        "except Exec:\n"
        "    pass\n"
        "heavy = ('chaz.stack', 'chaz.coord.redis', 'inspect', 'sqlite3', 'chaz.settings')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "CHAZ_DATABASE_URL": "postgresql+psycopg://u@127.0.0.1:1/db",
        "CHAZ_REDIS_URL": "redis://127.0.0.1:1/0",
        "CHAZ_WORKER_CONCURRENCY": "4",
        "CHAZ_HOME": str(tmp_path / "home"),
        "PYTHONPATH": ":".join(sys.path),
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "[]", done.stdout + done.stderr
