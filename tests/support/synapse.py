"""A real Matrix homeserver (Synapse) for the bridge's tests (docs/bridges.md).

Synapse comes from the package index into a virtualenv of its own (its pins
would clash with chaz's), made on first use under ``$CHAZ_TEST_CACHE/synapse``
(default ``~/.cache/chaz-test/synapse``) and kept between runs; ``.ci/run``
makes it before the tests (``python -m tests.support.synapse``), so CI never
skips. Each :func:`running_synapse` generates a config of its own (SQLite, one
client listener on 127.0.0.1 and a free port, no federation or key servers,
rate limits raised unless a test wants them), and registers users with
the admin registration API and the generated shared secret.

:class:`MatrixUser` is the test's own Matrix client (a person in a room),
plain ``httpx`` against the client-server API, independent of the bridge's.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tests.conftest import IN_CI, free_port

#: The Synapse releases the tests run against (a major version: the
#: client-server API they use is stable across it).
SYNAPSE_REQUIREMENT = "matrix-synapse>=1.100,<2"
#: How long Synapse may take to start on a loaded machine.
START_WAIT = 120
#: Rate limits for tests that send bursts: high enough never to bite.
UNLIMITED = {"per_second": 10_000, "burst_count": 10_000}
RATE_LIMITS = (
    "rc_message",
    "rc_registration",
    "rc_joins",
    "rc_joins_per_room",
    "rc_invites",
    "rc_room_creation",
    "rc_login",
    "rc_admin_redaction",
)


def cache_dir() -> Path:
    """Where the tests keep what they install once: ``$CHAZ_TEST_CACHE``, else
    ``~/.cache/chaz-test``."""
    given = os.environ.get("CHAZ_TEST_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "chaz-test"


def synapse_python() -> Path:
    """The Python of Synapse's own virtualenv, made (once, under a lock) if missing.

    Raises ``RuntimeError`` if it cannot be installed (no index, no network)."""
    root = cache_dir() / "synapse"
    venv = root / "venv"
    python = venv / "bin" / "python"
    # The marker is written last: a venv whose install was cut off is made again.
    done = root / "installed"
    if done.exists():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():  # another process made it while we waited
            return python
        shutil.rmtree(venv, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "-q", SYNAPSE_REQUIREMENT],
        ]
        for step in steps:
            run = subprocess.run(step, capture_output=True, text=True, timeout=900)
            if run.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise RuntimeError(f"{' '.join(step[:4])} failed: {run.stderr[-2000:]}")
        done.write_text(SYNAPSE_REQUIREMENT + "\n")
    return python


def synapse_or_skip() -> Path:
    """:func:`synapse_python`, or skip the test where it cannot be installed
    (never in CI, where ``.ci/run`` made it first: there it fails)."""
    import pytest

    try:
        return synapse_python()
    except RuntimeError as exc:
        if IN_CI:
            raise
        pytest.skip(f"Synapse cannot be installed here: {exc}")


@dataclass
class Synapse:
    """A homeserver: its URL, server name and registration secret; it can be
    stopped and started again on the same port and database."""

    url: str
    server_name: str
    shared_secret: str
    python: Path
    home: Path
    configs: list[Path]
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it and wait until it answers."""
        with (self.home / "synapse.out").open("a") as log:
            args = [a for c in self.configs for a in ("-c", str(c))]
            self.process = subprocess.Popen(
                [str(self.python), "-m", "synapse.app.homeserver", *args],
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait_until_up(self.url, self.process, self.home)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL if it hangs)."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def register(self, localpart: str, *, admin: bool = False) -> MatrixUser:
        """A new user, registered with the shared secret through the admin API
        (what ``register_new_matrix_user`` does, without its process start of a
        few seconds per user), and its access token."""
        password = uuid.uuid4().hex
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(endpoint, timeout=30).json()["nonce"]
        # Synapse's MAC: HMAC-SHA1 over the NUL-joined nonce, user, password, role.
        signed = "\x00".join([nonce, localpart, password, "admin" if admin else "notadmin"])
        mac = hmac.new(self.shared_secret.encode(), signed.encode(), hashlib.sha1)
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        answer = httpx.post(endpoint, json=body, timeout=60)
        answer.raise_for_status()
        found = answer.json()
        return MatrixUser(self.url, str(found["user_id"]), str(found["access_token"]), password)


@dataclass
class MatrixUser:
    """A person's Matrix client: a few client-server API calls over ``httpx``."""

    url: str
    user_id: str
    token: str
    password: str

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """One authenticated request; the answer's JSON (an error status raises).
        A 429 is retried after the homeserver's ``retry_after_ms``, as a client does."""
        while True:
            answer = httpx.request(
                method,
                f"{self.url}/_matrix/client/v3{path}",
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=60,
                **kw,
            )
            if answer.status_code != 429:
                answer.raise_for_status()
                return answer.json()
            time.sleep(answer.json().get("retry_after_ms", 1000) / 1000)

    def create_room(self, *invite: str) -> str:
        """A new private room with ``invite`` invited; its id."""
        body = {"preset": "private_chat", "invite": list(invite)}
        return str(self.call("POST", "/createRoom", json=body)["room_id"])

    def join(self, room: str) -> None:
        """Join ``room`` (after an invite)."""
        self.call("POST", f"/join/{quote(room)}", json={})

    def say(self, room: str, text: str) -> str:
        """Send ``text`` to ``room``; the event's id."""
        txn = uuid.uuid4().hex
        body = {"msgtype": "m.text", "body": text}
        path = f"/rooms/{quote(room)}/send/m.room.message/{txn}"
        return str(self.call("PUT", path, json=body)["event_id"])

    def messages(self, room: str) -> list[dict[str, Any]]:
        """Every ``m.room.message`` event of ``room``, oldest first (as a client
        scrolling back through it sees them)."""
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"dir": "b", "limit": 100}
        while True:
            page = self.call("GET", f"/rooms/{quote(room)}/messages", params=params)
            found.extend(e for e in page["chunk"] if e["type"] == "m.room.message")
            if "end" not in page or not page["chunk"]:
                return list(reversed(found))
            params["from"] = page["end"]

    def said_by(self, room: str, sender: str) -> list[str]:
        """The bodies of ``sender``'s messages in ``room``, oldest first."""
        return [e["content"].get("body", "") for e in self.messages(room) if e["sender"] == sender]


@contextmanager
def running_synapse(home: Path, *, rate_limits: dict[str, Any] | None = None) -> Iterator[Synapse]:
    """A Synapse on 127.0.0.1 and a free port, with a config and SQLite database
    generated under ``home``; stopped (SIGTERM) on exit. Rate limits are raised
    out of reach, but for those ``rate_limits`` sets (``{"rc_message": {...}}``)."""
    python = synapse_python()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "homeserver.yaml"
    subprocess.run(
        [
            str(python),
            "-m",
            "synapse.app.homeserver",
            "--generate-config",
            "--server-name",
            "localhost",
            "--config-path",
            str(config),
            "--data-directory",
            str(home / "data"),
            "--report-stats=no",
        ],
        check=True,
        capture_output=True,
        cwd=home,
        timeout=120,
    )
    port = free_port()
    secret = uuid.uuid4().hex
    overrides: dict[str, Any] = {
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(home / "data" / "homeserver.db")}},
        "registration_shared_secret": secret,
        "enable_registration": False,
        "enable_registration_without_verification": True,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "report_stats": False,
        "presence": {"enabled": False},
    }
    overrides.update({name: UNLIMITED for name in RATE_LIMITS})
    overrides["rc_login"] = {k: UNLIMITED for k in ("address", "account", "failed_attempts")}
    overrides["rc_joins"] = {"local": UNLIMITED, "remote": UNLIMITED}
    overrides["rc_invites"] = {k: UNLIMITED for k in ("per_room", "per_user", "per_issuer")}
    overrides.update(rate_limits or {})
    # JSON is YAML: a second config file whose top-level keys replace the generated ones.
    extra = home / "overrides.yaml"
    extra.write_text(json.dumps(overrides, indent=2))
    url = f"http://127.0.0.1:{port}"
    synapse = Synapse(url, "localhost", secret, python, home, [config, extra])
    try:
        synapse.start()
        yield synapse
    finally:
        synapse.stop()


def _wait_until_up(url: str, process: subprocess.Popen[bytes], home: Path) -> None:
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out = (home / "synapse.out").read_text()[-3000:]
            raise RuntimeError(f"Synapse exited ({process.returncode}): {out}")
        try:
            if httpx.get(f"{url}/_matrix/client/versions", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"Synapse did not answer within {START_WAIT} s")


if __name__ == "__main__":
    # `.ci/run` prepares the virtualenv before the tests, so they never skip in CI.
    started = time.monotonic()
    print(f"Synapse: {synapse_python()} ({time.monotonic() - started:.1f} s)")
