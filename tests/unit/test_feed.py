"""A turn's feed: entries published at once in commit order, or one held
for the turn signal that follows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from chaz.coord.feed import Feed
from chaz.domain.entries import Entry, EntryType


class _Redis:
    def __init__(self) -> None:
        self.published: list[tuple[str, str]] = []

    def publish(self, channel: str, message: str) -> None:
        self.published.append((channel, message))


def _entry(seq: int) -> Entry:
    return Entry(
        id=f"e{seq}",
        session_id="s1",
        seq=seq,
        type=EntryType.TOOL_CALL,
        sender="agent:a",
        content="{}",
        created_at=datetime.now(UTC),
    )


def _feed() -> tuple[Feed, _Redis]:
    client = _Redis()
    feed = Feed(client)  # type: ignore[arg-type]
    return feed, client


def test_entries_published_at_once_go_out_in_order_on_their_session_channel() -> None:
    feed, client = _feed()
    feed.publish(_entry(1), _entry(2))
    feed.publish(_entry(3))
    assert [c for c, _ in client.published] == ["chaz:entries:s1"] * 3
    assert [Entry.model_validate_json(m).seq for _, m in client.published] == [1, 2, 3]


def test_a_held_entry_is_not_published_but_taken_once_by_the_next_signal() -> None:
    feed, client = _feed()
    held = _entry(4)
    feed.hold(held)
    assert client.published == []
    assert feed.take() is held
    assert feed.take() is None
    feed.hold(None)  # a turn whose end wrote nothing
    assert feed.take() is None


def test_a_feed_holds_one_entry_at_a_time() -> None:
    feed, _ = _feed()
    feed.hold(_entry(1))
    with pytest.raises(AssertionError):
        feed.hold(_entry(2))


def test_a_lost_publish_is_ignored() -> None:
    class _Away(_Redis):
        def publish(self, channel: str, message: str) -> Any:
            raise redis.ConnectionError("away")

    Feed(_Away()).publish(_entry(1))  # type: ignore[arg-type]
