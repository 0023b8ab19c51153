"""A chaz stack for tests: settings, a client, and real worker processes."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import redis
from sqlalchemy import text

import chaz
from chaz.coord.redis import ensure_embedded, stop_embedded
from chaz.plumbing.files import private_dir
from chaz.runtime.gates import open_gate
from chaz.services import Services
from chaz.settings import Settings
from chaz.stack import Watchdog, WorkerProcess
from chaz.store import Store
from chaz.store.db import make_engine
from chaz.store.migrate import upgrade
from tests.support import rabbitmq as rabbitmq_support
from tests.support.redis_cluster import Cluster

#: Short leases and a fast reconciler, so recovery tests take seconds.
FAST = {"lease_seconds": 3.0, "reconcile_seconds": 1.0}
T = TypeVar("T")
#: Whether the running test may start workers: set per test by tests/conftest.py from
#: its ``fleet`` mark, so that ``pytest -m "not fleet"`` never starts a worker process.
FLEET_ALLOWED = False
#: How long a worker may take to boot (imports, mostly) before the test fails: a bound
#: for a broken start, wide enough for a machine busy with other runs and xdist peers.
BOOT_TIMEOUT = 120.0
#: This test process's watchdog (:func:`watchdog`), once a worker was started.
_WATCHDOG: Watchdog | None = None


def watchdog() -> Watchdog:
    """A watchdog that stops every worker this test process started and did not
    stop, should the process die without stopping them: a pytest run killed by
    a CI timeout, an xdist process ended by ``-x``. Without it their workers
    live on, consuming the Redis database whose claim the next run takes over
    (tests/support/redis_claims.py), and take that run's turns."""
    global _WATCHDOG
    if _WATCHDOG is None:
        _WATCHDOG = Watchdog()
        atexit.register(_WATCHDOG.release)
    return _WATCHDOG


TABLES = (
    "webhooks",
    "webhook_secrets",
    "api_keys",
    "projects",
    "approvals",
    "schedule_fires",
    "schedules",
    "todos",
    "artifacts",
    "events",
    "deliveries",
    "commands",
    "jobs",
    "entries",
    "sessions",
    "agents",
)


#: An embedded database migrated to the newest revision once per process
#: (:func:`_copy_migrated_sqlite`).
_SQLITE_TEMPLATE: Path | None = None


def _copy_migrated_sqlite(database: Path) -> None:
    """Put a copy of an embedded database at the newest revision at ``database``.

    Running the migrations on each test's fresh SQLite file cost the no-worker
    tier about half a second per test (more under load): this process
    migrates one file once and each embedded stack starts from a copy, which
    the client's migration check finds current. The migrations themselves
    are tested on fresh databases by tests/integration/test_migrations.py.
    """
    global _SQLITE_TEMPLATE
    if database.exists():
        return
    if _SQLITE_TEMPLATE is None:
        where = tempfile.mkdtemp(prefix="chaz-test-schema-")
        atexit.register(shutil.rmtree, where, ignore_errors=True)
        template = Path(where) / "chaz.db"
        engine = make_engine(f"sqlite:///{template.as_posix()}")
        try:
            upgrade(engine)
        finally:
            engine.dispose()
        # The last connection's close checkpoints the WAL into the file.
        assert not Path(f"{template}-wal").exists(), "the template's WAL was not checkpointed"
        _SQLITE_TEMPLATE = template
    private_dir(database.parent)
    shutil.copyfile(_SQLITE_TEMPLATE, database)
    os.chmod(database, 0o600)  # as chaz.plumbing.files creates it


class Stack:
    """One test's chaz installation."""

    def __init__(
        self,
        kind: str,
        settings: Settings,
        *,
        owns_servers: bool = True,
        vhost: str | None = None,
    ) -> None:
        self.kind = kind
        self.settings = settings
        #: The RabbitMQ vhost this stack made (``rabbitmq``), deleted at :meth:`close`.
        self._vhost = vhost
        self._workers: list[WorkerProcess] = []
        self._client: chaz.Client | None = None
        #: False for a :meth:`tenant`: its close leaves the embedded Redis running.
        self._owns_servers = owns_servers
        #: The cluster's nodes, on the ``cluster`` stack (to kill, restart, flush).
        self.nodes: Cluster | None = None

    @classmethod
    def embedded(cls, home: Path, **overrides: Any) -> Stack:
        """SQLite and an embedded Redis under ``home``."""
        # Explicit Nones: CHAZ_* variables of the shell must not leak into tests.
        settings = Settings(
            _env_file=None,
            home=home,
            database_url=None,
            redis_url=None,
            **{**FAST, **overrides},
        )
        ensure_embedded(settings)
        if settings.database_url is None:
            _copy_migrated_sqlite(settings.home.resolve() / "chaz.db")
        return cls("embedded", settings)

    @classmethod
    def server(
        cls, home: Path, pg_url: str, redis_url: str, *, rabbitmq: bool = False, **overrides: Any
    ) -> Stack:
        """The machine's PostgreSQL and Redis, emptied first; with ``rabbitmq``,
        the machine's RabbitMQ as the broker, in a fresh vhost of its own
        (kind ``rabbitmq``, docs/brokers.md#tests)."""
        vhost, broker_url = rabbitmq_support.new_vhost() if rabbitmq else (None, None)
        settings = Settings(
            _env_file=None,
            home=home,
            database_url=pg_url,
            redis_url=redis_url,
            broker_url=broker_url,
            **{**FAST, **overrides},
        )
        # The settings' pool: through PgBouncer, no server-side prepared statements.
        store = Store(pg_url, Services(settings).pool)
        upgrade(store.engine)
        with store.engine.begin() as conn:
            # DELETE, in TABLES' order (every foreign key's rows before the
            # rows it points to): a TRUNCATE of the 16 tables took about 0.6 s
            # on the loaded machine, these a few milliseconds.
            for table in TABLES:
                conn.execute(text(f"DELETE FROM {table}"))
        store.close()
        redis.Redis.from_url(redis_url).flushdb()
        return cls("rabbitmq" if rabbitmq else "server", settings, vhost=vhost)

    @classmethod
    def cluster(
        cls, home: Path, pg_url: str, nodes: Cluster, *, broker_url: str, **overrides: Any
    ) -> Stack:
        """PostgreSQL, a Redis Cluster as coordination and a plain Redis as the
        broker (a cluster cannot be one), all emptied first."""
        stack = cls.server(home, pg_url, broker_url, **overrides)
        nodes.flush_all()
        settings = stack.settings.model_copy(
            update={"redis_url": nodes.url, "redis_cluster": True, "broker_url": broker_url}
        )
        out = cls("cluster", settings)
        out.nodes = nodes
        return out

    @property
    def client(self) -> chaz.Client:
        """A producer client (migrates on first use)."""
        if self._client is None:
            self._client = chaz.Client(self.settings)
        return self._client

    def tenant(self) -> Stack:
        """This stack's servers and running workers, for one test in a project of its own.

        Its ``client`` acts in a new project, so the test's sessions, names,
        jobs, approvals and listings are its own (nothing crosses projects) while
        it uses the workers another fixture started; agents are global, so the
        tests sharing a fleet put the same spec under one id. Workers the test
        starts itself are its own and stop at its :meth:`close`.
        """
        view = Stack(self.kind, self.settings, owns_servers=False)
        view.nodes = self.nodes
        view._client = chaz.Client(
            self.settings, migrate=False, project=f"t-{uuid.uuid4().hex[:12]}"
        )
        return view

    def workers(
        self,
        n: int = 1,
        *,
        concurrency: int = 4,
        beat: bool = False,
        queues: str = "chaz.turns,chaz.control,chaz.schedules",
        metrics_ports: Sequence[int] = (),
        settings: Settings | None = None,
    ) -> list[WorkerProcess]:
        """Start ``n`` real ``celery worker`` processes and wait until they consume.

        ``metrics_ports``: none, or one per worker, where it serves its metrics;
        ``settings``: the workers' own (the stack's, changed), if not the stack's."""
        assert not metrics_ports or len(metrics_ports) == n, "one metrics port per worker"
        assert FLEET_ALLOWED, (
            "this test starts worker processes: mark it @pytest.mark.fleet"
            " (every test under tests/acceptance is marked already)"
        )
        client = self.client
        started = []
        for i in range(n):
            log = self.settings.home / f"worker-{len(self._workers)}.log"
            self.settings.home.mkdir(parents=True, exist_ok=True)
            started.append(
                WorkerProcess(
                    settings or self.settings,
                    concurrency=concurrency,
                    beat=beat,
                    log_file=log,
                    loglevel="INFO",
                    queues=queues,
                    metrics_port=metrics_ports[i] if metrics_ports else None,
                ).start()
            )
            watchdog().guard_group(started[-1].pid)
            # Stopped by close() even if a start below fails.
            self._workers.append(started[-1])
        for w in started:
            w.wait_ready(client, timeout=BOOT_TIMEOUT)
        return started

    def wait_for(self, predicate: Callable[[], T], timeout: float, what: str) -> T:
        """``predicate()`` once it is truthy; fails with the workers' logs after ``timeout``.

        A bound on an outcome, not a pace: the step waited for is one the
        test caused, and the bound only keeps a broken run from hanging.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def open_gate(self, name: str) -> None:
        """Let every turn waiting at gate ``name`` (a scripted ``wait`` step) go on."""
        open_gate(self.settings.home, name)

    def housekeeper(self) -> WorkerProcess:
        """A process that runs beat and the reconciler only (it takes no turns)."""
        return self.workers(1, concurrency=1, beat=True, queues="chaz.control")[0]

    def logs(self) -> str:
        """Every worker's log, for failure messages."""
        out = []
        for path in sorted(self.settings.home.glob("worker-*.log")):
            out.append(f"==== {path.name}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(out)

    def close(self) -> None:
        """Stop workers, close the client, stop an embedded Redis."""
        for w in self._workers:
            pgid = w.pid if w.proc is not None else None
            w.stop(timeout=10)
            if pgid is not None:
                watchdog().forget_group(pgid)
        if self._client is not None:
            self._client.close()
        if self.kind == "embedded" and self._owns_servers:
            stop_embedded(self.settings)
        if self._vhost is not None and self._owns_servers:
            rabbitmq_support.delete_vhost(self._vhost)
