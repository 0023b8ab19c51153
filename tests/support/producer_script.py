"""One producer script, run through an in-process ``chaz.Client`` and through
``chaz.Client(url=...)``, whose results must be equal (tests/acceptance/
test_remote_client.py). Run as ``python -m tests.support.producer_script`` it
is the remote side: a process with only ``CHAZ_URL`` and ``CHAZ_API_KEY``.

Gates: the script names a gate on stdout (``GATE name``) and the parent opens
it, so turns that must wait do so without a clock.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import chaz
from chaz.errors import ChazError

SAYER, STREAMER, HOLDER = "http-sayer", "http-streamer", "http-holder"
ANSWER = "The quick brown fox jumps over the lazy dog."
WAIT = 60.0


def refusal(call: Callable[[], Any]) -> list[str]:
    """``[class name, code]`` of the error ``call`` raises (it must raise one)."""
    try:
        result = call()
        if isinstance(result, Iterator):
            next(result)
    except ChazError as exc:
        return [type(exc).__name__, exc.code]
    raise AssertionError(f"{call} was not refused")


def run(client: chaz.Client, gate: Callable[[str], None], other: dict[str, str]) -> dict[str, Any]:
    """The script's results, free of ids (``other``: another project's session
    ``session`` and job ``job``, and ids of nothing ``missing_session``,
    ``missing_job``)."""
    out: dict[str, Any] = {"principal": [client.principal.name, client.principal.operator]}
    sessions, jobs = client.sessions, client.jobs

    # Post, wait for the reply, read it back.
    s = sessions.create(SAYER, name=None)
    posted = sessions.post(s.id, "hi")
    reply = sessions.wait_for_reply(s.id, after=posted.seq, timeout=WAIT)
    out["reply"] = [reply.seq, reply.type.value, reply.sender, reply.content]
    out["entries"] = [[e.seq, e.type.value, e.sender, e.content] for e in sessions.entries(s.id)]
    assert sessions.entries(s.id, after=1, limit=1) == sessions.entries(s.id)[1:2]
    job = jobs.wait(posted.job_id or "", timeout=WAIT)
    assert jobs.get(job.id) == job
    out["job"] = [job.status.value, job.version, job.attempts, job.session_id == s.id]
    out["listed"] = [
        s.id in [x.id for x in sessions.list(agent_id=SAYER, limit=100)],
        [j.id for j in jobs.list(session_id=s.id)] == [job.id],
        sessions.get(s.id) == next(x for x in sessions.list(limit=100) if x.id == s.id),
        sessions.queue(s.id),
    ]
    again = sessions.post(s.id, "hi", idempotency_key="k1")
    out["idempotent"] = sessions.post(s.id, "hi", idempotency_key="k1") == again
    out["mismatch"] = refusal(lambda: sessions.post(s.id, "other", idempotency_key="k1"))
    out["bad"] = [
        refusal(lambda: sessions.post(s.id, "   ")),
        refusal(lambda: sessions.entries(s.id, after=-1)),
        refusal(lambda: sessions.create("no-such-agent")),
        refusal(lambda: jobs.list(status="bogus")),
        refusal(lambda: sessions.wait_for_reply(s.id, after=999, timeout=0.2)),
        refusal(lambda: client.agents.put({"id": "x"})),
    ]
    out["agent"] = client.agents.get(SAYER).model_dump(mode="json")
    out["agents"] = SAYER in [a.id for a in client.agents.list()]

    # Watch with partials: the Ack says the watch is subscribed; then the gate.
    st = sessions.create(STREAMER)
    asked = sessions.post(st.id, "tell me")
    parts: list[str] = []
    seen: list[list[Any]] = []
    for item in sessions.watch(st.id, after=asked.seq, timeout=WAIT, partial=True):
        if isinstance(item, chaz.Partial):
            parts.append(item.text)
            continue
        seen.append([item.seq, item.type.value, item.content])
        if item.type is chaz.EntryType.ACK:
            gate(f"go-{st.id}")
        if item.type is chaz.EntryType.MESSAGE:
            break
    out["streamed"] = [seen, "".join(parts) == ANSWER, len(parts) >= 3]
    # A watch that times out ends quietly, without the live part.
    out["watched"] = [e.seq for e in sessions.watch(s.id, after=0, timeout=0.2)]

    # Cancel a held turn; stop a session with a held turn and a queued one.
    held = sessions.create(HOLDER)
    first = sessions.post(held.id, "one")
    outcome = jobs.cancel(first.job_id or "", reason="test")
    out["cancelled"] = [sorted(outcome), jobs.wait(first.job_id or "", timeout=WAIT).status.value]
    second = sessions.post(held.id, "two")
    third = sessions.post(held.id, "three")
    stopped = sessions.stop(held.id, reason="test")
    out["stopped"] = [
        sorted(stopped),
        len(stopped["cancelled"]),
        jobs.wait(second.job_id or "", timeout=WAIT).status.value,
        jobs.wait(third.job_id or "", timeout=WAIT).status.value,
    ]

    # Deliveries, events, schedules and approvals.
    target = sessions.create(SAYER)
    sent = client.deliveries.send(target.id, "from afar", reply="completion")
    done = jobs.wait(sent.job_id or "", timeout=WAIT) if sent.job_id else None
    result = client.deliveries.result(sent.id)
    out["delivery"] = [
        # Admitted at once (the target is idle); its job may even have ended
        # before the answer was read back, on a slow side: both are right.
        sent.state.value in ("admitted", "done"),
        done.status.value if done else None,
        client.deliveries.get(sent.id) == client.deliveries.list(target.id)[0],
        client.deliveries.status(sent.id),
        result is None,
        refusal(lambda: client.deliveries.send(target.id, "x", reply="bogus")),
    ]
    out["events"] = sorted({e.kind for e in client.events.list(target.id, limit=100)})
    schedules = client.schedules
    tick = schedules.add(SAYER, prompt="tick", kind="interval", interval_seconds=3600)
    changed = schedules.update(tick.id, prompt="tock")
    out["schedule"] = [
        tick.kind.value,
        changed.prompt,
        schedules.get(tick.id) == changed,
        [x.id for x in schedules.list(SAYER)] == [tick.id],
        schedules.pause(tick.id).enabled,
        schedules.resume(tick.id).enabled,
        schedules.fires(tick.id),
        schedules.remove(tick.id).id == tick.id,
        refusal(lambda: schedules.get(tick.id)),
        refusal(lambda: schedules.add(SAYER, prompt="x", kind="interval", interval_seconds=-1)),
    ]
    out["approvals"] = [client.approvals.pending(), refusal(lambda: client.approvals.get("nope"))]

    # Another project's session and job answer exactly as missing ones.
    out["denied"] = {
        "other": denials(client, other["session"], other["job"]),
        "missing": denials(client, other["missing_session"], other["missing_job"]),
    }
    return json.loads(json.dumps(out, default=str))


def denials(client: chaz.Client, sid: str, jid: str) -> list[list[str]]:
    """What reading, streaming, waiting on, writing to and cancelling session
    ``sid`` and job ``jid`` raise."""
    sessions, jobs = client.sessions, client.jobs
    return [
        refusal(lambda: sessions.get(sid)),
        refusal(lambda: sessions.entries(sid)),
        refusal(lambda: sessions.watch(sid, timeout=0.2, partial=True)),
        refusal(lambda: sessions.wait_for_reply(sid, after=1, timeout=0.2)),
        refusal(lambda: sessions.post(sid, "forged")),
        refusal(lambda: sessions.stop(sid)),
        refusal(lambda: sessions.queue(sid)),
        refusal(lambda: jobs.get(jid)),
        refusal(lambda: jobs.wait(jid, timeout=0.2)),
        refusal(lambda: jobs.cancel(jid)),
        refusal(lambda: jobs.list(session_id=sid)),
        refusal(lambda: client.events.list(sid)),
        refusal(lambda: client.deliveries.list(sid)),
        refusal(lambda: client.deliveries.send(sid, "forged")),
        refusal(lambda: client.approvals.pending(sid)),
    ]


def main() -> None:
    """The remote side: ``other`` as JSON in argv[1]; gates asked on stdout,
    answered on stdin; the results as the last line."""
    other = json.loads(sys.argv[1])

    def gate(name: str) -> None:
        print(f"GATE {name}", flush=True)
        assert sys.stdin.readline().strip() == "opened"

    with chaz.Client() as client:  # CHAZ_URL and CHAZ_API_KEY: nothing else
        result = run(client, gate, other)
    result["sqlalchemy_loaded"] = "sqlalchemy" in sys.modules
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
