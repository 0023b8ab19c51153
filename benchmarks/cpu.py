"""CPU time by process over a measurement window, read from ``/proc`` (Linux).

Throughput on a small machine is bounded by CPU, so the benchmark also says
whose CPU a round trip costs: this process (the producer and its listener),
the worker processes, Redis and PostgreSQL. Elsewhere than Linux the meter
measures nothing and the table shows dashes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Process groups, in the order the table shows them.
GROUPS = ("benchmark", "workers", "redis", "database")

_PROC = Path("/proc")


def available() -> bool:
    """Whether this machine has the ``/proc`` files the meter reads."""
    return (_PROC / "stat").exists() and (_PROC / str(os.getpid()) / "stat").exists()


class CpuMeter:
    """CPU seconds per group between :meth:`start` and :meth:`stop`.

    ``worker_pids`` names the workers of the phase being measured; Redis and
    PostgreSQL are found by their executables' names (every ``redis-server``
    and ``postgres`` process on the machine: other idle instances add nothing
    measurable). ``database`` says whether the stack uses PostgreSQL at all
    (the embedded one does not: its SQLite runs inside the other processes).
    ``machine`` is all CPUs' busy time, whoever used it.
    """

    def __init__(self, worker_pids: Callable[[], list[int]], *, database: bool) -> None:
        self._worker_pids = worker_pids
        self._groups = GROUPS if database else tuple(g for g in GROUPS if g != "database")
        self._start: dict[Any, float] = {}

    def start(self) -> None:
        """Take the first reading."""
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        """CPU seconds used since :meth:`start`, per group and for the ``machine``.

        Counted per process, over the processes that ran at both readings: a
        ``redis-server`` that another program stopped in between would
        otherwise take its whole CPU time off the group's total.
        """
        if not self._start:
            return {}
        end = self._read()
        out = dict.fromkeys(self._groups, 0.0)
        for key, value in end.items():
            if key in self._start:
                group = key[0] if isinstance(key, tuple) else key
                out[str(group)] = out.get(str(group), 0.0) + max(0.0, value - self._start[key])
        return out

    def _read(self) -> dict[Any, float]:
        """CPU seconds by ``(group, pid)``, and the machine's busy time."""
        if not available():
            return {}
        tick = os.sysconf("SC_CLK_TCK")
        out: dict[Any, float] = {}
        workers = set(self._worker_pids())
        me = os.getpid()
        for entry in _PROC.iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            group = _group(pid, me, workers)
            if group in self._groups:
                out[(group, pid)] = _cpu_seconds(pid, tick)
        out["machine"] = _machine_busy(tick)
        return out


def process_cpu_seconds(pid: int) -> float:
    """The CPU seconds ``pid`` has used so far, its threads' included (nan without ``/proc``).

    The count survives ``exec``: for ``chaz worker`` it covers the command and
    the Celery worker it became.
    """
    return _cpu_seconds(pid, os.sysconf("SC_CLK_TCK")) if available() else float("nan")


def _group(pid: int, me: int, workers: set[int]) -> str | None:
    if pid == me:
        return "benchmark"
    if pid in workers:
        return "workers"
    try:
        # The executable's name: PostgreSQL's backends rewrite their command
        # lines ("postgres: 15/main: ..."), not this.
        name = (_PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return None
    if name == "redis-server":
        return "redis"
    if name == "postgres":
        return "database"
    return None


def _cpu_seconds(pid: int, tick: int) -> float:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0  # it exited
    # Fields after the command name, which may itself hold spaces: utime and
    # stime are the 14th and 15th fields of the whole line.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


def _machine_busy(tick: int) -> float:
    # The first line of /proc/stat: user nice system idle iowait irq softirq steal ...
    values = [int(v) for v in (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / tick
