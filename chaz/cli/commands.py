"""The CLI commands, one function each, over the producer API and the embedded stack."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from chaz.cli.context import (
    Context,
    Interrupts,
    _is_reply,
    _watching,
    pydantic_message,
)
from chaz.cli.output import (
    EXIT_FAILURE,
    EXIT_OK,
)
from chaz.domain.agents import AgentSpec
from chaz.domain.entries import Entry, EntryType, agent_sender
from chaz.domain.events import Event
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.errors import (
    AlreadyRunning,
    BackendUnavailable,
    Timeout,
    ValidationError,
)
from chaz.settings import Settings, mask_url

if TYPE_CHECKING:
    from chaz.stack import WorkerProcess

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


def cmd_demo(ctx: Context) -> int:
    """Start the embedded stack, run one scripted turn and print it as it happens."""
    from chaz.stack import embedded

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
    from chaz.coord.redis import ensure_embedded, stop_embedded
    from chaz.stack import Watchdog, WorkerProcess, embedded_redis_pid

    args, out = ctx.args, ctx.out
    settings = ctx.server_settings
    home = settings.home.resolve()
    concurrency = args.concurrency or settings.worker_concurrency
    started_redis = False
    workers: list[WorkerProcess] = []
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
                    )
                    with interrupts.shield():
                        workers.append(worker.start())
                        watchdog.guard_group(worker.pid)
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
                watchdog.release()
            if out.json_mode:
                out.json({"status": "stopped"}, stream=True)


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


def cmd_worker(ctx: Context) -> int:
    """Replace this process with a ``celery worker`` consuming chaz's queues."""
    from chaz.coord.redis import ensure_embedded
    from chaz.stack import worker_command

    args, out = ctx.args, ctx.out
    settings = ctx.server_settings
    home = settings.home.resolve()
    extra = list(args.extra)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    cmd = worker_command(
        args.concurrency or settings.worker_concurrency,
        # The pid survives exec, so the node name is unique on this host.
        name=f"chaz-{os.getpid()}",
        loglevel=args.loglevel,
        beat_schedule=home / "celerybeat-schedule" if args.beat else None,
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
    # Every second before the exec delays the worker's first turn (and each
    # scale-up): the revision, which needs Alembic, is not read.
    _migrate(settings, report=False)
    env = dict(os.environ)
    # --home must reach chaz.celery_settings and the tasks, which read CHAZ_HOME themselves.
    env["CHAZ_HOME"] = str(home)
    if args.metrics_port is not None:
        # The tasks module starts the endpoint when the worker is ready (chaz.metrics).
        env["CHAZ_METRICS_PORT"] = str(args.metrics_port)
    out.note(f"exec: {shlex.join(cmd)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, env)


def _migrate(settings: Settings, *, report: bool = True) -> str | None:
    """Upgrade the schema; with ``report``, return the revision it is at."""
    from chaz.store.migrate import current_revision, is_current_file, upgrade

    url = settings.effective_database_url()
    if not report and is_current_file(url):
        return None  # the embedded database is current: no SQLAlchemy needed
    # An engine, not a Store: the repository's models would load for nothing.
    from chaz.store.db import make_engine

    engine = make_engine(url)
    try:
        upgrade(engine)
        return current_revision(engine) if report else None
    finally:
        engine.dispose()


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


def _read_agents(source: str) -> tuple[list[AgentSpec], bool]:
    """AgentSpecs from a JSON file (or ``-``, stdin); True when it held a list."""
    name = "stdin" if source == "-" else source
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"{name} is not UTF-8 text (byte {exc.start}: {exc.reason})", file=name
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{name} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        # The json module recurses once per nesting level: a deep file would
        # otherwise end the command with a RecursionError.
        raise ValidationError(f"{name} is nested too deeply to be an agent", file=name) from exc
    many = isinstance(data, list)
    items = data if many else [data]
    specs: list[AgentSpec] = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]" if many else name
        try:
            spec = AgentSpec.model_validate(item)
        except pydantic.ValidationError as exc:
            raise ValidationError(f"{where} is not a valid agent: {pydantic_message(exc)}") from exc
        if any(s.id == spec.id for s in specs):
            raise ValidationError(f"{where}: agent {spec.id!r} appears twice in {name}")
        specs.append(spec)
    return specs, many


def cmd_agents_put(ctx: Context) -> int:
    """Create or replace agents from JSON (one object or a list)."""
    specs, many = _read_agents(ctx.args.file)
    # Every spec is checked (fields here, tools in put_many) before one
    # transaction saves them all: a bad file changes nothing.
    saved = ctx.client.agents.put_many(specs)
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
    """List sessions, newest first (archived ones only with ``--archived``)."""
    args = ctx.args
    sessions = ctx.client.sessions.list(
        agent_id=args.agent, limit=args.limit, tree=args.tree, archived=args.archived
    )
    if ctx.out.json_mode:
        ctx.out.json([s.model_dump(mode="json") for s in sessions])
        return EXIT_OK
    ctx.out.table(
        "sessions", ["ID", "NAME", "AGENT", "ENTRIES", "CREATED"], _session_rows(sessions)
    )
    return EXIT_OK


def cmd_sessions_archive(ctx: Context) -> int:
    """Archive a session (idempotent: the first archive's time stays)."""
    session = ctx.client.sessions.archive(ctx.args.session, reason=ctx.args.reason)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
        return EXIT_OK
    reason = f" ({session.archive_reason})" if session.archive_reason else ""
    out.line(f"session {session.id} archived at {session.archived_at}{reason}")
    return EXIT_OK


def cmd_sessions_rename(ctx: Context) -> int:
    """Name a session; automatic naming never overwrites a person's name."""
    session = ctx.client.sessions.rename(ctx.args.session, ctx.args.name)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
    else:
        out.line(f"session {session.id} is now named {session.name!r}")
    return EXIT_OK


def cmd_sessions_compact(ctx: Context) -> int:
    """Compact a session: a Summary by its own model, which later turns start from."""
    summary = ctx.client.sessions.compact(ctx.args.session, timeout=ctx.args.timeout)
    out = ctx.out
    if out.json_mode:
        out.json({"summary": summary.model_dump(mode="json") if summary else None})
    elif summary is None:
        out.line(f"session {ctx.args.session}: nothing to compact since the latest Summary")
    else:
        out.line(
            f"session {summary.session_id} compacted: Summary at seq {summary.seq} "
            f"({summary.metadata.get('entries', 0)} entries)"
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


def cmd_sessions_fork(ctx: Context) -> int:
    """Fork a session at an entry; in a pipe, print only the new id."""
    args = ctx.args
    session = ctx.client.sessions.fork(args.session, args.at, agent_id=args.agent, name=args.name)
    out = ctx.out
    if out.json_mode:
        out.json(session.model_dump(mode="json"))
    elif out.fancy:
        out.line(
            f"forked {session.forked_from} into session {session.id} {session.name!r}", "green"
        )
    else:
        out.line(session.id)
    return EXIT_OK


# -- rooms (docs/rooms.md) ----------------------------------------------------


def cmd_rooms_new(ctx: Context) -> int:
    """Create a room; in a pipe, print only its id."""
    args = ctx.args
    room = ctx.client.sessions.create(
        args.host, name=args.name, members=list(args.member), burst_budget=args.burst
    )
    out = ctx.out
    if out.json_mode:
        out.json(room.model_dump(mode="json"))
    elif out.fancy:
        name = f" {room.name!r}" if room.name else ""
        out.line(f"created room {room.id}{name}: {_roster(room)}", "green")
    else:
        out.line(room.id)
    return EXIT_OK


def cmd_rooms_ls(ctx: Context) -> int:
    """List rooms, newest first."""
    rooms = ctx.client.sessions.rooms(limit=ctx.args.limit, archived=ctx.args.archived)
    if ctx.out.json_mode:
        ctx.out.json([r.model_dump(mode="json") for r in rooms])
        return EXIT_OK
    rows = [
        [
            r.id,
            r.name or "",
            _roster(r),
            str(r.burst_budget) if r.burst_budget is not None else "default",
            str(r.created_at),
        ]
        for r in rooms
    ]
    ctx.out.table("rooms", ["ID", "NAME", "AGENTS", "BURST", "CREATED"], rows)
    return EXIT_OK


def cmd_rooms_add(ctx: Context) -> int:
    """Add a member to a room."""
    return _room_changed(ctx, ctx.client.sessions.add_member(ctx.args.room, ctx.args.agent))


def cmd_rooms_rm(ctx: Context) -> int:
    """Remove a member from a room."""
    return _room_changed(ctx, ctx.client.sessions.remove_member(ctx.args.room, ctx.args.agent))


def _room_changed(ctx: Context, room: Session) -> int:
    if ctx.out.json_mode:
        ctx.out.json(room.model_dump(mode="json"))
    else:
        ctx.out.line(f"room {room.name or room.id}: {_roster(room)}")
    return EXIT_OK


def _roster(room: Session) -> str:
    return "+".join([f"{room.agent_id} (host)", *(room.members or [])])


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
    details: list[tuple[str, Any]] = [
        ("id", session.id),
        ("name", session.name),
        ("agent", session.agent_id),
        ("tree", session.tree_id),
        ("depth", session.call_depth),
        ("entries", session.last_seq),
        ("created", session.created_at),
    ]
    if session.members is not None:
        details.append(("room members", ", ".join(session.members) or "(none yet)"))
    if session.forked_from:
        details.append(("forked from", session.forked_from))
    if session.archived_at is not None:
        why = f": {session.archive_reason}" if session.archive_reason else ""
        details.append(("archived", f"{session.archived_at} ({session.archived_by}){why}"))
    out.fields("session", details)
    out.line("")
    out.line(f"entries ({len(entries)} of {session.last_seq})", "bold underline")
    for entry in entries:
        out.entry(entry)
    out.line("")
    running = sum(1 for j in queue if j.status in (JobStatus.RUNNING, JobStatus.STOPPING))
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
        sender=args.sender or ("user:you" if client.principal.operator else None),
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
    watch = client.sessions.watch(
        session.id, after=after, timeout=args.timeout, partial=args.partial
    )
    # The text of the answer being streamed, by (job, model step).
    growing: tuple[str, int] | None = None
    text = ""
    with out.status(f"following {session.id} (Ctrl-C to stop)"), _watching(watch) as items:
        for item in items:
            if isinstance(item, Entry):
                growing = None
                out.entry(item)
                continue
            if growing != (item.job_id, item.step):
                out.end_partial()
                growing, text = (item.job_id, item.step), ""
            text += item.text
            out.partial(item, text)
    return EXIT_OK


def cmd_events(ctx: Context) -> int:
    """A session's event log: a table (or JSON), or with ``--follow`` a live stream."""
    args, client, out = ctx.args, ctx.client, ctx.out
    session = client.sessions.get(args.session)
    if not args.follow:
        limit = 100 if args.limit is None else args.limit
        events: list[Event] = client.events.list(session.id, after=args.after, limit=limit)
        if args.jsonl:
            for event in events:
                out.event(event, jsonl=True)
        elif out.json_mode:
            out.json([e.model_dump(mode="json") for e in events])
        else:
            out.table(
                "events",
                ["ID", "TIME", "KIND", "DATA"],
                [[e.id, e.created_at, e.kind, e.data] for e in events],
            )
        return EXIT_OK
    if args.limit is not None and args.limit < 1:
        raise ValidationError("--limit must be at least 1", field="limit")
    printed = 0
    with (
        out.status(f"following the events of {session.id} (Ctrl-C to stop)"),
        _watching(
            client.events.follow(session.id, after=args.after, timeout=args.timeout)
        ) as stream,
    ):
        for event in stream:
            out.event(event, jsonl=args.jsonl)
            printed += 1
            if args.limit is not None and printed >= args.limit:
                break
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


def cmd_jobs_output(ctx: Context) -> int:
    """A job's result: the text alone on stdout, what it is on stderr (or all as JSON)."""
    args = ctx.args
    out = ctx.client.jobs.output(args.job, block=args.block, timeout=args.timeout, full=args.full)
    if ctx.out.json_mode:
        ctx.out.json(out)
        return EXIT_OK
    result = out["result"]
    if result is None:
        ctx.out.fields(f"job {out['execution_id']}", list(out.items()))
        return EXIT_OK
    # The text as it is, so that `> file` keeps it byte for byte.
    sys.stdout.write(result)
    sys.stdout.flush()
    note = f"job {out['execution_id']} {out['status']}: {len(result)} characters"
    artifact = out["artifact"]
    if out["truncated"]:
        note += ", cut to head and tail"
        if artifact is not None:
            note += f" of {artifact['byte_length']} bytes (--full prints them all)"
    elif artifact is not None:
        note += f", {artifact['byte_length']} bytes, sha256 {artifact['sha256']}"
    ctx.out.note(note)
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
