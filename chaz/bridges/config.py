"""A bridge's configuration: a TOML or JSON file, checked before anything connects
(docs/bridges.md#config).

A bridge holds a chaz URL and API keys, never database or Redis settings. Each
secret (``api_key``, ``access_token``, ``password``) may be given as
``NAME_env = "VARIABLE"`` instead, to keep it out of the file.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from chaz.errors import ConfigError

__all__ = ["BridgeConfig", "ChazConfig", "MatrixConfig", "RoomBinding", "UserMapping", "load"]

#: The secrets that may come from the environment (``api_key_env = "VAR"``).
SECRETS = ("api_key", "access_token", "password")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChazConfig(_Strict):
    """Where chaz is: ``chaz serve``'s URL and the bridge's own key (it creates
    the sessions of agent-bound rooms and reads their replies)."""

    url: str = Field(min_length=1)
    api_key: str = Field(min_length=1)


class MatrixConfig(_Strict):
    """The bot's homeserver account: an access token, or a password to log in
    with under a fixed ``device_id`` (the homeserver deduplicates a resend by
    transaction id per device, so a bridge that logs in again must keep its device)."""

    homeserver: str = Field(min_length=1)
    user_id: str = Field(pattern=r"^@[^:]+:.+$")
    access_token: str | None = None
    password: str | None = None
    device_id: str = "CHAZBRIDGE"

    @model_validator(mode="after")
    def _one_credential(self) -> MatrixConfig:
        if (self.access_token is None) == (self.password is None):
            raise ValueError("give exactly one of access_token and password")
        return self


class RoomBinding(_Strict):
    """A platform room and its chaz session: an agent (the first message
    creates the session) or an existing session id."""

    room: str = Field(min_length=1)
    agent: str | None = None
    session: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> RoomBinding:
        if (self.agent is None) == (self.session is None):
            raise ValueError(f"room {self.room!r}: give exactly one of agent and session")
        return self


class UserMapping(_Strict):
    """A platform user who acts in chaz: through the key of a chaz principal
    (the key's principal is the sender of what they write: docs/security.md)."""

    api_key: str = Field(min_length=1)


class BridgeConfig(_Strict):
    """The whole configuration of one bridge process."""

    chaz: ChazConfig
    matrix: MatrixConfig
    rooms: list[RoomBinding] = Field(min_length=1)
    users: dict[str, UserMapping] = Field(default_factory=dict)
    #: The bridge's own state (cursors, bindings, the sync token): a SQLite file.
    state: Path
    unknown_users: Literal["ignore", "refuse"] = "ignore"
    refusal: str = "Sorry, you are not allowed to talk to this agent."
    #: How long one long poll of the platform (and one watch of chaz) may last:
    #: the most a clean stop waits for.
    poll_seconds: float = Field(5.0, gt=0, le=60)
    #: The least time between two edits of a streamed answer's message (the
    #: first partial sends it at once, the stored reply is always the last edit).
    edit_seconds: float = Field(0.5, ge=0.1, le=60)
    #: Where the bridge serves its metrics (``/metrics``, Prometheus text), which
    #: ``chaz doctor`` reads its last sync from; none: not served.
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_addr: str = "0.0.0.0"

    @field_validator("rooms")
    @classmethod
    def _rooms_once(cls, rooms: list[RoomBinding]) -> list[RoomBinding]:
        seen = [b.room for b in rooms]
        twice = sorted({r for r in seen if seen.count(r) > 1})
        if twice:
            raise ValueError(f"rooms bound more than once: {twice}")
        return rooms

    def binding(self, room: str) -> RoomBinding | None:
        """The binding of ``room``, or None where the room is not bridged."""
        return next((b for b in self.rooms if b.room == room), None)


def load(path: Path) -> BridgeConfig:
    """The configuration in ``path`` (``.json``, else TOML), with secrets from
    the environment resolved and relative paths taken from the file's folder.

    Anything missing or wrong is ``config.invalid`` naming the field."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the bridge config {path}: {exc}", field="config") from exc
    try:
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} is not valid: {exc}", field="config") from exc
    raw = _resolve_secrets(raw, "")
    state = raw.get("state")
    if isinstance(state, str) and not Path(state).is_absolute():
        raw["state"] = str(path.parent / state)
    try:
        return BridgeConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "config"
        raise ConfigError(f"{path}: {field}: {first['msg']}", field=field) from exc


def _resolve_secrets(value: Any, where: str) -> Any:
    """``X_env = "VAR"`` becomes ``X = $VAR`` for each of :data:`SECRETS`, at any depth."""
    if isinstance(value, list):
        return [_resolve_secrets(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = key.removesuffix("_env")
        if key.endswith("_env") and name in SECRETS:
            if not isinstance(item, str) or item not in os.environ:
                raise ConfigError(
                    f"{where}{key} names {item!r}, which is not set", field=f"{where}{key}"
                )
            out[name] = os.environ[item]
        else:
            out[key] = _resolve_secrets(item, f"{where}{key}.")
    return out
