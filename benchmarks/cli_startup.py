"""``python -m benchmarks.cli_startup`` (or ``benchmarks.run --cli``): how fast ``chaz`` answers.

Runs each command as a fresh process, as a person or a script would, on a
temporary embedded ``CHAZ_HOME`` that one untimed ``chaz sessions ls`` has
migrated first. Prints the fastest and the median of ``--runs`` runs beside
the goal: the fastest run is the one least disturbed by the rest of the
machine, the median what a user sees on it. stdout is a pipe, as in scripts.

``--server`` times the read commands on PostgreSQL + Redis instead (issue
20's goal, 0.3 s): a fresh database (``BENCH_PG_DATABASE`` with ``_cli``
appended, on ``BENCH_PG_ADMIN``'s server) holding one session with one
entry and one queued job, and ``BENCH_REDIS_URL``; only the two URLs are set,
as on a deployment's shell (docs/performance.md#cli-read-commands-on-postgresql).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: (command, goal in seconds): issue 7's goals.
CASES: list[tuple[list[str], float]] = [
    (["--help"], 0.3),
    (["--version"], 0.3),
    (["config"], 0.6),
    (["sessions", "ls"], 0.6),
    (["jobs", "ls"], 0.6),
    (["agents", "ls"], 0.6),
]


#: (command, goal in seconds) on PostgreSQL (``--server``); ``{sid}`` is the session.
SERVER_CASES: list[tuple[list[str], float]] = [
    (["sessions", "ls"], 0.3),
    (["sessions", "show", "{sid}"], 0.3),
    (["jobs", "ls"], 0.3),
]


@dataclasses.dataclass
class Timing:
    """The wall-clock times of one command's runs."""

    command: str
    goal: float
    seconds: list[float]

    @property
    def best(self) -> float:
        """The fastest run."""
        return min(self.seconds)

    @property
    def median(self) -> float:
        """The median run."""
        return statistics.median(self.seconds)


def chaz_command() -> list[str]:
    """The installed ``chaz`` console script beside this Python, else ``python -m chaz.cli``."""
    script = Path(sys.executable).with_name("chaz")
    return [str(script)] if script.exists() else [sys.executable, "-m", "chaz.cli"]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
    env["CHAZ_HOME"] = str(home)
    return env


def _time(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}: {result.stderr}")
    return elapsed


def measure(runs: int = 7) -> list[Timing]:
    """Time every case ``runs`` times on a fresh embedded home."""
    chaz = chaz_command()
    tmp = Path(tempfile.mkdtemp(prefix="chaz-cli-bench-"))
    try:
        home = tmp / "home"
        env = _env(home)
        _time([*chaz, "sessions", "ls"], env, tmp)  # migrates: not part of any figure
        timings = []
        for args, goal in CASES:
            seconds = [_time([*chaz, *args], env, tmp) for _ in range(runs)]
            timings.append(Timing("chaz " + " ".join(args), goal, seconds))
        return timings
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {result.returncode}: {result.stderr}")
    return result.stdout


def measure_server(runs: int = 7) -> list[Timing]:
    """Time the read commands ``runs`` times on a fresh PostgreSQL database."""
    import psycopg

    from benchmarks.stacks import PG_ADMIN, PG_DATABASE, REDIS_URL

    name = f"{PG_DATABASE}_cli"
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    chaz = chaz_command()
    tmp = Path(tempfile.mkdtemp(prefix="chaz-cli-bench-"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
        env.update(CHAZ_DATABASE_URL=f"{base}/{name}", CHAZ_REDIS_URL=REDIS_URL)
        spec = tmp / "reader.json"
        spec.write_text('{"id": "reader", "script": [{"steps": [{"echo": true}]}]}')
        # Not timed: the first command migrates; the send admits a job no worker takes.
        _run([*chaz, "agents", "put", str(spec)], env, tmp)
        sid = _run([*chaz, "sessions", "new", "reader"], env, tmp).strip()
        _run([*chaz, "send", sid, "hello"], env, tmp)
        timings = []
        for args, goal in SERVER_CASES:
            cmd = [*chaz, *(a.format(sid=sid) for a in args)]
            seconds = [_time(cmd, env, tmp) for _ in range(runs)]
            timings.append(Timing("chaz " + " ".join(args).replace("{sid}", "SID"), goal, seconds))
        return timings
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report(timings: list[Timing]) -> str:
    """A plain table: command, fastest, median, goal, met."""
    head = f"{'command':<24} {'fastest':>8} {'median':>8} {'goal':>6}  met"
    lines = [head, "-" * len(head)]
    for t in timings:
        met = "yes" if t.best < t.goal else "NO"
        lines.append(f"{t.command:<24} {t.best:>7.3f}s {t.median:>7.3f}s {t.goal:>5.1f}s  {met}")
    python = min(
        _time([sys.executable, "-c", "pass"], os.environ.copy(), Path.cwd()) for _ in range(5)
    )
    lines.append(
        f"(a bare `python -c pass` takes {python:.3f}s here; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print; the exit status is 0 unless a command failed."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="runs per command (default 7)")
    parser.add_argument(
        "--server",
        action="store_true",
        help="the read commands on PostgreSQL + Redis (BENCH_PG_ADMIN, BENCH_REDIS_URL)",
    )
    args = parser.parse_args(argv)
    print(report(measure_server(args.runs) if args.server else measure(args.runs)))
    # Missed goals are figures, not failures (as in benchmarks.run).
    return 0


if __name__ == "__main__":
    sys.exit(main())
