"""The producers: numbered messages into many sessions, retried through every fault.

Session ``i``'s messages read ``s{i} #{n}`` with ``n`` = 1, 2, 3, ... and are
posted in that order by one thread (each session belongs to one producer), so
admission order is known without asking chaz. A post that fails (Redis or
PostgreSQL away) is retried with the same idempotency key until it succeeds,
so a retry can never admit a second turn: whatever the producer was told, the
database is checked at the end. A session gets its next message only while
fewer than ``window`` of its turns are unfinished, which keeps a queue behind
every turn (the FIFO check needs one) and bounds the backlog an outage builds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import chaz
from benchmarks.measure import join_all
from chaz.domain.agents import AgentSpec

#: The soak's agent: a tool call, a pause, a slow tool and a reply, so that a
#: fault lands in the middle of a turn and a resumed turn has a checkpoint.
AGENT = AgentSpec(
    id="soak",
    tools=["word_count", "sleep"],
    script=[
        {
            "steps": [
                {"call": "word_count", "args": {"text": "{input}"}},
                {"sleep": 0.3},
                {"call": "sleep", "args": {"seconds": 0.5}},
                {"say": "done {input}"},
            ]
        }
    ],
)

SENDER = "user:soak"


def content(session_index: int, n: int) -> str:
    """The text of session ``session_index``'s ``n``-th message."""
    return f"s{session_index} #{n}"


def reply_for(text: str) -> str:
    """The reply the agent gives to ``text``."""
    return f"done {text}"


def idempotency_key(session_index: int, n: int) -> str:
    """One key per message, reused by every retry of it."""
    return f"soak-s{session_index}-{n}"


@dataclass
class Posted:
    """What the producers were told, for the check."""

    #: session id -> the numbers whose post returned successfully.
    confirmed: dict[str, list[int]] = field(default_factory=dict)
    #: exception class name -> failed attempts (each was retried).
    errors: Counter[str] = field(default_factory=Counter)
    #: messages whose post never succeeded before the soak stopped.
    abandoned: int = 0


class Producers:
    """``threads`` threads posting into ``sessions`` at up to ``rate`` messages/s."""

    def __init__(
        self,
        client: chaz.Client,
        sessions: list[str],
        unfinished: dict[str, int],
        *,
        threads: int,
        rate: float,
        window: int,
    ) -> None:
        self.client = client
        #: session id -> the client of its project (``--cluster``: many projects)
        self.clients: dict[str, chaz.Client] | None = None
        self.sessions = sessions
        self.index = {sid: i for i, sid in enumerate(sessions)}
        #: session id -> unfinished jobs, refreshed by the monitor.
        self.unfinished = unfinished
        self.threads = threads
        self.rate = rate
        self.window = window
        self.posted = Posted(confirmed={sid: [] for sid in sessions})
        self._in_window: dict[str, int] = dict.fromkeys(sessions, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def start(self) -> None:
        """Start the producer threads."""
        for t in range(self.threads):
            mine = self.sessions[t :: self.threads]
            th = threading.Thread(target=self._run, args=(mine,), name=f"soak-producer-{t}")
            th.start()
            self._workers.append(th)

    def stop(self) -> None:
        """Stop posting; a post being retried is given up (and counted)."""
        self._stop.set()
        join_all(self._workers, "soak producers")

    def _run(self, mine: list[str]) -> None:
        interval = self.threads / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            for sid in mine:
                if self._stop.is_set():
                    return
                confirmed = self.posted.confirmed[sid]
                # Confirmed posts not yet seen by the monitor still count as open.
                open_turns = max(self.unfinished.get(sid, 0), self._in_window[sid])
                if open_turns >= self.window:
                    continue
                delay = next_at - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                next_at = max(next_at + interval, time.monotonic() - 1.0)
                n = len(confirmed) + 1
                if not self._post(sid, n):
                    return
                confirmed.append(n)
                self._in_window[sid] = open_turns + 1
            self._stop.wait(0.05)

    def _post(self, sid: str, n: int) -> bool:
        i = self.index[sid]
        backoff = 0.1
        while True:
            try:
                (self.clients or {}).get(sid, self.client).sessions.post(
                    sid,
                    content(i, n),
                    sender=SENDER,
                    idempotency_key=idempotency_key(i, n),
                )
                return True
            except Exception as exc:
                with self._lock:
                    self.posted.errors[type(exc).__name__] += 1
            if self._stop.wait(backoff):
                with self._lock:
                    self.posted.abandoned += 1
                return False
            backoff = min(1.0, backoff * 2)

    def refreshed(self) -> None:
        """The monitor updated ``unfinished``: forget the producers' own estimate."""
        for sid in self.sessions:
            self._in_window[sid] = 0
