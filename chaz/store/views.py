"""Rows that read as models: a Session, an Entry or a Job built only when needed.

The read commands' fast path (:mod:`chaz.cli.direct`) prints a few fields of
each row; building the pydantic models for that imports pydantic and the
domain's models, most of such a command's time
(docs/performance.md#cli-read-commands-on-postgresql). A view answers the
fields a listing prints straight from the row, converted exactly as
:mod:`chaz.store.records` converts them, and anything else (another field, a
property, ``model_dump``) from the model that :mod:`chaz.store.records` builds
from the same row on first use. So a view prints what the model prints; its
``--json`` output is the model's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from chaz.domain.kinds import EntryType, JobStatus
from chaz.ids import as_utc

if TYPE_CHECKING:
    from chaz.domain.entries import Entry
    from chaz.domain.jobs import Job
    from chaz.domain.sessions import Session


def _ts(value: Any) -> Any:
    return as_utc(value) if value is not None else None


class _View:
    """A row whose ``FIELDS`` are read from it and the rest from its model."""

    #: The model's fields that are the row's column as it is (no conversion).
    PLAIN: ClassVar[tuple[str, ...]] = ()
    #: The model's timestamp fields (UTC, as ``records.as_ts`` makes them).
    TIMES: ClassVar[tuple[str, ...]] = ()

    __slots__ = ("_model", "_row")

    def __init__(self, row: dict[str, Any]) -> None:
        self._row = row
        self._model: Any = None

    def _build(self) -> Any:
        raise NotImplementedError

    def model(self) -> Any:
        """The model of this row (built once)."""
        if self._model is None:
            self._model = self._build()
        return self._model

    def __getattr__(self, name: str) -> Any:
        # Only for names not found on the view: the plain and time fields
        # first, then whatever the model has.
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self.PLAIN:
            return self._row[name]
        if name in self.TIMES:
            return _ts(self._row[name])
        return getattr(self.model(), name)

    def __eq__(self, other: object) -> bool:
        return bool(self.model() == (other.model() if isinstance(other, _View) else other))

    __hash__ = None  # type: ignore[assignment]  # as the models: unhashable

    def __repr__(self) -> str:
        return repr(self.model())


class _SessionView(_View):
    PLAIN = ("id", "agent_id", "name", "tree_id", "call_depth", "last_seq", "members")
    TIMES = ("created_at", "archived_at")
    __slots__ = ()

    def _build(self) -> Session:
        from chaz.store.records import as_session

        return as_session(self._row)

    @property
    def forked_from(self) -> str | None:
        """``Session.forked_from``."""
        sid, seq = self._row.get("fork_session_id"), self._row.get("fork_seq")
        return None if sid is None or seq is None else f"{sid}:{seq}"


class _EntryView(_View):
    PLAIN = ("id", "session_id", "seq", "sender", "content", "job_id")
    TIMES = ("created_at",)
    __slots__ = ()

    def _build(self) -> Entry:
        from chaz.store.records import as_entry

        return as_entry(self._row)

    @property
    def type(self) -> EntryType:
        """``Entry.type``."""
        return EntryType(self._row["type"])

    @property
    def metadata(self) -> dict[str, Any]:
        """``Entry.metadata``."""
        return cast("dict[str, Any]", self._row["metadata"] or {})


class _JobView(_View):
    PLAIN = ("id", "session_id", "tree_id", "ordinal", "trigger_entry_id", "version", "attempts")
    TIMES = ("created_at", "started_at", "finished_at")
    __slots__ = ()

    def _build(self) -> Job:
        from chaz.store.records import as_job

        return as_job(self._row)

    @property
    def status(self) -> JobStatus:
        """``Job.status``."""
        return JobStatus(self._row["status"])


# A view stands for its model wherever the commands read one (the casts say
# so to type checkers; isinstance is the one thing a view does not answer).


def session_view(row: dict[str, Any]) -> Session:
    """``records.as_session(row)``, built when a field beyond a listing's is read."""
    return cast("Session", _SessionView(row))


def entry_view(row: dict[str, Any]) -> Entry:
    """``records.as_entry(row)``, built when a field beyond a listing's is read."""
    return cast("Entry", _EntryView(row))


def job_view(row: dict[str, Any]) -> Job:
    """``records.as_job(row)``, built when a field beyond a listing's is read."""
    return cast("Job", _JobView(row))
