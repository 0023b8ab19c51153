"""What every CLI command gets: parsed arguments, settings, a client, signals."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from chaz.cli.output import Output
from chaz.cli.urls import check_redis_url
from chaz.errors import ConfigError, validation_message

if TYPE_CHECKING:
    import pydantic

    from chaz.cli.direct import Direct
    from chaz.client import Client
    from chaz.domain.entries import Entry
    from chaz.settings import Settings
    from chaz.store.direct import DirectReads

_T = TypeVar("_T")


def load_settings(home: str | None) -> Settings:
    """The effective settings (``CHAZ_*``, ``.env``), with ``--home`` taking precedence."""
    # Imported here: pydantic-settings is a tenth of a second of a read
    # command that answers without it (chaz.cli.direct).
    import pydantic

    from chaz.settings import Settings

    try:
        return Settings(home=Path(home)) if home else Settings()
    except pydantic.ValidationError as exc:
        raise ConfigError(f"invalid settings: {pydantic_message(exc)}") from exc


def pydantic_message(exc: pydantic.ValidationError) -> str:
    """A pydantic error's failures in one line: ``field: message; ...``."""
    return validation_message(exc)


def check_urls(settings: Settings) -> None:
    """Refuse a database or Redis URL that cannot be used, before anything connects.

    The drivers would raise ValueError or SQLAlchemy's ArgumentError deep in
    a connection attempt; here the message names the setting, with the URL's
    password masked.
    """
    from chaz.settings import mask_url
    from chaz.store.migrate import connect_args

    # A plain postgresql+psycopg URL always passes SQLAlchemy's check: it is
    # not imported for it (chaz worker's exec waits for this).
    if settings.database_url and connect_args(settings.database_url) is None:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(settings.database_url).get_dialect()
        except (ArgumentError, ValueError) as exc:
            raise ConfigError(
                f"CHAZ_DATABASE_URL {mask_url(settings.database_url)!r} is not a usable "
                f"database URL: {_first_line(exc)}"
            ) from exc
    if settings.redis_url:
        check_redis_url(settings.redis_url)


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


class Context:
    """What a command works with: its arguments, the output, settings and a client."""

    def __init__(self, args: argparse.Namespace, out: Output) -> None:
        self.args = args
        self.out = out
        self._settings: Settings | None = None
        self._client: Client | None = None
        self._direct: DirectReads | None = None

    @property
    def settings(self) -> Settings:
        """Settings, read on first use (``chaz --help`` must not need valid ones)."""
        if self._settings is None:
            self._settings = load_settings(getattr(self.args, "home", None))
        return self._settings

    @property
    def server_settings(self) -> Settings:
        """Settings whose database and Redis URLs can be used (``config.invalid`` if not)."""
        check_urls(self.settings)
        return self.settings

    @property
    def client(self) -> Client:
        """A producer client (migrates the database on first use; with
        ``CHAZ_URL``, a client of that chaz serve, docs/http.md#producer)."""
        if self._client is None:
            if self.settings.url is None:
                # With CHAZ_URL the client speaks HTTP: the database and Redis
                # settings are the server's, not this process's.
                check_urls(self.settings)
            # Imported here: SQLAlchemy, Redis and Celery load only for commands that connect.
            from chaz.client import Client

            self._client = Client(
                self.settings,
                principal=getattr(self.args, "principal", None),
                project=getattr(self.args, "project", None),
                api_key=getattr(self.args, "api_key", None),
            )
        return self._client

    def read(self, direct: Callable[[Direct], _T | None], full: Callable[[Client], _T]) -> _T:
        """A read command's data: ``direct`` on the bare driver when the
        environment allows it (:mod:`chaz.cli.direct`), else ``full`` on the client.

        ``direct`` answers None (or raises) for whatever it cannot answer
        exactly as the client would (a missing session, a bad argument); then
        ``full`` runs and answers, or fails, as it always has.
        """
        from chaz.cli.direct import Direct

        reader = Direct.open(self.args)
        if reader is not None:
            self._direct = reader.reads
            try:
                found = direct(reader)
            except Exception:
                found = None
            if found is not None:
                return found
        return full(self.client)

    def close(self) -> None:
        """Release the client's connections (and the direct reads' one)."""
        if self._direct is not None:
            direct, self._direct = self._direct, None
            direct.close()
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
def _watching(entries: Iterator[_T]) -> Iterator[Iterator[_T]]:
    """Close a watch (or an event follow) when the caller stops early, releasing
    its Redis subscription now."""
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
    # String values, so that this module loads without the domain models.
    return entry.type == "error" or (entry.type == "message" and entry.sender == me)
