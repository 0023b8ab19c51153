"""Rows as chaz's models: the one place a database row becomes an Entry, a Job,
a Session or a Said.

A row here is any mapping of column names to the driver's values (a
SQLAlchemy ``RowMapping`` or a plain dict): the store reads through these, and
so do the reads on the bare driver (:mod:`chaz.store.direct`), which must
build exactly the same models without importing SQLAlchemy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chaz.domain.agents import Limits
from chaz.domain.entries import Entry, EntryType, KeyScope, Said
from chaz.domain.jobs import Job, JobStatus
from chaz.domain.sessions import Session
from chaz.ids import as_utc


def as_ts(value: datetime | None) -> datetime | None:
    """``value`` in UTC, or None."""
    return as_utc(value) if value is not None else None


def as_said(row: Any) -> Said:
    """A context row as a :class:`Said`."""
    # A row of statements.SAID_COLUMNS: id, seq, type, sender, content.
    return Said(row[0], row[1], EntryType(row[2]), row[3], row[4])


def as_entry(row: Any) -> Entry:
    """An ``entries`` row as an :class:`Entry`."""
    # Rows come from our own schema: skip validation, it dominated context reads.
    return Entry.model_construct(
        id=row["id"],
        session_id=row["session_id"],
        seq=row["seq"],
        type=EntryType(row["type"]),
        sender=row["sender"],
        content=row["content"],
        metadata=row["metadata"] or {},
        job_id=row["job_id"],
        # The runtime's keys are its own business; a producer sees its own.
        idempotency_key=row["idempotency_key"] if row["key_scope"] == KeyScope.USER else None,
        created_at=as_utc(row["created_at"]),
    )


def as_job(row: Any) -> Job:
    """A ``jobs`` row as a :class:`Job`."""
    return Job(
        id=row["id"],
        session_id=row["session_id"],
        tree_id=row["tree_id"],
        ordinal=row["ordinal"],
        trigger_entry_id=row["trigger_entry_id"],
        status=JobStatus(row["status"]),
        version=row["version"],
        caller_session_id=row["caller_session_id"],
        caller_entry_id=row["caller_entry_id"],
        parent_job_id=row["parent_job_id"],
        call_depth=row["call_depth"],
        message_count=row["message_count"],
        delivery_id=row.get("delivery_id"),
        input=row.get("input"),
        fire_id=row.get("fire_id"),
        member_agent_id=row.get("member_agent_id"),
        project=row.get("project") or "default",
        owner=row.get("owner") or "user:local",
        grants=row.get("grants"),
        unattended=bool(row.get("unattended")),
        attempts=row["attempts"],
        starts=row.get("starts") or 0,
        result=row["result"],
        error=row["error"],
        created_at=as_utc(row["created_at"]),
        started_at=as_ts(row["started_at"]),
        finished_at=as_ts(row["finished_at"]),
        usage=row.get("usage"),
        webhook=row.get("webhook"),
        hidden_at=as_ts(row.get("hidden_at")),
        rolled_back_at=as_ts(row.get("rolled_back_at")),
        trace_context=row.get("trace_context"),
    )


def as_session(row: Any) -> Session:
    """A ``sessions`` row as a :class:`Session`."""
    return Session(
        id=row["id"],
        agent_id=row["agent_id"],
        name=row["name"],
        tree_id=row["tree_id"],
        parent_job_id=row["parent_job_id"],
        call_depth=row["call_depth"],
        last_seq=row["last_seq"],
        limits=Limits.model_validate(row["limits"]) if row["limits"] else None,
        tools=row["tools"],
        created_at=as_utc(row["created_at"]),
        fork_session_id=row.get("fork_session_id"),
        fork_seq=row.get("fork_seq"),
        origin=row.get("origin"),
        name_source=row.get("name_source"),
        archived_at=as_ts(row.get("archived_at")),
        archive_reason=row.get("archive_reason"),
        archived_by=row.get("archived_by"),
        active_at=as_ts(row.get("active_at")),
        members=row.get("members"),
        burst_budget=row.get("burst_budget"),
        project=row.get("project") or "default",
        owner=row.get("owner") or "user:local",
        unattended=bool(row.get("unattended")),
        permission_mode=row.get("permission_mode") or "default",
        description=row.get("description"),
    )
