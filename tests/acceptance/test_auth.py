"""Principals, projects, grants and API keys on the producer side (issue 11, items
1 and 4; the client and CLI part of item 3).

Through the public entries (``chaz.Client``, ``chaz`` CLI), on both stacks with
real workers: a missing grant is ``auth.forbidden`` before any lookup and
changes nothing; another project's session, job, delivery, schedule or
approval reads exactly like a missing one; another project's job cannot be
cancelled, even with its exact id and version; an API key cannot change the
install-wide agents; listings keep to the project.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import text

import chaz
from chaz.domain.approvals import Approval
from chaz.domain.principals import ALL_GRANTS, Grant
from chaz.errors import ChazError
from chaz.ids import new_id
from tests.acceptance.test_cli import chaz_cli, cli_env, ok
from tests.support.stack import Stack

WAIT = 60
#: Every table a producer's call could change.
TABLES = (
    "agents",
    "sessions",
    "entries",
    "jobs",
    "commands",
    "deliveries",
    "events",
    "schedules",
    "schedule_fires",
    "approvals",
    "api_keys",
)


def _error(call: Callable[[], object]) -> dict[str, Any]:
    with pytest.raises(ChazError) as caught:
        result = call()
        if isinstance(result, Iterator):
            next(result)
    return caught.value.to_dict()


def _snapshot(stack: Stack) -> dict[str, list[str]]:
    """Every row of every table, as text: a call that changed nothing leaves it equal."""
    out: dict[str, list[str]] = {}
    with stack.client.services.store.engine.connect() as conn:
        for table in TABLES:
            rows = conn.execute(text(f"SELECT * FROM {table}")).mappings()
            out[table] = sorted(json.dumps(dict(r), default=str, sort_keys=True) for r in rows)
    return out


def _agents(client: chaz.Client) -> None:
    client.agents.put_many(
        [
            chaz.AgentSpec(id="echo", script=[{"steps": [{"echo": True}]}]),
            chaz.AgentSpec(
                id="held",
                script=[
                    {
                        "steps": [
                            {"wait": "auth-{session_id}", "timeout": 120},
                            {"say": "released"},
                        ]
                    }
                ],
            ),
            chaz.AgentSpec(
                id="careful",
                tools=["echo"],
                script=[{"steps": [{"call": "echo", "args": {"text": "{input}"}}, {"say": "ok"}]}],
                tool_policies={"echo": {"approval": "always", "timeout": 300}},
            ),
            chaz.AgentSpec(id="kid", script=[{"steps": [{"say": "kid done"}]}]),
            chaz.AgentSpec(
                id="boss",
                tools=["agent"],
                script=[
                    # The kid's follow-up: acknowledged, so the chain ends there.
                    {"match": "finished", "steps": [{"say": "noted"}]},
                    {
                        "steps": [
                            {
                                "call": "agent",
                                "args": {
                                    "prompt": "help",
                                    "agent_id": "kid",
                                    "run_in_background": True,
                                },
                            },
                            {"say": "asked"},
                        ]
                    },
                ],
            ),
        ]
    )


def _waiting(stack: Stack, client: chaz.Client, job_id: str) -> Approval:
    def found() -> Approval | None:
        return next((a for a in client.approvals.pending() if a.job_id == job_id), None)

    request = stack.wait_for(found, WAIT, f"job {job_id} waiting for approval")
    assert request is not None
    return request


@dataclass
class Objects:
    """One project's session, finished job, room, delivery, schedule and pending approval."""

    session: chaz.Session
    job: chaz.Job
    room: chaz.Session
    delivery_id: str
    schedule_id: str
    approval: Approval


def _objects(stack: Stack, client: chaz.Client) -> Objects:
    s = client.sessions.create("echo")
    posted = client.sessions.post(s.id, "hello", sender="user:tester")
    job = client.jobs.wait(posted.job_id or "", timeout=WAIT)
    room = client.sessions.create("echo", members=["kid"])
    boss = client.sessions.create("boss")
    asked = client.sessions.post(boss.id, "go", sender="user:tester")
    client.jobs.wait(asked.job_id or "", timeout=WAIT)
    delivery = client.deliveries.list(boss.id, direction="out")[0]
    # The kid's follow-up has been answered, and every turn has ended (or
    # waits for a decision): nothing moves under a snapshot.
    stack.wait_for(
        lambda: any(e.content == "noted" for e in client.sessions.entries(boss.id)),
        WAIT,
        "the boss to read its kid's follow-up",
    )
    every = stack.client.services.store.list_jobs
    stack.wait_for(
        lambda: all(
            j.status.terminal or j.status is chaz.JobStatus.WAITING_APPROVAL
            for j in every(limit=10_000)
        ),
        WAIT,
        "every job to finish",
    )
    schedule = client.schedules.add("echo", prompt="tick", kind="interval", interval_seconds=3600)
    c = client.sessions.create("careful")
    held = client.sessions.post(c.id, "launch", sender="user:tester")
    approval = _waiting(stack, client, held.job_id or "")
    return Objects(s, job, room, delivery.id, schedule.id, approval)


@contextmanager
def _client(stack: Stack, **kw: Any) -> Iterator[chaz.Client]:
    with chaz.Client(stack.settings, migrate=False, **kw) as client:
        yield client


def _same_as_missing(denied: Callable[[str], object], real: str, what: str, **args: str) -> None:
    """``denied(real)`` fails exactly like the same call on an id that never existed."""
    fake = new_id()
    got = json.dumps(_error(lambda: denied(real)), sort_keys=True).replace(real, "ID")
    missing = json.dumps(_error(lambda: denied(fake)), sort_keys=True).replace(fake, "ID")
    assert got == missing, f"{what}: {got} != {missing}"
    assert "not_found" in got, got


def test_a_missing_grant_is_forbidden_before_any_lookup_and_changes_nothing(
    stack: Stack,
) -> None:
    stack.workers(1, concurrency=4, queues="chaz.turns")
    _agents(stack.client)
    with _client(stack, project="acme") as acme:
        mine = _objects(stack, acme)
    s, j = mine.session.id, mine.job.id
    sched, request = mine.schedule_id, mine.approval.request_id
    needs: dict[Grant, list[Callable[[chaz.Client], object]]] = {
        Grant.SESSION_WRITE: [
            lambda c: c.sessions.create("echo"),
            lambda c: c.sessions.post(s, "hi", sender="user:alice"),
            lambda c: c.sessions.post(s, "note", type="summary", idempotency_key="k"),
            lambda c: c.sessions.fork(s, at=1),
            lambda c: c.sessions.rename(s, "renamed"),
            lambda c: c.sessions.add_member(mine.room.id, "boss"),
            lambda c: c.sessions.remove_member(mine.room.id, "kid"),
        ],
        Grant.HISTORY_READ: [
            lambda c: c.sessions.get(s),
            lambda c: c.sessions.list(),
            lambda c: c.sessions.rooms(),
            lambda c: c.sessions.entries(s),
            lambda c: c.sessions.watch(s, timeout=0.1),
            lambda c: c.sessions.wait_for_reply(s, after=1, timeout=0.1),
            lambda c: c.sessions.attachment(s, 1),
            lambda c: c.sessions.queue(s),
            lambda c: c.events.list(s),
            lambda c: c.events.follow(s, timeout=0.1),
            lambda c: c.deliveries.get(mine.delivery_id),
            lambda c: c.deliveries.list(s),
            lambda c: c.jobs.get(j),
            lambda c: c.jobs.list(),
            lambda c: c.jobs.wait(j, timeout=0.1),
            lambda c: c.jobs.output(j),
            lambda c: c.schedules.get(sched),
            lambda c: c.schedules.list(),
            lambda c: c.schedules.fires(sched),
            lambda c: c.approvals.pending(),
            lambda c: c.approvals.get(request),
        ],
        Grant.SESSION_ARCHIVE: [lambda c: c.sessions.archive(s)],
        Grant.RUNTIME_CONTROL: [
            lambda c: c.jobs.cancel(mine.approval.job_id),
            lambda c: c.jobs.cancel(new_id()),  # checked before the lookup: no not_found
        ],
        Grant.SCHEDULE_MANAGE: [
            lambda c: c.schedules.add("echo", prompt="x", kind="interval", interval_seconds=60),
            lambda c: c.schedules.update(sched, prompt="changed"),
            lambda c: c.schedules.pause(sched),
            lambda c: c.schedules.resume(sched),
            lambda c: c.schedules.remove(sched),
        ],
        Grant.APPROVAL_DECIDE: [lambda c: c.approvals.decide(request, "approve")],
    }
    assert set(needs) | {Grant.AGENT_SPAWN, Grant.MESSAGE_SEND} == ALL_GRANTS
    before = _snapshot(stack)
    for grant, calls in needs.items():
        held = sorted(g.value for g in ALL_GRANTS - {grant})
        _, plaintext = stack.client.keys.create("user:alice", "acme", held)
        keyed = [chaz.Client(stack.settings, migrate=False, api_key=plaintext)]
        # An operator who narrows its own grants is held to them just the same.
        keyed.append(chaz.Client(stack.settings, migrate=False, project="acme", grants=held))
        for client in keyed:
            with client:
                for i, call in enumerate(calls):
                    err = _error(lambda: call(client))  # noqa: B023
                    assert err["code"] == "auth.forbidden", (grant, i, err)
                    assert err["details"]["grant"] == grant.value
    after = _snapshot(stack)
    # Only the keys made here are new; nothing else changed.
    assert len(after.pop("api_keys")) == len(before.pop("api_keys")) + len(needs)
    assert after == before
    # With every grant, the same calls go through.
    with _client(stack, project="acme") as acme:
        assert acme.approvals.decide(request, "approve").effective
        assert acme.sessions.get(s).id == s


def test_another_projects_objects_read_exactly_like_missing_ones(stack: Stack) -> None:
    stack.workers(1, concurrency=4, queues="chaz.turns")
    _agents(stack.client)
    theirs = _objects(stack, stack.client)
    stack.client.sessions.rename(theirs.session.id, "secret-name")
    _, plaintext = stack.client.keys.create("user:mallory", "acme", sorted(ALL_GRANTS))
    before = _snapshot(stack)
    with _client(stack, api_key=plaintext) as key, _client(stack, project="acme") as op:
        for c in (key, op):
            checks: list[tuple[str, str, Callable[[str], object]]] = [
                ("session get", theirs.session.id, lambda r: c.sessions.get(r)),  # noqa: B023
                ("entries", theirs.session.id, lambda r: c.sessions.entries(r)),  # noqa: B023
                ("watch", theirs.session.id, lambda r: c.sessions.watch(r, timeout=0.1)),  # noqa: B023
                (
                    "wait_for_reply",
                    theirs.session.id,
                    lambda r: c.sessions.wait_for_reply(r, timeout=0.1),  # noqa: B023
                ),
                ("attachment", theirs.session.id, lambda r: c.sessions.attachment(r, 1)),  # noqa: B023
                ("queue", theirs.session.id, lambda r: c.sessions.queue(r)),  # noqa: B023
                ("events", theirs.session.id, lambda r: c.events.list(r)),  # noqa: B023
                ("follow", theirs.session.id, lambda r: c.events.follow(r, timeout=0.1)),  # noqa: B023
                ("session deliveries", theirs.session.id, lambda r: c.deliveries.list(r)),  # noqa: B023
                ("session jobs", theirs.session.id, lambda r: c.jobs.list(session_id=r)),  # noqa: B023
                ("tree", theirs.session.id, lambda r: c.sessions.list(tree=r)),  # noqa: B023
                ("post", theirs.session.id, lambda r: c.sessions.post(r, "hi")),  # noqa: B023
                (
                    "replay",
                    theirs.session.id,
                    lambda r: c.sessions.post(r, "hi", idempotency_key="k"),  # noqa: B023
                ),
                ("fork", theirs.session.id, lambda r: c.sessions.fork(r, at=1)),  # noqa: B023
                ("rename", theirs.session.id, lambda r: c.sessions.rename(r, f"n{new_id()}")),  # noqa: B023
                ("archive", theirs.session.id, lambda r: c.sessions.archive(r)),  # noqa: B023
                ("add member", theirs.room.id, lambda r: c.sessions.add_member(r, "boss")),  # noqa: B023
                ("job get", theirs.job.id, lambda r: c.jobs.get(r)),  # noqa: B023
                ("job output", theirs.job.id, lambda r: c.jobs.output(r)),  # noqa: B023
                ("job wait", theirs.job.id, lambda r: c.jobs.wait(r, timeout=0.1)),  # noqa: B023
                ("delivery", theirs.delivery_id, lambda r: c.deliveries.get(r)),  # noqa: B023
                ("schedule get", theirs.schedule_id, lambda r: c.schedules.get(r)),  # noqa: B023
                ("schedule fires", theirs.schedule_id, lambda r: c.schedules.fires(r)),  # noqa: B023
                ("schedule pause", theirs.schedule_id, lambda r: c.schedules.pause(r)),  # noqa: B023
                ("schedule remove", theirs.schedule_id, lambda r: c.schedules.remove(r)),  # noqa: B023
                (
                    "approval get",
                    theirs.approval.request_id,
                    lambda r: c.approvals.get(r),  # noqa: B023
                ),
                (
                    "approval decide",
                    theirs.approval.request_id,
                    lambda r: c.approvals.decide(r, "approve"),  # noqa: B023
                ),
                (
                    "approval pending",
                    theirs.approval.session_id,
                    lambda r: c.approvals.pending(r),  # noqa: B023
                ),
            ]
            for what, real, call in checks:
                _same_as_missing(call, real, what)
            # A session's name reads as missing too, and so does a pinned schedule.
            assert _error(lambda: c.sessions.get("secret-name"))["code"] == "session.not_found"  # noqa: B023
            assert _error(lambda: c.sessions.archive("secret"))["code"] == "session.not_found"  # noqa: B023
            pinned = _error(
                lambda: c.schedules.add(  # noqa: B023
                    "echo",
                    prompt="x",
                    kind="interval",
                    interval_seconds=60,
                    target="pinned",
                    session_id=theirs.session.id,
                )
            )
            assert pinned["code"] == "session.not_found", pinned
    # The other project's approval was not decided, its session not archived.
    assert _snapshot(stack) == before
    assert stack.client.approvals.decide(theirs.approval.request_id, "approve").effective


def test_cancelling_another_projects_job_is_not_found_and_it_runs_to_completion(
    stack: Stack,
) -> None:
    stack.workers(1, concurrency=4, queues="chaz.turns")
    _agents(stack.client)
    client = stack.client
    s = client.sessions.create("held")
    posted = client.sessions.post(s.id, "hold", sender="user:tester")
    job_id = posted.job_id or ""
    running = stack.wait_for(
        lambda: (j := client.jobs.get(job_id)).status is chaz.JobStatus.RUNNING and j,
        WAIT,
        "the held job to run",
    )
    assert running
    # An earlier, finished job, cancelled (a no-op) under a command id.
    done = client.sessions.create("echo")
    first = client.sessions.post(done.id, "x", sender="user:tester")
    client.jobs.wait(first.job_id or "", timeout=WAIT)
    client.jobs.cancel(first.job_id or "", command_id="shared")
    before = _snapshot(stack)
    _, plaintext = client.keys.create("user:mallory", "acme", ["runtime.control"])
    with _client(stack, api_key=plaintext) as key, _client(stack, project="acme") as op:
        for c in (key, op):
            err = _error(
                lambda: c.jobs.cancel(  # noqa: B023
                    job_id, expected_version=running.version, command_id="c1", reason="mine"
                )
            )
            # Answered exactly as a missing job: the id says nothing.
            missing = _error(lambda: c.jobs.cancel("0" * 16))  # noqa: B023
            assert err["code"] == "job.not_found", err
            assert err["details"] == {"job_id": job_id}
            assert err["message"] == missing["message"].replace("0" * 16, job_id)
            # The CLI's path is the same one.
            env = cli_env(settings=stack.settings)
            args = ["jobs", "cancel", job_id, "--expected-version", str(running.version)]
            who = ["--api-key", plaintext] if c is key else ["--project", "acme"]
            out = chaz_cli(*who, *args, env=env)
            assert out.returncode == 2 and "error [job.not_found]" in out.stderr, out  # EXIT_USAGE
            assert "Traceback" not in out.stderr
        # A command id another project used is this project's own here: it
        # applies to its own job, and nothing of the other's outcome shows.
        mine = op.sessions.create("echo")
        own = op.sessions.post(mine.id, "y", sender="user:m")
        op.jobs.wait(own.job_id or "", timeout=WAIT)
        reused = op.jobs.cancel(own.job_id or "", command_id="shared")
        assert reused["execution_id"] == own.job_id and reused["changed"] is False
        assert (first.job_id or "") not in json.dumps(reused)
        # Without runtime.control, even its own job is refused.
        _, reader = client.keys.create("user:mallory", "acme", ["history.read"])
        with _client(stack, api_key=reader) as r:
            assert _error(lambda: r.jobs.cancel(own.job_id or ""))["code"] == "auth.forbidden"
    after = _snapshot(stack)
    # Acme's own session, job and "shared" command were added; the refused
    # commands left no trace.
    assert len(set(after["commands"]) - set(before["commands"])) == 1
    assert set(before["commands"]) <= set(after["commands"])
    held = client.jobs.get(job_id)
    assert (held.status, held.version) == (chaz.JobStatus.RUNNING, running.version)
    assert not [e for e in client.sessions.entries(s.id) if e.type is chaz.EntryType.ERROR]
    stack.open_gate(f"auth-{s.id}")
    assert client.jobs.wait(job_id, timeout=WAIT).status is chaz.JobStatus.SUCCEEDED
    reply = client.sessions.wait_for_reply(s.id, after=posted.seq, timeout=WAIT)
    assert reply.content == "released"


def test_listings_keep_to_the_project_and_work_carries_its_principal(stack: Stack) -> None:
    stack.workers(1, concurrency=4, queues="chaz.turns")
    _agents(stack.client)
    theirs = _objects(stack, stack.client)
    with _client(stack, project="acme") as op:
        ours = _objects(stack, op)
        _, plaintext = stack.client.keys.create(
            "user:alice", "acme", ["history.read", "session.write"], label="alice"
        )
        stack.client.keys.create("user:bob", "other", ["history.read"])
        with _client(stack, api_key=plaintext) as alice:
            for c, mine, other in (
                (op, ours, theirs),
                (alice, ours, theirs),
                (stack.client, theirs, ours),
            ):
                sessions = {x.id for x in c.sessions.list(limit=1000)}
                assert mine.session.id in sessions and other.session.id not in sessions
                rooms = {x.id for x in c.sessions.rooms()}
                assert rooms == {mine.room.id}
                jobs = {x.id for x in c.jobs.list(limit=1000)}
                assert mine.job.id in jobs and other.job.id not in jobs
                expected = "acme" if mine is ours else "default"
                assert {x.project for x in c.jobs.list(limit=1000)} == {expected}
                assert {x.id for x in c.schedules.list()} == {mine.schedule_id}
                assert [a.request_id for a in c.approvals.pending()] == [mine.approval.request_id]
                assert {x.id for x in c.jobs.list(status="waiting_approval")} == {
                    mine.approval.job_id
                }
            # What alice starts is hers: her session, her job, her grants.
            s = alice.sessions.create("echo", name="alices")
            assert (s.project, s.owner) == ("acme", "user:alice")
            posted = alice.sessions.post(s.id, "mine", sender="user:alice")
            job = alice.jobs.wait(posted.job_id or "", timeout=WAIT)
            assert (job.project, job.owner, job.grants) == (
                "acme",
                "user:alice",
                ["history.read", "session.write"],
            )
            assert alice.sessions.wait_for_reply(s.id, after=posted.seq).content == "mine"
            # An idempotent replay into another project's session returns nothing of it.
            stack.client.sessions.post(theirs.session.id, "same", idempotency_key="k1")
            replay = _error(
                lambda: alice.sessions.post(theirs.session.id, "same", idempotency_key="k1")
            )
            assert replay["code"] == "session.not_found" and "same" not in json.dumps(replay)
            mismatch = _error(
                lambda: alice.sessions.post(theirs.session.id, "other", idempotency_key="k1")
            )
            assert mismatch == replay
        # A schedule carries its project, owner and grants.
        with _client(
            stack, project="acme", principal="user:carol", grants="history.read,schedule.manage"
        ) as carol:
            sched = carol.schedules.add("echo", prompt="t", kind="interval", interval_seconds=600)
        assert (sched.project, sched.owner, sched.grants) == (
            "acme",
            "user:carol",
            ["history.read", "schedule.manage"],
        )
        assert sched.id in {x.id for x in op.schedules.list()}
        assert sched.id not in {x.id for x in stack.client.schedules.list()}
    assert [k.label for k in stack.client.keys.list(project="acme")] == ["alice"]
    assert [k.principal for k in stack.client.keys.list(project="other")] == ["user:bob"]


def test_an_api_key_cannot_change_agents(stack: Stack) -> None:
    _agents(stack.client)
    _, plaintext = stack.client.keys.create("user:alice", "default", sorted(ALL_GRANTS))
    before = _snapshot(stack)
    with _client(stack, api_key=plaintext) as alice:
        spec = chaz.AgentSpec(
            id="echo", system_prompt="changed", script=[{"steps": [{"echo": True}]}]
        )
        for call in (
            lambda: alice.agents.put(spec),
            lambda: alice.agents.put({"id": "new", "script": [{"steps": [{"echo": True}]}]}),
            lambda: alice.agents.put_many([spec]),
        ):
            assert _error(call)["code"] == "auth.forbidden"
        # Reading them is fine.
        assert {a.id for a in alice.agents.list()} >= {"echo", "held"}
        assert alice.agents.get("echo").system_prompt != "changed"
    assert _snapshot(stack) == before


def test_the_cli_manages_keys_and_acts_as_them(stack: Stack) -> None:
    _agents(stack.client)
    env = cli_env(settings=stack.settings)
    theirs = stack.client.sessions.create("echo", name="default-room")
    made = chaz_cli(
        "keys",
        "create",
        "--principal",
        "user:alice",
        "--project",
        "acme",
        "--grants",
        "history.read,session.write",
        "--label",
        "laptop",
        env=env,
    )
    plaintext = ok(made).strip()
    assert plaintext.startswith("chz_") and "not shown again" in made.stderr
    [key] = stack.client.keys.list()
    assert plaintext.split("_")[1] == key.id and key.label == "laptop"
    as_json = json.loads(
        ok(
            chaz_cli(
                "keys",
                "create",
                "--principal",
                "user:bob",
                "--project",
                "acme",
                "--grants",
                "history.read",
                "--json",
                env=env,
            )
        )
    )
    assert as_json["key"].startswith("chz_") and "not shown again" in as_json["warning"]
    listed = json.loads(ok(chaz_cli("keys", "ls", "--project", "acme", "--json", env=env)))
    assert [k["principal"] for k in listed] == ["user:alice", "user:bob"]
    assert all("key_hash" not in k and "key" not in k for k in listed)

    # --api-key (or CHAZ_API_KEY) makes every command act as the key.
    made_s = json.loads(
        ok(chaz_cli("--api-key", plaintext, "sessions", "new", "echo", "--json", env=env))
    )
    assert made_s["project"] == "acme" and made_s["owner"] == "user:alice"
    # A key's entries are written as its principal.
    sent = chaz_cli("--api-key", plaintext, "send", made_s["id"], "hi", "--json", env=env)
    assert json.loads(ok(sent))["sender"] == "user:alice"
    posing = chaz_cli(
        "--api-key", plaintext, "send", made_s["id"], "x", "--sender", "user:bob", env=env
    )
    assert posing.returncode == 1 and "error [auth.forbidden]" in posing.stderr
    keyed = {**env, "CHAZ_API_KEY": plaintext}
    seen = json.loads(ok(chaz_cli("sessions", "ls", "--json", env=keyed)))
    assert [x["id"] for x in seen] == [made_s["id"]]
    hidden = chaz_cli("sessions", "show", theirs.id, env=keyed)
    assert hidden.returncode == 2 and "error [session.not_found]" in hidden.stderr
    # The global --project of an operator, before or after the command.
    for args in (
        ("--project", "acme", "sessions", "ls", "--json"),
        ("sessions", "ls", "--project", "acme", "--json"),
    ):
        assert [x["id"] for x in json.loads(ok(chaz_cli(*args, env=env)))] == [made_s["id"]]
    # Keys are an operator's business.
    refused = chaz_cli("keys", "ls", env=keyed)
    assert refused.returncode == 1 and "error [auth.forbidden]" in refused.stderr

    ok(chaz_cli("keys", "revoke", key.id, env=env))
    for run in (
        chaz_cli("sessions", "ls", env=keyed),
        chaz_cli("--api-key", "chz_nonsense", "sessions", "ls", env=env),
    ):
        assert run.returncode == 1, run
        assert run.stderr.strip() == "error [auth.unauthenticated]: the API key is not valid"
    gone = chaz_cli("keys", "revoke", "ffffffffffffffff", env=env)
    assert gone.returncode == 2 and "error [key.not_found]" in gone.stderr
    bad = chaz_cli(
        "keys",
        "create",
        "--principal",
        "alice",
        "--project",
        "acme",
        "--grants",
        "history.read",
        env=env,
    )
    assert bad.returncode == 2 and "error [request.invalid]" in bad.stderr
    assert "Traceback" not in bad.stderr
