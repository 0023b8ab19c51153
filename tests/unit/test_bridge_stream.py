"""A streamed answer's message: the throttle, gaps and the last edit
(chaz/bridges/stream.py, docs/bridges.md#streaming). The acceptance test
(tests/acceptance/test_bridge_matrix.py) shows it on a real Synapse; here a
clock the test moves decides what the throttle lets through."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from chaz.bridges.base import Batch, Bridge, stream_txn_id, txn_id
from chaz.bridges.state import State
from chaz.bridges.stream import Streams
from chaz.domain.entries import Entry, EntryType


@dataclass(frozen=True)
class Part:
    job_id: str
    step: int
    seq: int
    text: str


class Recorder(Bridge):
    """A platform that records each send (and deduplicates by transaction id)."""

    platform = "test"

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str | None]] = []
        self.ids: dict[str, str] = {}

    def start(self) -> str:
        return "@bot"

    def poll(self, token: str | None, timeout: float) -> Batch:
        return Batch((), "t")

    def send(
        self,
        room: str,
        txn_id: str,
        text: str,
        *,
        notice: bool = False,
        replaces: str | None = None,
    ) -> str:
        if txn_id not in self.ids:
            self.ids[txn_id] = f"$e{len(self.ids)}"
            self.sent.append((txn_id, text, replaces))
        return self.ids[txn_id]

    def join(self, room: str) -> None:
        pass

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def streams(tmp_path: Path, bridge: Recorder, clock: Clock) -> Streams:
    def send(room: str, txn: str, text: str, replaces: str | None) -> str:
        return bridge.send(room, txn, text, replaces=replaces)

    state = State(tmp_path / "state.sqlite")
    state.bind("!r", "s1", 0)
    return Streams(bridge, state, "!r", "s1", edit_seconds=0.5, send=send, clock=clock)


def reply(seq: int, content: str, job: str = "j1") -> Entry:
    return Entry(
        id=f"e{seq}",
        session_id="s1",
        seq=seq,
        type=EntryType.MESSAGE,
        sender="agent:a",
        content=content,
        job_id=job,
        created_at=datetime.now(UTC),
    )


def test_pieces_edit_one_message_at_most_once_per_interval_and_the_reply_is_the_last_edit(
    tmp_path: Path,
) -> None:
    bridge, clock = Recorder(), Clock()
    s = streams(tmp_path, bridge, clock)
    s.partial(Part("j1", 0, 1, "Hel"))  # sent at once: the message
    s.partial(Part("j1", 0, 2, "lo "))  # within the interval: held
    clock.now += 0.6
    s.partial(Part("j1", 0, 3, "wor"))  # past it: an edit with all so far
    s.partial(Part("j1", 0, 4, "ld"))  # held again
    assert s.reply(reply(7, "Hello world")) == (True, "j1")
    first = stream_txn_id("!r", "j1")
    assert [(t, r) for _, t, r in bridge.sent] == [
        ("Hel", None),
        ("Hello wor", "$e0"),
        ("Hello world", "$e0"),
    ]
    assert bridge.sent[0][0] == first and bridge.sent[-1][0] == txn_id("!r", "s1", 7)


def test_a_missed_piece_stops_the_edits_until_the_reply(tmp_path: Path) -> None:
    bridge, clock = Recorder(), Clock()
    s = streams(tmp_path, bridge, clock)
    s.partial(Part("j1", 0, 1, "one "))
    clock.now += 1
    s.partial(Part("j1", 0, 3, "three"))  # seq 2 was missed: not shown
    assert s.reply(reply(5, "one two three")) == (True, "j1")
    assert [t for _, t, _ in bridge.sent] == ["one ", "one two three"]


def test_a_job_first_heard_mid_answer_is_not_streamed_and_a_new_attempt_starts_over(
    tmp_path: Path,
) -> None:
    bridge, clock = Recorder(), Clock()
    s = streams(tmp_path, bridge, clock)
    s.partial(Part("j1", 0, 4, "late"))  # its start was missed
    assert bridge.sent == []
    assert s.reply(reply(5, "whole")) == (False, None)  # sent as usual by the caller
    s.partial(Part("j2", 0, 1, "first try"))
    clock.now += 1
    s.partial(Part("j2", 0, 1, "again"))  # a new attempt: seq 1 again
    assert [t for _, t, _ in bridge.sent] == ["first try", "again"]


def test_a_bridge_killed_before_it_saved_the_messages_id_edits_the_same_message(
    tmp_path: Path,
) -> None:
    bridge, clock = Recorder(), Clock()
    s = streams(tmp_path, bridge, clock)
    s.state.begin_stream("!r", "j1")  # then killed: the first send's id never saved
    bridge.send("!r", stream_txn_id("!r", "j1"), "Hel")
    again = streams(tmp_path, bridge, clock)  # the restarted bridge
    assert again.reply(reply(9, "Hello")) == (True, "j1")
    assert [(t, r) for _, t, r in bridge.sent] == [("Hel", None), ("Hello", "$e0")]


def test_an_approval_request_mid_answer_is_sent_as_usual_and_the_stream_goes_on(
    tmp_path: Path,
) -> None:
    bridge, clock = Recorder(), Clock()
    s = streams(tmp_path, bridge, clock)
    s.partial(Part("j1", 0, 1, "Let me check"))
    asked = reply(4, "{}").model_copy(update={"type": EntryType.APPROVAL_REQUEST})
    assert s.reply(asked) == (False, None)
    clock.now += 1
    s.partial(Part("j1", 1, 2, "It is"))  # the next step, after the decision
    assert s.reply(reply(8, "It is done")) == (True, "j1")
    assert [(t, r) for _, t, r in bridge.sent] == [
        ("Let me check", None),
        ("It is", "$e0"),
        ("It is done", "$e0"),
    ]
