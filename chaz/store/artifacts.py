"""The ``artifacts`` table: the record of job results longer than the result cap.

The full text stays in ``jobs.result``; an artifact row records that it was
longer than :data:`~chaz.domain.results.RESULT_CAP`, who owns it, its size
and hash (docs/contracts.md#result-cap). :func:`record` writes it in the
transaction that writes the result, so there is never an artifact without
its text nor a long result without its artifact; :meth:`ArtifactStore.expire`
removes it and cuts the result to its excerpt, again in one transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, delete, select, update

from chaz.domain.artifacts import Artifact
from chaz.domain.jobs import TERMINAL
from chaz.domain.results import RESULT_CAP, TEXT, digest, excerpt
from chaz.ids import as_utc, new_id, utcnow
from chaz.store import upsert
from chaz.store.models import ArtifactRow, JobRow

if TYPE_CHECKING:
    from chaz.store.db import Database

ARTIFACTS = ArtifactRow.__table__
JOBS = JobRow.__table__
_TERMINAL = sorted(s.value for s in TERMINAL)

_BY_JOB = select(ARTIFACTS).where(ARTIFACTS.c.job_id == bindparam("jid"))
#: The job row of an artifact, locked: its result is about to be cut.
_LOCK_RESULT = (
    select(JOBS.c.result, JOBS.c.status, JOBS.c.finished_at)
    .where(JOBS.c.id == bindparam("jid"))
    .with_for_update()
)


def record(conn: Connection, job_id: str, session_id: str, text: str) -> None:
    """Record ``text``, the result of ``job_id``, as an artifact if the cap cuts it.

    Runs in the caller's open write transaction, the one that writes the
    result: the artifact commits with it or not at all, so a failed write
    never leaves an artifact that describes nothing. Nothing is written for a
    result within the cap. A second call for the same job changes nothing
    (the unique ``job_id``, not a read first, makes that hold under
    concurrency).
    """
    if len(text) <= RESULT_CAP:
        return
    found = digest(text)
    values = {
        "id": new_id(),
        "job_id": job_id,
        "session_id": session_id,
        "media_type": TEXT,
        "byte_length": found.byte_length,
        "sha256": found.sha256,
        "created_at": utcnow(),
    }
    conn.execute(
        upsert.insert(conn, ARTIFACTS)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["job_id"])
    )


class ArtifactStore:
    """Reads and retention of artifacts (``Store.artifacts``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, job_id: str) -> Artifact | None:
        """The artifact of ``job_id``'s result, if it has one (and it has not expired)."""
        with self._db.read() as conn:
            row = conn.execute(_BY_JOB, {"jid": job_id}).mappings().first()
        return _artifact(row) if row is not None else None

    def expire(self, finished_before: datetime, limit: int = 500) -> int:
        """Remove up to ``limit`` artifacts of terminal jobs that finished before the cutoff.

        Each removal is its own transaction: the row goes and the job's result
        is cut to its excerpt, together. The job row is locked and the
        artifact's delete must hit, so two sweeps running at once cut each
        result once. Returns how many were removed; an active job's artifact
        (there is none yet, but a resumed turn may write one) and a recent
        one's stay.
        """
        # SQLite compares the stored UTC text: the cutoff must be UTC too.
        cutoff = as_utc(finished_before).astimezone(UTC)
        candidates = (
            select(ARTIFACTS.c.id, ARTIFACTS.c.job_id)
            .join(JOBS, JOBS.c.id == ARTIFACTS.c.job_id)
            .where(JOBS.c.status.in_(_TERMINAL), JOBS.c.finished_at < cutoff)
            .order_by(JOBS.c.finished_at)
            .limit(limit)
        )
        with self._db.read() as conn:
            found = conn.execute(candidates).all()
        removed = 0
        for artifact_id, job_id in found:
            with self._db.write() as conn:
                job = conn.execute(_LOCK_RESULT, {"jid": job_id}).mappings().first()
                if not _eligible(job, cutoff):
                    continue
                gone = conn.execute(delete(ARTIFACTS).where(ARTIFACTS.c.id == artifact_id))
                if not gone.rowcount:
                    continue  # another sweep removed it first
                assert job is not None
                cut, _ = excerpt(job["result"] or "")
                conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(result=cut))
                removed += 1
        return removed


def _eligible(job: Any, cutoff: datetime) -> bool:
    return (
        job is not None
        and job["status"] in _TERMINAL
        and job["finished_at"] is not None
        and as_utc(job["finished_at"]) < cutoff
    )


def _artifact(row: Any) -> Artifact:
    return Artifact(
        id=row["id"],
        job_id=row["job_id"],
        session_id=row["session_id"],
        media_type=row["media_type"],
        byte_length=row["byte_length"],
        sha256=row["sha256"],
        created_at=as_utc(row["created_at"]),
    )


def refs(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    """The references of a job's artifact (at most one): its id, length and
    digest, as a request's frozen result names them."""
    rows = conn.execute(
        select(ArtifactRow.id, ArtifactRow.byte_length, ArtifactRow.sha256).where(
            ArtifactRow.job_id == job_id
        )
    ).all()
    return [{"artifact_id": a, "byte_length": n, "sha256": h} for a, n, h in rows]
