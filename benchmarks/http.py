"""``python -m benchmarks.http``: chaz over HTTP against ``langgraph dev``, one client.

The same official ``langgraph-sdk`` client (the one in chaz's dev extras)
drives, in one run and one after the other:

* **langgraph dev**: LangGraph's own server (``langgraph-cli[inmem]``, the
  in-memory runtime, ``--no-browser --no-reload``), installed on first use
  into a virtualenv of its own under the benchmark's cache directory (its
  dependencies must not mix with chaz's), serving a graph that answers one
  AI message at once, without a model. It is the baseline of the ratios.
* **chaz over HTTP**: ``chaz serve`` in front of the server stack (2 real
  ``celery worker`` processes x 8 threads, PostgreSQL, Redis), the
  benchmark's zero-latency scripted agent.
* **chaz in-process**: the same loads through the in-process producer
  (``client.sessions.post`` + ``wait_for_reply``), with the same workers: what
  HTTP adds is the difference.

Two loads each: 100 threads x 10 runs in a closed loop (each thread's next
``runs.wait`` as soon as its previous one answered), and one thread x 200
sequential runs. Per load: runs/s, p50/p99 latency of one ``runs.wait``,
and CPU per run by process (from ``/proc``), printed with the ratios against
``langgraph dev`` measured in the same run. See benchmarks/README.md.

    python -m benchmarks.http                  # full sizes, about 2 minutes
    python -m benchmarks.http --quick          # a smoke run
    python -m benchmarks.http --no-langgraph   # chaz only (nothing installed)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.cpu import CpuMeter, process_cpu_seconds
from benchmarks.measure import Latency, join_all
from benchmarks.run import machine
from benchmarks.stacks import AGENT, ROOT, BenchStack, scrub_environment
from chaz.domain.principals import ALL_GRANTS
from chaz.stack import settings_env

console = Console(width=int(os.environ.get("COLUMNS", "132")))

#: What ``langgraph dev`` is installed from (PyPI), into its own virtualenv.
LANGGRAPH_CLI = "langgraph-cli[inmem]>=0.4,<0.5"
#: Where that virtualenv lives: ``BENCH_CACHE``, else the user's cache directory.
CACHE = Path(
    os.environ.get("BENCH_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "chaz-bench"
)
#: The graph ``langgraph dev`` serves: one AI message, at once, no model.
GRAPH = '''"""The benchmark's graph: one AI message, at once, without a model."""

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph


def answer(state: MessagesState) -> dict:
    return {"messages": [AIMessage(content="ok")]}


graph = (
    StateGraph(MessagesState)
    .add_node("answer", answer)
    .add_edge(START, "answer")
    .add_edge("answer", END)
    .compile()
)
'''
#: How long a server may take to answer ``/ok`` on a loaded machine.
START_SECONDS = 90.0
#: chaz's fleet: worker processes x threads; ``langgraph dev`` gets as many
#: concurrent jobs (``--n-jobs-per-worker``; its own default is 1).
WORKERS, CONCURRENCY = 2, 8
#: Goals of issue 22 (item 9), printed, not asserted.
GOAL_RATE_RATIO = 2.0
GOAL_CPU_RATIO = 1.25


@dataclasses.dataclass
class Sizes:
    """How much each load does."""

    threads: int = 100
    runs: int = 10
    sequential: int = 200
    #: Runs per thread before the counting starts (connections, caches).
    warm: int = 1


FULL = Sizes()
QUICK = Sizes(threads=10, runs=3, sequential=20)


@dataclasses.dataclass
class Load:
    """One load on one side: what was counted, and the CPU it took."""

    runs: int
    seconds: float
    latency: Latency
    errors: int = 0
    #: CPU seconds per process group over the load (see :class:`Meter`).
    cpu: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Runs per second."""
        return self.runs / self.seconds if self.seconds > 0 else float("nan")

    def ms(self, *groups: str) -> float:
        """Milliseconds of ``groups``' CPU per run (nan if not measured)."""
        if not self.runs or any(g not in self.cpu for g in groups):
            return float("nan")
        return 1000 * sum(self.cpu[g] for g in groups) / self.runs


@dataclasses.dataclass
class Side:
    """What one server (or the in-process producer) did under both loads."""

    name: str
    closed: Load
    sequential: Load
    #: The process groups that are this side's own cost per run.
    own: tuple[str, ...]


# -- processes and their CPU ------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class Meter:
    """CPU seconds per group over one load: the benchmark process (the client,
    or the in-process producer), the server's process tree, the workers,
    Redis and PostgreSQL (benchmarks.cpu), and the whole machine."""

    def __init__(
        self, server: int | None, workers: Callable[[], list[int]], *, database: bool
    ) -> None:
        self._server = server
        self._inner = CpuMeter(workers, database=database)
        self._start: dict[int, float] = {}

    def _tree(self) -> dict[int, float]:
        if self._server is None:
            return {}
        return {p: process_cpu_seconds(p) for p in descendants(self._server)}

    def start(self) -> None:
        """Take the first reading."""
        self._inner.start()
        self._start = self._tree()

    def stop(self) -> dict[str, float]:
        """CPU seconds per group since :meth:`start`."""
        end = self._tree()
        out = self._inner.stop()
        if self._server is not None:
            out["server"] = sum(max(0.0, v - self._start.get(p, 0.0)) for p, v in end.items())
        return out


class Child:
    """A server process in a session of its own, stopped with its children."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ok(self, url: str) -> None:
        """Block until ``url``/ok answers 200."""
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited; see {self.log}")
            try:
                if httpx.get(f"{url}/ok", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{url} did not answer in {START_SECONDS:g}s; see {self.log}")

    def stop(self) -> None:
        """SIGTERM to the group (a graceful stop), SIGKILL if it lingers."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


# -- the loads, through langgraph-sdk ----------------------------------------------


def _answered(values: Any) -> bool:
    """Whether a ``runs.wait`` answer ends with the graph's AI message."""
    messages: Any = values.get("messages") if isinstance(values, dict) else None
    return bool(messages) and messages[-1].get("type") == "ai"


async def _sdk_loads(url: str, key: str | None, sizes: Sizes, meter: Meter) -> tuple[Load, Load]:
    from langgraph_sdk import get_client

    client = get_client(url=url, api_key=key)
    run_input: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    errors = [0]

    async def one(thread_id: str, latencies: list[float] | None) -> None:
        t0 = time.perf_counter()
        try:
            values = await client.runs.wait(thread_id, AGENT.id, input=run_input)
        except Exception:
            errors[0] += 1
            return
        if latencies is not None:
            latencies.append(time.perf_counter() - t0)
        errors[0] += not _answered(values)

    async def thread_loop(thread_id: str, n: int, latencies: list[float]) -> None:
        for _ in range(n):
            await one(thread_id, latencies)

    async def load(threads: int, runs: int) -> Load:
        ids = [
            (await client.threads.create(graph_id=AGENT.id))["thread_id"] for _ in range(threads)
        ]
        for _ in range(sizes.warm):
            await asyncio.gather(*(one(t, None) for t in ids))
        errors[0] = 0
        latencies: list[float] = []
        meter.start()
        t0 = time.perf_counter()
        await asyncio.gather(*(thread_loop(t, runs, latencies) for t in ids))
        seconds = time.perf_counter() - t0
        cpu = meter.stop()
        return Load(len(latencies), seconds, Latency.of(latencies), errors[0], cpu)

    try:
        return await load(sizes.threads, sizes.runs), await load(1, sizes.sequential)
    finally:
        await client.aclose()


def sdk_side(
    name: str, url: str, key: str | None, sizes: Sizes, meter: Meter, own: tuple[str, ...]
) -> Side:
    """Both loads through ``langgraph-sdk`` against the server at ``url``."""
    closed, sequential = asyncio.run(_sdk_loads(url, key, sizes, meter))
    return Side(name, closed, sequential, own)


#: chaz's own processes per run over HTTP, and in-process (the producer is the
#: benchmark process there: it does what the server does over HTTP).
OWN_HTTP = ("server", "workers", "database", "redis")
OWN_INPROCESS = ("benchmark", "workers", "database", "redis")
#: How long an in-process run waits for its reply.
REPLY_SECONDS = 60


# -- the loads, in-process ----------------------------------------------------------


def _inprocess_load(stack: BenchStack, threads: int, runs: int, warm: int, meter: Meter) -> Load:
    client = stack.client
    sessions = [client.sessions.create(AGENT.id).id for _ in range(threads)]
    lock = threading.Lock()
    latencies: list[float] = []
    errors = [0]
    gate = threading.Barrier(threads + 1)

    def one(sid: str, record: bool) -> None:
        t0 = time.perf_counter()
        try:
            entry = client.sessions.post(sid, "hi")
            reply = client.sessions.wait_for_reply(sid, after=entry.seq, timeout=REPLY_SECONDS)
        except Exception:
            with lock:
                errors[0] += 1
            return
        with lock:
            errors[0] += reply.job_id != entry.job_id
            if record:
                latencies.append(time.perf_counter() - t0)

    def producer(sid: str) -> None:
        for _ in range(warm):
            one(sid, False)
        gate.wait()
        for _ in range(runs):
            one(sid, True)

    workers = [threading.Thread(target=producer, args=(s,), daemon=True) for s in sessions]
    for t in workers:
        t.start()
    gate.wait()
    with lock:
        errors[0] = 0  # only the counted runs' errors
    meter.start()
    t0 = time.perf_counter()
    # Each run waits at most REPLY_SECONDS for its reply: a producer still
    # running past all of its runs' is stuck, and its stack says where.
    join_all(workers, "producer threads", (runs + 1) * REPLY_SECONDS)
    seconds = time.perf_counter() - t0
    cpu = meter.stop()
    return Load(len(latencies), seconds, Latency.of(latencies), errors[0], cpu)


# -- the sides ----------------------------------------------------------------------


def ensure_langgraph_dev(say: Callable[[str], None]) -> Path:
    """The ``langgraph`` command of the benchmark's own virtualenv, installed
    from PyPI on first use (again when :data:`LANGGRAPH_CLI` changes)."""
    venv = CACHE / "langgraph-dev"
    marker = venv / "chaz-bench-installed"
    binary = venv / "bin" / "langgraph"
    if binary.exists() and marker.exists() and marker.read_text() == LANGGRAPH_CLI:
        return binary
    say(f"installing {LANGGRAPH_CLI} into {venv} (first use)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", LANGGRAPH_CLI],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    marker.write_text(LANGGRAPH_CLI)
    return binary


def langgraph_versions(binary: Path) -> dict[str, str]:
    """The versions of LangGraph's server parts in the benchmark's virtualenv."""
    names = ("langgraph-cli", "langgraph-api", "langgraph-runtime-inmem", "langgraph")
    code = (
        "import importlib.metadata as m, json;"
        f"print(json.dumps({{n: m.version(n) for n in {names!r}}}))"
    )
    out = subprocess.run(
        [str(binary.parent / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    versions: dict[str, str] = json.loads(out.stdout)
    return versions


@contextmanager
def langgraph_dev(binary: Path, home: Path) -> Iterator[tuple[str, Child]]:
    """``langgraph dev`` over the benchmark's graph, on a free port."""
    graph = home / "graph"
    graph.mkdir(parents=True, exist_ok=True)
    (graph / "graph.py").write_text(GRAPH)
    config = {"dependencies": ["."], "graphs": {AGENT.id: "./graph.py:graph"}}
    (graph / "langgraph.json").write_text(json.dumps(config))
    port = free_port()
    cmd = [str(binary), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--config", "langgraph.json", "--server-log-level", "warning"]
    cmd += ["--n-jobs-per-worker", str(WORKERS * CONCURRENCY)]
    # Nothing of chaz's environment, and no tracing: the server talks to no one.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAZ_", "LANG"))}
    env |= {"LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false"}
    child = Child(cmd, env, graph, home / "langgraph-dev.log")
    url = f"http://127.0.0.1:{port}"
    try:
        child.wait_ok(url)
        yield url, child
    finally:
        child.stop()


@contextmanager
def chaz_serve(stack: BenchStack) -> Iterator[tuple[str, Child]]:
    """``chaz serve`` over the stack's settings, on a free port."""
    port = free_port()
    cmd = [sys.executable, "-m", "chaz.cli", "serve", "--port", str(port)]
    cmd += ["--loglevel", "warning"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAZ_")}
    env |= settings_env(stack.settings)
    child = Child(cmd, env, ROOT, stack.home / "serve.log")
    url = f"http://127.0.0.1:{port}"
    try:
        child.wait_ok(url)
        yield url, child
    finally:
        child.stop()


def run_langgraph(sizes: Sizes, say: Callable[[str], None]) -> tuple[Side, dict[str, str]]:
    """``langgraph dev``'s side, and the versions it ran."""
    binary = ensure_langgraph_dev(say)
    versions = langgraph_versions(binary)
    home = Path(tempfile.mkdtemp(prefix="chaz-bench-langgraph-"))
    with langgraph_dev(binary, home) as (url, child):
        say(f"langgraph dev {versions['langgraph-api']} at {url}: the loads")
        meter = Meter(child.proc.pid, lambda: [], database=False)
        side = sdk_side("langgraph dev", url, None, sizes, meter, ("server",))
    return side, versions


def run_chaz(sizes: Sizes, say: Callable[[str], None]) -> tuple[Side, Side, dict[str, str]]:
    """chaz's two sides (in-process, then HTTP) on the server stack, and its versions."""
    stack = BenchStack("server")
    try:
        say(f"chaz: {WORKERS} workers x {CONCURRENCY} threads on PostgreSQL + Redis")
        stack.start_chaz_workers(WORKERS, CONCURRENCY)
        meter = Meter(None, stack.worker_pids, database=True)
        say("chaz in-process: the loads")
        closed = _inprocess_load(stack, sizes.threads, sizes.runs, sizes.warm, meter)
        sequential = _inprocess_load(stack, 1, sizes.sequential, sizes.warm, meter)
        inprocess = Side("chaz in-process", closed, sequential, OWN_INPROCESS)
        _, key = stack.client.keys.create("user:bench", "default", list(ALL_GRANTS))
        with chaz_serve(stack) as (url, child):
            say(f"chaz serve at {url}: the loads")
            meter = Meter(child.proc.pid, stack.worker_pids, database=True)
            http = sdk_side("chaz serve", url, key, sizes, meter, OWN_HTTP)
        return inprocess, http, stack.versions()
    finally:
        stack.close()


# -- the report -----------------------------------------------------------------------


def _f(value: float, fmt: str = ",.1f") -> str:
    return "-" if value != value else format(value, fmt)


def _x(value: float, base: float) -> str:
    return "-" if value != value or base != base or not base else f"{value / base:.2f}"


def table(sides: list[Side], sizes: Sizes) -> Table:
    """One row per side and load, with ratios to the first side's same load."""
    t = Table(
        title=f"runs.wait through langgraph-sdk: {sizes.threads} threads x {sizes.runs} runs "
        f"(closed loop), 1 thread x {sizes.sequential} (sequential)",
        title_justify="left",
    )
    for col in ("load", "side", "runs/s", "x base", "p50 ms", "p99 ms", "err"):
        t.add_column(col, justify="left" if col in ("load", "side") else "right")
    t.add_column("CPU ms/run", justify="right")
    t.add_column("x base", justify="right")
    t.add_column("srv|prod/wrk/PG/Redis", justify="right")
    t.add_column("client", justify="right")
    t.add_column("machine", justify="right")
    base = sides[0]
    for label, pick in (("closed", "closed"), ("sequential", "sequential")):
        for side in sides:
            load: Load = getattr(side, pick)
            ref: Load = getattr(base, pick)
            split = "/".join(_f(load.ms(g), ".2f") for g in side.own)
            client = "-" if side.own[0] == "benchmark" else _f(load.ms("benchmark"), ".2f")
            t.add_row(
                label,
                side.name,
                _f(load.rate),
                _x(load.rate, ref.rate),
                _f(load.latency.p50),
                _f(load.latency.p99),
                str(load.errors),
                _f(load.ms(*side.own), ".2f"),
                _x(load.ms(*side.own), ref.ms(*base.own)),
                split,
                client,
                _f(load.ms("machine"), ".2f"),
            )
    return t


def goals(sides: dict[str, Side]) -> list[str]:
    """Issue 22's goals as ratios of this run (printed, not asserted)."""
    out = []
    http, inproc, lg = (sides.get(n) for n in ("chaz serve", "chaz in-process", "langgraph dev"))
    if http and lg:
        ratio = http.closed.rate / lg.closed.rate
        verdict = "met" if ratio >= GOAL_RATE_RATIO else "NOT met"
        out.append(
            f"chaz serve runs/s, {http.closed.runs} runs closed loop = {ratio:.2f} x "
            f"langgraph dev's (goal >= {GOAL_RATE_RATIO:g}): {verdict}"
        )
    if http and inproc:
        for pick in ("closed", "sequential"):
            h, p = getattr(http, pick), getattr(inproc, pick)
            ratio = h.ms(*OWN_HTTP) / p.ms(*OWN_INPROCESS)
            verdict = "met" if ratio <= GOAL_CPU_RATIO else "NOT met"
            with_client = h.ms(*OWN_HTTP, "benchmark") / p.ms(*OWN_INPROCESS)
            out.append(
                f"{pick}: chaz CPU per run over HTTP = {ratio:.2f} x in-process "
                f"(goal <= {GOAL_CPU_RATIO:g}): {verdict}; {with_client:.2f} x with the "
                "HTTP client's CPU counted too"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every side, print the table and the goals; 1 if a side broke or a run failed."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.http",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--no-langgraph",
        action="store_true",
        help="chaz only: do not install or run langgraph dev (the ratios are then to "
        "chaz in-process)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    scrub_environment()
    sizes = QUICK if args.quick else FULL
    info = machine()
    console.print(
        f"[bold]chaz HTTP benchmark[/] {info['date']}: {info['cpus']} CPUs ({info['cpu']}), "
        f"{info['memory']}, Python {info['python']}; load average {info['load_before']}"
    )
    console.print(f"chaz measured: {info['code']}")

    def say(msg: str) -> None:
        console.print(f"[dim]{time.strftime('%H:%M:%S')} {msg}[/]")

    t0 = time.perf_counter()
    sides: list[Side] = []
    failed = False
    try:
        if not args.no_langgraph:
            side, info["langgraph"] = run_langgraph(sizes, say)
            sides.append(side)
        inprocess, http, info["stack"] = run_chaz(sizes, say)
        sides += [http, inprocess]
    except Exception:
        console.print(f"[red]the benchmark failed[/]\n{traceback.format_exc()}")
        failed = True
    if sides:
        console.print(table(sides, sizes))
        for line in goals({s.name: s for s in sides}):
            console.print(line)
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(
        f"[dim]total {time.perf_counter() - t0:.0f}s; load average now {info['load_after']}; "
        f"versions {info.get('langgraph', {})} {info.get('stack', {})}[/]"
    )
    if args.json:
        payload = {
            "machine": info,
            "sizes": dataclasses.asdict(sizes),
            "sides": [dataclasses.asdict(s) for s in sides],
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    broken = any(load.errors or not load.runs for s in sides for load in (s.closed, s.sequential))
    return 1 if failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
