"""The ``chaz`` command line.

Every command is a thin layer over the producer API (:class:`chaz.Client`) or
over the embedded stack (:func:`chaz.embedded`), so what the CLI does a program
can do too. Output adapts to where it goes:

* on a terminal: rich tables, a coloured timeline and spinners while waiting;
* into a pipe or a file: plain, column-aligned text with no colour;
* with ``--json`` (accepted before or after the subcommand): JSON documents,
  and one JSON object per line for the commands that stream entries
  (``demo``, ``tail``).

Exit codes: 0 success; 1 a failure (an Error entry, a timeout, an unreachable
backend, a conflict); 2 a bad request (invalid input, an unknown id, a usage
error); 130 interrupted by Ctrl-C. A :class:`~chaz.errors.ChazError` is
reported as ``error [code]: message`` on stderr, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import pydantic
import redis
import sqlalchemy.exc
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from chaz import __version__
from chaz.client import Client
from chaz.coord.redis import ensure_embedded, stop_embedded
from chaz.domain.agents import AgentSpec
from chaz.domain.entries import Entry, EntryType, agent_sender
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.errors import (
    BackendUnavailable,
    ChazError,
    ConfigError,
    NotFound,
    Timeout,
    ValidationError,
)
from chaz.settings import Settings, mask_url
from chaz.stack import WorkerProcess, embedded

#: The agent ``chaz demo`` registers: one built-in tool call, then a reply.
DEMO_AGENT = AgentSpec(
    id="demo",
    system_prompt="You count the words of every message.",
    tools=["word_count", "clock"],
    script=[
        {
            "steps": [
                {"call": "word_count", "args": {"text": "{input}"}},
                {"say": "Your message has {last_result} words."},
            ]
        }
    ],
)
DEMO_MESSAGE = "Hello chaz, please count the words in this message."
#: The queues chaz's tasks are routed to (see celeryconfig.task_routes).
QUEUES = "chaz.turns,chaz.control"

# Exit codes (see the module docstring).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

_STYLES: dict[EntryType, str] = {
    EntryType.MESSAGE: "bold",
    EntryType.DIRECTIVE: "magenta",
    EntryType.TOOL_CALL: "yellow",
    EntryType.TOOL_RESULT: "blue",
    EntryType.ACK: "dim",
    EntryType.ERROR: "bold red",
    EntryType.SUMMARY: "cyan",
    EntryType.APPROVAL_REQUEST: "bold magenta",
    EntryType.APPROVAL_DECISION: "magenta",
}


# --------------------------------------------------------------------------- output


def entry_label(entry_type: EntryType) -> str:
    """The seed's name of an entry type: ``tool_call`` -> ``ToolCall``."""
    return "".join(part.capitalize() for part in entry_type.value.split("_"))


def entry_summary(entry: Entry) -> str:
    """One readable line (or a few) for an entry's content."""
    if entry.type is EntryType.TOOL_CALL:
        try:
            call = json.loads(entry.content)
            return f"{call['name']}({call['arguments']})"
        except (ValueError, TypeError, KeyError):
            return entry.content
    if entry.type is EntryType.TOOL_RESULT:
        tool = entry.metadata.get("tool")
        text = f"{tool} -> {entry.content}" if tool else entry.content
        return f"{text}  (error)" if entry.metadata.get("is_error") else text
    return entry.content


def _local(ts: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    # Stored times are UTC; people read their own clock.
    return ts.astimezone().strftime(fmt) if ts is not None else "-"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return _local(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, default=str) if value else "-"
    return str(value)


class Output:
    """Where and how results are written: rich on a TTY, plain in a pipe, or JSON."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.console = Console(highlight=False)
        self.err_console = Console(stderr=True, highlight=False)
        # Rich decides what a terminal is (it also honours FORCE_COLOR / TTY_COMPATIBLE).
        self.fancy = not json_mode and self.console.is_terminal

    # Plain text is written with print(): rich would wrap it at 80 columns.
    def _plain(self, text: str = "") -> None:
        print(text, flush=True)

    def json(self, obj: Any, *, stream: bool = False) -> None:
        """One JSON document (pretty), or one compact line of a stream."""
        if stream:
            print(json.dumps(obj, default=str, ensure_ascii=False), flush=True)
        else:
            print(json.dumps(obj, default=str, ensure_ascii=False, indent=2), flush=True)

    def line(self, text: str, style: str = "") -> None:
        """A line of text (styled on a TTY)."""
        if self.fancy:
            self.console.print(Text(text, style=style))
        else:
            self._plain(text)

    def note(self, text: str) -> None:
        """Progress or hints for people: stderr, so stdout stays parseable."""
        if self.json_mode:
            return
        if self.fancy:
            self.err_console.print(Text(text, style="dim"))
        else:
            print(text, file=sys.stderr, flush=True)

    def error(self, exc: ChazError) -> None:
        """Report a ChazError on stderr."""
        self.failure(exc.code, exc.message, exc.to_dict())

    def failure(self, code: str, message: str, payload: dict[str, Any]) -> None:
        """Report a failure with a stable code: ``error [code]: message`` on stderr."""
        if self.json_mode:
            print(json.dumps({"error": payload}, default=str), file=sys.stderr, flush=True)
        elif self.fancy:
            self.err_console.print(
                Text.assemble(("error ", "bold red"), (f"[{code}]", "red"), f": {message}")
            )
        else:
            print(f"error [{code}]: {message}", file=sys.stderr, flush=True)

    def error_entry(self, entry: Entry) -> None:
        """Report an Error entry (a failed turn) like any other failure."""
        code = str(entry.metadata.get("code") or "turn.error")
        message = entry.content
        # Error entries read "code: message"; the code is already in the prefix.
        if message.startswith(f"{code}: "):
            message = message[len(code) + 2 :]
        payload = {
            "code": code,
            "message": message,
            "retryable": bool(entry.metadata.get("retryable", False)),
            "details": {"session_id": entry.session_id, "seq": entry.seq, "job_id": entry.job_id},
        }
        self.failure(code, message, payload)

    @contextmanager
    def status(self, message: str, *, announce: bool = False) -> Iterator[None]:
        """A spinner on a TTY while a long wait lasts; ``announce`` also tells a pipe."""
        if self.fancy:
            with self.console.status(Text(message)):
                yield
            return
        if announce:
            self.note(message)
        yield

    def entry(self, entry: Entry) -> None:
        """One timeline line for an entry (a JSON line with ``--json``)."""
        if self.json_mode:
            self.json(entry.model_dump(mode="json"), stream=True)
            return
        summary = entry_summary(entry)
        when = _local(entry.created_at, "%H:%M:%S")
        label = entry_label(entry.type)
        if not self.fancy:
            head = f"{when} #{entry.seq:<3} {label:<10} {entry.sender:<14} "
            lines = summary.splitlines() or [""]
            self._plain(head + lines[0])
            for more in lines[1:]:
                self._plain(" " * len(head) + more)
            return
        style = _STYLES.get(entry.type, "")
        if entry.type is EntryType.TOOL_RESULT and entry.metadata.get("is_error"):
            style = "red"
        if entry.type is EntryType.MESSAGE and entry.sender.startswith("agent:"):
            style = "bold green"
        sender_style = "cyan" if entry.sender.startswith("user:") else "magenta"
        self.console.print(
            Text.assemble(
                (f"{when} ", "dim"),
                (f"#{entry.seq:<3} ", "dim"),
                (f"{label:<10} ", style),
                (f"{entry.sender:<14} ", sender_style),
                (summary, style if entry.type is not EntryType.MESSAGE else ""),
            )
        )

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows under a header: a rich table on a TTY, aligned columns in a pipe."""
        cells = [[_cell(v) for v in row] for row in rows]
        if self.fancy:
            table = Table(title=title or None, box=box.SIMPLE_HEAD, title_justify="left")
            for col in columns:
                table.add_column(col, overflow="fold")
            for row in cells:
                table.add_row(*(Text(c) for c in row))
            self.console.print(table)
            return
        # A newline inside a cell would break the columns for line-based tools.
        cells = [[c.replace("\n", " ") for c in row] for row in cells]
        widths = [max([len(col)] + [len(row[i]) for row in cells]) for i, col in enumerate(columns)]
        self._plain("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
        for row in cells:
            self._plain("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())

    def fields(self, title: str, pairs: Sequence[tuple[str, Any]]) -> None:
        """Key/value pairs."""
        if self.fancy:
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold")
            grid.add_column(overflow="fold")
            for key, value in pairs:
                grid.add_row(key, Text(_cell(value)))
            if title:
                self.console.print(Text(title, style="bold underline"))
            self.console.print(grid)
            return
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            self._plain(f"{key.ljust(width)}  {_cell(value)}")


# --------------------------------------------------------------------------- context


def load_settings(home: str | None) -> Settings:
    """The effective settings (``CHAZ_*``, ``.env``), with ``--home`` taking precedence."""
    try:
        return Settings(home=Path(home)) if home else Settings()
    except pydantic.ValidationError as exc:
        raise ConfigError(f"invalid settings: {_pydantic_message(exc)}") from exc


def _pydantic_message(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "value"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class Context:
    """What a command works with: its arguments, the output, settings and a client."""

    def __init__(self, args: argparse.Namespace, out: Output) -> None:
        self.args = args
        self.out = out
        self._settings: Settings | None = None
        self._client: Client | None = None

    @property
    def settings(self) -> Settings:
        """Settings, read on first use (``chaz --help`` must not need valid ones)."""
        if self._settings is None:
            self._settings = load_settings(getattr(self.args, "home", None))
        return self._settings

    @property
    def client(self) -> Client:
        """A producer client (migrates the database on first use)."""
        if self._client is None:
            self._client = Client(self.settings)
        return self._client

    def close(self) -> None:
        """Release the client's connections."""
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


class Interrupts:
    """SIGINT/SIGTERM as one KeyboardInterrupt, never inside a shielded block.

    The long-running commands start and stop child processes (workers, the
    embedded Redis). An interrupt in the middle of starting or stopping one
    would leak it, so those steps run under :meth:`shield`: a signal that
    arrives there is held and raised when the step is done. After the first
    interrupt, further signals are ignored, so a second Ctrl-C cannot abort
    the cleanup the first one started.
    """

    def __init__(self, *signums: int) -> None:
        self._signums = signums
        self._previous: dict[int, Any] = {}
        self._depth = 0
        self._pending = False
        self._fired = False

    def __enter__(self) -> Interrupts:
        for s in self._signums:
            previous = signal.getsignal(s)
            # A signal the parent set to be ignored (a shell's background job
            # ignores SIGINT) stays ignored: that was the parent's decision.
            if previous is not signal.SIG_IGN:
                self._previous[s] = previous
                signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        if self._fired:
            return
        if self._depth:
            self._pending = True
            return
        self._fired = True
        raise KeyboardInterrupt

    @contextmanager
    def shield(self) -> Iterator[None]:
        """Hold interrupts until the block is done, then raise a held one."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        # Reached only when the block succeeded: a real error is never masked.
        if not self._depth and self._pending and not self._fired:
            self._fired = True
            raise KeyboardInterrupt


@contextmanager
def _watching(entries: Iterator[Entry]) -> Iterator[Iterator[Entry]]:
    """Close a watch when the caller stops early, releasing its Redis subscription now."""
    try:
        yield entries
    finally:
        close = getattr(entries, "close", None)
        if close is not None:
            close()


def _is_reply(entry: Entry, job_id: str | None, me: str) -> bool:
    """Whether ``entry`` ends the turn ``job_id``: the agent's Message or an Error."""
    if job_id is not None and entry.job_id != job_id:
        return False
    return entry.type is EntryType.ERROR or (entry.type is EntryType.MESSAGE and entry.sender == me)


# --------------------------------------------------------------------------- commands


def cmd_demo(ctx: Context) -> int:
    """Start the embedded stack, run one scripted turn and print it as it happens."""
    args, out = ctx.args, ctx.out
    settings = ctx.settings
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
        client.agents.put(DEMO_AGENT)
        session = client.sessions.create(DEMO_AGENT.id)
        out.note(f"session {session.id} of agent {DEMO_AGENT.id!r}:")
        posted = client.sessions.post(session.id, args.message, sender="user:you")
        me = agent_sender(DEMO_AGENT.id)
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
    args, out = ctx.args, ctx.out
    settings = ctx.settings
    home = settings.home.resolve()
    concurrency = args.concurrency or settings.worker_concurrency
    started_redis = False
    workers: list[WorkerProcess] = []
    with Interrupts(signal.SIGINT, signal.SIGTERM) as interrupts:
        try:
            with out.status(f"starting chaz in {home}...", announce=True):
                home.mkdir(parents=True, exist_ok=True)
                # Shielded: what was started must be recorded, or nothing stops it.
                if settings.embedded_redis:
                    with interrupts.shield():
                        started_redis = ensure_embedded(settings)
                client = ctx.client  # migrates the database
                for i in range(args.workers):
                    worker = WorkerProcess(
                        settings,
                        concurrency=concurrency,
                        # One beat is enough; its schedule fires are safe twice anyway.
                        beat=not args.no_beat and i == 0,
                        loglevel=args.loglevel,
                        log_file=home / f"worker-{i + 1}.log",
                    )
                    with interrupts.shield():
                        workers.append(worker.start())
                for w in workers:
                    w.wait_ready(client)
            _up_banner(ctx, workers, concurrency)
            # Waiting in short sleeps keeps Ctrl-C responsive and notices a dead worker.
            while all(w.alive() for w in workers):
                time.sleep(0.5)
            dead = next(w for w in workers if not w.alive())
            code = dead.proc.returncode if dead.proc is not None else None
            raise BackendUnavailable(
                f"worker {dead.name} exited (status {code}); see its log in {home}"
            )
        except KeyboardInterrupt:
            # Ctrl-C / SIGTERM is how `up` is meant to end: a clean stop is success.
            out.note("stopping...")
            return EXIT_OK
        finally:
            with out.status("stopping workers..."), interrupts.shield():
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
            if out.json_mode:
                out.json({"status": "stopped"}, stream=True)


def _up_banner(ctx: Context, workers: Sequence[WorkerProcess], concurrency: int) -> None:
    settings, out = ctx.settings, ctx.out
    home = settings.home.resolve()
    info = {
        "status": "up",
        "home": str(home),
        "database": mask_url(settings.effective_database_url()),
        "redis": mask_url(settings.effective_redis_url()),
        "workers": [{"name": w.name, "pid": w.pid, "log": str(w.log_file)} for w in workers],
        "concurrency": concurrency,
        "beat": not ctx.args.no_beat,
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


def worker_command(
    concurrency: int, *, beat: bool, loglevel: str, home: Path, extra: Sequence[str]
) -> list[str]:
    """The ``celery worker`` command line ``chaz worker`` runs (extra args go last, so win)."""
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers",
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--queues",
        QUEUES,
        "--loglevel",
        loglevel,
        # The pid survives exec, so the node name is unique on this host.
        "--hostname",
        f"chaz-{os.getpid()}@%h",
        # Gossip and mingle are broker chatter chaz does not use (no revokes,
        # no worker-to-worker sync); Flower reads task events instead.
        "--without-gossip",
        "--without-mingle",
    ]
    if beat:
        cmd += ["--beat", "--schedule", str(home / "celerybeat-schedule")]
    return cmd + list(extra)


def cmd_worker(ctx: Context) -> int:
    """Replace this process with a ``celery worker`` consuming chaz's queues."""
    args, out = ctx.args, ctx.out
    settings = ctx.settings
    home = settings.home.resolve()
    extra = list(args.extra)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    cmd = worker_command(
        args.concurrency or settings.worker_concurrency,
        beat=args.beat,
        loglevel=args.loglevel,
        home=home,
        extra=extra,
    )
    if args.dry_run:
        if out.json_mode:
            out.json({"command": cmd})
        else:
            out.line(shlex.join(cmd))
        return EXIT_OK
    home.mkdir(parents=True, exist_ok=True)
    if settings.embedded_redis:
        # The worker's broker is this Redis: it must answer before celery connects.
        ensure_embedded(settings)
    _migrate(settings)
    env = dict(os.environ)
    # --home must reach celeryconfig and the tasks, which read CHAZ_HOME themselves.
    env["CHAZ_HOME"] = str(home)
    out.note(f"exec: {shlex.join(cmd)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, env)


def _migrate(settings: Settings) -> str | None:
    from chaz.store import Store
    from chaz.store.migrate import current_revision, upgrade

    store = Store(settings.effective_database_url())
    try:
        upgrade(store.engine)
        return current_revision(store.engine)
    finally:
        store.close()


def cmd_migrate(ctx: Context) -> int:
    """Bring the database schema up to date (safe to run again, and concurrently)."""
    settings, out = ctx.settings, ctx.out
    with out.status("migrating..."):
        revision = _migrate(settings)
    database = mask_url(settings.effective_database_url())
    if out.json_mode:
        out.json({"database": database, "revision": revision})
    else:
        out.line(f"database {database} is at revision {revision}")
    return EXIT_OK


def cmd_config(ctx: Context) -> int:
    """Print the effective settings with passwords and keys masked."""
    values = ctx.settings.masked()
    if ctx.out.json_mode:
        ctx.out.json(values)
    else:
        ctx.out.fields("settings", sorted(values.items()))
    return EXIT_OK


def _read_agents(source: str) -> tuple[list[AgentSpec], bool]:
    """AgentSpecs from a JSON file (or ``-``, stdin); True when it held a list."""
    name = "stdin" if source == "-" else source
    try:
        raw = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{name} is not valid JSON: {exc}") from exc
    many = isinstance(data, list)
    items = data if many else [data]
    specs = []
    for i, item in enumerate(items):
        try:
            specs.append(AgentSpec.model_validate(item))
        except pydantic.ValidationError as exc:
            where = f"{name}[{i}]" if many else name
            raise ValidationError(
                f"{where} is not a valid agent: {_pydantic_message(exc)}"
            ) from exc
    return specs, many


def cmd_agents_put(ctx: Context) -> int:
    """Create or replace agents from JSON (one object or a list)."""
    specs, many = _read_agents(ctx.args.file)
    # Every spec was validated before the first write: a bad file changes nothing.
    saved = [ctx.client.agents.put(spec) for spec in specs]
    out = ctx.out
    if out.json_mode:
        dumped = [s.model_dump(mode="json") for s in saved]
        out.json(dumped if many else dumped[0])
        return EXIT_OK
    for spec in saved:
        tools = ", ".join(spec.tools) or "no tools"
        out.line(f"saved agent {spec.id} ({spec.model}; {tools})")
    return EXIT_OK


def cmd_agents_ls(ctx: Context) -> int:
    """List saved agents."""
    agents = ctx.client.agents.list()
    if ctx.out.json_mode:
        ctx.out.json([a.model_dump(mode="json") for a in agents])
        return EXIT_OK
    ctx.out.table(
        "agents",
        ["ID", "MODEL", "TOOLS", "SYSTEM PROMPT"],
        [[a.id, a.model, a.tools, _shorten(a.system_prompt, 50)] for a in agents],
    )
    return EXIT_OK


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _session_rows(sessions: Sequence[Session]) -> list[list[Any]]:
    return [[s.id, s.name, s.agent_id, s.last_seq, s.created_at] for s in sessions]


def cmd_sessions_ls(ctx: Context) -> int:
    """List sessions, newest first."""
    sessions = ctx.client.sessions.list(agent_id=ctx.args.agent, limit=ctx.args.limit)
    if ctx.out.json_mode:
        ctx.out.json([s.model_dump(mode="json") for s in sessions])
        return EXIT_OK
    ctx.out.table(
        "sessions", ["ID", "NAME", "AGENT", "ENTRIES", "CREATED"], _session_rows(sessions)
    )
    return EXIT_OK


def cmd_sessions_new(ctx: Context) -> int:
    """Create a session; in a pipe, print only its id (for ``S=$(chaz sessions new A)``)."""
    session = ctx.client.sessions.create(ctx.args.agent, name=ctx.args.name)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
    elif out.fancy:
        name = f" {session.name!r}" if session.name else ""
        out.line(f"created session {session.id}{name} of agent {session.agent_id}", "green")
    else:
        out.line(session.id)
    return EXIT_OK


def cmd_sessions_show(ctx: Context) -> int:
    """A session's details, its timeline, and its queue (what runs, what waits)."""
    client, out = ctx.client, ctx.out
    session = client.sessions.get(ctx.args.session)
    after = 0 if ctx.args.last is None else max(0, session.last_seq - ctx.args.last)
    # Annotated: Client's methods named ``list`` confuse type checkers about list[...].
    entries: list[Entry] = client.sessions.entries(session.id, after=after)
    queue: list[Job] = client.sessions.queue(session.id)
    if out.json_mode:
        out.json(
            {
                "session": session.model_dump(mode="json"),
                "entries": [e.model_dump(mode="json") for e in entries],
                "queue": [j.model_dump(mode="json") for j in queue],
            }
        )
        return EXIT_OK
    out.fields(
        "session",
        [
            ("id", session.id),
            ("name", session.name),
            ("agent", session.agent_id),
            ("tree", session.tree_id),
            ("depth", session.call_depth),
            ("entries", session.last_seq),
            ("created", session.created_at),
        ],
    )
    out.line("")
    out.line(f"entries ({len(entries)} of {session.last_seq})", "bold underline")
    for entry in entries:
        out.entry(entry)
    out.line("")
    running = sum(1 for j in queue if j.status is not JobStatus.QUEUED)
    waiting = len(queue) - running
    out.line(f"queue ({running} running, {waiting} waiting)", "bold underline")
    if queue:
        seqs = {e.id: e.seq for e in entries}
        out.table(
            "",
            ["#", "STATUS", "JOB", "TRIGGER", "ADMITTED", "STARTED"],
            [
                [
                    pos,
                    j.status.value,
                    j.id,
                    f"#{seqs[j.trigger_entry_id]}"
                    if j.trigger_entry_id in seqs
                    else j.trigger_entry_id,
                    j.created_at,
                    j.started_at,
                ]
                for pos, j in enumerate(queue, start=1)
            ],
        )
    else:
        out.line("empty: nothing runs or waits")
    return EXIT_OK


def cmd_send(ctx: Context) -> int:
    """Post an entry; with ``--wait``, print the agent's reply (exit 1 on an Error)."""
    args, client, out = ctx.args, ctx.client, ctx.out
    entry = client.sessions.post(
        args.session,
        args.text,
        sender=args.sender,
        type=args.type,
        idempotency_key=args.idempotency_key,
    )
    if not args.wait:
        if out.json_mode:
            out.json(entry.model_dump(mode="json"))
        else:
            out.entry(entry)
            if entry.job_id:
                out.note(f"admitted job {entry.job_id}")
        return EXIT_OK
    if out.fancy:
        out.entry(entry)
    with out.status(f"waiting for the reply (up to {args.timeout:g}s)..."):
        reply = client.sessions.wait_for_reply(
            entry.session_id, after=entry.seq, timeout=args.timeout
        )
    failed = reply.type is EntryType.ERROR
    if out.json_mode:
        out.json({"entry": entry.model_dump(mode="json"), "reply": reply.model_dump(mode="json")})
    elif out.fancy:
        out.entry(reply)
    elif failed:
        out.error_entry(reply)
    else:
        # In a pipe the reply's text alone is the most useful: REPLY=$(chaz send ... --wait).
        out.line(reply.content)
    return EXIT_FAILURE if failed else EXIT_OK


def cmd_tail(ctx: Context) -> int:
    """Print a session's entries as they land, until Ctrl-C (or ``--timeout``)."""
    args, client, out = ctx.args, ctx.client, ctx.out
    session = client.sessions.get(args.session)
    after = args.after if args.after is not None else max(0, session.last_seq - args.lines)
    with (
        out.status(f"following {session.id} (Ctrl-C to stop)"),
        _watching(client.sessions.watch(session.id, after=after, timeout=args.timeout)) as entries,
    ):
        for entry in entries:
            out.entry(entry)
    return EXIT_OK


def _job_rows(jobs: Sequence[Job]) -> list[list[Any]]:
    return [
        [
            j.id,
            j.session_id,
            j.ordinal,
            j.status.value,
            j.version,
            j.attempts,
            j.created_at,
            j.finished_at,
        ]
        for j in jobs
    ]


def cmd_jobs_ls(ctx: Context) -> int:
    """List jobs, optionally of one session or in one state."""
    args = ctx.args
    jobs = ctx.client.jobs.list(
        session_id=args.session, status=args.status, limit=args.limit, newest_first=True
    )
    if ctx.out.json_mode:
        ctx.out.json([j.model_dump(mode="json") for j in jobs])
        return EXIT_OK
    ctx.out.table(
        "jobs",
        ["ID", "SESSION", "ORDINAL", "STATUS", "VERSION", "ATTEMPTS", "CREATED", "FINISHED"],
        _job_rows(jobs),
    )
    return EXIT_OK


def cmd_jobs_show(ctx: Context) -> int:
    """Every field of one job."""
    job = ctx.client.jobs.get(ctx.args.job)
    if ctx.out.json_mode:
        ctx.out.json(job.model_dump(mode="json"))
    else:
        ctx.out.fields(f"job {job.id}", list(job.model_dump().items()))
    return EXIT_OK


def cmd_jobs_cancel(ctx: Context) -> int:
    """The versioned ``execution.cancel`` command; prints its outcome."""
    args = ctx.args
    outcome = ctx.client.jobs.cancel(
        args.job,
        expected_version=args.expected_version,
        command_id=args.command_id,
        reason=args.reason,
    )
    if ctx.out.json_mode:
        ctx.out.json(outcome)
    else:
        ctx.out.fields("execution.cancel", list(outcome.items()))
    return EXIT_OK


# --------------------------------------------------------------------------- parser


def _show_help(_ctx: Context) -> int:
    return EXIT_USAGE  # replaced by _help_of(parser) once the parser exists


def _help_of(parser: argparse.ArgumentParser) -> Callable[[Context], int]:
    def show(_ctx: Context) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return show


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``chaz`` and all its subcommands."""
    # --json and --home work before or after the subcommand. SUPPRESS keeps a
    # subcommand from resetting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON (JSON lines for streams) instead of text",
    )
    common.add_argument(
        "--home",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="data directory of the embedded default (overrides CHAZ_HOME)",
    )

    parser = argparse.ArgumentParser(
        prog="chaz",
        description="chaz: a distributed runtime for LLM agent sessions.",
        epilog="Settings come from CHAZ_* variables (see `chaz config`). "
        "Exit codes: 0 ok, 1 failure, 2 bad request, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"chaz {__version__}")
    parser.add_argument(
        "--json",
        action="store_true",
        default=False,
        help="print JSON (JSON lines for streams) instead of text",
    )
    parser.add_argument(
        "--home",
        metavar="DIR",
        default=None,
        help="data directory of the embedded default (overrides CHAZ_HOME)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(
        parent: Any, name: str, func: Callable[[Context], int], help: str, **kw: Any
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(
            name, help=help, description=help, parents=[common], **kw
        )
        p.set_defaults(func=func)
        return p

    def group(name: str, help: str) -> Any:
        # A command with subcommands; alone, it shows its help.
        p = add(sub, name, _show_help, help)
        p.set_defaults(func=_help_of(p))
        return p.add_subparsers(dest=f"{name}_command", metavar="COMMAND")

    p = add(sub, "demo", cmd_demo, "run one agent turn on the embedded stack, live")
    p.add_argument("--message", default=DEMO_MESSAGE, help="what user:you says")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the reply")

    p = add(sub, "up", cmd_up, "run workers and beat in the foreground until Ctrl-C")
    p.add_argument(
        "--workers", type=int, default=1, metavar="N", help="worker processes (default 1)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="turn threads per worker (default CHAZ_WORKER_CONCURRENCY)",
    )
    p.add_argument("--no-beat", action="store_true", help="do not run the periodic reconciler")
    p.add_argument("--loglevel", default="INFO", help="worker log level (logs go to files)")

    p = add(
        sub,
        "worker",
        cmd_worker,
        "exec a celery worker on chaz's queues (extra args go to celery)",
        allow_abbrev=False,  # an unknown option is celery's, never a prefix of ours
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="threads (default CHAZ_WORKER_CONCURRENCY)",
    )
    p.add_argument("--beat", action="store_true", help="also run beat in this worker")
    p.add_argument("--loglevel", default="INFO", help="celery log level (default INFO)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the celery command instead of running it"
    )

    add(sub, "migrate", cmd_migrate, "bring the database schema up to date")
    add(sub, "config", cmd_config, "print the effective settings (secrets masked)")

    agents_sub = group("agents", "saved agents")
    p = add(agents_sub, "put", cmd_agents_put, "create or replace agents from JSON")
    p.add_argument("file", metavar="FILE", help="a JSON AgentSpec (or a list of them); - = stdin")
    add(agents_sub, "ls", cmd_agents_ls, "list agents")

    sessions_sub = group("sessions", "sessions: create, list, inspect")
    p = add(sessions_sub, "ls", cmd_sessions_ls, "list sessions, newest first")
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = add(sessions_sub, "new", cmd_sessions_new, "create a session")
    p.add_argument("agent", metavar="AGENT", help="the agent id")
    p.add_argument("--name", help="a unique label (addressable like the id)")
    p = add(sessions_sub, "show", cmd_sessions_show, "a session, its entries and its queue")
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("--last", type=int, default=None, metavar="N", help="only the last N entries")

    p = add(sub, "send", cmd_send, "post a message or directive into a session")
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument("text", metavar="TEXT", help="the content")
    p.add_argument("--sender", default="user:you", help="user:NAME, agent:NAME or system:NAME")
    p.add_argument(
        "--type",
        choices=[EntryType.MESSAGE.value, EntryType.DIRECTIVE.value],
        default=EntryType.MESSAGE.value,
        help="entry type (default message)",
    )
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="a repeated key returns the first entry instead of a new one",
    )
    p.add_argument("--wait", action="store_true", help="wait for and print the reply")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds --wait waits (default 60)")

    p = add(sub, "tail", cmd_tail, "print a session's entries live until Ctrl-C")
    p.add_argument("session", metavar="SESSION", help="session id or name")
    p.add_argument(
        "--after",
        type=int,
        default=None,
        metavar="N",
        help="start after entry #N (0: the whole history)",
    )
    p.add_argument(
        "-n",
        "--lines",
        type=int,
        default=10,
        metavar="N",
        help="without --after, first show the last N entries (default 10)",
    )
    p.add_argument(
        "--timeout", type=float, default=None, help="stop after this many seconds (default: never)"
    )

    jobs_sub = group("jobs", "jobs (admitted turns): list, inspect, cancel")
    p = add(jobs_sub, "ls", cmd_jobs_ls, "list jobs, oldest first")
    p.add_argument("--session", help="only this session's jobs (id or name)")
    p.add_argument("--status", choices=[s.value for s in JobStatus], help="only jobs in this state")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p = add(jobs_sub, "show", cmd_jobs_show, "one job")
    p.add_argument("job", metavar="ID", help="the job (execution) id")
    p = add(jobs_sub, "cancel", cmd_jobs_cancel, "cancel a job (execution.cancel)")
    p.add_argument("job", metavar="ID", help="the job (execution) id")
    p.add_argument(
        "--expected-version",
        type=int,
        metavar="V",
        help="refuse (conflict.version) unless the job is at this version",
    )
    p.add_argument(
        "--command-id", metavar="C", help="idempotency key: a repeated id returns the first outcome"
    )
    p.add_argument("--reason", default="", help="why; recorded with the cancellation")
    return parser


# --------------------------------------------------------------------------- entry points


def exit_code(exc: ChazError) -> int:
    """2 for a request that can never succeed as written, 1 for other failures."""
    return EXIT_USAGE if isinstance(exc, ValidationError | NotFound | ConfigError) else EXIT_FAILURE


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "worker":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        # argparse exits on --help (0) and on usage errors (2); run() returns instead.
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.extra = extra
    out = Output(json_mode=bool(args.json))
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    ctx = Context(args, out)
    try:
        return int(args.func(ctx))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except ChazError as exc:
        out.error(exc)
        return exit_code(exc)
    except pydantic.ValidationError as exc:
        # Input that reached a model unchecked (a malformed id, a bad limit).
        err = ValidationError(_pydantic_message(exc))
        out.error(err)
        return exit_code(err)
    except (redis.RedisError, sqlalchemy.exc.OperationalError) as exc:
        # An unreachable server is the environment's fault, not a bug: no traceback.
        busy = BackendUnavailable(f"{type(exc).__name__}: {exc}".splitlines()[0])
        out.error(busy)
        return exit_code(busy)
    except BrokenPipeError:
        # `chaz tail S | head`: the reader left. Point stdout at /dev/null so
        # the interpreter's final flush does not complain a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        # A file or directory chaz needs (CHAZ_HOME, an agent file) is unusable.
        failure = ChazError(str(exc))
        out.error(failure)
        return exit_code(failure)
    finally:
        # Closing connections must not hide the command's own outcome.
        with suppress(Exception):
            ctx.close()


def main() -> None:
    """Console-script entry point: ``chaz ...``."""
    try:
        code = run()
    except KeyboardInterrupt:
        # Ctrl-C while run() was cleaning up, after its own handler.
        code = EXIT_INTERRUPTED
    # The command is over: a late Ctrl-C must not turn its outcome into a
    # traceback while the interpreter shuts down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    main()
