"""Result artifacts (docs/contracts.md#result-cap, C9): the record, authorized full reads,
retention.

Jobs are finished through the store's own end of a turn (``Store.end_turn``,
what a worker calls), so no worker process is needed.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from sqlalchemy import update

import chaz
from chaz.domain.entries import EntryType, NewEntry
from chaz.domain.jobs import Job, JobStatus, missing_job
from chaz.domain.results import RESULT_CAP, TEXT, excerpt
from chaz.errors import ArtifactNotFound, JobNotFound, LeaseLost
from chaz.ids import utcnow
from chaz.services import Services
from chaz.store import artifacts
from chaz.store.models import ArtifactRow, JobRow
from chaz.store.types import Fence, Finish
from chaz.usecases import completion, control, retention
from tests.support.stack import Stack

AGENT = chaz.AgentSpec(id="bot", script=[{"steps": [{"say": "ok"}]}])
#: Over the cap, with a recognisable head and tail and two-byte characters,
#: so that its UTF-8 length differs from its length in characters.
BIG = "HEAD:" + "é" * 20_000 + "x" * 60_000 + ":TAIL"
DAY = timedelta(days=1)


def running(stack: Stack, session_id: str, token: str = "tok") -> Job:
    """A job admitted in ``session_id`` and started under ``token``."""
    posted = stack.client.sessions.post(session_id, "go", sender="user:a")
    assert posted.job_id is not None
    job, _ = stack.client.services.store.start_turn(posted.job_id, token)
    return job


def finished(stack: Stack, session_id: str, text: str | None) -> Job:
    """A job whose turn ended with ``text`` as its result (None: it failed)."""
    store = stack.client.services.store
    job = running(stack, session_id)
    if text is None:
        finish = Finish(job.id, JobStatus.FAILED, error={"code": "x", "message": "broke"})
        draft = NewEntry(EntryType.ERROR, "agent:bot", "x: broke")
    else:
        finish = Finish(job.id, JobStatus.SUCCEEDED, result=text)
        draft = NewEntry(EntryType.MESSAGE, "agent:bot", text)
    store.end_turn(Fence(job.id, "tok"), finish, session_id, draft, completion=completion.ended)
    return store.get_job(job.id)


def set_finished_at(svc: Services, job_id: str, when: object) -> None:
    """Age a finished job (as if it had ended ``when``)."""
    with svc.store.engine.begin() as conn:
        conn.execute(update(JobRow).where(JobRow.id == job_id).values(finished_at=when))


def test_an_artifact_is_recorded_only_above_the_cap_only_once_and_only_with_its_result(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put(AGENT)
    store = client.services.store
    s = client.sessions.create(agent_id="bot")

    at_cap = finished(stack, s.id, "y" * RESULT_CAP)
    failed = finished(stack, s.id, None)
    assert store.artifacts.get(at_cap.id) is None
    assert store.artifacts.get(failed.id) is None

    big = finished(stack, s.id, BIG)
    artifact = store.artifacts.get(big.id)
    assert artifact is not None
    data = BIG.encode("utf-8")
    assert (artifact.job_id, artifact.session_id, artifact.media_type) == (big.id, s.id, TEXT)
    assert artifact.byte_length == len(data) > len(BIG)
    assert artifact.sha256 == hashlib.sha256(data).hexdigest()
    assert big.result == BIG  # the full text stays in the job

    # A second record for the same job (a replayed end, another text) changes nothing.
    with store.engine.begin() as conn:
        artifacts.record(conn, big.id, s.id, BIG + "more")
    assert store.artifacts.get(big.id) == artifact

    # A turn's end that is refused (its worker lost the job) records nothing.
    lost = running(stack, s.id, token="tok-1")
    store.start_turn(lost.id, "tok-2")  # another worker took it over
    with pytest.raises(LeaseLost):
        store.end_turn(
            Fence(lost.id, "tok-1"),
            Finish(lost.id, JobStatus.SUCCEEDED, result=BIG),
            s.id,
            NewEntry(EntryType.MESSAGE, "agent:bot", "stale"),
            completion=completion.ended,
        )
    assert store.artifacts.get(lost.id) is None
    with store.engine.connect() as conn:
        rows = conn.execute(ArtifactRow.__table__.select()).all()
    assert [r.job_id for r in rows] == [big.id]


def test_job_output_caps_reports_the_artifact_and_full_reads_it_only_if_authorized(
    stack: Stack,
) -> None:
    client = stack.client
    client.agents.put(AGENT)
    svc = client.services
    s = client.sessions.create(agent_id="bot")
    big = finished(stack, s.id, BIG)
    small = finished(stack, s.id, "short")
    artifact = svc.store.artifacts.get(big.id)
    assert artifact is not None

    out = control.job_output(svc, big.id, s.id)
    assert out["truncated"] is True
    assert len(out["result"]) <= RESULT_CAP
    assert out["result"].startswith("HEAD:éé") and out["result"].endswith("xx:TAIL")
    assert out["artifact"] == {
        "id": artifact.id,
        "media_type": TEXT,
        "byte_length": len(BIG.encode()),
        "sha256": artifact.sha256,
    }
    whole = control.job_output(svc, big.id, s.id, full=True)
    assert (whole["result"], whole["truncated"]) == (BIG, False)
    assert whole["artifact"] == out["artifact"]
    assert client.jobs.output(big.id, full=True)["result"] == BIG
    assert client.jobs.output(big.id)["result"] == out["result"]

    # Within the cap there is nothing to cut and no artifact; full is the same text.
    for full in (False, True):
        short = control.job_output(svc, small.id, s.id, full=full)
        assert (short["result"], short["truncated"], short["artifact"]) == ("short", False, None)

    # A session of another tree: exactly a missing job, with or without full.
    stranger = client.sessions.create(agent_id="bot")
    for full in (False, True):
        with pytest.raises(JobNotFound) as denied:
            control.job_output(svc, big.id, stranger.id, full=full)
        assert denied.value.to_dict() == missing_job(big.id).to_dict()

    # An artifact that does not describe the stored text is not reported.
    with svc.store.engine.begin() as conn:
        conn.execute(
            update(ArtifactRow).where(ArtifactRow.job_id == big.id).values(sha256="0" * 64)
        )
    assert control.job_output(svc, big.id, s.id)["artifact"] is None
    with pytest.raises(ArtifactNotFound):
        control.job_output(svc, big.id, s.id, full=True)


def test_retention_removes_only_eligible_artifacts_and_cuts_their_results(stack: Stack) -> None:
    client = stack.client
    client.agents.put(AGENT)
    svc = client.services
    store = svc.store
    s = client.sessions.create(agent_id="bot")
    old = finished(stack, s.id, BIG)
    recent = finished(stack, s.id, BIG + "!")
    # A job still running whose artifact exists (record() called mid-turn) is never eligible.
    active = running(stack, s.id)
    with store.engine.begin() as conn:
        artifacts.record(conn, active.id, s.id, BIG)
    now = utcnow()
    set_finished_at(svc, old.id, now - 10 * DAY)
    set_finished_at(svc, recent.id, now - 2 * DAY)

    # The use case: nothing without a retention setting, however late it is.
    assert retention.expire_artifacts(svc, now=now + 1000 * DAY) == 0
    kept = Services(stack.settings.model_copy(update={"artifact_retention_days": 7}))
    try:
        assert retention.expire_artifacts(kept, now=now) == 1
        assert retention.expire_artifacts(kept, now=now) == 0
    finally:
        kept.close()

    assert store.artifacts.get(old.id) is None
    assert store.get_job(old.id).result == excerpt(BIG)[0]
    assert store.get_job(recent.id).result == BIG + "!"
    assert store.artifacts.get(recent.id) is not None
    assert store.artifacts.get(active.id) is not None

    # The cut result reads as cut, and its full text is gone for good.
    out = control.job_output(svc, old.id, s.id)
    assert (out["result"], out["truncated"], out["artifact"]) == (excerpt(BIG)[0], True, None)
    with pytest.raises(ArtifactNotFound) as gone:
        control.job_output(svc, old.id, s.id, full=True)
    assert gone.value.code == "artifact.not_found"
    with pytest.raises(ArtifactNotFound):
        client.jobs.output(old.id, full=True)

    # The store's sweep: the cutoff is "finished before", and terminal jobs only.
    assert store.artifacts.expire(now - 2 * DAY - timedelta(seconds=1)) == 0
    assert store.artifacts.expire(now + DAY) == 1
    assert store.get_job(recent.id).result == excerpt(BIG + "!")[0]
    assert store.artifacts.get(active.id) is not None


def test_beat_runs_the_sweep_on_the_control_queue() -> None:
    from chaz import celery_settings
    from workers.app import app

    entry = celery_settings.beat_schedule["chaz-expire-artifacts"]
    assert entry["task"] == "chaz.expire_artifacts"
    assert entry["schedule"] == celery_settings._settings.artifact_sweep_seconds
    assert celery_settings.task_routes["chaz.expire_artifacts"] == {"queue": "chaz.control"}
    app.loader.import_default_modules()
    assert "chaz.expire_artifacts" in app.tasks


def test_event_retention_deletes_only_old_events(stack: Stack) -> None:
    from sqlalchemy import update

    from chaz.store.models import EventRow

    client = stack.client
    client.agents.put(AGENT)
    svc = client.services
    s = client.sessions.create(agent_id="bot")
    old = svc.store.events.add(s.id, "test.old", {})
    new = svc.store.events.add(s.id, "test.new", {})
    now = utcnow()
    with svc.store.engine.begin() as conn:
        conn.execute(
            update(EventRow).where(EventRow.id == old.id).values(created_at=now - 10 * DAY)
        )
    assert retention.expire_events(svc, now=now) == 0  # no retention set: keep all
    kept = Services(stack.settings.model_copy(update={"event_retention_days": 7}))
    try:
        assert retention.expire_events(kept, now=now) == 1
        assert retention.expire_events(kept, now=now) == 0
    finally:
        kept.close()
    assert [e.id for e in svc.store.events.list(s.id)] == [new.id]
    from chaz import celery_settings

    assert celery_settings.beat_schedule["chaz-expire-events"]["task"] == "chaz.expire_events"
