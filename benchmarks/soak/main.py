"""The soak command: set up, load, inject, drain, check, print, clean up."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from rich.console import Console

import chaz
from benchmarks.run import code_version
from benchmarks.soak import check, report
from benchmarks.soak.faults import CLUSTER_KINDS, KINDS, Fault, Injector, Monitor, plan
from benchmarks.soak.load import AGENT, Producers
from benchmarks.soak.stack import Database, RedisServer, Supervisor
from benchmarks.stacks import scrub_environment
from chaz.plumbing.dispatch import Dispatcher
from chaz.settings import Settings
from chaz.store import Store
from chaz.store.migrate import upgrade
from tests.support.redis_cluster import Cluster

console = Console(width=int(os.environ.get("COLUMNS", "160")))


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=(
            "A fault soak of chaz on PostgreSQL + Redis: exits 1 on any lost, duplicated "
            "or out-of-order turn, or a worker that died by itself. See docs/reliability.md."
        ),
    )
    p.add_argument("--minutes", type=float, default=3.0, help="load duration (default 3)")
    p.add_argument(
        "--faults",
        default=",".join(KINDS),
        help=f"comma-separated fault kinds (default all: {','.join(KINDS)}); 'none' for a baseline",
    )
    p.add_argument(
        "--per-kind",
        type=int,
        help="faults of each kind (default 5 for 3 minutes, scaled with --minutes, at least 2)",
    )
    p.add_argument(
        "--redis-outage", type=float, default=10.0, help="seconds Redis stays down (default 10)"
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        help="coordination on a three-master Redis Cluster of the soak's own (the broker on "
        f"its Redis); adds the fault kinds {','.join(CLUSTER_KINDS)}",
    )
    p.add_argument("--sessions", type=int, default=30, help="sessions (default 30)")
    p.add_argument("--producers", type=int, default=3, help="producer threads (default 3)")
    p.add_argument("--rate", type=float, default=6.0, help="posts/s at most (default 6)")
    p.add_argument("--window", type=int, default=3, help="unfinished turns per session (default 3)")
    p.add_argument("--workers", type=int, default=3, help="turn worker processes (default 3)")
    p.add_argument("--concurrency", type=int, default=4, help="threads per worker (default 4)")
    p.add_argument(
        "--reconcile", type=float, default=2.0, help="CHAZ_RECONCILE_SECONDS (default 2)"
    )
    p.add_argument("--lease", type=float, help="CHAZ_LEASE_SECONDS (default: chaz's own)")
    p.add_argument(
        "--drain-timeout", type=float, default=180.0, help="seconds to finish the backlog"
    )
    p.add_argument("--seed", type=int, default=7, help="seed of the fault order")
    p.add_argument("--keep", action="store_true", help="keep the data directory and the database")
    args = p.parse_args(argv)
    args.kinds = [] if args.faults == "none" else [k.strip() for k in args.faults.split(",") if k]
    if args.cluster and args.faults == ",".join(KINDS):
        args.kinds += list(CLUSTER_KINDS)
    known = KINDS + CLUSTER_KINDS if args.cluster else KINDS
    unknown = [k for k in args.kinds if k not in known]
    if unknown:
        p.error(f"unknown fault kinds {unknown}; choose from {list(known)}")
    if args.per_kind is None:
        args.per_kind = max(2, round(5 * args.minutes / 3))
    return args


class _Interrupted(Exception):
    pass


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise _Interrupted(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Run the soak; the exit status is 0 only when every check passed."""
    args = parse(argv)
    scrub_environment()
    signal.signal(signal.SIGTERM, _on_term)
    home = Path(tempfile.mkdtemp(prefix="chaz-soak-"))
    db = Database()
    server = RedisServer(home)
    failed = True
    try:
        failed = _run(args, home, db, server)
    except (_Interrupted, KeyboardInterrupt) as exc:
        console.print(f"[red]interrupted ({exc or 'Ctrl-C'}); cleaning up[/]")
    except Exception:
        console.print(f"[red]the soak itself failed[/]\n{traceback.format_exc()}")
    finally:
        _cleanup(args, home, db, server)
    return 1 if failed else 0


#: Projects the sessions are spread over with --cluster.
PROJECTS = 6

#: What _run started, for _cleanup to stop even when _run did not finish.
_started: dict[str, object] = {}


def _run(args: argparse.Namespace, home: Path, db: Database, server: RedisServer) -> bool:
    """Everything between set-up and clean-up; True when the soak found a problem."""
    say = _say()
    console.print(
        f"[bold]chaz fault soak[/]: {args.minutes:g} min, faults {args.kinds or 'none'} "
        f"x {args.per_kind}, Redis outage {args.redis_outage:g}s, {args.sessions} sessions, "
        f"{args.workers} workers x {args.concurrency} threads, one beat; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    console.print(f"chaz under test: {code_version()}")
    for stale in Database.drop_stale():
        say(f"dropped {stale}, left behind by a soak that was killed")
    db.create()
    server.start()
    _started["server"] = server
    overrides: dict[str, float] = {"reconcile_seconds": args.reconcile}
    if args.lease:
        overrides["lease_seconds"] = args.lease
    settings = Settings(
        _env_file=None,
        home=home,
        database_url=db.sqlalchemy_url,
        redis_url=server.url,
        **overrides,  # type: ignore[arg-type]
    )
    nodes: Cluster | None = None
    if args.cluster:
        nodes = Cluster(home / "cluster").start()
        _started["cluster"] = nodes
        apart = {"redis_url": nodes.url, "redis_cluster": True, "broker_url": server.url}
        settings = settings.model_copy(update=apart)
    store = Store(settings.effective_database_url())
    try:
        upgrade(store.engine)
    finally:
        store.close()
    client = chaz.Client(settings, migrate=False)
    _started["client"] = client
    client.agents.put(AGENT)
    # On a cluster, sessions in several projects: their buckets spread them over the shards.
    tenants = [
        chaz.Client(settings, migrate=False, project=f"soak-{i}")
        for i in range(PROJECTS if args.cluster else 0)
    ]
    _started["tenants"] = tenants
    owners = [tenants[i % len(tenants)] if tenants else client for i in range(args.sessions)]
    sessions = [c.sessions.create(AGENT.id).id for c in owners]
    say(
        f"PostgreSQL database {db.name}, Redis on port {server.port}, "
        f"lease {settings.lease_seconds:g}s, reconcile {settings.reconcile_seconds:g}s"
    )

    supervisor = Supervisor(settings, turn_workers=args.workers, concurrency=args.concurrency)
    _started["supervisor"] = supervisor
    supervisor.start()
    deadline = time.monotonic() + 90
    for w in supervisor.alive("worker"):
        w.wait_ready(client, timeout=max(1.0, deadline - time.monotonic()))
    say("workers ready")

    monitor = Monitor(db, sessions)
    _started["monitor"] = monitor
    producers = Producers(
        client,
        sessions,
        monitor.unfinished,
        threads=args.producers,
        rate=args.rate,
        window=args.window,
    )
    _started["producers"] = producers
    if tenants:
        producers.clients = dict(zip(sessions, owners, strict=True))
    monitor.on_refresh.append(producers.refreshed)
    dispatcher = Dispatcher(settings)
    _started["dispatcher"] = dispatcher
    injector = Injector(
        server, db, supervisor, dispatcher, monitor, outage=args.redis_outage, cluster=nodes
    )

    seconds = args.minutes * 60
    schedule = plan(args.kinds, args.per_kind, seconds, args.redis_outage, args.seed)
    monitor.start()
    t0 = time.time()
    producers.start()
    say(f"load on; {len(schedule.order)} faults, one every {schedule.gap:.1f}s")
    faults: list[Fault] = []
    time.sleep(schedule.warmup)
    for kind in schedule.order:
        time.sleep(schedule.gap)
        fault = injector.inject(kind)
        if fault is not None:
            faults.append(fault)
            say(f"{kind}: {fault.detail}")
        else:
            say(f"[yellow]{kind}: skipped[/]")
    time.sleep(max(schedule.gap, seconds - (time.time() - t0)))
    producers.stop()
    load_seconds = time.time() - t0
    confirmed = sum(len(v) for v in producers.posted.confirmed.values())
    say(f"load off after {load_seconds:.0f}s: {confirmed} messages confirmed; draining")

    drained = _drain(monitor, args.drain_timeout)
    drain_seconds = time.time() - t0 - load_seconds
    monitor.stop()
    say(
        f"drained in {drain_seconds:.0f}s"
        if drained
        else f"[red]NOT drained after {args.drain_timeout:g}s[/]"
    )
    # The check reads the database only; the workers can stop first.
    supervisor.stop()
    with db.monitor() as conn:
        jobs, entries = check.load(conn)
    verdict = check.verify(
        jobs, entries, producers.posted.confirmed, faults, supervisor.exits, args.kinds
    )
    if not drained:
        verdict.problems.insert(0, f"the backlog did not drain in {args.drain_timeout:g}s")
    for kind, n in injector.skipped.items():
        verdict.problems.append(f"{n} {kind} fault(s) could not be injected")
    short = [k for k in args.kinds if verdict.rows[k].faults < args.per_kind]
    for k in short:
        verdict.problems.append(f"only {verdict.rows[k].faults} {k} faults of {args.per_kind}")

    console.print()
    console.print(
        report.table(
            verdict,
            f"chaz fault soak: {load_seconds:.0f}s of load + {drain_seconds:.0f}s drain, "
            f"{len(sessions)} sessions, {args.workers} workers x {args.concurrency} threads, "
            f"lease {settings.lease_seconds:g}s, reconcile {settings.reconcile_seconds:g}s, "
            f"Redis outage {args.redis_outage:g}s",
        )
    )
    console.print("faults:")
    for line in report.fault_log(faults, t0) + report.overlaps(faults):
        console.print(line, markup=False, highlight=False)
    console.print(f"job states: {dict(verdict.statuses)}")
    if verdict.errors:
        console.print("unsuccessful jobs, by error and the last fault before they ended:")
        for key, n in verdict.errors.most_common():
            example = verdict.examples.get(key, "")[:240]
            console.print(f"  {n:4d}  {key}: e.g. {example!r}", markup=False, highlight=False)
    posted = producers.posted
    console.print(
        f"producer posts retried: {dict(posted.errors) or 0}; abandoned at the stop: "
        f"{posted.abandoned}"
    )
    expected = sum(1 for x in supervisor.exits if x.expected)
    console.print(
        f"worker exits: {expected} killed by the soak, {len(supervisor.exits) - expected} on "
        f"their own; Redis restarts: {server.restarts}"
    )
    if verdict.problems:
        console.print(f"[red bold]FAILED[/]: {len(verdict.problems)} problem(s)")
        for line in verdict.problems[:60]:
            console.print(f"  {line}", markup=False, highlight=False)
        if len(verdict.problems) > 60:
            console.print(f"  ... and {len(verdict.problems) - 60} more")
        return True
    console.print("[green bold]PASSED[/]: no loss, no duplicate, no FIFO violation")
    return False


def _drain(monitor: Monitor, timeout: float) -> bool:
    """Wait until no job is queued or running (faults have stopped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            rows = monitor.query(
                "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running', 'stopping')"
            )
            if rows and rows[0][0] == 0:
                return True
        time.sleep(0.5)
    return False


def _say() -> Callable[[str], None]:
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        console.print(f"[dim]{time.perf_counter() - t0:6.1f}s[/] {msg}")

    return say


def _cleanup(args: argparse.Namespace, home: Path, db: Database, server: RedisServer) -> None:
    """Stop everything the soak started, whatever state it is in."""
    # Ignore a second Ctrl-C or SIGTERM: half a cleanup would leave processes behind.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for name in (
        "producers",
        "monitor",
        "supervisor",
        "dispatcher",
        "client",
        "tenants",
        "cluster",
    ):
        found = _started.pop(name, None)
        for thing in found if isinstance(found, list) else [found]:
            if thing is None:
                continue
            stop = getattr(thing, "stop", None) or getattr(thing, "close", None)
            with contextlib.suppress(Exception):
                if stop is not None:
                    stop()
    server.kill()
    if args.keep:
        console.print(f"kept {home} and database {db.name}")
        return
    with contextlib.suppress(Exception):
        db.drop()
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
