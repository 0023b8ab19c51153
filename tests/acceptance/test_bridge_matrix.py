"""Issue 23's first slice: ``chaz bridge matrix`` against a real Synapse on
127.0.0.1, a real ``chaz serve`` and real workers (docs/bridges.md).

The bridge runs as a child process whose environment holds no database or
Redis settings: only the config file, with chaz's URL and API keys. People are
Matrix users of their own (``tests/support/synapse.py``) and everything is
checked as a person's Matrix client sees the room. Replies that must pile up
wait at a gate the test opens, so nothing races the clock.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pytest

import chaz
from chaz.domain.entries import EntryType
from chaz.domain.principals import ALL_GRANTS
from chaz.usecases.doctor import bridge_stale_after, check_bridge
from tests.acceptance.test_cli import INTERRUPTIBLE_CLI, cli_env
from tests.acceptance.test_outages import RestartableStack
from tests.conftest import free_port
from tests.support.redis_server import RedisServer
from tests.support.serve import serving
from tests.support.stack import Stack
from tests.support.synapse import MatrixUser, Synapse, running_synapse, synapse_or_skip

pytestmark = pytest.mark.bridge
T = TypeVar("T")

#: How long a worker, the bridge or the homeserver may take on a loaded machine.
WAIT = 90
ECHO = chaz.AgentSpec(id="bridge-echo", script=[{"steps": [{"say": "echo: {input}"}]}])
HELD = chaz.AgentSpec(
    id="bridge-held",
    script=[{"steps": [{"wait": "hold-{session_id}"}, {"say": "held: {input}"}]}],
)
CAREFUL = chaz.AgentSpec(
    id="bridge-careful",
    tools=["echo"],
    script=[
        {"steps": [{"call": "echo", "args": {"text": "{input}"}}, {"say": "after {last_result}"}]}
    ],
    tool_policies={"echo": {"approval": "always", "timeout": 300, "show": ["text"]}},
)
STREAMER = chaz.AgentSpec(
    id="bridge-streamer",
    script=[
        {
            "steps": [
                {"wait": "go-{session_id}"},
                {
                    "stream": "a streamed answer to {input}, told in small pieces",
                    "chunk": 4,
                    "hold": "more-{session_id}",
                },
            ]
        }
    ],
)
MAX_BYTES = 8192
REFUSAL = "Sorry, you are not allowed to talk to this agent."


@dataclass
class World:
    """Synapse, the module's fleet and ``chaz serve`` in front of it."""

    synapse: Synapse
    stack: Stack
    url: str
    home: Path
    bridges: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)

    def key(self, project: str, principal: str, without: tuple[str, ...] = ()) -> str:
        """A new API key of ``principal`` in ``project`` with every grant but ``without``."""
        grants = [g for g in ALL_GRANTS if g not in without]
        _, plaintext = self.stack.client.keys.create(principal, project, grants)
        return plaintext

    def start_bridge(self, config: Path) -> subprocess.Popen[bytes]:
        """``chaz bridge matrix --config FILE`` with no CHAZ_* settings at all;
        returned once it has synced and is ready."""
        log_path = config.with_suffix(f".{len(self.bridges)}.log")
        log = log_path.open("w")
        child = subprocess.Popen(
            [*INTERRUPTIBLE_CLI, "bridge", "matrix", "--config", str(config)],
            env=cli_env(home=config.parent / "chaz-home"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.bridges.append(child)
        self.logs[child.pid] = log_path

        def ready() -> bool:
            assert child.poll() is None, f"the bridge exited: {log_path.read_text()[-3000:]}"
            return "ready as" in log_path.read_text()

        self.stack.wait_for(ready, WAIT, "the bridge to sync")
        return child


@pytest.fixture(scope="module")
def world(module_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    synapse_or_skip()
    home = tmp_path_factory.mktemp("bridge")
    module_stack.workers(1, concurrency=4)
    for spec in (ECHO, HELD, CAREFUL, STREAMER):
        module_stack.client.agents.put(spec)
    # A small CHAZ_MAX_CONTENT_BYTES on the server: a Matrix event can be
    # larger than chaz takes (a homeserver's own limit is 64 KiB).
    with (
        running_synapse(home / "synapse") as synapse,
        serving(module_stack, CHAZ_MAX_CONTENT_BYTES=str(MAX_BYTES)) as url,
    ):
        w = World(synapse, module_stack, url, home)
        try:
            yield w
        finally:
            for child in w.bridges:
                if child.poll() is None:
                    child.kill()
                    child.wait()


@dataclass
class Scene:
    """One test's project, bot, people and config."""

    world: World
    synapse: Synapse
    project: str
    bot: MatrixUser
    bridge_key: str
    config: Path
    people: dict[str, MatrixUser]

    def write(
        self,
        rooms: list[dict[str, str]],
        mapped: list[str],
        *,
        without: dict[str, tuple[str, ...]] | None = None,
        **extra: Any,
    ) -> None:
        """The bridge's config: ``rooms``, and the ``mapped`` people with keys of
        their own (with every grant but those ``without`` names for them)."""
        users = {
            self.people[p].user_id: {
                "api_key": self.world.key(self.project, f"user:{p}", (without or {}).get(p, ()))
            }
            for p in mapped
        }
        body = {
            "chaz": {"url": self.world.url, "api_key": self.bridge_key},
            "matrix": {
                "homeserver": self.synapse.url,
                "user_id": self.bot.user_id,
                "access_token": self.bot.token,
            },
            "rooms": rooms,
            "users": users,
            "state": "state.sqlite",
            "poll_seconds": 1,
            **extra,
        }
        self.config.write_text(json.dumps(body))

    def reader(self) -> chaz.Client:
        """The bridge's own key as a remote client, to read its sessions."""
        return chaz.Client(url=self.world.url, api_key=self.bridge_key)

    def session_of(self, room: str) -> str:
        """The session the bridge made for ``room``."""
        return self.reader().sessions.get(f"matrix {room}").id

    def cursor(self, room: str) -> int:
        """The bridge's saved cursor of ``room`` (0 before it bound the room)."""
        with sqlite3.connect(self.config.parent / "state.sqlite") as db:
            row = db.execute("SELECT sent_seq FROM rooms WHERE room = ?", (room,)).fetchone()
        return int(row[0]) if row else 0


@pytest.fixture
def scene(world: World) -> Scene:
    return make_scene(world, world.synapse)


def make_scene(world: World, synapse: Synapse) -> Scene:
    """A project, a bot and three people of their own on ``synapse``."""
    tag = uuid.uuid4().hex[:8]
    folder = world.home / tag
    folder.mkdir()
    bot = synapse.register(f"bot{tag}")
    people = {p: synapse.register(f"{p}{tag}") for p in ("alice", "carol", "mallory")}
    project = f"bridge-{tag}"
    bridge_key = world.key(project, "user:bridge")
    return Scene(world, synapse, project, bot, bridge_key, folder / "bridge.json", people)


def eventually(stack: Stack, what: str, check: Callable[[], bool]) -> None:
    stack.wait_for(check, WAIT, what)


def eventually_value(stack: Stack, what: str, value: Callable[[], T | None]) -> T:
    found = stack.wait_for(value, WAIT, what)
    assert found is not None
    return found


def test_a_persons_message_gets_the_agents_reply_in_the_room(scene: Scene) -> None:
    alice, mallory = scene.people["alice"], scene.people["mallory"]
    room = alice.create_room(scene.bot.user_id, mallory.user_id)
    mallory.join(room)
    port = free_port()
    scene.write(
        [{"room": room, "agent": ECHO.id}],
        ["alice"],
        unknown_users="refuse",
        metrics_port=port,
        metrics_addr="127.0.0.1",
    )
    child = scene.world.start_bridge(scene.config)

    mallory.say(room, "let me in")  # not mapped: refused, never admitted
    alice.say(room, "hello agent")
    stack = scene.world.stack
    eventually(
        stack, "the reply", lambda: "echo: hello agent" in alice.said_by(room, scene.bot.user_id)
    )

    # As alice's own client sees the room: the refusal of mallory, then the reply, once each.
    assert alice.said_by(room, scene.bot.user_id) == [REFUSAL, "echo: hello agent"]
    kinds = [
        e["content"]["msgtype"] for e in alice.messages(room) if e["sender"] == scene.bot.user_id
    ]
    assert kinds == ["m.notice", "m.text"]
    entries = scene.reader().sessions.entries(scene.session_of(room))
    people = [e for e in entries if e.type == "message" and not e.sender.startswith("agent:")]
    assert [(e.sender, e.content) for e in people] == [("user:alice", "hello agent")]
    assert people[0].metadata["platform_user"] == alice.user_id

    # Its metrics, and chaz doctor's check of them (CHAZ_BRIDGES).
    url = f"http://127.0.0.1:{port}/metrics"
    counted = [
        'chaz_bridge_messages_in_total{platform="matrix"} 1.0',
        'chaz_bridge_messages_out_total{platform="matrix"} 1.0',
        f'chaz_bridge_lag_seconds{{platform="matrix",room="{room}"}}',
    ]
    # Counted just after the post and the send return: the room may show the
    # reply a moment before.
    eventually(
        stack,
        "the metrics",
        lambda: all(line in httpx.get(url, timeout=WAIT).text for line in counted),
    )
    assert check_bridge(url).ok
    later = time.time() + bridge_stale_after(1) + 1  # as doctor would see it then
    stale = check_bridge(url, now=later)
    assert not stale.ok and "has not synced for" in stale.detail
    child.kill()
    child.wait()
    gone = check_bridge(url)
    assert not gone.ok and "no metrics" in gone.detail


def test_a_room_bound_to_an_existing_session_starts_at_its_end(scene: Scene) -> None:
    alice = scene.people["alice"]
    room = alice.create_room(scene.bot.user_id)
    reader = scene.reader()
    name = f"kept-{uuid.uuid4().hex[:6]}"
    session = reader.sessions.create(ECHO.id, name=name)
    earlier = reader.sessions.post(session.id, "said before the bridge")
    reader.sessions.wait_for_reply(session.id, after=earlier.seq, timeout=WAIT)
    scene.write([{"room": room, "session": name}], ["alice"])  # by name: resolved at start
    scene.world.start_bridge(scene.config)
    alice.say(room, "and now from matrix")
    _settle(scene, room, 1, session=session.id)
    # The reply before the binding stays out of the room: only the new one is there.
    assert _bot_says(scene, room) == ["echo: and now from matrix"]


def test_a_room_joined_on_an_invite_relays_only_what_is_said_after_the_join(
    scene: Scene,
) -> None:
    alice = scene.people["alice"]
    room = alice.create_room()  # the bot is not invited yet: it cannot join at start
    scene.write([{"room": room, "agent": ECHO.id}], ["alice"])
    scene.world.start_bridge(scene.config)
    alice.say(room, "said before the bot was here")
    alice.call("POST", f"/rooms/{quote(room)}/invite", json={"user_id": scene.bot.user_id})

    def joined() -> bool:
        members = alice.call("GET", f"/rooms/{quote(room)}/joined_members")["joined"]
        return scene.bot.user_id in members

    eventually(scene.world.stack, "the bot to join on the invite", joined)
    alice.say(room, "said after the join")
    session = _settle(scene, room, 1)
    assert _bot_says(scene, room) == ["echo: said after the join"]
    assert _said_in_chaz(scene, session, "user:") == ["said after the join"]


def test_messages_of_two_people_in_two_rooms_arrive_in_order_and_replies_once(
    scene: Scene,
) -> None:
    alice, carol = scene.people["alice"], scene.people["carol"]
    rooms = [alice.create_room(scene.bot.user_id, carol.user_id) for _ in range(2)]
    for room in rooms:
        carol.join(room)
    scene.write([{"room": r, "agent": ECHO.id} for r in rooms], ["alice", "carol"])
    scene.world.start_bridge(scene.config)

    sent: dict[str, list[str]] = {room: [] for room in rooms}
    for i in range(50):
        person = (alice, carol)[i % 2]
        room = rooms[(i // 2) % 2]
        text = f"message {i} from {person.user_id}"
        person.say(room, text)
        sent[room].append(text)

    for room in rooms:
        session = _settle(scene, room, len(sent[room]))
        assert _bot_says(scene, room) == [f"echo: {text}" for text in sent[room]]
        entries = scene.reader().sessions.entries(session)
        people = ("user:alice", "user:carol")
        posted = [e.content for e in entries if e.type == "message" and e.sender in people]
        assert posted == sent[room]


def test_a_streamed_answer_is_one_message_whose_last_edit_is_the_stored_reply(
    scene: Scene,
) -> None:
    alice = scene.people["alice"]
    room = alice.create_room(scene.bot.user_id)
    # A watch as long as the test: partials have no backlog, and the first
    # piece must not fall between two watches (docs/bridges.md#streaming).
    scene.write([{"room": room, "agent": STREAMER.id}], ["alice"], poll_seconds=60)
    stack = scene.world.stack
    scene.world.start_bridge(scene.config)
    alice.say(room, "the question")
    eventually(stack, "the bridge to watch the session", lambda: scene.cursor(room) > 0)
    session = scene.session_of(room)
    stack.open_gate(f"go-{session}")
    # The first piece is in the room while the gate holds the rest.
    eventually(stack, "the first piece", lambda: _bot_says(scene, room) == ["a st"])
    stack.open_gate(f"more-{session}")
    eventually(stack, "the reply stored", lambda: len(_said_in_chaz(scene, session, "agent:")) == 1)
    _settle(scene, room, 1)  # and the bridge's cursor past it: its last edit sent

    [stored] = _said_in_chaz(scene, session, "agent:")
    assert stored == "a streamed answer to the question, told in small pieces"
    bot = [e for e in alice.messages(room) if e["sender"] == scene.bot.user_id]
    edits = [e for e in bot if e["content"].get("m.relates_to", {}).get("rel_type") == "m.replace"]
    [message] = [e for e in bot if e not in edits]  # one message, the rest edits of it
    assert message["content"]["body"] == "a st"
    assert edits and all(
        e["content"]["m.relates_to"]["event_id"] == message["event_id"] for e in edits
    )
    assert edits[-1]["content"]["m.new_content"]["body"] == stored


def test_a_bridge_killed_mid_burst_resends_nothing_twice_and_loses_nothing(
    scene: Scene,
) -> None:
    alice = scene.people["alice"]
    room = alice.create_room(scene.bot.user_id)
    scene.write([{"room": room, "agent": HELD.id}], ["alice"])
    world, stack = scene.world, scene.world.stack
    first = world.start_bridge(scene.config)
    # The state as it was before anything was said: a copy put back after the
    # kill makes the restarted bridge redo everything (every poll, post and
    # send) under the same ids, as a bridge killed between each step and its
    # save would, at every step at once.
    before = scene.config.parent / "before.sqlite"
    _copy_state(scene, before)

    texts = [f"burst {i}" for i in range(20)]
    for text in texts:
        alice.say(room, text)
    eventually(stack, "the bridge to bind the room", lambda: scene.cursor(room) > 0)
    session = scene.session_of(room)

    def admitted() -> list[str]:
        entries = scene.reader().sessions.entries(session)
        return [e.content for e in entries if e.type == "message" and e.sender == "user:alice"]

    eventually(stack, "all 20 admitted", lambda: len(admitted()) == 20)
    stack.open_gate(f"hold-{session}")
    eventually(stack, "some replies sent", lambda: len(_bot_says(scene, room)) >= 1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    _copy_state(scene, scene.config.parent / "state.sqlite", source=before)

    world.start_bridge(scene.config)
    _settle(scene, room, 20)
    assert _bot_says(scene, room) == [f"held: {text}" for text in texts]
    assert admitted() == texts  # the redelivered events admitted nothing twice


def test_replies_made_while_the_homeserver_is_down_arrive_once_in_order(scene: Scene) -> None:
    alice = scene.people["alice"]
    room = alice.create_room(scene.bot.user_id)
    scene.write([{"room": room, "agent": HELD.id}], ["alice"])
    world, stack = scene.world, scene.world.stack
    child = world.start_bridge(scene.config)
    texts = [f"while down {i}" for i in range(10)]
    for text in texts:
        alice.say(room, text)
    eventually(stack, "the bridge to bind the room", lambda: scene.cursor(room) > 0)
    session = scene.session_of(room)
    eventually(stack, "all admitted", lambda: len(_said_in_chaz(scene, session, "user:")) == 10)

    scene.synapse.stop()
    try:
        stack.open_gate(f"hold-{session}")
        eventually(stack, "every reply", lambda: len(_said_in_chaz(scene, session, "agent:")) == 10)
        log = world.logs[child.pid]
        # A send of a reply was tried, and failed, while the homeserver was away.
        failed = f"send to {room}: [bridge.platform_unavailable]"
        eventually(stack, "a failed send", lambda: failed in log.read_text())
    finally:
        scene.synapse.start()
    _settle(scene, room, 10)
    assert _bot_says(scene, room) == [f"held: {text}" for text in texts]
    assert child.poll() is None


def test_redis_restarted_and_a_worker_killed_mid_turn_lose_and_repeat_nothing(
    world: World, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # A stack of its own, of the module's kind (the module's fleet is shared):
    # a Redis the test kills and starts again, two workers, one killed mid-turn.
    home = tmp_path / "home"
    redis_server: RedisServer | None = None
    if world.stack.kind == "embedded":
        own = Stack.embedded(home, lease_seconds=5.0)
    else:
        redis_server = RedisServer(free_port(), tmp_path / "redis").start()
        pg_url = request.getfixturevalue("pg_url")
        own = Stack.server(home, pg_url, redis_server.url, lease_seconds=5.0)
    restartable = RestartableStack(own, redis_server)
    try:
        workers = own.workers(2, concurrency=2)
        own.client.agents.put(HELD)
        with serving(own) as url:
            faulty = World(world.synapse, own, url, world.home, world.bridges, world.logs)
            scene = make_scene(faulty, world.synapse)
            _ride_through_faults(scene, restartable, workers)
    finally:
        own.close()
        if redis_server is not None:
            redis_server.stop()


def _ride_through_faults(scene: Scene, redis: RestartableStack, workers: list[Any]) -> None:
    alice = scene.people["alice"]
    room = alice.create_room(scene.bot.user_id)
    scene.write([{"room": room, "agent": HELD.id}], ["alice"])
    world, stack = scene.world, scene.world.stack
    child = world.start_bridge(scene.config)
    texts = [f"fault {i}" for i in range(5)]
    for text in texts:
        alice.say(room, text)
    eventually(stack, "the bridge to bind the room", lambda: scene.cursor(room) > 0)
    session = scene.session_of(room)
    eventually(stack, "all admitted", lambda: len(_said_in_chaz(scene, session, "user:")) == 5)

    # Redis killed: what alice says meanwhile is retried until chaz takes it.
    redis.kill_redis()
    texts.append("said while redis was down")
    alice.say(room, texts[-1])
    log = world.logs[child.pid]

    def tried() -> bool:  # refused and retried (or taken at once: nothing lost either way)
        return f"post to {session}" in log.read_text() or len(texts) == len(
            _said_in_chaz(scene, session, "user:")
        )

    eventually(stack, "the post tried while Redis is down", tried)
    redis.start_redis()

    # The worker whose turn waits at the gate is killed; another resumes it.
    def running_pid() -> int | None:
        entries = scene.reader().sessions.entries(session)
        acks = [e for e in entries if e.type is EntryType.ACK]
        return acks[0].metadata.get("pid") if acks else None

    pid = eventually_value(stack, "the first turn to start", running_pid)
    victim = next(w for w in workers if w.pid == pid)
    victim.kill(signal.SIGKILL)
    stack.open_gate(f"hold-{session}")
    _settle(scene, room, len(texts))
    assert _bot_says(scene, room) == [f"held: {text}" for text in texts]
    assert _said_in_chaz(scene, session, "user:") == texts
    assert _said_in_chaz(scene, session, "agent:") == [f"held: {text}" for text in texts]
    assert child.poll() is None
    child.kill()  # before its chaz stops: it would retry its watch until the module ends
    child.wait()


def test_a_rate_limited_bridge_waits_as_told_and_sends_each_reply_once(world: World) -> None:
    # 2 sends at once, then one every 2 s: the replies reach the bridge piled
    # up (it is stopped while they are written), so its back-to-back sends
    # meet the limit however slow the machine (replies at a turn's pace did not).
    limits = {"rc_message": {"per_second": 0.5, "burst_count": 2}}
    with running_synapse(world.home / f"limited-{uuid.uuid4().hex[:6]}", rate_limits=limits) as hs:
        scene = make_scene(world, hs)
        alice = scene.people["alice"]
        room = alice.create_room(scene.bot.user_id)
        scene.write([{"room": room, "agent": HELD.id}], ["alice"])
        child = world.start_bridge(scene.config)
        texts = [f"limited {i}" for i in range(6)]
        for text in texts:
            alice.say(room, text)  # retried on 429 by the person's client
        stack = world.stack
        eventually(stack, "the bridge to bind the room", lambda: scene.cursor(room) > 0)
        session = scene.session_of(room)
        eventually(stack, "all admitted", lambda: len(_said_in_chaz(scene, session, "user:")) == 6)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=WAIT) == 0  # a clean stop, too
        stack.open_gate(f"hold-{session}")
        eventually(stack, "every reply", lambda: len(_said_in_chaz(scene, session, "agent:")) == 6)
        child = world.start_bridge(scene.config)
        _settle(scene, room, 6)
        assert _bot_says(scene, room) == [f"held: {text}" for text in texts]
        assert "M_LIMIT_EXCEEDED" in world.logs[child.pid].read_text()
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=WAIT) == 0


def test_an_approval_is_asked_in_the_room_and_decided_there_by_who_may(scene: Scene) -> None:
    alice, carol = scene.people["alice"], scene.people["carol"]
    room = alice.create_room(scene.bot.user_id, carol.user_id)
    carol.join(room)
    scene.write(
        [{"room": room, "agent": CAREFUL.id}],
        ["alice", "carol"],
        without={"carol": ("approval.decide",)},
    )
    stack = scene.world.stack
    scene.world.start_bridge(scene.config)
    alice.say(room, "mind the gap")
    eventually(
        stack, "the request", lambda: any("Approval needed" in t for t in _bot_says(scene, room))
    )
    [asked] = _bot_says(scene, room)
    assert 'echo {"text": "mind the gap"}' in asked
    session = scene.session_of(room)
    [pending] = scene.reader().approvals.pending(session)
    assert pending.request_id in asked

    # A key without approval.decide changes nothing, by a reply or a reaction.
    carol.say(room, "approve")
    _react(carol, room, _asking(scene, room, pending.request_id), "👍")
    eventually(
        stack,
        "carol's answers",
        lambda: sum("Not decided" in t for t in _bot_says(scene, room)) == 2,
    )
    assert scene.reader().approvals.get(pending.request_id).state.value == "pending"
    alice.say(room, f"approve {pending.request_id}")
    _settle(scene, room, 5)
    said = _bot_says(scene, room)
    # The decision's answer and the reply are sent by two threads: either order.
    assert said[0] == asked and all("auth.forbidden" in t for t in said[1:3])
    assert sorted(said[3:]) == sorted(
        ["after mind the gap", f"Approved by {alice.user_id} (request {pending.request_id})."]
    )
    entries = scene.reader().sessions.entries(session)
    assert [e.type for e in entries].count(EntryType.TOOL_RESULT) == 1  # the tool ran once
    assert scene.reader().approvals.get(pending.request_id).decided_by == "user:alice"

    # A reaction from a person who may decide decides, as a reply does.
    alice.say(room, "once more")
    eventually(
        stack, "the second request", lambda: len(scene.reader().approvals.pending(session)) == 1
    )
    [second] = scene.reader().approvals.pending(session)
    eventually(stack, "it in the room", lambda: _bot_said(scene, room, second.request_id))
    _react(alice, room, _asking(scene, room, second.request_id), "👎")
    eventually(stack, "the denial", lambda: _bot_said(scene, room, "Denied by"))
    assert scene.reader().approvals.get(second.request_id).state.value == "denied"
    assert scene.reader().approvals.get(second.request_id).decided_by == "user:alice"


def test_hostile_input_admits_only_text_and_a_flood_is_refused_once(scene: Scene) -> None:
    alice = scene.people["alice"]
    room = alice.create_room(scene.bot.user_id)
    elsewhere = alice.create_room(scene.bot.user_id)
    scene.bot.join(elsewhere)  # a room the bot is in that no binding names
    scene.world.stack.client.projects.set_limits(scene.project, max_jobs=3)
    scene.write([{"room": room, "agent": ECHO.id}], ["alice"])
    scene.world.start_bridge(scene.config)

    def send(where: str, content: dict[str, Any]) -> None:
        path = f"/rooms/{quote(where)}/send/m.room.message/{uuid.uuid4().hex}"
        try:
            alice.call("PUT", path, json=content)
        except httpx.HTTPStatusError as exc:
            # Synapse refuses some malformed content itself: it never reaches a bridge.
            assert exc.response.status_code == 400, exc

    send(room, {"msgtype": "m.emote", "body": "waves"})  # not a text: not relayed
    send(room, {"msgtype": "org.example.custom", "body": "custom"})
    send(room, {"body": "no msgtype"})  # malformed
    send(room, {"msgtype": "m.text", "body": ["not", "a", "string"]})
    send(room, {"msgtype": "m.text"})  # no body
    send(  # HTML: the plain body is what is said
        room,
        {
            "msgtype": "m.text",
            "body": "plain words",
            "format": "org.matrix.custom.html",
            "formatted_body": "<b>plain</b> <script>x</script>words",
        },
    )
    alice.say(room, "x" * (MAX_BYTES + 100))  # larger than chaz takes: refused, said once
    alice.say(elsewhere, "not bound here")
    flood = [f"flood {i}" for i in range(6)]
    for text in flood:  # max_jobs=3: two more turns pass, four are refused
        alice.say(room, text)
    alice.say(room, "approve")  # not a turn: its answer shows the flood was read
    eventually(
        scene.world.stack, "the last answer", lambda: _bot_said(scene, room, "Nothing is waiting")
    )
    session = _settle(scene, room, 6)

    said = _bot_says(scene, room)
    replies = [t for t in said if t.startswith("echo: ")]
    assert replies == ["echo: plain words", "echo: flood 0", "echo: flood 1"]
    notices = [t for t in said if not t.startswith("echo: ")]
    assert len(notices) == 3, said
    [too_big] = [t for t in notices if t.startswith("Not delivered") and "quota" not in t]
    assert "bytes" in too_big
    assert sum("quota.project_jobs" in t for t in notices) == 1  # once, not four times
    assert _said_in_chaz(scene, session, "user:") == ["plain words", "flood 0", "flood 1"]
    assert alice.said_by(elsewhere, scene.bot.user_id) == []


def test_sigterm_stops_the_bridge_cleanly(scene: Scene) -> None:
    alice = scene.people["alice"]
    room = alice.create_room(scene.bot.user_id)
    scene.write([{"room": room, "agent": ECHO.id}], ["alice"])
    child = scene.world.start_bridge(scene.config)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=WAIT) == 0


def _settle(scene: Scene, room: str, replies: int, *, session: str | None = None) -> str:
    """Wait for ``replies`` of the bot in ``room`` and for the bridge's cursor to
    pass the session's last entry (from then on it sends nothing more); the session."""
    stack = scene.world.stack
    eventually(stack, "every reply", lambda: len(_bot_says(scene, room)) >= replies)
    session = session or scene.session_of(room)
    last = scene.reader().sessions.get(session).last_seq
    eventually(stack, "the cursor at the end", lambda: scene.cursor(room) >= last)
    return session


def _said_in_chaz(scene: Scene, session: str, prefix: str) -> list[str]:
    """The contents of the session's Messages whose sender starts with ``prefix``."""
    entries = scene.reader().sessions.entries(session)
    return [e.content for e in entries if e.type == "message" and e.sender.startswith(prefix)]


def _asking(scene: Scene, room: str, request_id: str) -> str:
    """The event id of the bot's message that asks approval request ``request_id``."""
    messages = scene.people["alice"].messages(room)
    return next(
        str(e["event_id"])
        for e in messages
        if e["sender"] == scene.bot.user_id and f"(request {request_id})" in e["content"]["body"]
    )


def _react(person: MatrixUser, room: str, event_id: str, key: str) -> None:
    body = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
    person.call("PUT", f"/rooms/{quote(room)}/send/m.reaction/{uuid.uuid4().hex}", json=body)


def _bot_said(scene: Scene, room: str, words: str) -> bool:
    return any(words in text for text in _bot_says(scene, room))


def _bot_says(scene: Scene, room: str) -> list[str]:
    return scene.people["alice"].said_by(room, scene.bot.user_id)


def _copy_state(scene: Scene, target: Path, *, source: Path | None = None) -> None:
    """A consistent copy of a state file (SQLite's backup: the WAL included)."""
    src = sqlite3.connect(source or scene.config.parent / "state.sqlite")
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
