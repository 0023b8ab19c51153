"""Acceptance: the real ``chaz`` command line.

Most commands run in this process (:func:`chaz_cli`, tests/support/cli.py),
which costs what the command does and not an interpreter's start; the
console script, the hostile input, ``chaz up`` and ``chaz tail`` run as
child processes.

Each test gives the CLI its own ``CHAZ_HOME`` (or the ``stack`` fixture's
settings) and no other ``CHAZ_*`` variable, so nothing leaks in from the
machine. stdout is a pipe here, so the CLI prints its plain-text form.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import chaz
from chaz.coord.redis import ensure_embedded, process_running, stop_embedded
from chaz.domain.jobs import JobStatus
from chaz.runtime.gates import open_gate
from chaz.settings import Settings
from chaz.stack import settings_env
from tests.conftest import free_port
from tests.support.cli import CLI, run_in_process
from tests.support.interruptible import PREFIX as INTERRUPTIBLE
from tests.support.metrics import scrape
from tests.support.stack import Stack

#: The CLI for a child the test stops with SIGINT (Ctrl-C), even when this run ignores it.
INTERRUPTIBLE_CLI = [*INTERRUPTIBLE, *CLI]
#: A timeline line in plain text: "HH:MM:SS #SEQ Label sender content".
LINE = re.compile(r"^\d\d:\d\d:\d\d #(\d+)\s+(\w+)\s+(\S+)\s+(.*)$")

COUNTER = {
    "id": "counter",
    "tools": ["word_count"],
    "script": [
        {"match": "^fail", "steps": [{"fail": "the model is down"}]},
        {"steps": [{"call": "word_count", "args": {"text": "{input}"}}, {"say": "{last_result}"}]},
    ],
}
#: A turn that holds at its session's gate until the test opens it: it surely
#: still runs while the CLI reads the queue, however loaded the machine. The
#: tool call after the gate is a step boundary, where a cancel takes effect.
GATED = chaz.AgentSpec(
    id="gated",
    tools=["clock"],
    script=[
        {
            "steps": [
                {"wait": "go-{session_id}", "timeout": 300},
                {"call": "clock"},
                {"say": "done"},
            ]
        }
    ],
)
#: COUNTER behind a gate: the test decides when the turn goes on.
GATED_COUNTER = {
    "id": "gated-counter",
    "tools": ["word_count"],
    "script": [
        {
            "steps": [
                {"wait": "go-{session_id}", "timeout": 300},
                {"call": "word_count", "args": {"text": "{input}"}},
                {"say": "{last_result}"},
            ]
        }
    ],
}


def cli_env(
    *, home: Path | None = None, settings: Settings | None = None, **extra: str
) -> dict[str, str]:
    """The machine's environment minus every CHAZ_* (and colour forcing), plus ours."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CHAZ_") and k not in ("FORCE_COLOR", "TTY_COMPATIBLE")
    }
    if settings is not None:
        env.update(settings_env(settings))
    if home is not None:
        env["CHAZ_HOME"] = str(home)
    env.update(extra)
    return env


def chaz_cli(
    *args: str, env: dict[str, str], stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``chaz ARGS`` to completion in this process, as a child would
    (tests/support/cli.py; ``CHAZ_TEST_CLI=process`` makes it a child)."""
    return run_in_process(*args, env=env, stdin=stdin, timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a run that must have succeeded (its output in the failure message)."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def timeline(text: str) -> list[tuple[int, str, str, str]]:
    """(seq, label, sender, content) of every timeline line in ``text``."""
    rows = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            rows.append((int(m[1]), m[2], m[3], m[4]))
    return rows


def redis_servers_of(home: Path) -> list[int]:
    """Pids of redis-server processes serving ``home``'s socket."""
    sock = str(home.resolve() / "redis.sock")
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "redis-server" in cmdline and sock in cmdline and process_running(int(proc.name)):
            pids.append(int(proc.name))
    return pids


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``predicate()`` until it is true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --------------------------------------------------------------------------- embedded, fresh home


def test_demo_on_a_fresh_home_prints_the_turn_and_cleans_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = subprocess.Popen(
        # --home rather than CHAZ_HOME: the flag must win over the default (./.chaz).
        [*CLI, "demo", "--home", str(home), "--message", "count these four words"],
        env=cli_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The pid file goes away when Redis stops, so note the pid while it runs.
    pidfile = home / "redis.pid"
    seen: list[int] = []

    def note_pid() -> bool:
        # The file may vanish between two reads once the demo is done.
        with contextlib.suppress(OSError, ValueError):
            seen.append(int(pidfile.read_text().strip()))
        return bool(seen) or proc.poll() is not None

    wait_for(note_pid, 120, "redis.pid")
    assert seen, "the demo ended before its Redis wrote a pid file"
    redis_pid = seen[0]
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, f"{stdout}\n{stderr}"
    assert "Traceback" not in stderr
    rows = timeline(stdout)
    assert [(label, sender) for _, label, sender, _ in rows] == [
        ("Message", "user:you"),
        ("Ack", "agent:demo"),
        ("ToolCall", "agent:demo"),
        ("ToolResult", "agent:demo"),
        ("Message", "agent:demo"),
    ]
    assert [seq for seq, *_ in rows] == [1, 2, 3, 4, 5]
    assert rows[0][3] == "count these four words"
    assert rows[2][3].startswith("word_count(")
    assert rows[3][3] == "word_count -> 4"
    assert rows[4][3] == "Your message has 4 words."
    # Nothing keeps running: the demo started Redis and the worker, and stopped both.
    assert not process_running(redis_pid)
    assert redis_servers_of(home) == []
    assert (home / "chaz.db").exists()
    # Everything the demo created is its owner's only: dirs 0700, files 0600.
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for path in home.rglob("*"):
        want = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.lstat().st_mode) == want, path


def test_demo_on_real_servers(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    servers = Stack.server(tmp_path / "home", pg_url, redis_url)  # emptied first
    try:
        env = cli_env(settings=servers.settings)
        rows = timeline(ok(chaz_cli("demo", "--message", "just three words", env=env)))
        assert [label for _, label, *_ in rows] == [
            "Message",
            "Ack",
            "ToolCall",
            "ToolResult",
            "Message",
        ]
        assert rows[-1][3] == "Your message has 3 words."
        # The servers were used: no embedded Redis, no SQLite file.
        assert not (tmp_path / "home" / "redis.pid").exists()
        assert not (tmp_path / "home" / "chaz.db").exists()
        assert [s.agent_id for s in servers.client.sessions.list()] == ["demo"]
    finally:
        servers.close()


def test_config_masks_passwords_in_queries_and_with_raw_separators(tmp_path: Path) -> None:
    env = cli_env(
        home=tmp_path / "home",
        CHAZ_DATABASE_URL="postgresql+psycopg://u@h/db?sslmode=require&password=q-s3cr3t",
        CHAZ_REDIS_URL="redis://:at@sign/sl:ash@h:6379/0",
    )
    for args in (["config"], ["config", "--json"]):
        text = ok(chaz_cli(*args, env=env))
        for secret in ("q-s3cr3t", "at@sign", "sign/sl", "sl:ash"):
            assert secret not in text, text
    data = json.loads(ok(chaz_cli("config", "--json", env=env)))
    assert data["database_url"] == "postgresql+psycopg://u@h/db?sslmode=require&password=****"
    assert data["redis_url"] == "redis://:****@h:6379/0"


def test_config_masks_secrets(tmp_path: Path) -> None:
    env = cli_env(
        home=tmp_path / "home",
        CHAZ_DATABASE_URL="postgresql+psycopg://u:pw-s3cr3t@h/db",
        CHAZ_REDIS_URL="redis://:hunter2@h:6379/0",
        CHAZ_OPENAI_API_KEY="sk-very-private",
    )
    text = ok(chaz_cli("config", env=env))
    assert "postgresql+psycopg://u:****@h/db" in text
    data = json.loads(ok(chaz_cli("config", "--json", env=env)))
    assert data["database_url"] == "postgresql+psycopg://u:****@h/db"
    assert data["redis_url"] == "redis://:****@h:6379/0"
    assert data["openai_api_key"] == "****"
    for secret in ("s3cr3t", "hunter2", "very-private"):
        assert secret not in text
        assert secret not in json.dumps(data)


def test_agents_put_from_stdin_and_ls_json(tmp_path: Path) -> None:
    env = cli_env(home=tmp_path / "home")
    out = ok(chaz_cli("agents", "put", "-", env=env, stdin=json.dumps(COUNTER)))
    assert "saved agent counter" in out
    # A list is validated as a whole before anything is written.
    bad_list = [{"id": "fine", "script": [{"steps": [{"echo": True}]}]}, {"id": "bad id!"}]
    r = chaz_cli("agents", "put", "-", env=env, stdin=json.dumps(bad_list))
    assert r.returncode == 2 and "error [request.invalid]" in r.stderr
    assert "stdin[1]" in r.stderr
    r = chaz_cli("agents", "put", "-", env=env, stdin="{not json")
    assert r.returncode == 2 and "not valid JSON" in r.stderr
    # Valid fields but an unknown tool in the second: the first is not saved either.
    unknown_tool = [
        {"id": "fine", "script": [{"steps": [{"echo": True}]}]},
        {"id": "tooled", "tools": ["no_such_tool"], "script": [{"steps": [{"echo": True}]}]},
    ]
    r = chaz_cli("agents", "put", "-", env=env, stdin=json.dumps(unknown_tool))
    assert r.returncode == 2 and "error [request.invalid]" in r.stderr, r.stderr
    assert "no_such_tool" in r.stderr
    saved = json.loads(ok(chaz_cli("agents", "ls", "--json", env=env)))
    assert [a["id"] for a in saved] == ["counter"]  # not "fine"
    r = chaz_cli("agents", "put", "-", env=env, stdin=json.dumps([COUNTER, COUNTER]))
    assert r.returncode == 2 and "appears twice" in r.stderr, r.stderr

    # --json works after the subcommand and before it.
    for args in (["agents", "ls", "--json"], ["--json", "agents", "ls"]):
        agents = json.loads(ok(chaz_cli(*args, env=env)))
        assert [a["id"] for a in agents] == ["counter"]
        assert agents[0]["tools"] == ["word_count"]


def test_errors_are_one_line_with_a_code_and_an_exit_status(tmp_path: Path) -> None:
    env = cli_env(home=tmp_path / "home")
    r = chaz_cli("sessions", "show", "nope", env=env)
    assert (r.returncode, r.stderr.strip()) == (2, "error [session.not_found]: no session 'nope'")
    r = chaz_cli("--json", "jobs", "show", "nope", env=env)
    assert r.returncode == 2
    assert json.loads(r.stderr)["error"]["code"] == "job.not_found"
    r = chaz_cli("sessions", "ls", "--no-such-option", env=env)
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr
    r = chaz_cli("config", env={**env, "CHAZ_LEASE_SECONDS": "-1"})
    assert r.returncode == 2 and "error [config.invalid]" in r.stderr
    # Client commands have migrated already: migrate again is a no-op that says where.
    assert re.search(r"is at revision \w+", ok(chaz_cli("migrate", env=env)))


def one_error(result: subprocess.CompletedProcess[Any], exit_code: int, code: str) -> str:
    """stderr of a run that failed as documented: the exit code, one line with the code."""
    stderr = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    assert "Traceback" not in stderr, stderr
    assert (result.returncode, stderr.count("\n")) == (exit_code, 1), stderr
    assert stderr.startswith(f"error [{code}]: "), stderr
    return stderr


def test_hostile_input_gets_a_code_never_a_traceback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = cli_env(home=home)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    one_error(chaz_cli("agents", "put", str(deep), env=env), 2, "request.invalid")
    not_utf8 = b'{"id": "x\xff\xfe", "script": [{"steps": [{"echo": true}]}]}'
    (tmp_path / "latin.json").write_bytes(not_utf8)
    err = one_error(chaz_cli("agents", "put", "latin.json", env=env), 2, "request.invalid")
    assert "not UTF-8" in err
    r = subprocess.run(
        [*CLI, "agents", "put", "-"], env=env, cwd=tmp_path, input=not_utf8, capture_output=True
    )
    assert "not UTF-8" in one_error(r, 2, "request.invalid")
    # An argument that is not UTF-8 (Python decodes it to lone surrogates).
    r = subprocess.run(
        [*CLI, "sessions", "show", b"\xff\xfe"], env=env, cwd=tmp_path, capture_output=True
    )
    one_error(r, 2, "request.invalid")
    assert [a.id for a in chaz.Client(Settings(_env_file=None, home=home)).agents.list()] == []

    for url in (
        "postgresql://u:pw-s3cr3t@h:notaport/db",
        "::garbage",
        "nosuchdb://u:pw-s3cr3t@h/d",
    ):
        for args in (["sessions", "ls"], ["migrate"], ["worker"], ["up"]):
            err = one_error(
                chaz_cli(*args, env={**env, "CHAZ_DATABASE_URL": url}), 2, "config.invalid"
            )
            assert "CHAZ_DATABASE_URL" in err and "s3cr3t" not in err
    for url in ("garbage", "redis://:pw-s3cr3t@h:notaport/0", "http://h/"):
        for args in (["sessions", "ls"], ["send", "s", "hi"], ["up"]):
            err = one_error(
                chaz_cli(*args, env={**env, "CHAZ_REDIS_URL": url}), 2, "config.invalid"
            )
            assert "CHAZ_REDIS_URL" in err and "s3cr3t" not in err


# --------------------------------------------------------------------------- against a stack


def test_sessions_send_jobs_and_the_queue_against_a_worker(stack: Stack) -> None:
    stack.workers(1)
    client = stack.client
    client.agents.put(chaz.AgentSpec.model_validate(COUNTER))
    env = cli_env(settings=stack.settings)

    sid = ok(chaz_cli("sessions", "new", "counter", "--name", "talk", env=env)).strip()
    assert client.sessions.get("talk").id == sid
    reply = chaz_cli(
        "send", "talk", "three little words", "--wait", "--timeout", "120", env=env, timeout=180
    )
    assert ok(reply).strip() == "3", stack.logs()

    # A bad sender changes nothing and says why.
    before = client.sessions.get(sid).last_seq
    r = chaz_cli("send", sid, "hi", "--sender", "bogus", env=env)
    assert r.returncode == 2
    assert r.stderr.startswith("error [request.invalid]: "), r.stderr
    assert "Traceback" not in r.stderr
    assert client.sessions.get(sid).last_seq == before

    # A turn that fails: the Error entry is the answer, exit status 1.
    r = chaz_cli("send", sid, "fail now", "--wait", "--timeout", "120", env=env, timeout=180)
    assert r.returncode == 1 and "error [model.error]: the model is down" in r.stderr

    jobs = json.loads(ok(chaz_cli("jobs", "ls", "--json", "--session", sid, env=env)))
    assert [j["status"] for j in jobs] == ["failed", "succeeded"]  # newest first
    assert all(j["session_id"] == sid for j in jobs)
    # A job shows what its turn used (docs/runtime.md#per-turn-budgets).
    shown = json.loads(ok(chaz_cli("jobs", "show", jobs[1]["id"], "--json", env=env)))
    assert shown["usage"]["runtime_seconds"] > 0
    assert "usage" in ok(chaz_cli("jobs", "show", jobs[1]["id"], env=env))

    # The queue: one turn runs, the ones admitted after it wait, in admission order.
    # The running turn holds at its gate until the end of the test.
    client.agents.put(GATED)
    s = client.sessions.create("gated")
    posted = [client.sessions.post(s.id, f"m{i}", sender="user:you") for i in range(3)]
    job_ids = [e.job_id or "" for e in posted]
    # Its Ack is written when the turn has started.
    next(e for e in client.sessions.watch(s.id, after=posted[0].seq, timeout=60) if e.type == "ack")
    assert client.jobs.get(job_ids[0]).status is JobStatus.RUNNING
    text = ok(chaz_cli("sessions", "show", s.id, env=env))
    assert "queue (1 running, 2 waiting)" in text, text
    queue = text.split("queue (1 running, 2 waiting)", 1)[1].splitlines()
    rows_q = [line.split() for line in queue if line[:1].isdigit()]
    # TRIGGER is the entry that admitted the job (the worker's Ack may land in between).
    assert [tuple(r[:4]) for r in rows_q] == [
        ("1", "running", job_ids[0], f"#{posted[0].seq}"),
        ("2", "queued", job_ids[1], f"#{posted[1].seq}"),
        ("3", "queued", job_ids[2], f"#{posted[2].seq}"),
    ]

    last = client.jobs.get(job_ids[2])
    outcome = json.loads(
        ok(
            chaz_cli(
                "jobs",
                "cancel",
                last.id,
                "--expected-version",
                str(last.version),
                "--command-id",
                "cli-1",
                "--reason",
                "changed my mind",
                "--json",
                env=env,
            )
        )
    )
    assert (outcome["status"], outcome["previous"], outcome["changed"]) == (
        "cancelled",
        "queued",
        True,
    )
    assert client.jobs.get(last.id).status is JobStatus.CANCELLED
    stale = chaz_cli("jobs", "cancel", job_ids[1], "--expected-version", "99", env=env)
    assert stale.returncode == 1 and "error [conflict.version]" in stale.stderr
    # Cancel the rest: the running turn stops at its next step boundary once
    # the gate lets it reach one.
    client.jobs.cancel(job_ids[1])
    assert client.jobs.cancel(job_ids[0])["status"] == "stopping"
    stack.open_gate(f"go-{s.id}")
    assert client.jobs.wait(job_ids[0], timeout=60).status is JobStatus.CANCELLED


# --------------------------------------------------------------------------- long-running commands


def _counter_session(home: Path, spec: dict[str, Any] = COUNTER) -> str:
    """A session of ``spec`` in ``home``, made through the API (the CLI is tested above)."""
    settings = Settings(_env_file=None, home=home, database_url=None, redis_url=None)
    with chaz.Client(settings) as client:
        client.agents.put(chaz.AgentSpec.model_validate(spec))
        return client.sessions.create(spec["id"]).id


class LineReader:
    """The lines a child process prints, read by a thread so that a test can wait on them."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
        """Collect lines up to the first one that satisfies ``predicate``; return it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"timed out waiting for {what}: {self.lines}") from None
            if line is None:
                raise AssertionError(f"the stream ended before {what}: {self.lines}")
            self.lines.append(line)
            if predicate(line):
                return line

    def rest(self, timeout: float) -> str:
        """Every remaining line, once the stream has ended."""
        self._thread.join(timeout)
        while not self._queue.empty():
            line = self._queue.get()
            if line is not None:
                self.lines.append(line)
        return "".join(self.lines)


def test_up_serves_until_sigint_and_tail_follows(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = cli_env(home=home)
    log = tmp_path / "up.out"
    with log.open("w") as out:
        up = subprocess.Popen(
            [*INTERRUPTIBLE_CLI, "up", "--concurrency", "2"],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    tail: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: "Press Ctrl-C" in log.read_text() or up.poll() is not None, 120, "up")
        assert up.poll() is None, log.read_text()
        redis_pid = int((home / "redis.pid").read_text())
        sid = _counter_session(home, GATED_COUNTER)
        # The turn starts (Message, Ack) and holds at its gate.
        ok(chaz_cli("send", sid, "one two", env=env))

        tail = subprocess.Popen(
            [*INTERRUPTIBLE_CLI, "tail", sid],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = LineReader(tail.stdout)  # type: ignore[arg-type]
        # The history first: tail is running once it printed the Ack.
        lines.until(lambda line: " Ack " in line, 120, "the Ack in the tail")
        # What the turn writes from now on reaches the tail live.
        open_gate(home, f"go-{sid}")
        lines.until(
            lambda line: " agent:gated-counter " in line and " Message " in line,
            120,
            "the reply in the tail",
        )
        tail.send_signal(signal.SIGINT)
        assert tail.wait(60) == 130
        stdout = lines.rest(10)
        stderr = tail.stderr.read()  # type: ignore[union-attr]
        assert "Traceback" not in stderr, stderr
        rows = timeline(stdout)
        assert [label for _, label, *_ in rows] == [
            "Message",
            "Ack",
            "ToolCall",
            "ToolResult",
            "Message",
        ]
        assert rows[-1][3] == "2"

        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
        assert not process_running(redis_pid)
    finally:
        # A failed assertion must leave neither the tail nor `up` behind.
        if tail is not None and tail.poll() is None:
            tail.kill()
            tail.wait()
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        stop_embedded(Settings(_env_file=None, home=home))


def test_worker_execs_celery_on_chaz_queues(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = cli_env(home=home)
    cmd = ok(chaz_cli("worker", "--dry-run", "--concurrency", "3", "--", "-O", "fair", env=env))
    assert "-m workers worker --pool threads --concurrency 3" in cmd
    assert "--queues chaz.turns,chaz.control" in cmd
    assert cmd.strip().endswith("-O fair")

    port = free_port()
    worker = subprocess.Popen(
        [
            *CLI,
            "worker",
            "--concurrency",
            "2",
            "--loglevel",
            "WARNING",
            "--metrics-port",
            str(port),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        sid = _counter_session(home)
        reply = chaz_cli(
            "send", sid, "a b c d e", "--wait", "--timeout", "120", env=env, timeout=180
        )
        assert ok(reply).strip() == "5"
        # --metrics-port reached the worker: its endpoint counts the turn
        # (just after the reply commits, so the count is waited for).
        succeeded = ("chaz_turns_ended_total", (("outcome", "succeeded"),))
        deadline = time.monotonic() + 30
        while scrape(port).get(succeeded) != 1:
            assert time.monotonic() < deadline, scrape(port)
            time.sleep(0.05)
        # exec kept the pid: the process we started *is* the celery worker.
        assert "\0-m\0workers\0worker\0" in Path(f"/proc/{worker.pid}/cmdline").read_text()
        worker.terminate()
        _, stderr = worker.communicate(timeout=20)
        assert "exec: " in stderr
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        stop_embedded(Settings(_env_file=None, home=home))


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of the process group ``pgid``."""
    members = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(proc.name))
    return members


def _start_up(
    home: Path, tmp_path: Path, name: str
) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """``chaz up --json`` (beat on) started and ready; its first line, parsed."""
    up = subprocess.Popen(
        [*INTERRUPTIBLE_CLI, "up", "--json", "--concurrency", "1"],
        env=cli_env(home=home),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / f"{name}.err").open("w"),
        text=True,
        start_new_session=True,
    )
    lines = LineReader(up.stdout)  # type: ignore[arg-type]
    banner = json.loads(lines.until(lambda line: '"status": "up"' in line, 120, "chaz up"))
    return up, banner


def test_kill_9_of_up_takes_its_workers_and_its_redis_along(tmp_path: Path) -> None:
    home = tmp_path / "home"
    up, banner = _start_up(home, tmp_path, "up")
    worker_pid = banner["workers"][0]["pid"]
    try:
        redis_pid = int((home / "redis.pid").read_text())
        # The worker's group holds the worker and its beat child.
        wait_for(lambda: len(group_members(worker_pid)) >= 2, 120, "the worker's beat child")
        members = group_members(worker_pid)

        # A second copy on the same home is refused while the first runs, and
        # touches nothing of it.
        second = chaz_cli("up", env=cli_env(home=home))
        assert second.returncode == 1, second.stderr
        assert second.stderr.startswith("error [conflict.already_running]: "), second.stderr
        assert f"pid {up.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert up.poll() is None and process_running(redis_pid)
        assert all(process_running(pid) for pid in members)

        up.kill()
        up.wait()
        wait_for(
            lambda: not group_members(worker_pid) and not process_running(redis_pid),
            120,
            "the worker, its beat and Redis to stop",
        )
        assert redis_servers_of(home) == []
        # The lock went with its holder: up starts again on this home.
        up, _ = _start_up(home, tmp_path, "up-again")
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        for pid in group_members(worker_pid):
            os.kill(pid, signal.SIGKILL)
        stop_embedded(Settings(_env_file=None, home=home))


def test_kill_9_of_up_leaves_a_redis_it_did_not_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = Settings(_env_file=None, home=home, database_url=None, redis_url=None)
    assert ensure_embedded(settings)  # this test's Redis, shared with up
    redis_pid = int((home / "redis.pid").read_text())
    up, banner = _start_up(home, tmp_path, "up")
    worker_pid = banner["workers"][0]["pid"]
    try:
        up.kill()
        up.wait()
        wait_for(lambda: not group_members(worker_pid), 120, "the worker to stop")
        assert process_running(redis_pid)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        for pid in group_members(worker_pid):
            os.kill(pid, signal.SIGKILL)
        stop_embedded(settings)
