"""The bridge's config file and its pure helpers (docs/bridges.md#config)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chaz.bridges.base import decision_of, idempotency_key, render, txn_id, visible
from chaz.bridges.config import load
from chaz.domain.entries import Entry, EntryType
from chaz.errors import ConfigError

GOOD = """
state = "state.sqlite"
[chaz]
url = "http://127.0.0.1:2024"
api_key_env = "TEST_BRIDGE_KEY"
[matrix]
homeserver = "http://127.0.0.1:8008"
user_id = "@bot:localhost"
access_token = "syt_x"
[[rooms]]
room = "!a:localhost"
agent = "helper"
[users."@alice:localhost"]
api_key = "chz_alice"
"""


def test_a_toml_config_loads_with_secrets_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_BRIDGE_KEY", "chz_bridge")
    path = tmp_path / "bridge.toml"
    path.write_text(GOOD)
    config = load(path)
    assert config.chaz.api_key == "chz_bridge"
    assert config.state == tmp_path / "state.sqlite"
    assert config.binding("!a:localhost") is not None
    assert config.binding("!b:localhost") is None
    assert config.users["@alice:localhost"].api_key == "chz_alice"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda c: c["rooms"][0].update(session="s1"), "rooms.0"),
        (lambda c: c["matrix"].pop("access_token"), "matrix"),
        (lambda c: c.update(unknown_users="shout"), "unknown_users"),
        (lambda c: c["chaz"].update(api_key_env="NOT_SET_ANYWHERE"), "chaz.api_key_env"),
        (lambda c: c["rooms"].append({"room": "!a:localhost", "agent": "x"}), "rooms"),
        (lambda c: c.update(database_url="postgresql://x"), "database_url"),
    ],
)
def test_a_bad_config_is_config_invalid_naming_the_field(
    tmp_path: Path, change: object, field: str
) -> None:
    config = {
        "state": "s.sqlite",
        "chaz": {"url": "http://x", "api_key": "k"},
        "matrix": {"homeserver": "http://m", "user_id": "@b:m", "access_token": "t"},
        "rooms": [{"room": "!a:localhost", "agent": "helper"}],
    }
    change(config)  # type: ignore[operator]
    path = tmp_path / "bridge.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert caught.value.details["field"] == field


def _entry(type: EntryType, sender: str) -> Entry:
    return Entry(
        id="e",
        session_id="s",
        seq=3,
        type=type,
        sender=sender,
        content="hi",
        created_at=datetime.now(UTC),
    )


def test_people_see_agents_messages_and_errors_only() -> None:
    assert visible(_entry(EntryType.MESSAGE, "agent:helper"))
    assert visible(_entry(EntryType.ERROR, "system:runtime"))
    assert not visible(_entry(EntryType.MESSAGE, "user:alice"))
    assert not visible(_entry(EntryType.TOOL_CALL, "agent:helper"))
    assert render(_entry(EntryType.ERROR, "system:runtime")) == ("⚠ hi", True)


def test_ids_are_derived_so_a_resend_repeats_them() -> None:
    assert txn_id("!a:m", "s", 3) == txn_id("!a:m", "s", 3)
    assert txn_id("!a:m", "s", 3) != txn_id("!b:m", "s", 3) != txn_id("!a:m", "s", 4)
    assert idempotency_key("matrix", "$e:m") == "matrix:$e:m"
    long = idempotency_key("matrix", "$" + "x" * 300)
    assert len(long) <= 200 and long == idempotency_key("matrix", "$" + "x" * 300)


def test_a_decision_is_a_whole_message_of_approve_deny_or_approve_all() -> None:
    assert decision_of("approve") == ("approve", None)
    assert decision_of(" Approve  ALL ") == ("approve_all", None)
    assert decision_of("deny r1") == ("deny", "r1")
    assert decision_of("approve all r1") == ("approve_all", "r1")
    assert decision_of("approve this please") is None
    assert decision_of("I approve") is None


def test_an_approval_request_shows_the_tool_arguments_and_request() -> None:
    entry = Entry(
        id="e",
        session_id="s",
        seq=4,
        type=EntryType.APPROVAL_REQUEST,
        sender="agent:a",
        content='{"tool": "echo", "arguments": {"text": "hi"}}',
        metadata={"request_id": "r1", "tool": "echo"},
        created_at=datetime.now(UTC),
    )
    assert visible(entry)
    text, notice = render(entry)
    assert notice and 'echo {"text": "hi"}' in text and "request r1" in text


def test_chaz_bridges_is_a_comma_separated_list_of_http_urls() -> None:
    from pydantic import ValidationError

    from chaz.settings import Settings

    given = " http://a:9109/metrics, ,https://b/metrics "
    settings = Settings(_env_file=None, bridges=given)
    assert settings.bridges == ["http://a:9109/metrics", "https://b/metrics"]
    with pytest.raises(ValidationError, match="not an http"):
        Settings(_env_file=None, bridges="bridge-matrix:9109")
