"""The platform-independent half of a bridge: rooms to sessions, people to
principals, cursors, transaction ids, order and back-off (docs/bridges.md).

Inbound, one thread (the caller's) polls the platform and admits each mapped
person's message with ``sessions.post`` through that person's own key, its
event id the idempotency key; the platform's token is saved only after the
batch is admitted, so a restart redelivers at most what was admitted already,
and admits nothing twice. Outbound, one thread per bound room watches its
session after the room's cursor and sends each visible entry in seq order
under :func:`~chaz.bridges.base.txn_id`; the cursor is saved after the send,
so a bridge killed between the two resends under the same id and the platform
shows the message once.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from chaz.bridges.base import (
    Bridge,
    Incoming,
    PlatformRefused,
    PlatformUnavailable,
    decision_of,
    idempotency_key,
    reaction_decision,
    render,
    txn_id,
    visible,
)
from chaz.bridges.config import BridgeConfig, RoomBinding
from chaz.bridges.metrics import Metrics
from chaz.bridges.state import State
from chaz.bridges.stream import Streams
from chaz.domain.entries import Entry, EntryType
from chaz.errors import ChazError, ConfigError, NameTaken, QuotaError

if TYPE_CHECKING:
    from chaz import Client

__all__ = ["Relay"]

log = logging.getLogger("chaz.bridges")
T = TypeVar("T")

#: Back-off between retries: doubling from the first to the last, each with
#: up to half again of jitter, so many bridges do not retry in step.
FIRST_DELAY = 0.5
LAST_DELAY = 30.0


class _Stopped(Exception):
    """The bridge was asked to stop while it waited to retry."""


class Relay:
    """One bridge process's work over a platform :class:`Bridge`."""

    def __init__(
        self,
        bridge: Bridge,
        config: BridgeConfig,
        state: State,
        connect: Callable[[str, str], Client],
    ) -> None:
        self.bridge = bridge
        self.config = config
        self.state = state
        self._connect = connect
        self._stop = threading.Event()
        self._outbound: dict[str, threading.Thread] = {}
        self._refused: set[tuple[str, str]] = set()
        #: (room, person) told they are over a quota, until a message is admitted.
        self._over_quota: set[tuple[str, str]] = set()
        self.metrics = Metrics(bridge.platform, config.poll_seconds)
        # Every key is checked now (whoami), so a wrong one fails at start.
        self.client = connect(config.chaz.url, config.chaz.api_key)
        self._people = {
            user: connect(config.chaz.url, m.api_key) for user, m in config.users.items()
        }
        self.bot = ""

    def stop(self) -> None:
        """Ask the relay to stop: it finishes what it sends and returns from :meth:`run`."""
        self._stop.set()

    def run(self) -> None:
        """Relay until :meth:`stop`: join the bound rooms, start their outbound
        threads, then poll the platform and admit what people say."""
        if self.config.metrics_port is not None:
            self.metrics.serve(self.config.metrics_port, self.config.metrics_addr)
        self.bot = self._retrying("log in", self.bridge.start)
        try:
            for binding in self.config.rooms:
                self._join(binding.room)
                if binding.session is not None:
                    self._bind_existing(binding)
            for room in self.state.rooms():
                if self.config.binding(room) is not None:
                    self._start_outbound(room)
            self._inbound()
        except _Stopped:
            pass
        finally:
            self._stop.set()
            for thread in self._outbound.values():
                thread.join()

    def _inbound(self) -> None:
        name = f"{self.bridge.platform}.sync"
        token = self.state.token(name)
        # Without a token this is the bridge's first poll ever: what it finds
        # was said before the bridge existed, and is not admitted.
        admit = token is not None
        ready = False
        while not self._stop.is_set():
            poll = functools.partial(self.bridge.poll, token, self.config.poll_seconds)
            batch = self._retrying("poll", poll)
            for room in batch.invites:
                if self.config.binding(room) is not None:
                    self._join(room)
            if admit:
                for message in batch.messages:
                    self._admit(message)
            self.state.save_token(name, batch.token)
            token, admit = batch.token, True
            self.metrics.synced()
            if not ready:
                log.warning("chaz bridge %s: ready as %s", self.bridge.platform, self.bot)
                ready = True

    def _admit(self, message: Incoming) -> None:
        binding = self.config.binding(message.room)
        if binding is None:
            return
        person = self._people.get(message.user)
        if person is None:
            self._refuse_stranger(message)
            return
        session_id = self._session_of(binding)
        if message.reaction_to is not None:
            # A reaction decides the request its message asks; any other is nothing.
            request = self.state.request_of(message.room, message.reaction_to)
            word = reaction_decision(message.text)
            if request is not None and word is not None:
                self._decide(message, person, session_id, word, request)
            return
        decision = decision_of(message.text)
        if decision is not None:
            self._decide(message, person, session_id, *decision)
            return
        metadata = {
            "bridge": self.bridge.platform,
            "room": message.room,
            "platform_user": message.user,
            "event_id": message.event_id,
        }
        key = idempotency_key(self.bridge.platform, message.event_id)
        try:
            self._retrying(
                f"post to {session_id}",
                lambda: person.sessions.post(
                    session_id, message.text, metadata=metadata, idempotency_key=key
                ),
                quota_fails=True,
            )
        except ChazError as exc:
            # Refused for good (a quota, a grant, bad input): said in the room
            # under an id of this message, so a redelivery says it once too.
            log.warning("chaz bridge: %s's message %s refused: %s", message.user, key, exc)
            self.metrics.refused()
            flood = (message.room, message.user)
            if isinstance(exc, QuotaError):
                # A flood: the person is told once, not per message, until a
                # message of theirs is admitted again.
                if flood in self._over_quota:
                    return
                self._over_quota.add(flood)
            text = f"Not delivered: {exc.message} ({exc.code})"
            self._notify(message.room, f"chaz.refused.{_digest(message.event_id)}", text)
            return
        self._over_quota.discard((message.room, message.user))
        self.metrics.admitted()

    def _decide(
        self,
        message: Incoming,
        person: Client,
        session_id: str,
        decision: str,
        request_id: str | None,
    ) -> None:
        """A person's ``approve``/``deny``/``approve all``: decided through the
        person's own key (``approvals.decide``, the one decision path: one
        decision wins, a key without ``approval.decide`` changes nothing), on
        the named request or the session's oldest pending one; the outcome is
        answered under an id of the message, so a redelivery answers once."""
        txn = f"chaz.decided.{_digest(message.event_id)}"

        def decide() -> str:
            target = request_id
            if target is None:
                pending = person.approvals.pending(session_id)
                if not pending:
                    return "Nothing is waiting for approval here."
                target = pending[0].request_id
            done = person.approvals.decide(target, decision)
            state = done.approval.state.value
            mine = done.approval.decided_by == person.principal.name
            if done.effective or (mine and done.approval.decision == decision):
                return f"{state.capitalize()} by {message.user} (request {target})."
            return f"Request {target} was already decided: {state}."

        try:
            answer = self._retrying(f"decide for {message.user}", decide)
        except ChazError as exc:
            log.warning("chaz bridge: %s's decision refused: %s", message.user, exc)
            answer = f"Not decided: {exc.message} ({exc.code})"
        self._notify(message.room, txn, answer)

    def _refuse_stranger(self, message: Incoming) -> None:
        if self.config.unknown_users == "ignore":
            return
        if (message.room, message.user) in self._refused:
            return  # once per person and room in a run, not per message
        self._refused.add((message.room, message.user))
        txn = f"chaz.stranger.{_digest(message.event_id)}"
        self._notify(message.room, txn, self.config.refusal)

    def _session_of(self, binding: RoomBinding) -> str:
        """The session of ``binding``'s room, made on its first message when the
        room is bound to an agent."""
        known = self.state.session_of(binding.room)
        if known is not None:
            return known[0]
        assert binding.agent is not None  # a session binding is bound at start
        agent = binding.agent
        # A name derived from the room: a bridge killed between creating the
        # session and saving it finds the same session again, never a second.
        name = f"{self.bridge.platform} {binding.room}".replace("/", "_")

        def create() -> str:
            try:
                return str(self.client.sessions.create(agent, name=name).id)
            except NameTaken:
                return str(self.client.sessions.get(name).id)

        session_id = self._retrying(f"create a session of {agent}", create)
        session_id, _ = self.state.bind(binding.room, session_id, 0)
        self._start_outbound(binding.room)
        return session_id

    def _bind_existing(self, binding: RoomBinding) -> None:
        assert binding.session is not None
        ref = binding.session
        head = self._retrying(f"read {ref}", lambda: self.client.sessions.get(ref))
        # From the session's head: what was said before the binding stays out of the room.
        session_id, _ = self.state.bind(binding.room, head.id, head.last_seq)
        if session_id != head.id:
            raise ConfigError(
                f"room {binding.room} is bound to session {session_id} in the state file,"
                f" not {ref} ({head.id})",
                field="rooms",
            )

    def _start_outbound(self, room: str) -> None:
        if room in self._outbound:
            return
        thread = threading.Thread(
            target=self._outbound_loop, args=(room,), name=f"out {room}", daemon=True
        )
        self._outbound[room] = thread
        thread.start()

    def _outbound_loop(self, room: str) -> None:
        bound = self.state.session_of(room)
        assert bound is not None
        session_id, cursor = bound
        streams = Streams(
            self.bridge,
            self.state,
            room,
            session_id,
            edit_seconds=self.config.edit_seconds,
            send=self._send_as,
        )

        def watch() -> None:
            nonlocal cursor
            for item in self.client.sessions.watch(
                session_id,
                after=cursor,
                timeout=self.config.poll_seconds,
                partial=True,
                stop=self._stop.is_set,
            ):
                if not isinstance(item, Entry):
                    streams.partial(item)
                    continue
                self._relay(room, session_id, item, streams)
                cursor = item.seq

        try:
            # One watch per call, reopened after the cursor: a watch that fails
            # is retried with the same back-off as every other call.
            while not self._stop.is_set():
                self._retrying(f"watch {session_id}", watch)
        except _Stopped:
            return
        except Exception:
            log.exception("chaz bridge: the outbound thread of %s failed", room)
            self._stop.set()

    def _relay(self, room: str, session_id: str, entry: Entry, streams: Streams) -> None:
        """Send ``entry`` if a person should see it (as the last edit of its
        job's stream, if it streamed here), then move the cursor past it."""
        ended = None
        if visible(entry):
            handled, ended = streams.reply(entry)
            if not handled:
                text, notice = render(entry)
                sent = self._send(room, txn_id(room, session_id, entry.seq), text, notice)
                request = entry.metadata.get("request_id")
                if entry.type is EntryType.APPROVAL_REQUEST and isinstance(request, str):
                    self.state.asked(room, sent, request)
            age = (datetime.now(UTC) - entry.created_at).total_seconds()
            self.metrics.sent(room, age)
        self.state.advance(room, entry.seq, ended=ended)

    def _send(self, room: str, txn: str, text: str, notice: bool) -> str:
        return self._send_as(room, txn, text, None, notice=notice)

    def _send_as(
        self, room: str, txn: str, text: str, replaces: str | None, *, notice: bool = False
    ) -> str:
        """A message (or an edit of one), retried until it lands; each failure counted."""

        def send() -> str:
            try:
                return self.bridge.send(room, txn, text, notice=notice, replaces=replaces)
            except (PlatformUnavailable, PlatformRefused):
                self.metrics.send_failed()
                raise

        return self._retrying(f"send to {room}", send)

    def _notify(self, room: str, txn: str, text: str) -> None:
        """A notice of the bridge's own (a refusal): retried while the platform
        is away, but dropped if it refuses, so a room the bot cannot write to
        does not hold up what people say in the others."""
        try:
            self._retrying(
                f"notify {room}",
                lambda: self.bridge.send(room, txn, text, notice=True),
                refused_fails=True,
            )
        except PlatformRefused as exc:
            log.warning("chaz bridge: a notice to %s was refused: %s", room, exc)

    def _join(self, room: str) -> None:
        try:
            self._retrying(f"join {room}", lambda: self.bridge.join(room), refused_fails=True)
        except PlatformRefused as exc:
            # Not invited yet: joined when the invite comes (a poll's invites).
            log.warning("chaz bridge: cannot join %s yet: %s", room, exc)

    def _retrying(
        self,
        what: str,
        call: Callable[[], T],
        *,
        refused_fails: bool = False,
        quota_fails: bool = False,
    ) -> T:
        """``call()``, retried with back-off while it fails transiently (and, unless
        ``refused_fails``, while the platform refuses: an outbound message is
        never dropped, a room that refuses stalls until it takes it). With
        ``quota_fails`` a quota's refusal is final even where it is retryable:
        one person's flood must not hold up what everyone else says."""
        delay = FIRST_DELAY
        while not self._stop.is_set():
            try:
                return call()
            except PlatformUnavailable as exc:
                wait = exc.retry_after if exc.retry_after is not None else _jitter(delay)
                log.warning("chaz bridge: %s: %s; again in %.1f s", what, exc, wait)
            except PlatformRefused as exc:
                if refused_fails:
                    raise
                wait = _jitter(LAST_DELAY)
                log.warning("chaz bridge: %s refused: %s; again in %.1f s", what, exc, wait)
            except ChazError as exc:
                if not exc.retryable or (quota_fails and isinstance(exc, QuotaError)):
                    raise
                wait = _jitter(delay)
                log.warning("chaz bridge: %s: %s; again in %.1f s", what, exc, wait)
            delay = min(delay * 2, LAST_DELAY)
            self._stop.wait(wait)
        raise _Stopped


def _jitter(delay: float) -> float:
    return delay * (1 + random.random() / 2)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]
