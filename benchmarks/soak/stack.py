"""The soak's servers and processes: its own Redis, its own database, supervised workers.

Nothing here touches a shared server's data: the soak starts a ``redis-server``
of its own on a free port (which it may flush, kill and restart) and creates a
PostgreSQL database of its own (``chaz_soak_<pid>``), dropped at the end.
Every child process is started with a parent-death signal where the machine
has ``setpriv``, so a soak that is itself SIGKILLed (a CI timeout) leaves no
worker or Redis server behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis

from chaz.coord.redis import redis_server_binary
from chaz.settings import Settings
from chaz.stack import WorkerProcess, settings_env

PG_ADMIN = os.environ.get("SOAK_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
#: application_name of the soak's own monitoring connection: the PostgreSQL
#: fault spares it, so the soak can keep observing while it injects.
MONITOR_APP = "chaz-soak-monitor"

_SETPRIV = shutil.which("setpriv")


def _orphan_proof(cmd: list[str]) -> list[str]:
    """``cmd``, set to die with the thread that starts it (Linux ``setpriv``)."""
    if _SETPRIV is None:
        return cmd
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *cmd]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- Redis ------------------------------------------------------------------------


class RedisServer:
    """A ``redis-server`` of the soak's own, without persistence, on a fixed port.

    A restart therefore comes back empty, like a cache node that was replaced:
    the hardest case for chaz, which must rebuild everything from the database.
    """

    def __init__(self, home: Path, port: int | None = None) -> None:
        self.home = home
        self.port = port or free_port()
        self.binary = shutil.which("redis-server") or redis_server_binary()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        """The URL chaz is configured with (database 0 of this server)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A short-timeout client for the soak's own commands."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and wait until it answers PING."""
        cmd = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.home),
            "--logfile", str(self.home / "redis.log"),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            _orphan_proof(cmd),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        client = self.client()
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server exited; see {self.home / 'redis.log'}")
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        return
                time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(f"redis-server did not answer in {timeout:g}s")

    def kill(self) -> None:
        """SIGKILL the server (no shutdown, no save)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self, outage: float) -> float:
        """``kill -9``, stay down for ``outage`` seconds, start again on the same port.

        Returns the wall-clock time at which the server answered again.
        """
        self.kill()
        time.sleep(outage)
        self.start()
        self.restarts += 1
        return time.time()

    def flushall(self) -> None:
        """``FLUSHALL``: every lease, counter, queue and unacked message is gone."""
        client = self.client()
        try:
            client.flushall()
        finally:
            client.close()


# -- PostgreSQL -------------------------------------------------------------------


class Database:
    """A PostgreSQL database of the soak's own, created fresh and dropped at the end."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or f"chaz_soak_{os.getpid()}"
        base = PG_ADMIN.rsplit("/", 1)[0]
        self.url = f"{base}/{self.name}"
        #: The SQLAlchemy URL chaz is configured with.
        self.sqlalchemy_url = self.url.replace("postgresql://", "postgresql+psycopg://", 1)

    def create(self) -> None:
        """Create the database (dropping a leftover of the same name)."""
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.name}"')

    @staticmethod
    def drop_stale() -> list[str]:
        """Drop the databases of earlier soaks that were killed before their clean-up.

        Only ``chaz_soak_<pid>`` databases whose process no longer exists.
        """
        dropped = []
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
            names = [
                str(n)
                for (n,) in admin.execute(
                    "SELECT datname FROM pg_database WHERE datname ~ '^chaz_soak_[0-9]+$'"
                )
            ]
            for name in names:
                pid = int(name.rsplit("_", 1)[1])
                try:
                    os.kill(pid, 0)
                    continue  # that soak still runs
                except ProcessLookupError:
                    pass
                except PermissionError:
                    continue
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                dropped.append(name)
        return dropped

    def drop(self) -> None:
        """Drop the database, ending whatever is still connected to it."""
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def monitor(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit connection that the PostgreSQL fault spares."""
        return psycopg.connect(
            self.url, autocommit=True, connect_timeout=5, application_name=MONITOR_APP
        )

    def terminate_backends(self) -> int:
        """``pg_terminate_backend`` every connection to this database but the monitor's.

        Runs on the admin database, so the admin connection is never among them.
        Returns how many backends were terminated.
        """
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid() "
                "AND coalesce(application_name, '') <> %s",
                (self.name, MONITOR_APP),
            ).fetchall()
        return sum(1 for (ok,) in rows if ok)


# -- workers ----------------------------------------------------------------------


class SoakWorker(WorkerProcess):
    """chaz's :class:`~chaz.stack.WorkerProcess`, started so that it dies with the soak."""

    def __init__(self, settings: Settings, *, role: str, **kwargs: object) -> None:
        super().__init__(settings, **kwargs)  # type: ignore[arg-type]
        #: ``worker`` (turns and reconciler passes) or ``beat``.
        self.role = role

    def command(self) -> list[str]:
        """A worker's command line, or for ``beat`` a standalone ``celery beat``.

        A standalone beat, as in docker-compose.yml: a worker's embedded
        ``--beat`` runs in a child process that outlives a SIGKILLed worker.
        """
        if self.role != "beat":
            return super().command()
        return [
            sys.executable, "-m", "celery", "-A", "workers", "beat",
            "--schedule", str(self.settings.home.resolve() / "celerybeat-schedule"),
            "--loglevel", self.loglevel,
        ]  # fmt: skip

    def start(self) -> SoakWorker:
        """Launch ``celery worker`` with a parent-death signal."""
        self.settings.home.resolve().mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **settings_env(self.settings)}
        out = self.log_file.open("ab") if self.log_file else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                _orphan_proof(self.command()),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if not isinstance(out, int):
                out.close()
        return self


@dataclass
class Exit:
    """A worker process that ended while the soak ran."""

    at: float  # wall clock
    name: str
    role: str
    pid: int
    returncode: int | None
    #: True when the soak killed it (a fault); False when it died on its own.
    expected: bool
    log_tail: str = ""


class Supervisor:
    """Keeps ``turn_workers`` worker processes and one beat process running.

    The workers consume chaz's queues (turns, control tasks, schedule fires),
    as ``chaz worker`` does in production; beat is a process of its own.

    Like systemd or Kubernetes would, it starts a new process ``restart_delay``
    seconds after one ends, and it records every exit: those the soak caused
    (:meth:`kill`) and those it did not (a crash the soak must report).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        turn_workers: int,
        concurrency: int,
        restart_delay: float = 1.0,
    ) -> None:
        self.settings = settings
        self.turn_workers = turn_workers
        self.concurrency = concurrency
        self.restart_delay = restart_delay
        self.exits: list[Exit] = []
        self._workers: list[SoakWorker] = []
        self._killed: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._serial = 0

    def _new(self, role: str) -> SoakWorker:
        self._serial += 1
        name = f"soak-{role}-{self._serial}"
        w = SoakWorker(
            self.settings,
            role=role,
            name=name,
            concurrency=self.concurrency,
            loglevel="WARNING",
            log_file=self.settings.home / f"{name}.log",
        )
        return w.start()

    def start(self) -> None:
        """Start every process and the supervising thread (returns at once)."""
        with self._lock:
            self._workers.append(self._new("beat"))
            for _ in range(self.turn_workers):
                self._workers.append(self._new("worker"))
        self._thread = threading.Thread(target=self._run, name="soak-supervisor", daemon=True)
        self._thread.start()

    def alive(self, role: str = "worker") -> list[SoakWorker]:
        """Running processes of ``role``."""
        with self._lock:
            return [w for w in self._workers if w.role == role and w.alive()]

    def kill(self, worker: SoakWorker) -> None:
        """SIGKILL ``worker``'s process group: a fault, restarted like a crash."""
        with self._lock:
            self._killed.add(worker.pid)
        worker.kill(signal.SIGKILL)

    def _run(self) -> None:
        # Relaunching happens on this thread, which lives until stop(): the
        # parent-death signal of a child follows the thread that started it.
        while not self._stop.wait(0.2):
            with self._lock:
                dead = [w for w in self._workers if not w.alive()]
            for w in dead:
                self._record(w)
                if self._stop.wait(self.restart_delay):
                    return
                with self._lock:
                    self._workers.remove(w)
                    self._workers.append(self._new(w.role))

    def _record(self, w: SoakWorker) -> None:
        assert w.proc is not None
        pid, rc = w.proc.pid, w.proc.returncode
        w.kill(signal.SIGKILL)  # what is left of its group (an embedded beat)
        with self._lock:
            expected = pid in self._killed
        tail = ""
        if not expected and w.log_file is not None:
            with contextlib.suppress(OSError):
                tail = w.log_file.read_text(errors="replace")[-1500:]
        self.exits.append(Exit(time.time(), w.name, w.role, pid, rc, expected, tail))

    def stop(self) -> None:
        """Stop relaunching, then stop every process (warm, then SIGKILL)."""
        self._stop.set()
        with self._lock:
            workers = list(self._workers)
        for w in workers:
            with contextlib.suppress(Exception):
                w.stop(timeout=10)
        if self._thread is not None:
            self._thread.join(timeout=15)
