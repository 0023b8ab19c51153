"""A real ``pgbouncer`` process in transaction pooling mode, in front of the test PostgreSQL.

Each one gets a fresh directory (config, auth file, log) and a free port, so
nothing is shared between runs. As root, pgbouncer refuses to start unless
told which user to become (``-u``): the directory is then made readable by
that user, the one the machine's PostgreSQL runs as.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from sqlalchemy.engine import make_url

#: Server connections pgbouncer opens per database and user: far below
#: PostgreSQL's max_connections, whatever the number of clients.
POOL_SIZE = 20
#: The user pgbouncer runs as when started by root.
RUN_AS = "postgres"


def find() -> str | None:
    """The pgbouncer executable, or None when it is not installed."""
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer process; :attr:`url` is ``pg_url`` routed through it."""

    def __init__(self, executable: str, pg_url: str, *, pool_size: int = POOL_SIZE) -> None:
        target = make_url(pg_url)
        self.executable = executable
        self.port = _free_port()
        self.pool_size = pool_size
        self.dir = Path(tempfile.mkdtemp(prefix="chaz-pgbouncer-"))
        self.url = target.set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False
        )
        self.log = self.dir / "pgbouncer.log"
        user = target.username or "postgres"
        (self.dir / "users.txt").write_text(f'"{user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    # Any database name, forwarded to the same name on the server.
                    f"* = host={target.host or '127.0.0.1'} port={target.port or 5432}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "pool_mode = transaction",
                    "auth_type = trust",
                    f"auth_file = {self.dir / 'users.txt'}",
                    "max_client_conn = 2000",
                    f"default_pool_size = {pool_size}",
                    f"max_db_connections = {pool_size}",
                    "reserve_pool_size = 0",
                    # A client waits for a server connection, never fails for want of one.
                    "query_wait_timeout = 120",
                    "ignore_startup_parameters = extra_float_digits",
                    f"logfile = {self.log}",
                    "",
                ]
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> PgBouncer:
        """Launch it and wait until it accepts connections."""
        cmd = [self.executable, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:
            entry = pwd.getpwnam(RUN_AS)
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            cmd += ["-u", RUN_AS]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        # Waiting on the outcome (the port answers), bounded so a broken
        # config fails with its log instead of hanging.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start:\n{self.log_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen on {self.port}:\n{self.log_text()}")

    def log_text(self) -> str:
        """The end of its log, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the process and remove its directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
