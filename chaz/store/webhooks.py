"""The ``webhooks`` outbox and ``webhook_secrets`` (docs/http.md#webhooks).

A job that names a webhook gets its outbox row in the transaction that ends
it (:func:`record`, from :func:`chaz.store.ending.job_ended`), so a worker
killed between the end and the POST loses nothing: the row is there, due.
Each attempt first claims the row (:meth:`WebhookStore.claim`, a
compare-and-set that counts the attempt and pushes ``next_at`` past the
attempt's longest time), so two senders of one row (a retry and the sweep)
cannot both POST it; a claim whose worker died is claimable again once
``next_at`` has passed.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, func, or_, select, update

from chaz.domain.jobs import Job
from chaz.domain.webhooks import Webhook, WebhookState, new_secret
from chaz.ids import as_utc, new_id, utcnow
from chaz.store import upsert
from chaz.store.models import JobRow, WebhookRow, WebhookSecretRow
from chaz.store.records import as_ts
from chaz.store.rows import as_job

if TYPE_CHECKING:
    from chaz.store.db import Database

WEBHOOKS = WebhookRow.__table__
SECRETS = WebhookSecretRow.__table__
_PENDING = WebhookState.PENDING.value
#: The longest error text kept on a row.
MAX_ERROR_CHARS = 1000


@dataclass(frozen=True)
class Claim:
    """One attempt of a delivery, claimed: its number, the ended job, and the
    project's signing secrets."""

    webhook: Webhook
    attempt: int
    job: Job
    #: The secrets that sign it: the project's, and the one a rotation
    #: replaced while its overlap lasts.
    secrets: tuple[str, ...]


def as_webhook(row: Any) -> Webhook:
    """A ``webhooks`` row as a :class:`Webhook`."""
    return Webhook(
        id=row["id"],
        job_id=row["job_id"],
        session_id=row["session_id"],
        project=row["project"],
        url=row["url"],
        state=WebhookState(row["state"]),
        attempts=row["attempts"],
        next_at=as_utc(row["next_at"]),
        last_error=row["last_error"],
        last_status=row["last_status"],
        created_at=as_utc(row["created_at"]),
        settled_at=as_ts(row["settled_at"]),
    )


def record(conn: Connection, *, job_id: str, session_id: str, project: str, url: str) -> None:
    """The outbox row of a job's end, in its transaction; once per job (an end
    applied again, by a sweep, records nothing more)."""
    now = utcnow()
    values = {
        "id": new_id(),
        "job_id": job_id,
        "session_id": session_id,
        "project": project,
        "url": url,
        "state": _PENDING,
        "attempts": 0,
        "next_at": now,
        "last_error": None,
        "last_status": None,
        "created_at": now,
        "settled_at": None,
    }
    conn.execute(
        upsert.insert(conn, WEBHOOKS)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["job_id"])
    )


def _secrets(conn: Connection, project: str) -> tuple[str, ...]:
    """The project's secret (made now if it has none), then the one its last
    rotation replaced while that one's overlap lasts."""
    query = select(SECRETS.c.secret, SECRETS.c.previous_secret, SECRETS.c.previous_until).where(
        SECRETS.c.project == project
    )
    row = conn.execute(query).first()
    if row is None:
        conn.execute(
            upsert.insert(conn, SECRETS)
            .values(project=project, secret=new_secret(), created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["project"])
        )
        row = conn.execute(query).one()
    until = row.previous_until
    if row.previous_secret and until is not None and as_utc(until) > utcnow():
        return (str(row.secret), str(row.previous_secret))
    return (str(row.secret),)


class WebhookStore:
    """Runs' webhook deliveries and projects' signing secrets (``store.webhooks``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def claim(self, job_id: str, hold_seconds: float) -> Claim | None:
        """Begin the next attempt of the job's pending delivery, if due: count it,
        and hold the row for ``hold_seconds`` (past the attempt's timeout).
        None: delivered, dead, not due yet, or another sender holds it."""
        now = utcnow()
        with self.db.write() as conn:
            row = (
                conn.execute(
                    update(WEBHOOKS)
                    .where(
                        and_(
                            WEBHOOKS.c.job_id == job_id,
                            WEBHOOKS.c.state == _PENDING,
                            # A first attempt is due at once, whatever this
                            # host's clock says of the one that wrote the row.
                            or_(WEBHOOKS.c.next_at <= now, WEBHOOKS.c.attempts == 0),
                        )
                    )
                    .values(
                        attempts=WEBHOOKS.c.attempts + 1,
                        next_at=now + timedelta(seconds=hold_seconds),
                    )
                    .returning(*WEBHOOKS.c)
                )
                .mappings()
                .first()
            )
            if row is None:
                return None
            webhook = as_webhook(row)
            job = conn.execute(select(JobRow).where(JobRow.id == webhook.job_id)).mappings().one()
            return Claim(webhook, webhook.attempts, as_job(job), _secrets(conn, webhook.project))

    def delivered(self, delivery_id: str, status: int) -> bool:
        """A receiver accepted the delivery; whether this attempt settled it."""
        return self._settle(
            delivery_id,
            None,
            state=WebhookState.DELIVERED,
            last_status=status,
            last_error=None,
            settled_at=utcnow(),
        )

    def failed(
        self,
        delivery_id: str,
        attempt: int,
        error: str,
        *,
        status: int | None,
        retry_in: float | None,
    ) -> bool:
        """Attempt ``attempt`` failed: due again in ``retry_in`` seconds, or dead
        (None). Only the latest claim settles the row; whether this one did."""
        values: dict[str, Any] = {"last_error": error[:MAX_ERROR_CHARS], "last_status": status}
        if retry_in is None:
            values |= {"state": WebhookState.DEAD, "settled_at": utcnow()}
        else:
            values["next_at"] = utcnow() + timedelta(seconds=retry_in)
        return self._settle(delivery_id, attempt, **values)

    def _settle(self, delivery_id: str, attempt: int | None, **values: Any) -> bool:
        where = [WEBHOOKS.c.id == delivery_id, WEBHOOKS.c.state == _PENDING]
        if attempt is not None:
            where.append(WEBHOOKS.c.attempts == attempt)
        if "state" in values:
            values["state"] = WebhookState(values["state"]).value
        with self.db.write() as conn:
            done = conn.execute(update(WEBHOOKS).where(and_(*where)).values(**values)).rowcount
        return bool(done)

    def due(self, now: datetime | None = None, limit: int = 500) -> builtins.list[str]:
        """The jobs of pending deliveries whose next attempt is due (or whose
        claimed attempt is presumed lost), oldest first."""
        moment = now or utcnow()
        stmt = (
            select(WEBHOOKS.c.job_id)
            .where(and_(WEBHOOKS.c.state == _PENDING, WEBHOOKS.c.next_at <= moment))
            .order_by(WEBHOOKS.c.next_at)
            .limit(limit)
        )
        with self.db.read() as conn:
            return [str(i) for i in conn.scalars(stmt)]

    def get(self, delivery_id: str) -> Webhook | None:
        """One delivery (None: no such id)."""
        with self.db.read() as conn:
            row = conn.execute(select(WEBHOOKS).where(WEBHOOKS.c.id == delivery_id)).mappings()
            found = row.first()
        return as_webhook(found) if found else None

    def for_job(self, job_id: str) -> Webhook | None:
        """The delivery of one job's end (None: it has none yet)."""
        with self.db.read() as conn:
            found = (
                conn.execute(select(WEBHOOKS).where(WEBHOOKS.c.job_id == job_id)).mappings().first()
            )
        return as_webhook(found) if found else None

    def list(
        self,
        *,
        project: str | None = None,
        state: WebhookState | None = None,
        limit: int = 100,
    ) -> builtins.list[Webhook]:
        """Deliveries, newest first (of one project, in one state)."""
        stmt = select(WEBHOOKS).order_by(WEBHOOKS.c.created_at.desc()).limit(limit)
        if project is not None:
            stmt = stmt.where(WEBHOOKS.c.project == project)
        if state is not None:
            stmt = stmt.where(WEBHOOKS.c.state == state.value)
        with self.db.read() as conn:
            return [as_webhook(r) for r in conn.execute(stmt).mappings()]

    def counts(self) -> dict[str, int]:
        """Deliveries by state, over every project (``chaz doctor``)."""
        stmt = select(WEBHOOKS.c.state, func.count()).group_by(WEBHOOKS.c.state)
        with self.db.read() as conn:
            return {str(s): int(n) for s, n in conn.execute(stmt)}

    def revive(self, delivery_id: str, project: str) -> Webhook | None:
        """A dead delivery of ``project`` pending again, due now, with its
        attempts counted from zero; None if it is not dead (or not there)."""
        with self.db.write() as conn:
            row = (
                conn.execute(
                    update(WEBHOOKS)
                    .where(
                        and_(
                            WEBHOOKS.c.id == delivery_id,
                            WEBHOOKS.c.project == project,
                            WEBHOOKS.c.state == WebhookState.DEAD.value,
                        )
                    )
                    .values(state=_PENDING, attempts=0, next_at=utcnow(), settled_at=None)
                    .returning(*WEBHOOKS.c)
                )
                .mappings()
                .first()
            )
        return as_webhook(row) if row else None

    def expire(self, cutoff: datetime, *, limit: int) -> int:
        """Delete up to ``limit`` deliveries settled (delivered or dead) before
        ``cutoff``; how many were (retention, with the event log's)."""
        with self.db.write() as conn:
            ids = list(
                conn.scalars(
                    select(WEBHOOKS.c.id)
                    .where(and_(WEBHOOKS.c.state != _PENDING, WEBHOOKS.c.settled_at < cutoff))
                    .limit(limit)
                )
            )
            if ids:
                conn.execute(WEBHOOKS.delete().where(WEBHOOKS.c.id.in_(ids)))
        return len(ids)

    def secret(self, project: str) -> str:
        """The project's signing secret, made now if it has none."""
        with self.db.write() as conn:
            return _secrets(conn, project)[0]

    def secrets(self, project: str) -> tuple[str, ...]:
        """The secrets that sign the project's deliveries now: its own, then
        the one its last rotation replaced while the overlap lasts."""
        with self.db.write() as conn:
            return _secrets(conn, project)

    def rotate(self, project: str, *, overlap: timedelta = timedelta(0)) -> str:
        """A new signing secret for the project. The one it replaces signs
        beside it for ``overlap`` more (nothing, at zero): a receiver given the
        new secret within that time refuses no delivery."""
        fresh = new_secret()
        now = utcnow()
        with self.db.write() as conn:
            old = _secrets(conn, project)[0]
            keep = overlap > timedelta(0)
            conn.execute(
                SECRETS.update()
                .where(SECRETS.c.project == project)
                .values(
                    secret=fresh,
                    created_at=now,
                    previous_secret=old if keep else None,
                    previous_until=now + overlap if keep else None,
                )
            )
        return fresh
