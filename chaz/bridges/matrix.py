"""Matrix as a :class:`~chaz.bridges.base.Bridge`: the client-server API over
``httpx`` (docs/bridges.md#matrix).

Four endpoints are all a bridge needs: ``/login`` (or ``/account/whoami`` for a
given token), ``/sync`` with ``since`` tokens, ``/join``, and
``PUT /rooms/{id}/send/m.room.message/{txnId}``, whose transaction id the
homeserver deduplicates per device. Plain ``httpx`` (already chaz's) keeps the
bridge synchronous like ``chaz.Client`` and adds no dependency; ``mautrix`` and
``matrix-nio`` are asyncio clients with crypto stacks the bridge does not use.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx

from chaz.bridges.base import Batch, Bridge, Incoming, PlatformRefused, PlatformUnavailable
from chaz.bridges.config import MatrixConfig
from chaz.errors import ConfigError

__all__ = ["MatrixBridge"]

API = "/_matrix/client/v3"
#: Most events a room's timeline gives per sync; more since the last one is a
#: ``limited`` timeline, whose gap :meth:`MatrixBridge._gap` reads back.
TIMELINE_LIMIT = 100
#: The timeline events the bridge reads (reactions decide approvals).
TYPES = ["m.room.message", "m.room.member", "m.reaction"]
#: Only messages in timelines, nothing else the bridge would discard.
FILTER = {
    "presence": {"types": []},
    "account_data": {"types": []},
    "room": {
        # Members too: the bot's own join marks where a room's relaying starts.
        "timeline": {"limit": TIMELINE_LIMIT, "types": TYPES},
        "state": {"lazy_load_members": True},
        "ephemeral": {"types": []},
        "account_data": {"types": []},
    },
}
#: How long a request other than the long poll may take.
CALL_SECONDS = 30.0


class MatrixBridge(Bridge):
    """One Matrix account (the bot's) on one homeserver."""

    platform = "matrix"

    def __init__(self, config: MatrixConfig) -> None:
        self.config = config
        self.user_id = config.user_id
        self._token = config.access_token
        self._http = httpx.Client(base_url=config.homeserver.rstrip("/"), timeout=CALL_SECONDS)

    def start(self) -> str:
        """Log in with the password under the configured device (or check the
        token); the bot's user id, which must be the configured one."""
        if self._token is None:
            body = {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": self.config.user_id},
                "password": self.config.password,
                "device_id": self.config.device_id,
                "initial_device_display_name": "chaz bridge",
            }
            self._token = str(self._call("POST", "/login", json=body)["access_token"])
        who = str(self._call("GET", "/account/whoami")["user_id"])
        if who != self.config.user_id:
            raise ConfigError(
                f"the Matrix credentials are {who}'s, not {self.config.user_id}'s",
                field="matrix.user_id",
            )
        return who

    def poll(self, token: str | None, timeout: float) -> Batch:
        """One ``/sync`` after ``token``: people's text messages per joined room
        (a limited timeline's gap read back first), and the rooms the bot was
        invited to."""
        params: dict[str, Any] = {"filter": json.dumps(FILTER), "timeout": int(timeout * 1000)}
        if token is None:
            params["timeout"] = 0  # the first sync is only the position to start from
        else:
            params["since"] = token
        body = self._call("GET", "/sync", params=params, read=timeout + CALL_SECONDS)
        rooms = body.get("rooms", {})
        messages: list[Incoming] = []
        for room, joined in rooms.get("join", {}).items():
            timeline = joined.get("timeline", {})
            events = list(timeline.get("events", []))
            if timeline.get("limited") and token is not None and timeline.get("prev_batch"):
                events = self._gap(room, token, str(timeline["prev_batch"])) + events
            seen: set[str] = set()
            for event in self._since_joined(events):
                message = self._incoming(room, event)
                if message is not None and message.event_id not in seen:
                    seen.add(message.event_id)
                    messages.append(message)
        return Batch(messages, str(body["next_batch"]), tuple(rooms.get("invite", {})))

    def send(
        self,
        room: str,
        txn_id: str,
        text: str,
        *,
        notice: bool = False,
        replaces: str | None = None,
    ) -> str:
        """``PUT .../send/m.room.message/{txn_id}``: the homeserver answers a
        repeated transaction id with the first event, and shows one message.
        An edit (``replaces``) is an ``m.replace`` whose ``m.new_content`` is
        the message's new text (the ``* ``-prefixed body is for clients that
        do not show edits)."""
        kind = "m.notice" if notice else "m.text"
        body: dict[str, Any] = {"msgtype": kind, "body": text}
        if replaces is not None:
            body = {
                "msgtype": kind,
                "body": f"* {text}",
                "m.new_content": {"msgtype": kind, "body": text},
                "m.relates_to": {"rel_type": "m.replace", "event_id": replaces},
            }
        path = f"/rooms/{quote(room, safe='')}/send/m.room.message/{quote(txn_id, safe='')}"
        return str(self._call("PUT", path, json=body)["event_id"])

    def join(self, room: str) -> None:
        """Join ``room`` (refused until the bot is invited to a private room)."""
        self._call("POST", f"/join/{quote(room, safe='')}", json={})

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def _gap(self, room: str, since: str, until: str) -> list[dict[str, Any]]:
        """The room's events between two sync positions, oldest first (``/messages``
        takes sync tokens), so a burst larger than a timeline loses nothing."""
        events: list[dict[str, Any]] = []
        params: dict[str, Any] = {"dir": "f", "from": since, "to": until, "limit": 100}
        params["filter"] = json.dumps({"types": TYPES})
        while True:
            page = self._call("GET", f"/rooms/{quote(room, safe='')}/messages", params=params)
            chunk = page.get("chunk", [])
            events.extend(chunk)
            if not chunk or "end" not in page:
                return events
            params["from"] = page["end"]

    def _since_joined(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``events`` after the bot's own join, if it is among them: a room's
        first sync after a join also gives its recent history, said before the
        bot was there, which is not the bridge's to admit."""
        for i in range(len(events) - 1, -1, -1):
            event = events[i]
            content = event.get("content")
            if (
                event.get("type") == "m.room.member"
                and event.get("state_key") == self.user_id
                and isinstance(content, dict)
                and content.get("membership") == "join"
                and (event.get("unsigned") or {}).get("prev_content", {}).get("membership")
                != "join"
            ):
                return events[i + 1 :]
        return events

    def _incoming(self, room: str, event: dict[str, Any]) -> Incoming | None:
        """A person's new text message or reaction, or None: the bot's own,
        notices, other types, edits (``m.replace``: a person's edit is not a
        second turn) and malformed events are not relayed."""
        content = event.get("content")
        if not isinstance(content, dict):
            return None
        sender, event_id, body = event.get("sender"), event.get("event_id"), content.get("body")
        if sender == self.user_id or not isinstance(sender, str) or not isinstance(event_id, str):
            return None
        relates = content.get("m.relates_to")
        if event.get("type") == "m.reaction":
            # A reaction: an annotation whose key is the emoji, on a message.
            if not isinstance(relates, dict) or relates.get("rel_type") != "m.annotation":
                return None
            target, key = relates.get("event_id"), relates.get("key")
            if not isinstance(target, str) or not isinstance(key, str):
                return None
            return Incoming(room=room, user=sender, event_id=event_id, text=key, reaction_to=target)
        if event.get("type") != "m.room.message":
            return None
        if content.get("msgtype") != "m.text" or not isinstance(body, str):
            return None
        if isinstance(relates, dict) and relates.get("rel_type") == "m.replace":
            return None
        return Incoming(room=room, user=sender, event_id=event_id, text=body)

    def _call(self, method: str, path: str, *, read: float | None = None, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        timeout = httpx.Timeout(CALL_SECONDS, read=read) if read else None
        try:
            answer = self._http.request(
                method, API + path, headers=headers, timeout=timeout or CALL_SECONDS, **kw
            )
        except httpx.HTTPError as exc:
            raise PlatformUnavailable(
                f"the homeserver is unavailable: {type(exc).__name__}: {exc}"
            ) from exc
        if answer.status_code < 400:
            return answer.json()
        try:
            error = answer.json()
        except ValueError:
            error = {}
        code, text = error.get("errcode", "?"), error.get("error", answer.reason_phrase)
        message = f"{method} {path}: {answer.status_code} {code}: {text}"
        if answer.status_code == 429:
            after = error.get("retry_after_ms")
            retry = after / 1000 if isinstance(after, int | float) else _retry_after(answer)
            raise PlatformUnavailable(message, retry_after=retry, errcode=code)
        if answer.status_code >= 500:
            raise PlatformUnavailable(message, errcode=code)
        raise PlatformRefused(message, errcode=code, status=answer.status_code)


def _retry_after(answer: httpx.Response) -> float | None:
    try:
        return float(answer.headers["Retry-After"])
    except (KeyError, ValueError):
        return None
