"""Withdrawing queued work (docs/collaboration.md#withdrawal) and the session-wide
Stop (docs/executions.md#stop), without workers.

A message a job left in a busy target's inbox is withdrawn by that job's
cancel, and the withdrawal races the inbox's admission of the same delivery
by a compare-and-set on its state: the tests force each order (and the
admission landing inside the cancel) by calling the two operations in turn,
and every order ends with the delivery either withdrawn or its job
cancelled, never both and never neither.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

import chaz
from chaz.domain.deliveries import (
    WITHDRAWN_CODE,
    Delivered,
    Delivery,
    DeliveryKind,
    DeliveryState,
    NewBranch,
    Reply,
    Sender,
)
from chaz.domain.jobs import JobStatus
from chaz.domain.principals import LOCAL, Principal
from chaz.errors import Cancelled, Forbidden, IdempotencyMismatch, SessionNotFound
from chaz.runtime.backends.base import ToolCallRequest
from chaz.services import Services
from chaz.usecases import admission, control, deliveries
from chaz.usecases.stop import stop_session
from tests.support.principals import session_in
from tests.support.stack import Stack
from tests.support.turns import interactive_turn

AGENT = chaz.AgentSpec(id="quiet", script=[{"steps": [{"say": "ok"}]}])


@pytest.fixture
def services(stack: Stack) -> Iterator[Services]:
    stack.client.agents.put(AGENT)
    svc = Services(stack.settings)
    yield svc
    svc.close()


def _queued_message(services: Services, stack: Stack, text: str = "hi") -> tuple[str, Delivered]:
    """A producer's job in a sender session that left ``text`` in the inbox of a
    busy target (its own queued job holds it: no worker runs here)."""
    client = stack.client
    sender = client.sessions.create("quiet")
    target = client.sessions.create("quiet")
    assert client.sessions.post(target.id, "busy", sender="user:t").job_id
    job_id = client.sessions.post(sender.id, "send", sender="user:t").job_id
    assert job_id is not None
    who = Sender(
        sender="agent:quiet", key=f"message:{job_id}:1", session_id=sender.id, job_id=job_id
    )
    done = deliveries.deliver(
        services, who, services.store.get_session(target.id), DeliveryKind.MESSAGE, text
    )
    assert done.queued
    return job_id, done


def test_a_cancel_withdraws_what_its_job_left_in_a_busy_inbox(
    services: Services, stack: Stack
) -> None:
    job_id, queued = _queued_message(services, stack)
    outcome = control.cancel(services, job_id)
    assert outcome["withdrawn"] == [queued.delivery.id] and outcome["cascaded"] == []
    withdrawn = services.store.deliveries.get(queued.delivery.id)
    assert withdrawn.state is DeliveryState.WITHDRAWN and withdrawn.code == WITHDRAWN_CODE
    # No command id: the cancelled job is recorded as what withdrew it.
    assert withdrawn.metadata["withdrawn_by"] == job_id
    # Withdrawn first, admitted second: the admission finds it gone, writes nothing.
    assert deliveries.admit_accepted(services, queued.delivery) is None
    assert deliveries.drain(services, queued.session.id) == 0
    assert services.store.list_jobs(parent_job_id=job_id) == []
    # The event logs of both sessions say so.
    kinds = [e.kind for e in stack.client.events.list(queued.session.id)]
    assert "delivery.withdrawn" in kinds


def test_a_delivery_admitted_first_is_not_withdrawn_and_its_job_is_cancelled(
    services: Services, stack: Stack
) -> None:
    job_id, queued = _queued_message(services, stack)
    admitted = deliveries.admit_accepted(services, queued.delivery)
    assert admitted is not None and admitted.parent_job_id == job_id
    outcome = control.cancel(services, job_id, command_id="cancel-admitted-first")
    assert outcome["withdrawn"] == [] and outcome["cascaded"] == [admitted.id]
    assert services.store.get_job(admitted.id).status is JobStatus.CANCELLED
    assert services.store.deliveries.get(queued.delivery.id).state is not DeliveryState.WITHDRAWN


def test_an_admission_inside_the_cancel_loses_nothing(
    services: Services, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox admits the message after the cancel read the lineage and before
    it cancels the sender: the job it admitted is no descendant the cancel
    read, its delivery is no longer there to withdraw, and the cancel still
    finds and cancels that job."""
    job_id, queued = _queued_message(services, stack)
    silence = services.store.silence_followups
    admitted: list[chaz.Job] = []

    def admission_between(job_ids: Iterable[str]) -> None:
        if not admitted:
            job = deliveries.admit_accepted(services, queued.delivery)
            assert job is not None
            admitted.append(job)
        silence(job_ids)

    monkeypatch.setattr(services.store, "silence_followups", admission_between)
    outcome = control.cancel(services, job_id, command_id="cancel-raced")
    [job] = admitted
    assert outcome["withdrawn"] == [] and outcome["cascaded"] == [job.id]
    assert services.store.get_job(job.id).status is JobStatus.CANCELLED
    delivery = services.store.deliveries.get(queued.delivery.id)
    assert delivery.state is DeliveryState.DONE and delivery.job_id == job.id
    # Its end sends nothing back to the cancelled sender.
    sender = queued.delivery.sender_session_id or ""
    assert services.store.deliveries.list(sender, direction="in") == []


def test_an_admission_after_the_senders_cancel_withdraws_instead(
    services: Services, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inbox admits the message after the cancel moved the sender and before
    the cancel's withdrawal: the admission sees the sender cancelled and
    withdraws it; the cancel's withdrawal then finds nothing left."""
    job_id, queued = _queued_message(services, stack)
    withdraw = services.store.deliveries.withdraw_sent
    tried: list[chaz.Job | None] = []

    def admission_first(*args: Any, **kwargs: Any) -> list[Delivery]:
        tried.append(deliveries.admit_accepted(services, queued.delivery))
        return withdraw(*args, **kwargs)

    monkeypatch.setattr(services.store.deliveries, "withdraw_sent", admission_first)
    outcome = control.cancel(services, job_id, command_id="cancel-raced-late")
    assert tried == [None]
    assert outcome["withdrawn"] == [] and outcome["cascaded"] == []
    delivery = services.store.deliveries.get(queued.delivery.id)
    assert delivery.state is DeliveryState.WITHDRAWN and delivery.job_id is None
    assert services.store.list_jobs(parent_job_id=job_id) == []


def test_a_message_queued_after_its_senders_cancel_is_withdrawn_not_run(
    services: Services, stack: Stack
) -> None:
    """A tool call in flight when the cancel came queues its message after the
    cancel's withdrawal: the inbox's admission finds its sender cancelled and
    withdraws it instead."""
    client = stack.client
    sender = client.sessions.create("quiet")
    target = client.sessions.create("quiet")
    assert client.sessions.post(target.id, "busy", sender="user:t").job_id
    job_id = client.sessions.post(sender.id, "send", sender="user:t").job_id or ""
    assert control.cancel(services, job_id, command_id="cancel-before")["withdrawn"] == []
    who = Sender(
        sender="agent:quiet", key=f"message:{job_id}:late", session_id=sender.id, job_id=job_id
    )
    late = deliveries.deliver(
        services, who, services.store.get_session(target.id), DeliveryKind.MESSAGE, "late"
    )
    assert late.queued
    assert deliveries.admit_accepted(services, late.delivery) is None
    withdrawn = services.store.deliveries.get(late.delivery.id)
    assert withdrawn.state is DeliveryState.WITHDRAWN and withdrawn.code == WITHDRAWN_CODE
    assert withdrawn.metadata["withdrawn_by"] == job_id
    assert services.store.list_jobs(parent_job_id=job_id) == []
    # The admission rolled back whole: no Directive in the target, no quota spent.
    assert [e.content for e in client.sessions.entries(target.id)] == ["busy"]


def test_a_cancel_cancels_the_queued_follow_up_of_a_child_that_ended_first(
    services: Services, stack: Stack
) -> None:
    """A child of the cancelled job ended before the cancel, and its follow-up
    waits in the cancelled job's session as a queued turn: that turn is queued
    work of the lineage, and is cancelled with it."""
    client = stack.client
    caller = client.sessions.create("quiet")
    job_id = client.sessions.post(caller.id, "spawn", sender="user:t").job_id or ""
    who = Sender(
        sender="agent:quiet",
        key=f"spawn:{job_id}:1",
        session_id=caller.id,
        job_id=job_id,
        tree_id=caller.tree_id,
    )
    child = deliveries.spawn(services, who, NewBranch("quiet", "work", reply=Reply.FOLLOWUP))
    assert child.job is not None
    control.cancel(services, child.job.id)  # on its own: it answers its caller once
    [answer] = [j for j in services.store.list_jobs(session_id=caller.id) if j.id != job_id]
    assert answer.status is JobStatus.QUEUED
    outcome = control.cancel(services, job_id)
    assert outcome["cascaded"] == [answer.id] and outcome["withdrawn"] == []
    assert services.store.get_job(answer.id).status is JobStatus.CANCELLED


def test_the_cancel_records_its_command_id(services: Services, stack: Stack) -> None:
    job_id, queued = _queued_message(services, stack)
    first = control.cancel(services, job_id, command_id="cancel-with-id")
    assert services.store.deliveries.get(queued.delivery.id).metadata["withdrawn_by"] == (
        "cancel-with-id"
    )
    assert control.cancel(services, job_id, command_id="cancel-with-id") == first


def test_stop_withdraws_the_inbox_and_cancels_the_queue(services: Services, stack: Stack) -> None:
    _, queued = _queued_message(services, stack)
    target = queued.session.id
    [busy] = services.store.list_jobs(session_id=target)
    more = stack.client.sessions.post(target, "more", sender="user:t").job_id
    outcome = stop_session(services, target, principal=LOCAL, command_id="stop-1", reason="halt")
    assert outcome["action"] == "session.stop" and outcome["session_id"] == target
    assert [o["execution_id"] for o in outcome["cancelled"]] == [busy.id, more]
    assert outcome["withdrawn"] == [queued.delivery.id] and outcome["changed"] is True
    assert {j.status for j in services.store.list_jobs(session_id=target)} == {JobStatus.CANCELLED}
    withdrawn = services.store.deliveries.get(queued.delivery.id)
    assert withdrawn.state is DeliveryState.WITHDRAWN
    assert withdrawn.metadata["withdrawn_by"] == "stop-1"
    # Repeated with its command id: the first outcome, nothing more.
    assert stop_session(services, target, principal=LOCAL, command_id="stop-1") == outcome
    # Without one, a second stop finds nothing left to do.
    again = stop_session(services, target, principal=LOCAL)
    assert again["changed"] is False and again["withdrawn"] == []
    assert all(not o["changed"] for o in again["cancelled"])


def test_stop_is_authorized_like_a_cancel(services: Services, stack: Stack) -> None:
    stack.client.agents.put(AGENT)
    mine = stack.client.sessions.create("quiet")
    job = stack.client.sessions.post(mine.id, "busy", sender="user:t").job_id
    theirs = session_in(stack.client, "quiet", "other-project")
    other = Principal(name="user:other", project="other-project")
    with pytest.raises(SessionNotFound) as missing:
        stop_session(services, mine.id, principal=other)
    with pytest.raises(SessionNotFound) as absent:
        stop_session(services, "0000000000000000", principal=other)
    assert missing.value.code == absent.value.code == "session.not_found"
    with pytest.raises(Forbidden):
        stop_session(services, mine.id, principal=Principal(grants=frozenset()))
    assert services.store.get_job(job or "").status is JobStatus.QUEUED
    # A command id is its project's own: used again in the project for another
    # command it is a mismatch; another project's use of it is not seen at all.
    stop_session(services, theirs.id, principal=other, command_id="stop-1")
    elsewhere = session_in(stack.client, "quiet", "other-project")
    with pytest.raises(IdempotencyMismatch):
        stop_session(services, elsewhere.id, principal=other, command_id="stop-1")
    assert services.store.get_job(job or "").status is JobStatus.QUEUED
    done = control.cancel(services, job or "", command_id="stop-1")
    assert done["changed"] is True
    assert services.store.get_job(job or "").status is JobStatus.CANCELLED
    assert control.cancel(services, job or "", command_id="stop-1") == done  # its retry
    with pytest.raises(IdempotencyMismatch):
        stop_session(services, mine.id, principal=LOCAL, command_id="stop-1")


def _running_sender(services: Services, stack: Stack) -> tuple[str, Sender, chaz.Session]:
    """A sender job whose turn runs (started as a worker would), and an idle target."""
    client = stack.client
    sender = client.sessions.create("quiet")
    target = client.sessions.create("quiet")
    job_id = client.sessions.post(sender.id, "send", sender="user:t").job_id or ""
    services.store.start_turn(job_id, "tok-sender")
    who = Sender(
        sender="agent:quiet",
        key=f"message:{job_id}:in-flight",
        session_id=sender.id,
        job_id=job_id,
        tree_id=sender.tree_id,
    )
    return job_id, who, target


def test_an_in_flight_send_admitting_after_the_cascade_is_withdrawn(
    services: Services, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender's tool call found its target idle and was about to admit the
    message at once when the cancel cascade ran, read the lineage and
    finished: the admission, inside its transaction, finds the sender
    stopping and records the delivery withdrawn; no job, nothing in the
    target."""
    job_id, who, target = _running_sender(services, stack)
    transact = admission.transact
    outcomes: list[dict[str, Any]] = []

    def cascade_first(*args: Any, **kwargs: Any) -> Any:
        outcomes.append(control.cancel(services, job_id, command_id="cancel-in-flight"))
        return transact(*args, **kwargs)

    monkeypatch.setattr(admission, "transact", cascade_first)
    done = deliveries.deliver(
        services, who, services.store.get_session(target.id), DeliveryKind.MESSAGE, "late"
    )
    [outcome] = outcomes
    assert outcome["status"] == JobStatus.STOPPING.value and outcome["cascaded"] == []
    assert done.job is None and not done.queued
    assert done.delivery.state is DeliveryState.WITHDRAWN and done.delivery.code == WITHDRAWN_CODE
    assert done.delivery.metadata["withdrawn_by"] == job_id
    assert services.store.list_jobs(parent_job_id=job_id) == []
    assert stack.client.sessions.entries(target.id) == []
    # A replay of the same call answers the same, and still admits nothing.
    monkeypatch.setattr(admission, "transact", transact)
    again = deliveries.deliver(
        services, who, services.store.get_session(target.id), DeliveryKind.MESSAGE, "late"
    )
    assert again.delivery.id == done.delivery.id and not again.created and again.job is None
    # A spawn in flight the same way creates nothing: no session, no job.
    before = len(stack.client.sessions.list())
    spawner = Sender(
        sender="agent:quiet",
        key=f"spawn:{job_id}:in-flight",
        session_id=who.session_id,
        job_id=job_id,
        tree_id=who.tree_id,
    )
    with pytest.raises(Cancelled) as refused:
        deliveries.spawn(services, spawner, NewBranch("quiet", "work", reply=Reply.FOLLOWUP))
    assert refused.value.code == "job.cancelled"
    assert len(stack.client.sessions.list()) == before
    assert services.store.list_jobs(parent_job_id=job_id) == []


def test_a_cascade_waits_for_an_admission_that_read_its_sender_first(
    services: Services, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admission checked its sender (running) and holds it share-locked,
    uncommitted, when the cascade reads the lineage: the cascade's move of
    the sender waits for the commit, then finds the admitted job and
    cancels it."""
    job_id, who, target = _running_sender(services, stack)
    lineage_read, checked = threading.Event(), threading.Event()
    check = deliveries.check_sender

    def check_then_hold(tx: Any, sender_job_id: str | None, delivery_id: str) -> None:
        check(tx, sender_job_id, delivery_id)
        checked.set()
        assert lineage_read.wait(60), "the cascade never read the lineage"

    read = control.descendants

    def read_then_go_on(svc: Services, root: str) -> list[chaz.Job]:
        found = read(svc, root)
        lineage_read.set()
        return found

    monkeypatch.setattr(deliveries, "check_sender", check_then_hold)
    monkeypatch.setattr(control, "descendants", read_then_go_on)
    admitted: list[Delivered] = []
    sending = threading.Thread(
        target=lambda: admitted.append(
            deliveries.deliver(
                services, who, services.store.get_session(target.id), DeliveryKind.MESSAGE, "hi"
            )
        )
    )
    sending.start()
    assert checked.wait(60), "the admission never checked its sender"
    outcome = control.cancel(services, job_id, command_id="cancel-waits")
    sending.join(60)
    [done] = admitted
    assert done.job is not None and done.job.parent_job_id == job_id
    assert outcome["cascaded"] == [done.job.id] and outcome["withdrawn"] == []
    assert services.store.get_job(done.job.id).status is JobStatus.CANCELLED


def test_a_stopping_turns_tools_say_withdrawn_and_admit_nothing(
    services: Services, stack: Stack
) -> None:
    """What the model reads when its tool call lands after its own cancel: the
    message is reported withdrawn, ``agent(to=)`` fails ``job.cancelled``."""
    client = stack.client
    sender = client.sessions.create("quiet")
    target = client.sessions.create("quiet")
    ctx = interactive_turn(client, sender.id, ["send_message", "agent"])
    services.store.start_turn(ctx.job_id, "tok-tools")
    assert control.cancel(services, ctx.job_id)["status"] == JobStatus.STOPPING.value

    def call(name: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        request = ToolCallRequest(id=f"c-{name}", name=name, arguments=json.dumps(args))
        outcome = client.tools.invoke(request, ctx)
        return json.loads(outcome.output), outcome.is_error

    sent, is_error = call("send_message", {"to": target.id, "message": "hi"})
    assert not is_error and sent["status"] == DeliveryState.WITHDRAWN.value, sent
    assert services.store.deliveries.get(sent["delivery_id"]).code == WITHDRAWN_CODE
    ran, is_error = call("agent", {"to": target.id, "prompt": "go", "run_in_background": True})
    assert is_error and ran["error"]["code"] == "job.cancelled", ran
    assert services.store.list_jobs(parent_job_id=ctx.job_id) == []
    assert client.sessions.entries(target.id) == []


def test_a_job_admitted_inside_the_cascade_is_cancelled_with_what_it_sent(
    services: Services, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the cascade's read of the lineage and its move of the sender, the
    sender admitted a job at once into an idle target, and that job ran and
    sent work of its own: the cascade finds the late job and cancels it with
    its lineage, so what it sent does not run either."""
    job_id, who, target = _running_sender(services, stack)
    onward = stack.client.sessions.create("quiet")
    silence = services.store.silence_followups
    made: list[str] = []

    def sends_between(job_ids: Iterable[str]) -> None:
        if not made:
            late = deliveries.deliver(
                services, who, services.store.get_session(target.id), DeliveryKind.AGENT, "go"
            )
            assert late.job is not None
            services.store.start_turn(late.job.id, "tok-late")
            hop = Sender(
                sender="agent:quiet",
                key=f"message:{late.job.id}:onward",
                session_id=target.id,
                job_id=late.job.id,
                tree_id=target.tree_id,
            )
            further = deliveries.deliver(
                services, hop, services.store.get_session(onward.id), DeliveryKind.AGENT, "on"
            )
            assert further.job is not None and further.job.parent_job_id == late.job.id
            made.extend([late.job.id, further.job.id])
        silence(job_ids)

    monkeypatch.setattr(services.store, "silence_followups", sends_between)
    outcome = control.cancel(services, job_id, command_id="cancel-late-lineage")
    late_id, further_id = made
    assert outcome["cascaded"] == [late_id, further_id]
    assert services.store.get_job(late_id).status is JobStatus.STOPPING
    assert services.store.get_job(further_id).status is JobStatus.CANCELLED


# -- schedules a cancelled lineage added (docs/schedules.md#a-cancelled-creator)


def _add_schedule(client: chaz.Client, ctx: Any, call_id: str) -> tuple[dict[str, Any], bool]:
    """The turn of ``ctx`` calls ``schedule_add`` (every hour, pinned to its session)."""
    args = {"prompt": "tick", "interval_seconds": 3600}
    request = ToolCallRequest(id=call_id, name="schedule_add", arguments=json.dumps(args))
    outcome = client.tools.invoke(request, ctx)
    return json.loads(outcome.output), outcome.is_error


def test_a_cancel_pauses_the_schedules_its_lineage_added_and_a_stop_does_too(
    services: Services, stack: Stack
) -> None:
    client = stack.client
    session = client.sessions.create("quiet")
    ctx = interactive_turn(client, session.id, ["schedule_add"])
    services.store.start_turn(ctx.job_id, "tok-sched")
    made, is_error = _add_schedule(client, ctx, "c-1")
    assert not is_error and made["enabled"], made
    assert client.schedules.get(made["id"]).job_id == ctx.job_id
    # A producer's schedule has no creator job: no cancel pauses it.
    own = client.schedules.add("quiet", kind="interval", prompt="p", interval_seconds=60)
    assert own.job_id is None
    outcome = control.cancel(services, ctx.job_id, command_id="cancel-sched")
    assert outcome["paused"] == [made["id"]]
    paused = client.schedules.get(made["id"])
    assert not paused.enabled and paused.disabled_reason is not None
    assert "cancelled (by cancel-sched)" in paused.disabled_reason
    assert client.schedules.get(own.id).enabled
    # The stopping turn's next add adds nothing: its job is no longer running.
    late, is_error = _add_schedule(client, ctx, "c-2")
    assert is_error and late["error"]["code"] == "job.cancelled", late
    assert [s.id for s in client.schedules.list() if s.job_id == ctx.job_id] == [made["id"]]
    # Paused, not lost: a resume turns it on again, and a second cancel
    # (nothing left to change) pauses nothing more.
    assert client.schedules.resume(made["id"]).enabled
    assert control.cancel(services, ctx.job_id)["paused"] == [made["id"]]

    # A session-wide Stop pauses what the lineages it cancels added.
    other = client.sessions.create("quiet")
    running = interactive_turn(client, other.id, ["schedule_add"])
    services.store.start_turn(running.job_id, "tok-sched-2")
    added, _ = _add_schedule(client, running, "c-3")
    stopped = stop_session(services, other.id, principal=LOCAL)
    assert stopped["paused"] == [added["id"]] and stopped["changed"]
    assert not client.schedules.get(added["id"]).enabled
