"""``python -m benchmarks.dispatch``: dispatch latency, chaz against bare Celery, in one run.

Like for like, one message at a time on idle workers, both kinds of worker
up at once and the samples interleaved (a bare Celery one, a chaz one, ...),
so that the machine's load moves both alike:

* **bare Celery**: from the moment the producer calls ``send_task`` to the
  no-op task's start (its own clock, ``stamped``) and to the moment this
  process hears of it (the task's LPUSH, popped here: ``seen``);
* **chaz**: from the moment the admission's transaction has *committed*
  (this process's ``store.admitting`` block has ended) to the Ack's stamp
  (its ``created_at``, taken in the start's transaction just before that
  commits: ``stamped``) and to the moment this process hears the Ack
  (published once its transaction committed: ``seen``).

The goal (issue 25, item 6) reads "commit -> Ack" against bare Celery's
"send -> task start": ``seen`` against ``seen`` is the like-for-like pair
(each includes its commit or start and one Redis notification to this
process), ``stamped`` against ``stamped`` the pair without the notification
(chaz's then excludes its own commit, bare Celery's nothing). Both are reported.

Where the time goes, per sample, from the workers' Celery task events
(``task-received``, ``task-started``; timestamps on the worker's clock, the
same machine's) and the rows: the wake-up's send, the broker hop to the
worker's consumer, the hand-off to a pool thread, the lane and the setup up
to the job's ``started_at``, the start's writes up to the Ack's stamp, and
the commit and publish up to ``seen``. ``Message.created_at -> Ack.created_at``
(what ``benchmarks.run`` reported as (d) before 2026-12-07) is shown as well.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

from benchmarks import noop_app
from benchmarks.measure import DoneListener, Latency, join_all, percentile, producer_app
from benchmarks.stacks import AGENT, BenchStack
from chaz.coord import keys
from chaz.domain.entries import agent_sender

#: The goal: chaz's dispatch p99 at most this many times bare Celery's.
GOAL_RATIO = 2.0

console = Console(width=int(os.environ.get("COLUMNS", "132")))


@dataclasses.dataclass
class Sample:
    """One message's timestamps (``time.time()`` seconds; None: not seen)."""

    kind: str  # "bare" or "chaz"
    key: str  # bare: the task's key; chaz: the job id
    #: bare: send_task called; chaz: the admission committed.
    origin: float
    #: The wake-up's send_task called and returned (chaz: inside the post).
    send_begin: float | None = None
    send_end: float | None = None
    #: The workers' task events: received by the consumer, started in a pool thread.
    received: float | None = None
    started: float | None = None
    #: chaz: the job's started_at (its start's write); bare: the task's stamp.
    begun: float | None = None
    #: chaz: the Ack's created_at; bare: the task's stamp.
    stamped: float | None = None
    #: When this process heard of it (the Ack's publish; the task's LPUSH).
    seen: float | None = None
    #: chaz: the Message's created_at (the admission's insert, before its commit).
    message_stamp: float | None = None

    def span(self, a: str, b: str) -> float | None:
        """Seconds from field ``a`` to field ``b`` (None if either is missing)."""
        x, y = getattr(self, a), getattr(self, b)
        return None if x is None or y is None else y - x


#: The segments a sample's time is cut into, in order (the first field to the next).
SEGMENTS: dict[str, list[tuple[str, str, str]]] = {
    "bare": [
        ("send_task call", "origin", "send_end"),
        ("broker -> consumer (task-received)", "send_end", "received"),
        ("consumer -> pool thread (task-started)", "received", "started"),
        ("thread -> task body stamp", "started", "stamped"),
        ("stamp -> seen here", "stamped", "seen"),
    ],
    "chaz": [
        ("commit -> wake-up sent (publish, send_task)", "origin", "send_end"),
        ("broker -> consumer (task-received)", "send_end", "received"),
        ("consumer -> pool thread (task-started)", "received", "started"),
        ("lane + setup read + live slot -> started_at", "started", "begun"),
        ("start's writes -> Ack stamp", "begun", "stamped"),
        ("Ack commit + publish -> seen here", "stamped", "seen"),
    ],
}


@dataclasses.dataclass
class DispatchRun:
    """One stack's interleaved samples and what they add up to."""

    kind: str
    bare: list[Sample]
    chaz: list[Sample]
    load_before: str
    load_after: str
    seconds: float

    def total(self, kind: str, end: str) -> Latency:
        """origin -> ``end`` (``stamped`` or ``seen``) over ``kind``'s samples."""
        got = [s.span("origin", end) for s in getattr(self, kind)]
        return Latency.of([x for x in got if x is not None])

    def legacy(self) -> Latency:
        """chaz's Message.created_at -> Ack.created_at (the old (d))."""
        got = [s.span("message_stamp", "stamped") for s in self.chaz]
        return Latency.of([x for x in got if x is not None])

    def ratio(self, end: str, at: float = 99) -> float:
        """chaz's percentile ``at`` over bare Celery's, origin -> ``end``."""
        c, b = self.total("chaz", end), self.total("bare", end)
        x, y = (c.p99, b.p99) if at == 99 else (c.p50, b.p50)
        return x / y if y else float("nan")

    def met(self) -> bool:
        """Both pairs' p99 within the goal."""
        return all(self.ratio(end) <= GOAL_RATIO for end in ("stamped", "seen"))


#: A wake-up's send_task: called, returned.
Sent = tuple[float, float]

# -- what the processes tell -----------------------------------------------------------


_EXECUTION = re.compile(r"execution_id['\"]?:\s*['\"]([^'\"]+)")
_BARE_KEY = re.compile(r"['\"](d\d+)['\"]")


class TaskEvents:
    """The workers' ``task-received`` and ``task-started`` events, by sample key."""

    def __init__(self, stack: BenchStack) -> None:
        self._app = producer_app(stack)
        self._by_uuid: dict[str, str] = {}
        self.received: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._run, name="bench-events", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _on_received(self, event: dict[str, Any]) -> None:
        text = f"{event.get('args', '')} {event.get('kwargs', '')}"
        found = _EXECUTION.search(text) or _BARE_KEY.search(text)
        if found is None:
            return
        with self._lock:
            self._by_uuid[event["uuid"]] = found.group(1)
            self.received.setdefault(found.group(1), float(event["timestamp"]))

    def _on_started(self, event: dict[str, Any]) -> None:
        with self._lock:
            key = self._by_uuid.get(event["uuid"])
            if key is not None:
                self.started.setdefault(key, float(event["timestamp"]))

    def _run(self) -> None:
        with self._app.connection_for_read() as conn:
            self._receiver = self._app.events.Receiver(
                conn,
                handlers={"task-received": self._on_received, "task-started": self._on_started},
            )
            self._receiver.on_consume_ready = _consumer_ready(self._ready)
            with contextlib.suppress(Exception):
                self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def close(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(timeout=5)
        self._app.close()


def _consumer_ready(ready: threading.Event) -> Callable[..., None]:
    def on_ready(*_: Any, **__: Any) -> None:
        ready.set()

    return on_ready


class AckListener:
    """The benchmark agent's entries published on the sessions' channels (its
    Acks and replies), each with the time it was heard."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._me = agent_sender(AGENT.id)
        self._pubsub = client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]
        self._pubsub.psubscribe(keys.entries_channel("*"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = self._pubsub.get_message(timeout=0.5)
            if msg is not None and msg["type"] == "psubscribe":
                break
        self.acks: queue.Queue[tuple[dict[str, Any], float]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-acks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._pubsub.get_message(timeout=0.2)
            if msg is None or msg["type"] != "pmessage":
                continue
            heard = time.time()
            data = json.loads(msg["data"])
            if data["type"] in ("ack", "message", "error") and data["sender"] == self._me:
                self.acks.put((data, heard))

    def close(self) -> None:
        self._stop.set()
        join_all([self._thread], "the Ack listener", strict=False)
        self._pubsub.close()


def _ts(value: str | datetime) -> float:
    return (value if isinstance(value, datetime) else datetime.fromisoformat(value)).timestamp()


@contextlib.contextmanager
def watched(
    stack: BenchStack,
) -> Iterator[tuple[dict[str, float], dict[str, tuple[float, float]]]]:
    """This process's admissions' commit times and wake-up sends, by job id:
    the client's store and dispatcher, wrapped on their instances."""
    services = stack.client.services
    store, dispatcher = services.store, services.dispatcher
    committed: dict[str, float] = {}
    sent: dict[str, Sent] = {}
    admitting, send_wake = store.admitting, dispatcher.send_wake

    @contextlib.contextmanager
    def timed_admitting(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with admitting(*args, **kwargs) as tx:
            yield tx
        committed[tx.job_id] = time.time()  # the block ended: committed

    def timed_send(session_id: str, execution_id: str, *args: Any, **kwargs: Any) -> bool:
        t0 = time.time()
        ok = send_wake(session_id, execution_id, *args, **kwargs)
        sent[execution_id] = (t0, time.time())
        return ok

    store.admitting = timed_admitting  # type: ignore[method-assign]
    dispatcher.send_wake = timed_send  # type: ignore[method-assign]
    try:
        yield committed, sent
    finally:
        del store.admitting
        del dispatcher.send_wake


# -- the run ----------------------------------------------------------------------------


def measure(
    stack: BenchStack,
    samples: int,
    *,
    workers: int = 2,
    concurrency: int = 8,
    gap: float = 0.02,
    warm: int = 10,
) -> DispatchRun:
    """``samples`` messages each way, interleaved, ``gap`` seconds apart, with
    ``workers`` processes of each kind up (started here, stopped after)."""
    t_start = time.perf_counter()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    stack.start_noop_workers(workers, concurrency)
    stack.start_chaz_workers(workers, concurrency)
    events = TaskEvents(stack)
    app = producer_app(stack)
    stack.redis.delete(noop_app.DONE)
    done = DoneListener(redis.Redis.from_url(stack.settings.effective_redis_url()))
    acks = AckListener(redis.Redis.from_url(stack.settings.effective_redis_url()))
    bare_seen: queue.Queue[tuple[str, float, float]] = queue.Queue()
    done.handler = lambda key, started: bare_seen.put((key, started, time.time()))
    client = stack.client
    sessions = [client.sessions.create(AGENT.id).id for _ in range(10)]
    bare: list[Sample] = []
    chaz: list[Sample] = []
    try:
        with watched(stack) as (committed, sent):
            for i in range(samples + warm):
                b = _bare_one(app, f"d{i}", bare_seen)
                time.sleep(gap)
                c = _chaz_one(client, sessions[i % len(sessions)], acks, committed, sent)
                time.sleep(gap)
                if i >= warm:
                    bare.append(b)
                    chaz.append(c)
        time.sleep(0.5)  # the last events arrive
        for s in bare + chaz:
            s.received = events.received.get(s.key)
            s.started = events.started.get(s.key)
        store = client.services.store
        for s in chaz:
            job = store.get_job(s.key)
            s.begun = _ts(job.started_at) if job.started_at is not None else None
    finally:
        acks.close()
        done.close()
        events.close()
        app.close()
        stack.stop_chaz_workers()
        stack.stop_noop_workers()
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return DispatchRun(
        stack.kind, bare, chaz, load_before, load_after, time.perf_counter() - t_start
    )


def _bare_one(app: Any, key: str, seen: queue.Queue[tuple[str, float, float]]) -> Sample:
    t0 = time.time()
    app.send_task(noop_app.TASK, args=[key], queue=noop_app.QUEUE)
    s = Sample("bare", key, t0, send_begin=t0, send_end=time.time())
    while True:
        got, stamp, heard = seen.get(timeout=30)
        if got == key:
            s.begun = s.stamped = stamp
            s.seen = heard
            return s


def _chaz_one(
    client: Any,
    sid: str,
    acks: AckListener,
    committed: dict[str, float],
    sent: dict[str, Sent],
) -> Sample:
    entry = client.sessions.post(sid, "ping")
    job = str(entry.job_id)
    ack: tuple[dict[str, Any], float] | None = None
    while True:
        data, heard = acks.acks.get(timeout=30)
        if data["job_id"] != job:
            continue
        if data["type"] == "ack":
            ack = (data, heard)
        elif ack is not None:
            break  # the turn's reply: the next message finds its worker idle
    data, heard = ack
    begin, end = sent.get(job, (None, None))
    return Sample(
        "chaz",
        job,
        committed[job],
        send_begin=begin,
        send_end=end,
        stamped=_ts(data["created_at"]),
        seen=heard,
        message_stamp=_ts(entry.created_at),
    )


# -- the report ---------------------------------------------------------------------------


def _ms(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"


def _segment_rows(run: DispatchRun, kind: str) -> list[tuple[str, str, str, str]]:
    """Per segment: p50, p99, and its mean over the slowest 2 % of ``seen`` samples."""
    samples = getattr(run, kind)
    totals = [s.span("origin", "seen") or 0.0 for s in samples]
    cut = percentile(totals, 98) if totals else 0.0
    slow = [s for s, t in zip(samples, totals, strict=True) if t >= cut]
    rows = []
    for name, a, b in SEGMENTS[kind]:
        got = [x * 1000 for s in samples if (x := s.span(a, b)) is not None]
        tail = [x * 1000 for s in slow if (x := s.span(a, b)) is not None]
        rows.append(
            (
                name,
                _ms(percentile(got, 50)),
                _ms(percentile(got, 99)),
                _ms(sum(tail) / len(tail) if tail else float("nan")),
            )
        )
    return rows


def table(run: DispatchRun) -> Table:
    """The totals, their ratios, and the segments."""
    t = Table(
        title=(
            f"dispatch, {run.kind} stack: {len(run.chaz)} messages each way, interleaved "
            f"(ms; load average {run.load_before} -> {run.load_after})"
        ),
        title_justify="left",
    )
    for name in ("", "p50", "p99", "slowest 2 %: mean"):
        t.add_column(name, justify="left" if not name else "right")
    for end, label in (("stamped", "task start / Ack stamp"), ("seen", "heard here")):
        b, c = run.total("bare", end), run.total("chaz", end)
        t.add_row(f"bare Celery: send -> {label}", _ms(b.p50), _ms(b.p99), "")
        t.add_row(f"chaz: commit -> {label}", _ms(c.p50), _ms(c.p99), "")
        t.add_row(
            f"  chaz / bare ({label})",
            f"{run.ratio(end, 50):.2f}",
            f"[bold]{run.ratio(end):.2f}[/]",
            "",
        )
    lg = run.legacy()
    t.add_row("chaz: Message.created_at -> Ack.created_at (old (d))", _ms(lg.p50), _ms(lg.p99), "")
    for kind in ("bare", "chaz"):
        t.add_section()
        for name, p50, p99, tail in _segment_rows(run, kind):
            t.add_row(f"{kind}: {name}", p50, p99, tail)
    return t


def goal_line(run: DispatchRun) -> str:
    """The goal, read (never asserted)."""
    s, h = run.ratio("stamped"), run.ratio("seen")
    return (
        f"{run.kind}: dispatch p99 = {run.total('chaz', 'seen').p99:.2f} ms commit -> Ack heard "
        f"= {h:.2f} x bare Celery's send -> task heard ({run.total('bare', 'seen').p99:.2f} ms); "
        f"{s:.2f} x by the stamps ({run.total('chaz', 'stamped').p99:.2f} vs "
        f"{run.total('bare', 'stamped').p99:.2f} ms) (goal <= {GOAL_RATIO:g}): "
        f"{'met' if run.met() else 'NOT met'}"
    )


def summary(run: DispatchRun) -> dict[str, Any]:
    """The figures, for ``--json`` and the other benchmarks' payloads."""
    return {
        "kind": run.kind,
        "load": [run.load_before, run.load_after],
        "samples": len(run.chaz),
        "bare": {e: dataclasses.asdict(run.total("bare", e)) for e in ("stamped", "seen")},
        "chaz": {e: dataclasses.asdict(run.total("chaz", e)) for e in ("stamped", "seen")},
        "legacy": dataclasses.asdict(run.legacy()),
        "ratio_p99": {e: run.ratio(e) for e in ("stamped", "seen")},
        "segments": {k: _segment_rows(run, k) for k in ("bare", "chaz")},
        "met": run.met(),
        "goal": goal_line(run),
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import code_version, machine
    from benchmarks.stacks import scrub_environment

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dispatch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", choices=["embedded", "server", "both"], default="both")
    parser.add_argument("--samples", type=int, default=500, help="messages each way (500)")
    parser.add_argument("--workers", type=int, default=2, help="processes of each kind (2)")
    parser.add_argument("--concurrency", type=int, default=8, help="threads per process (8)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    scrub_environment()
    info = machine()
    console.print(
        f"[bold]chaz dispatch[/] {info['date']}: {info['cpus']} CPUs, Python {info['python']}, "
        f"Celery {info['celery']}; chaz {code_version()}"
    )
    kinds = ["embedded", "server"] if args.stack == "both" else [args.stack]
    out = []
    for kind in kinds:
        stack = BenchStack(kind)
        try:
            run = measure(stack, args.samples, workers=args.workers, concurrency=args.concurrency)
        finally:
            stack.close()
        console.print(table(run))
        console.print(goal_line(run))
        out.append(summary(run))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "runs": out}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
