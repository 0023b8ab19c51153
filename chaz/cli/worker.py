"""``chaz worker``: the checks a worker's start needs, then the exec of Celery.

Every second before the exec delays the worker's first turn, and each
scale-up (docs/performance.md#worker-start-up). Where the environment names
no setting but the database and Redis URLs, the home, the principal and the
project, and no ``.env`` file could add one (the read commands' condition,
:func:`chaz.cli.urls.plain_environment`), the settings that matter here are
read without pydantic-settings, which is most of the command's own time:
the values are those ``Settings`` would hold (strings, which it never
refuses), so the command, its checks and its errors are the same.

Where the environment names other settings too (a deployment's
``CHAZ_WORKER_CONCURRENCY``, ``CHAZ_SHUTDOWN_GRACE_SECONDS``...), the four
values the command needs are still read plainly when they are exactly
``Settings``' (:func:`unchecked_worker_settings`), and the rest is checked
once, by the exec'd worker, which builds ``Settings`` anyway: before Celery
starts, it reports a refused setting with the command's error and exit
status (``workers/__main__.py``),
after the command's ``exec:`` note. Anything else (``--dry-run``, a ``.env``
file, a value only pydantic can read) is read by ``Settings`` in the
command, as before.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import NamedTuple

from chaz.cli.context import Context
from chaz.cli.output import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from chaz.cli.urls import check_redis_url, plain_environment

#: ``Settings.home``'s and ``Settings.worker_concurrency``'s defaults
#: (tests/unit/test_worker_settings.py holds them equal).
DEFAULT_HOME = ".chaz"
DEFAULT_CONCURRENCY = 8
#: Set by ``chaz worker`` for the worker it execs when the settings are the
#: worker's to check: ``MODE:USAGE:FAILURE:MIGRATE``, the command's output
#: (``json``, ``fancy`` or ``text``), its exit statuses for a request refused
#: as written and for any other failure, and ``migrate`` when the worker
#: brings the schema up to date too (workers/__main__.py). Not a ``CHAZ_``
#: name: it is no setting, and the worker removes it from its environment.
CHECK_SETTINGS_ENV = "_CHAZ_WORKER_CHECK_SETTINGS"
#: A ``CHAZ_WORKER_CONCURRENCY`` read without pydantic: digits pydantic reads as
#: the same positive int; anything else (signs, spaces, ``0``) is left to it.
_PLAIN_INT = re.compile(r"[1-9][0-9]{0,5}")


class WorkerSettings(NamedTuple):
    """What ``chaz worker`` reads of the settings before it execs Celery.

    A named tuple, not a dataclass: :mod:`dataclasses` imports :mod:`inspect`
    and the tokenizer, a tenth of the command's own time before its exec."""

    #: ``CHAZ_HOME``, resolved.
    home: Path
    #: ``CHAZ_WORKER_CONCURRENCY``: turn threads unless ``--concurrency`` says.
    concurrency: int
    #: ``Settings.effective_database_url()``.
    database_url: str
    #: No ``CHAZ_REDIS_URL``: the worker's broker is the embedded Redis.
    embedded_redis: bool


def worker_settings(ctx: Context) -> WorkerSettings:
    """The settings of this ``chaz worker``: read plainly where that is exact,
    else by ``Settings`` (``config.invalid`` for a setting it refuses)."""
    plain = plain_worker_settings(getattr(ctx.args, "home", None), os.environ)
    if plain is not None:
        return plain
    settings = ctx.server_settings
    return WorkerSettings(
        home=settings.home.resolve(),
        concurrency=settings.worker_concurrency,
        database_url=settings.effective_database_url(),
        embedded_redis=settings.embedded_redis,
    )


def plain_worker_settings(
    home: str | None, environ: dict[str, str] | os._Environ[str]
) -> WorkerSettings | None:
    """:class:`WorkerSettings` without pydantic-settings, or None when ``Settings``
    must read them: another setting in the environment, a ``.env`` file, an
    empty URL, or a URL the full path checks with SQLAlchemy or refuses."""
    from chaz.store.migrate import connect_args

    env = plain_environment(environ)
    if env is None:
        return None
    database_url = env.get("CHAZ_DATABASE_URL")
    redis_url = env.get("CHAZ_REDIS_URL")
    if database_url == "" or redis_url == "":
        return None
    if database_url is not None and connect_args(database_url) is None:
        return None  # SQLAlchemy's URL check (chaz.cli.context.check_urls)
    if redis_url is not None:
        try:
            check_redis_url(redis_url)
        except Exception:
            return None  # Settings' path refuses it, in its words
    where = (Path(home) if home else Path(env.get("CHAZ_HOME", DEFAULT_HOME))).resolve()
    return WorkerSettings(
        home=where,
        concurrency=DEFAULT_CONCURRENCY,
        database_url=database_url or f"sqlite:///{(where / 'chaz.db').as_posix()}",
        embedded_redis=redis_url is None,
    )


def unchecked_worker_settings(
    home: str | None, environ: dict[str, str] | os._Environ[str]
) -> WorkerSettings | None:
    """:class:`WorkerSettings` read plainly from an environment that names other
    settings too, which the exec'd worker then checks; None when ``Settings``
    must read even these: a ``.env`` file, a setting named twice (pydantic-settings
    ignores case), a concurrency only pydantic can read, or the URLs
    :func:`plain_worker_settings` leaves to it."""
    if Path(".env").exists():
        return None
    env: dict[str, str] = {}
    for key, value in environ.items():
        name = key.upper()
        if name.startswith("CHAZ_"):
            if name in env:
                return None
            env[name] = value
    plain = {k: v for k, v in env.items() if k in _PLAIN_NAMES}
    read = plain_worker_settings(home, plain)
    raw = env.get("CHAZ_WORKER_CONCURRENCY")
    if read is None or (raw is not None and not _PLAIN_INT.fullmatch(raw)):
        return None
    concurrency = int(raw) if raw is not None else DEFAULT_CONCURRENCY
    return WorkerSettings(read.home, concurrency, read.database_url, read.embedded_redis)


_PLAIN_NAMES = frozenset({"CHAZ_DATABASE_URL", "CHAZ_REDIS_URL", "CHAZ_HOME"})


def migrate_url(url: str, *, report: bool = True) -> str | None:
    """Upgrade the schema of ``url``; with ``report``, return the revision it is at."""
    from chaz.store.migrate import current_revision, is_current_file, is_current_postgres, upgrade

    if not report and (is_current_file(url) or is_current_postgres(url)):
        return None  # the database is current: no SQLAlchemy needed
    # An engine, not a Store: the store's models would load for nothing.
    from chaz.store.db import make_engine

    engine = make_engine(url)
    try:
        upgrade(engine)
        return current_revision(engine) if report else None
    finally:
        engine.dispose()


def cmd_worker(ctx: Context) -> int:
    """Replace this process with a ``celery worker`` consuming chaz's queues."""
    from chaz.plumbing.worker_command import worker_command
    from chaz.store.migrate import connect_args

    args, out = ctx.args, ctx.out
    unchecked = None
    if not args.dry_run and plain_environment(os.environ) is None:
        # Other settings: the worker checks them, the command reads its four.
        unchecked = unchecked_worker_settings(getattr(args, "home", None), os.environ)
    settings = unchecked or worker_settings(ctx)
    home = settings.home
    extra = list(args.extra)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    cmd = worker_command(
        args.concurrency or settings.concurrency,
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
        from chaz.coord.redis import ensure_embedded_at

        # The worker's broker is this Redis: it must answer before celery connects.
        ensure_embedded_at(home)
    # On PostgreSQL, a worker that checks the settings also brings the schema
    # up to date: it imports psycopg anyway, which the command need not.
    deferred = unchecked is not None and connect_args(settings.database_url) is not None
    if not deferred:
        # The revision, which needs Alembic, is not read.
        migrate_url(settings.database_url, report=False)
    env = dict(os.environ)
    # --home must reach chaz.celery_settings and the tasks, which read CHAZ_HOME themselves.
    env["CHAZ_HOME"] = str(home)
    if unchecked is not None:
        mode = "json" if out.json_mode else "fancy" if out.fancy else "text"
        migrate = "migrate" if deferred else ""
        env[CHECK_SETTINGS_ENV] = f"{mode}:{EXIT_USAGE}:{EXIT_FAILURE}:{migrate}"
    if args.metrics_port is not None:
        # The tasks module starts the endpoint when the worker is ready (chaz.metrics).
        env["CHAZ_METRICS_PORT"] = str(args.metrics_port)
    if args.metrics_addr is not None:
        env["CHAZ_METRICS_ADDR"] = args.metrics_addr
    out.note(f"exec: {shlex.join(cmd)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, env)
