"""The benchmark command must keep running: a quick pass on the embedded stack.

This checks that every figure is produced and the run's own correctness
checks hold (every turn answered, one session's turns in order); the figures
themselves are read in docs/performance.md, never asserted here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

#: Minutes of CPU each: run by .ci/run after the default run (docs/testing.md).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short TMPDIR for every benchmark here: an embedded Redis's socket lies two
    directories below it, and a Unix socket's path has at most 107 bytes (an xdist
    worker's temporary directory and a test's name already take about 75)."""
    return tmp_path_factory.mktemp("bench")


#: A bound for a benchmark that hangs, not a pace: a quick run takes under a minute.
BENCH_TIMEOUT = 240


def run_benchmark(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ARGS`` from the checkout. If it outlives BENCH_TIMEOUT, it
    is sent SIGABRT first, so that its faulthandler prints where every thread
    waits, and the test fails with that: the dump's head (faulthandler lists
    the newest threads first: a phase's senders) and its tail (the main
    thread), and the path of the whole output, kept in the test's temporary
    directory (``TMPDIR`` in ``env``)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env={**env, "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=BENCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        kept = Path(env.get("TMPDIR") or tempfile.mkdtemp()) / f"{args[0]}.hung.txt"
        kept.write_text(f"$ python -m {' '.join(args)}\n-- stdout\n{stdout}\n-- stderr\n{stderr}")
        pytest.fail(
            f"{' '.join(args)} still ran after {BENCH_TIMEOUT} s (whole output: {kept})\n"
            f"{stdout[-3000:]}\n{_head_and_tail(stderr, 9000, 5000)}"
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _head_and_tail(text: str, head: int, tail: int) -> str:
    """``text``, or its first ``head`` and last ``tail`` characters if longer."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


def bench(tmp_path: Path, *args: str, **extra_env: str) -> str:
    """stdout of ``python -m ARGS`` run from the checkout with none of the shell's
    CHAZ_* settings, a short TMPDIR and 200 columns; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
    out = run_benchmark(list(args), {**env, "TMPDIR": str(tmp_path), "COLUMNS": "200", **extra_env})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_quick_benchmark_runs_and_prints_every_figure(tmp_path: Path) -> None:
    stdout = bench(tmp_path, "benchmarks.run", "--stack", "embedded", "--quick")
    for figure in ("(a)", "(b)", "(c)", "(d)", "(e)", "(f)", "x (a)"):
        assert figure in stdout, stdout[-3000:]
    # Where the CPU goes: this process, the workers and Redis each used some.
    split = [line for line in stdout.splitlines() if "of which bench/workers" in line]
    assert len(split) == 2, stdout[-3000:]
    for line in split:
        bench_ms, workers, redis_ms, _db = line.split("│")[2].split("/")
        assert min(float(bench_ms), float(workers), float(redis_ms)) > 0, line


def test_worker_boot_case_prints_its_table_and_the_ratio(tmp_path: Path) -> None:
    """``benchmarks.run --boot --quick``: bare Celery and ``chaz worker`` each boot
    twice, and the table (median, min, max) and the ratio to the goal are printed."""
    stdout = bench(tmp_path, "benchmarks.run", "--boot", "--stack", "embedded", "--quick")
    text = " ".join(stdout.split())  # the console wraps long lines
    for figure in ("median s", "min s", "max s", "x (a)", "(a) bare", "(i) `chaz worker`"):
        assert figure in text, stdout[-3000:]
    assert re.search(r"embedded: chaz worker start-up = \d+\.\d\d x .*goal <= 1\.5", text), text


def test_quick_isolation_benchmark_prints_its_table_and_the_ratio(tmp_path: Path) -> None:
    """``benchmarks.isolation --quick`` on the embedded stack: the quiet project's
    phases (alone before and after), their ratios to its latency alone, and the
    noisy project refused."""
    stdout = bench(tmp_path, "benchmarks.isolation", "--stack", "embedded", "--quick")
    for figure in ("(i0)", "(i1)", "(i1r)", "(i2)", "(i3)", "p99 x alone", "x alone"):
        assert figure in stdout, stdout[-3000:]


def test_quick_search_benchmark_runs_and_prints_its_table(tmp_path: Path) -> None:
    """``benchmarks.search --quick`` on SQLite: it builds, searches and reports."""
    stdout = bench(tmp_path, "benchmarks.search", "--stack", "embedded", "--quick")
    assert "| SQLite | 5,000 |" in stdout and "p50 ms" in stdout, stdout


def test_quick_capacity_benchmark_prints_the_per_turn_costs(tmp_path: Path) -> None:
    """``benchmarks.capacity --quick`` on PostgreSQL and a Redis server of its own:
    every phase runs, every turn is answered, and each cost is reported."""
    from tests.conftest import free_port
    from tests.support.redis_server import RedisServer

    server = RedisServer(free_port(), tmp_path / "redis").start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
        env |= {
            "TMPDIR": str(tmp_path),
            "BENCH_REDIS_URL": server.url,
            "BENCH_PG_DATABASE": f"chaz_bench_test_{os.getpid()}",
        }
        out = run_benchmark(["benchmarks.capacity", "--quick", "--workers", "1"], env)
    finally:
        server.stop()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = " ".join(out.stdout.split())  # the console wraps long lines
    for figure in (
        "(a) bare",
        "(h) 1",
        "transactions per turn",
        "PostgreSQL CPU per turn",
        "Redis commands per turn",
        "worker RSS after 1,000 turns",
    ):
        assert figure in text, out.stdout[-3000:]


def test_quick_dispatch_benchmark_prints_both_pairs_their_segments_and_the_goal(
    tmp_path: Path,
) -> None:
    """``benchmarks.dispatch`` on the embedded stack: bare Celery's and chaz's
    samples interleaved, both pairs (stamps, heard here), each one's segments
    from the workers' task events, and the goal read (never asserted)."""
    stdout = bench(tmp_path, "benchmarks.dispatch", "--stack", "embedded", "--samples", "20")
    text = " ".join(stdout.split())  # the console wraps long lines
    for figure in (
        "bare Celery: send -> task start / Ack stamp",
        "chaz: commit -> heard here",
        "chaz / bare (heard here)",
        "chaz: broker -> consumer (task-received)",
        "chaz: lane + setup read + live slot -> started_at",
        "bare: consumer -> pool thread (task-started)",
    ):
        assert figure in text, stdout[-3000:]
    assert re.search(r"embedded: dispatch p99 = \d+\.\d\d ms commit -> Ack heard", text), text
    assert "nan" not in text.split("chaz / bare")[1][:40], text


def test_quick_http_benchmark_prints_chaz_sides_and_the_cpu_goal(tmp_path: Path) -> None:
    """``benchmarks.http --quick --no-langgraph``: LangGraph's client drives
    ``chaz serve`` and the same loads run through the in-process producer, on
    PostgreSQL and a Redis server of its own; every run is answered and the
    CPU ratio is printed. The chaz side only: ``langgraph dev`` is installed
    from PyPI on first use, which a test must not need."""
    from tests.conftest import free_port
    from tests.support.redis_server import RedisServer

    server = RedisServer(free_port(), tmp_path / "redis").start()
    try:
        stdout = bench(
            tmp_path,
            "benchmarks.http",
            "--quick",
            "--no-langgraph",
            BENCH_REDIS_URL=server.url,
            BENCH_PG_DATABASE=f"chaz_bench_http_{os.getpid()}",
        )
    finally:
        server.stop()
    text = " ".join(stdout.split())  # the console wraps long lines
    for figure in ("chaz serve", "in-process", "closed", "sequential", "p99 ms"):
        assert figure in text, stdout[-3000:]
    for load in ("closed", "sequential"):
        assert re.search(rf"{load}: chaz CPU per run over HTTP = \d+\.\d\d x in-process", text)


def test_cli_read_commands_on_postgresql_print_their_table(tmp_path: Path) -> None:
    """``benchmarks.cli_startup --server``: the three read commands, timed on a
    database of their own, each against the 0.3 s goal."""
    stdout = bench(tmp_path, "benchmarks.cli_startup", "--server", "--runs", "1")
    for command in ("chaz sessions ls", "chaz sessions show SID", "chaz jobs ls"):
        assert re.search(rf"{command} +\d+\.\d{{3}}s +\d+\.\d{{3}}s +0\.3s", stdout), stdout
