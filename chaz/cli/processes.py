"""``chaz demo``, ``chaz up`` and ``chaz migrate``: the commands that run chaz's
processes, or bring their database up to date (``chaz worker``: :mod:`chaz.cli.worker`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaz.cli.context import Context, Interrupts, _is_reply, _watching
from chaz.cli.output import EXIT_FAILURE, EXIT_OK
from chaz.errors import AlreadyRunning, BackendUnavailable, Timeout
from chaz.settings import Settings, mask_url

if TYPE_CHECKING:
    from chaz.domain.entries import Entry
    from chaz.stack import Watchdog, WorkerProcess


#: The agent ``chaz demo`` registers: one built-in tool call, then a reply.
#: An AgentSpec's fields, made into one when the demo runs: the domain models
#: would otherwise load in ``chaz worker`` too, and delay its exec.
DEMO_SPEC: dict[str, Any] = {
    "id": "demo",
    "system_prompt": "You count the words of every message.",
    "tools": ["word_count", "clock"],
    "script": [
        {
            "steps": [
                {"call": "word_count", "args": {"text": "{input}"}},
                {"say": "Your message has {last_result} words."},
            ]
        }
    ],
}


def cmd_demo(ctx: Context) -> int:
    """Start the embedded stack, run one scripted turn and print it as it happens."""
    from chaz.domain.agents import AgentSpec
    from chaz.domain.entries import EntryType, agent_sender
    from chaz.stack import embedded

    demo = AgentSpec(**DEMO_SPEC)

    args, out = ctx.args, ctx.out
    settings = ctx.server_settings
    home = settings.home.resolve()
    # embedded() writes its worker log here even when it uses real servers.
    home.mkdir(parents=True, exist_ok=True)
    with Interrupts(signal.SIGINT, signal.SIGTERM) as interrupts, ExitStack() as stack:
        with (
            out.status(
                f"starting chaz in {home} (Redis, database, a celery worker)...", announce=True
            ),
            # embedded() starts Redis before it can clean up after itself.
            interrupts.shield(),
        ):
            client = stack.enter_context(embedded(workers=2, settings=settings))
        client.agents.put(demo)
        session = client.sessions.create(demo.id)
        out.note(f"session {session.id} of agent {demo.id!r}:")
        posted = client.sessions.post(session.id, args.message, sender="user:you")
        me = agent_sender(demo.id)
        reply: Entry | None = None
        with (
            out.status("waiting for the agent..."),
            _watching(client.sessions.watch(session.id, after=0, timeout=args.timeout)) as entries,
        ):
            for entry in entries:
                out.entry(entry)
                if _is_reply(entry, posted.job_id, me):
                    reply = entry
                    break
        with out.status("stopping the embedded stack..."), interrupts.shield():
            stack.close()
    if reply is None:
        raise Timeout(f"no reply within {args.timeout:g}s; see {home / 'worker.log'}")
    if reply.type is EntryType.ERROR:
        out.error_entry(reply)
        return EXIT_FAILURE
    where = mask_url(settings.database_url) if settings.database_url else str(home)
    out.note(f"done. The data stays in {where}: `chaz sessions show {session.id}` shows it again.")
    return EXIT_OK


def cmd_up(ctx: Context) -> int:
    """Run worker processes (and beat) in the foreground until Ctrl-C or SIGTERM."""
    from chaz.coord.redis import ensure_embedded, stop_embedded
    from chaz.stack import STOP_SECONDS, Watchdog, WorkerProcess, embedded_redis_pid

    args, out = ctx.args, ctx.out
    settings = ctx.server_settings
    home = settings.home.resolve()
    concurrency = args.concurrency or settings.worker_concurrency
    started_redis = False
    workers: list[WorkerProcess] = []
    http: subprocess.Popen[bytes] | None = None
    home.mkdir(parents=True, exist_ok=True)
    with (
        _up_lock(home),
        Interrupts(signal.SIGINT, signal.SIGTERM) as interrupts,
    ):
        # Stops the workers, and a Redis this command started, if we are SIGKILLed.
        watchdog = Watchdog()
        try:
            with out.status(f"starting chaz in {home}...", announce=True):
                # Shielded: what was started must be recorded, or nothing stops it.
                if settings.embedded_redis:
                    with interrupts.shield():
                        started_redis = ensure_embedded(settings)
                        redis_pid = embedded_redis_pid(settings) if started_redis else None
                        if redis_pid is not None:
                            watchdog.guard_pid(redis_pid)
                client = ctx.client  # migrates the database
                for i in range(args.workers):
                    worker = WorkerProcess(
                        settings,
                        concurrency=concurrency,
                        # One beat is enough; its schedule fires are safe twice anyway.
                        beat=not args.no_beat and i == 0,
                        loglevel=args.loglevel,
                        log_file=home / f"worker-{i + 1}.log",
                        # Ctrl-C hands a running turn back before the kill.
                        stop_deadline=STOP_SECONDS,
                    )
                    with interrupts.shield():
                        workers.append(worker.start())
                        watchdog.guard_group(worker.pid)
                for w in workers:
                    w.wait_ready(client)
                if args.http is not None:
                    with interrupts.shield():
                        http = _start_http(settings, args.http, watchdog)
            _up_banner(ctx, workers, concurrency)
            # Waiting in short sleeps keeps Ctrl-C responsive and notices a dead worker.
            while all(w.alive() for w in workers) and (http is None or http.poll() is None):
                time.sleep(0.5)
            raise BackendUnavailable(f"{_dead(workers, http)}; see its log in {home}")
        except KeyboardInterrupt:
            # Ctrl-C / SIGTERM is how `up` is meant to end: a clean stop is success.
            out.note("stopping...")
            return EXIT_OK
        finally:
            with out.status("stopping workers..."), interrupts.shield():
                _stop_http(http)
                for w in workers:
                    if w.proc is not None and not w.alive():
                        # Its leader died, but its beat child may still run
                        # in the process group; stop() only sees the leader.
                        with suppress(ProcessLookupError, PermissionError):
                            os.killpg(w.proc.pid, signal.SIGTERM)
                    w.stop()
                ctx.close()
                if started_redis:
                    stop_embedded(settings)
                watchdog.release()
            if out.json_mode:
                out.json({"status": "stopped"}, stream=True)


def _start_http(settings: Settings, port: int, watchdog: Watchdog) -> subprocess.Popen[bytes]:
    """``chaz serve`` on 127.0.0.1:``port`` as a child in a group of its own
    (the watchdog stops it if ``chaz up`` dies), logging to ``http.log``."""
    from chaz.plumbing.files import create_private
    from chaz.stack import settings_env

    home = settings.home.resolve()
    log = create_private(home / "http.log")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "chaz.cli", "serve", "--port", str(port)],
            env={**os.environ, **settings_env(settings)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    watchdog.guard_group(proc.pid)
    return proc


def _dead(workers: Sequence[WorkerProcess], http: subprocess.Popen[bytes] | None) -> str:
    """Which child of ``chaz up`` exited, and with what status."""
    for w in workers:
        if not w.alive():
            code = w.proc.returncode if w.proc is not None else None
            return f"worker {w.name} exited (status {code})"
    return f"chaz serve exited (status {http.returncode if http is not None else None})"


def _stop_http(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop ``chaz serve`` (SIGTERM: uvicorn's graceful stop), killing it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_HTTP_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


#: How long ``chaz up`` lets its ``chaz serve`` finish its requests on stop.
STOP_HTTP_SECONDS = 5.0


@contextmanager
def _up_lock(home: Path) -> Iterator[None]:
    """Hold ``$CHAZ_HOME/up.lock`` while ``chaz up`` runs; refuse a second copy.

    An flock, not a pid file: the kernel drops it when its holder dies, even
    by SIGKILL, so a crash never leaves a stale lock behind.
    """
    import fcntl

    path = home / "up.lock"
    fh = path.open("a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise AlreadyRunning(
                f"chaz up is already running on {home} (pid {holder}); stop it first",
                home=str(home),
                pid=holder,
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        yield
    finally:
        fh.close()


def _up_banner(ctx: Context, workers: Sequence[WorkerProcess], concurrency: int) -> None:
    settings, out = ctx.server_settings, ctx.out
    home = settings.home.resolve()
    info = {
        "status": "up",
        "home": str(home),
        "database": mask_url(settings.effective_database_url()),
        "redis": mask_url(settings.effective_redis_url()),
        "workers": [{"name": w.name, "pid": w.pid, "log": str(w.log_file)} for w in workers],
        "concurrency": concurrency,
        "beat": not ctx.args.no_beat,
        "http": None if ctx.args.http is None else f"http://127.0.0.1:{ctx.args.http}",
    }
    if out.json_mode:
        out.json(info, stream=True)
        return
    out.line(
        f"chaz is up: {len(workers)} worker process(es) x {concurrency} threads"
        f"{', beat on' if info['beat'] else ''}",
        "bold green",
    )
    out.fields(
        "",
        [
            ("data", home),
            ("database", info["database"]),
            ("redis", info["redis"]),
            ("logs", ", ".join(str(w.log_file) for w in workers)),
            *([("http", f"{info['http']} (docs/http.md)")] if info["http"] else []),
        ],
    )
    env = "" if settings.database_url or settings.redis_url else f"CHAZ_HOME={home} "
    out.line("From another terminal:", "bold")
    for example in (
        f"{env}chaz agents put my-agent.json",
        f"{env}chaz sessions new my-agent",
        f'{env}chaz send SESSION "hello" --wait',
        f"{env}chaz tail SESSION",
    ):
        out.line(f"  {example}", "cyan")
    out.line("Press Ctrl-C to stop.")


def _migrate(settings: Settings, *, report: bool = True) -> str | None:
    """Upgrade the schema; with ``report``, return the revision it is at."""
    from chaz.cli.worker import migrate_url

    return migrate_url(settings.effective_database_url(), report=report)


def cmd_migrate(ctx: Context) -> int:
    """Bring the database schema up to date (safe to run again, and concurrently)."""
    settings, out = ctx.server_settings, ctx.out
    with out.status("migrating..."):
        revision = _migrate(settings)
    database = mask_url(settings.effective_database_url())
    if out.json_mode:
        out.json({"database": database, "revision": revision})
    else:
        out.line(f"database {database} is at revision {revision}")
    return EXIT_OK
