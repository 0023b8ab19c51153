"""``python -m benchmarks.pgturn``: where a turn's PostgreSQL CPU goes, statement by statement.

One process, no workers and no broker: it admits a Message into one of
``--sessions`` sessions and runs the turn it admits in this process (the
worker's own :class:`~chaz.usecases.turns.TurnRunner`, its wake-ups
recorded and not sent), round robin, ``--turns`` times after a warm-up. The
benchmark's scripted agent answers at once, so each turn is only its
database and Redis work, one at a time: the quietest reading of what a turn
asks of PostgreSQL.

Around every statement it reads the CPU time of the backend that ran it
(``/proc/PID/schedstat``, nanoseconds; the backend sleeps between
statements, so the reading is exact), and it gives the CPU a backend spent
between one statement's end and the next one's start on the same
connection (its ``COMMIT``) to the statement before. It also reports the
database's WAL records by kind (``pg_walinspect``, the records touching
this database's relations) and its tables' updates and HOT updates
(``pg_stat_user_tables``) over the measured turns.

``--phases`` also has every backend report its parser's, planner's and
executor's own CPU per statement (``log_*_stats``, sent to the client),
which costs CPU itself: read that run for the split, not for the total.
``--perf SECONDS`` records the backends with ``perf record -g`` for that
long in the middle of the measured turns and writes ``perf.data`` here.
Measurements take the machine's benchmark lock (docs/performance.md).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import re
import subprocess
import sys
import time
from typing import Any

import psycopg
from sqlalchemy import event

from benchmarks.stacks import AGENT, PG_ADMIN, PG_DATABASE, BenchStack, scrub_environment
from chaz.domain.entries import EntryType
from chaz.plumbing.dispatch import Wake
from chaz.services import Services
from chaz.tools import default_registry
from chaz.usecases import admission
from chaz.usecases.turns import TurnRunner


class _NoDispatch:
    """Wake-ups and webhooks recorded nowhere: this process runs every turn itself."""

    def send_wake(self, session_id: str, execution_id: str, reason: Wake, **_: object) -> bool:
        return True

    def send_webhook(self, job_id: str, *, countdown: float | None = None) -> bool:
        return True

    def close(self) -> None:
        pass


def _cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


_CTE = re.compile(r"(\w+) AS \(")


def label(statement: str) -> str:
    """A short name for a statement: its verb and table, or its CTEs' names."""
    s = " ".join(statement.split())
    if s.startswith("WITH"):
        return "WITH " + ",".join(_CTE.findall(s))
    m = re.match(r"(SELECT|INSERT INTO|UPDATE|DELETE FROM)\s+(\S+)", s)
    if m and m.group(1) != "SELECT":
        return f"{m.group(1)} {m.group(2)}"
    m = re.search(r"\bFROM\s+(\S+)", s)
    return f"SELECT ... FROM {m.group(1)}" if m else s[:40]


class Probe:
    """Per statement label: executions, backend CPU ns in it, and in what followed it."""

    def __init__(self, engine: Any, phases: bool, explain: int | None = None) -> None:
        self.count: collections.Counter[str] = collections.Counter()
        self.ns: collections.Counter[str] = collections.Counter()
        self.after: collections.Counter[str] = collections.Counter()
        self.phase_ns: collections.Counter[str] = collections.Counter()
        self.on = False
        self._last: dict[int, tuple[int, str]] = {}
        self._current: str | None = None
        self.pids: set[int] = set()
        self.plans: list[str] = []

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, record: Any) -> None:
            pid = int(dbapi_conn.info.backend_pid)
            record.info["pid"] = pid
            self.pids.add(pid)
            if explain is not None:
                dbapi_conn.add_notice_handler(self._plan)
                with dbapi_conn.cursor() as cur:
                    cur.execute("LOAD 'auto_explain'")
                    cur.execute(f"SET auto_explain.log_min_duration TO '{explain}ms'")
                    cur.execute("SET auto_explain.log_analyze TO on")
                    cur.execute("SET auto_explain.log_buffers TO on")
                    cur.execute("SET client_min_messages TO log")
                dbapi_conn.commit()
            if phases:
                dbapi_conn.add_notice_handler(self._notice)
                with dbapi_conn.cursor() as cur:
                    for name in ("log_parser_stats", "log_planner_stats", "log_executor_stats"):
                        cur.execute(f"SET {name} TO on")
                    cur.execute("SET client_min_messages TO log")
                dbapi_conn.commit()

        @event.listens_for(engine, "before_cursor_execute")
        def _before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            pid = conn.connection.info["pid"]
            now = _cpu_ns(pid)
            if self.on and pid in self._last:
                at, what = self._last[pid]
                self.after[what] += now - at
            conn.info["probe_start"] = now
            self._current = label(statement)

        @event.listens_for(engine, "after_cursor_execute")
        def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            pid = conn.connection.info["pid"]
            now = _cpu_ns(pid)
            what = label(statement)
            if self.on:
                self.count[what] += 1
                self.ns[what] += now - conn.info["probe_start"]
            self._last[pid] = (now, what)
            self._current = None

    def _plan(self, diag: Any) -> None:
        if self.on:
            self.plans.append(diag.message_primary or "")

    def _notice(self, diag: Any) -> None:
        text = diag.message_primary or ""
        detail = diag.message_detail or ""
        m = re.search(r"([\d.]+) s user, ([\d.]+) s system", detail)
        if self.on and self._current and m and text.endswith("STATISTICS"):
            kind = text.split()[0].lower()
            self.phase_ns[f"{self._current} | {kind}"] += int(
                (float(m.group(1)) + float(m.group(2))) * 1e9
            )

    def flush(self) -> None:
        """Give each backend's CPU since its last statement to that statement."""
        for pid, (at, what) in list(self._last.items()):
            try:
                now = _cpu_ns(pid)
            except OSError:
                continue
            if self.on:
                self.after[what] += now - at
            self._last[pid] = (now, what)


def _admin_scalar(sql: str, *args: Any) -> Any:
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        row = c.execute(sql, args).fetchone()
        return row[0] if row else None


def _db(sql: str, *args: Any) -> list[tuple[Any, ...]]:
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + PG_DATABASE
    with psycopg.connect(url, autocommit=True) as c:
        cur = c.execute(sql, args)
        return cur.fetchall() if cur.description else []


def _table_stats() -> dict[str, tuple[int, int, int]]:
    rows = _db(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
        " WHERE relname IN ('sessions', 'jobs', 'entries')"
    )
    return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}


def _wal(start: str, end: str) -> list[tuple[str, str, int, int]]:
    """(resource manager, record type, count, bytes) of records touching this database."""
    oid = _admin_scalar("SELECT oid FROM pg_database WHERE datname = %s", PG_DATABASE)
    try:
        return _wal_records(start, end, oid)
    except psycopg.errors.UndefinedFile:
        # A checkpoint recycled the window's first segment (others wrote a lot).
        print("(the window's WAL is gone: no WAL figures)")
        return []


def _wal_records(start: str, end: str, oid: int) -> list[tuple[str, str, int, int]]:
    return [
        (r[0], r[1], int(r[2]), int(r[3]))
        for r in _db(
            "SELECT resource_manager, split_part(record_type, ' ', 1), count(*),"
            " sum(record_length) FROM pg_get_wal_records_info(%s, %s)"
            " WHERE block_ref LIKE %s OR resource_manager = 'Transaction'"
            " GROUP BY 1, 2 ORDER BY 3 DESC",
            start,
            end,
            f"%/{oid}/%",
        )
    ]


@dataclasses.dataclass
class Window:
    """What the measured turns cost, read before and after them."""

    turns: int
    sessions: int
    wall: float
    load: tuple[str, str]
    backend_ns: int
    tables: tuple[dict[str, tuple[int, int, int]], dict[str, tuple[int, int, int]]]
    wal: list[tuple[str, str, int, int]]
    prepared: list[tuple[Any, ...]]


def _perf(pids: set[int], seconds: float) -> subprocess.Popen[bytes]:
    cmd = ["perf", "record", "-g", "-F", "2000", "-p", ",".join(str(p) for p in pids)]
    return subprocess.Popen(
        [*cmd, "-o", "perf.data", "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def measure(svc: Services, probe: Probe, args: argparse.Namespace) -> Window:
    """Warm up, then run ``args.turns`` turns with the probe on."""
    runner = TurnRunner(svc, default_registry())
    sessions = [svc.store.create_session(AGENT.id).id for _ in range(args.sessions)]

    def turn(i: int) -> None:
        sid = sessions[i % len(sessions)]
        done = admission.write(svc, sid, EntryType.MESSAGE, "user:u", "hi")
        assert done.job is not None
        # With the job's tree, as the admission's wake-up names it to a worker.
        outcome = runner.wake(sid, done.job.id, tree=done.job.tree_id)
        assert outcome.status == "ran", outcome

    for i in range(args.warmup):
        turn(i)
    probe.flush()
    # An idle backend flushes its statistics after 10 s (PostgreSQL 15).
    time.sleep(11)
    _db("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    tables0 = _table_stats()
    lsn0 = _admin_scalar("SELECT pg_current_wal_insert_lsn()::text")
    cpu0 = {pid: _cpu_ns(pid) for pid in probe.pids}
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    probe.on = True
    perf: subprocess.Popen[bytes] | None = None
    t0 = time.perf_counter()
    for i in range(args.turns):
        if args.perf and perf is None and i == args.turns // 4:
            perf = _perf(probe.pids, args.perf)
        turn(args.warmup + i)
    wall = time.perf_counter() - t0
    probe.flush()
    probe.on = False
    cpu1 = {pid: _cpu_ns(pid) for pid in probe.pids}
    lsn1 = _admin_scalar("SELECT pg_current_wal_insert_lsn()::text")
    if perf is not None:
        perf.wait()
    with svc.store.engine.connect() as conn:
        prepared = conn.exec_driver_sql(
            "SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements"
        ).all()
    svc.store.engine.dispose()  # the backends exit: their statistics are flushed
    time.sleep(1.2)
    return Window(
        args.turns,
        args.sessions,
        wall,
        (load0, " ".join(f"{x:.2f}" for x in os.getloadavg())),
        sum(cpu1[p] - cpu0.get(p, 0) for p in cpu1),
        (tables0, _table_stats()),
        _wal(lsn0, lsn1),
        [tuple(r) for r in prepared],
    )


def report(w: Window, probe: Probe) -> None:
    """Print the window's figures per turn."""
    n = w.turns
    print(
        f"{n} turns over {w.sessions} sessions in {w.wall:.1f}s; "
        f"load average {w.load[0]} -> {w.load[1]}"
    )
    print(f"backend CPU per turn: {w.backend_ns / n / 1e3:.0f} us (all backends of the database)")
    print(f"{'statement':<58} {'per turn':>8} {'us each':>8} {'us/turn':>8} {'after':>7}")
    for what, count in probe.count.most_common():
        print(
            f"{what[:58]:<58} {count / n:8.2f} {probe.ns[what] / count / 1e3:8.0f} "
            f"{probe.ns[what] / n / 1e3:8.0f} {probe.after[what] / n / 1e3:7.0f}"
        )
    inside, after = sum(probe.ns.values()), sum(probe.after.values())
    print(
        f"in statements {inside / n / 1e3:.0f} us/turn, after them (COMMITs) "
        f"{after / n / 1e3:.0f} us/turn, statements {sum(probe.count.values()) / n:.2f}/turn"
    )
    if probe.phase_ns:
        print("phases (us per turn):")
        for key, v in sorted(probe.phase_ns.items()):
            print(f"  {key:<70} {v / n / 1e3:8.0f}")
    print("tables: inserts, updates, HOT updates per turn")
    before, end = w.tables
    for name, (i1, u1, h1) in sorted(end.items()):
        i0, u0, h0 = before.get(name, (0, 0, 0))
        print(f"  {name:<10} {(i1 - i0) / n:6.2f} {(u1 - u0) / n:6.2f} {(h1 - h0) / n:6.2f}")
    records = sum(r[2] for r in w.wal)
    print(f"WAL records per turn: {records / n:.2f}, bytes {sum(r[3] for r in w.wal) / n:.0f}")
    for rm, kind, count, size in w.wal:
        if count / n >= 0.05:
            print(f"  {rm:<12} {kind:<22} {count / n:6.2f} {size / n:7.0f}")
    print("prepared statements of one connection: generic plans, custom plans")
    for generic, custom, text in w.prepared:
        print(f"  {generic:6} {custom:6}  {label(text)}")
    if probe.plans:
        print(f"{len(probe.plans)} plans logged; the first and the last:")
        print(probe.plans[0])
        print(probe.plans[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pgturn",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=1000, help="turns measured")
    parser.add_argument("--warmup", type=int, default=200, help="turns run first, not measured")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--phases", action="store_true", help="parser, planner, executor CPU")
    parser.add_argument("--perf", type=float, default=0.0, help="perf record this many seconds")
    parser.add_argument(
        "--without-foreign-keys",
        action="store_true",
        help="drop the foreign keys of entries and jobs first: what their checks cost",
    )
    parser.add_argument(
        "--explain", type=int, help="log the plans of statements taking this many ms or more"
    )
    args = parser.parse_args(argv)
    scrub_environment()
    stack = BenchStack("server")
    svc = Services(stack.settings)
    try:
        if args.without_foreign_keys:
            _db("ALTER TABLE entries DROP CONSTRAINT entries_session_id_fkey")
            _db("ALTER TABLE jobs DROP CONSTRAINT jobs_session_id_fkey")
        svc.__dict__["dispatcher"] = _NoDispatch()
        probe = Probe(svc.store.engine, args.phases, args.explain)
        report(measure(svc, probe, args), probe)
    finally:
        svc.close()
        stack.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
