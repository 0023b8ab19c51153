"""The measurements: closed loops for throughput, one-at-a-time probes for latency.

Throughput figures (a), (b) and (e) come from a *closed loop*: a fixed set of
keys (baseline slots, chaz sessions), each with at most one request in
flight; a key goes back to the sender threads as soon as its request has
completed. Completions are counted in a window that starts after a warm-up,
so process start-up and first connections are not measured.
"""

from __future__ import annotations

import json
import queue
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import Celery

from benchmarks import noop_app
from benchmarks.cpu import CpuMeter
from benchmarks.stacks import AGENT, BenchStack
from chaz.brokers import configure
from chaz.coord import keys
from chaz.domain.entries import EntryType, NewEntry, agent_sender
from chaz.settings import broker_url_for

# -- helpers ----------------------------------------------------------------------

#: How long a finished phase waits for its threads to return: a bound for a
#: thread that hangs, not a pace (a sender's call takes milliseconds).
JOIN_SECONDS = 60.0

# Every queue here is a queue.Queue, never a queue.SimpleQueue: on CPython
# before 3.13, SimpleQueue.get(timeout=...) may block past its timeout until
# the next put. A getter woken by a put that finds the item taken by another
# getter, and gets the GIL back after its deadline, waits again with a
# negative timeout, which means forever. That fits capacity's (r) hang in CI
# (2026-12-07): all 1,000 turns answered, so no put came any more, the main
# thread in its join, and the one sender left waiting in benchmark code (a
# C-level wait). Queue.get computes its remaining time in Python and raises
# Empty once it is spent (tests/unit/test_bench_threads.py).


class StuckThreads(RuntimeError):
    """Threads that did not return in time, with the stack each one waits in."""


def stacks(threads: list[threading.Thread]) -> str:
    """Where each of ``threads`` is now: its name and its Python stack."""
    frames = sys._current_frames()
    out = []
    for t in threads:
        frame = frames.get(t.ident) if t.ident is not None else None
        where = "".join(traceback.format_stack(frame)) if frame is not None else "  (no frame)\n"
        out.append(f"thread {t.name} (ident {t.ident}):\n{where}")
    return "".join(out)


def join_all(
    threads: list[threading.Thread],
    what: str,
    timeout: float | None = None,
    *,
    strict: bool = True,
) -> None:
    """Join ``threads`` within ``timeout`` seconds in all (default
    :data:`JOIN_SECONDS`). Any still alive then is reported with the stack it
    waits in, after every other thread's: raised as :class:`StuckThreads`
    naming ``what``, or (``strict=False``, for a close in a ``finally`` that
    must not skip the clean-up after it) written to stderr."""
    timeout = JOIN_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threads if t.is_alive()]
    if not stuck:
        return
    others = [t for t in threading.enumerate() if t not in stuck]
    # The stuck threads last: a report cut to its tail keeps them.
    report = (
        f"{len(stuck)} of {len(threads)} {what} still ran {timeout:g} s after they "
        f"were told to stop.\nThe process's other threads:\n{stacks(others)}"
        f"The {what} still running:\n{stacks(stuck)}"
    )
    if strict:
        raise StuckThreads(report)
    print(report, file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass
class Latency:
    """Summary of latency samples, in milliseconds."""

    samples: int
    p50: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ms = [s * 1000 for s in seconds]
        if not ms:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan)
        return cls(len(ms), percentile(ms, 50), percentile(ms, 99), statistics.fmean(ms), max(ms))


@dataclass
class Throughput:
    """Completions counted in the measurement window."""

    count: int
    seconds: float
    in_flight: int
    errors: int = 0
    #: CPU seconds per process group over the window (see benchmarks.cpu).
    cpu: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("nan")

    def cpu_ms_per(self, group: str) -> float:
        """Milliseconds of ``group``'s CPU per completion (nan if not measured)."""
        if group not in self.cpu or not self.count:
            return float("nan")
        return 1000 * self.cpu[group] / self.count


class ClosedLoop:
    """``senders`` threads keep one request in flight per key until time is up."""

    def __init__(self, keys: list[str], submit: Callable[[str], None], senders: int = 4) -> None:
        self.keys = keys
        self.submit = submit
        self.senders = senders
        self._ready: queue.Queue[str] = queue.Queue()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._window = (float("inf"), float("inf"))
        self._count = 0
        self._in_flight = 0
        self._errors = 0
        self._drained = threading.Condition(self._lock)

    def complete(self, key: str) -> None:
        """Called when ``key``'s request has finished; hands the key back."""
        now = time.perf_counter()
        with self._lock:
            self._in_flight -= 1
            start, end = self._window
            if start <= now < end:
                self._count += 1
            if self._in_flight <= 0:
                self._drained.notify_all()
        if not self._stopping.is_set():
            self._ready.put(key)

    def _send(self) -> None:
        while not self._stopping.is_set():
            try:
                key = self._ready.get(timeout=0.05)
            except queue.Empty:
                continue
            with self._lock:
                self._in_flight += 1
            try:
                self.submit(key)
            except Exception:
                with self._lock:
                    self._in_flight -= 1
                    self._errors += 1
                time.sleep(0.01)
                self._ready.put(key)

    def run(
        self,
        warmup: float,
        duration: float,
        drain_timeout: float = 60.0,
        meter: CpuMeter | None = None,
    ) -> Throughput:
        """Warm up, count completions for ``duration`` seconds, then drain.

        ``meter`` reads CPU time over the counting window only.
        """
        for k in self.keys:
            self._ready.put(k)
        t0 = time.perf_counter()
        self._window = (t0 + warmup, t0 + warmup + duration)
        threads = [
            threading.Thread(target=self._send, name=f"bench-send-{i}", daemon=True)
            for i in range(self.senders)
        ]
        for t in threads:
            t.start()
        cpu: dict[str, float] = {}
        if meter is not None:
            time.sleep(max(0.0, self._window[0] - time.perf_counter()))
            meter.start()
        time.sleep(max(0.0, self._window[1] - time.perf_counter()))
        if meter is not None:
            cpu = meter.stop()
        self._stopping.set()
        join_all(threads, "sender threads")
        with self._lock:
            in_flight = self._in_flight
            self._drained.wait_for(lambda: self._in_flight <= 0, timeout=drain_timeout)
            return Throughput(self._count, duration, in_flight, self._errors, cpu)


# -- listeners --------------------------------------------------------------------


class DoneListener:
    """Pops the baseline's done list and hands ``(key, start_time)`` to ``handler``."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.handler: Callable[[str, float], None] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-done", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            got = self._client.blpop([noop_app.DONE], timeout=0.2)
            if got is None:
                continue
            items: list[bytes | str] = [got[1]]
            more = self._client.lpop(noop_app.DONE, 512)
            if isinstance(more, list):
                items.extend(more)
            for raw in items:
                text = raw.decode() if isinstance(raw, bytes) else raw
                key, _, started = text.partition(" ")
                if self.handler is not None:
                    self.handler(key, float(started))

    def close(self) -> None:
        self._stop.set()
        join_all([self._thread], "the done listener", strict=False)


class ReplyListener:
    """One pattern subscription to every session's entry channel.

    Hands each reply of the benchmark agent (a Message or an Error it wrote)
    to ``handler`` as the published JSON.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client  # keep it: a collected client closes its pool's connections
        self._pubsub = client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]
        self._pubsub.psubscribe(keys.entries_channel("*"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait for the subscription to be in force
            msg = self._pubsub.get_message(timeout=0.5)
            if msg is not None and msg["type"] == "psubscribe":
                break
        self._me = agent_sender(AGENT.id)
        self.handler: Callable[[dict[str, Any]], None] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-replies", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._pubsub.get_message(timeout=0.2)
            if msg is None or msg["type"] != "pmessage":
                continue
            data = json.loads(msg["data"])
            if data["sender"] != self._me or data["type"] not in ("message", "error"):
                continue
            if self.handler is not None:
                self.handler(data)

    def close(self) -> None:
        self._stop.set()
        join_all([self._thread], "the reply listener", strict=False)
        self._pubsub.close()


# -- (a) the baseline ---------------------------------------------------------------


@dataclass
class Sizes:
    """How much each phase does."""

    sessions: int = 100
    senders: int = 4
    warmup: float = 2.0
    baseline_seconds: float = 10.0
    latency_samples: int = 200
    turns_seconds: float = 15.0
    fifo_messages: int = 300
    admission_seconds: float = 5.0
    admission_sessions: int = 40
    #: (f): entries written before the long session is compacted, messages
    #: per round, and rounds (each a fresh session and the long one, alternated).
    long_entries: int = 100_000
    long_messages: int = 200
    long_rounds: int = 3
    #: (g): producer threads, each with its own session, and the counting window.
    producer_threads: int = 100
    producer_seconds: float = 10.0


FULL = Sizes()
QUICK = Sizes(
    warmup=1.0,
    baseline_seconds=3.0,
    latency_samples=40,
    turns_seconds=4.0,
    fifo_messages=40,
    admission_seconds=1.5,
    long_entries=20_000,
    long_messages=40,
    long_rounds=2,
    producer_seconds=3.0,
)


@dataclass
class BaselineResult:
    round_trips: Throughput
    latency: Latency
    rtt: Latency


def producer_app(stack: BenchStack) -> Celery:
    """A producer-side Celery app with chaz's settings, as chaz's Dispatcher builds it."""
    app = Celery("bench-producer", set_as_current=False)
    app.config_from_object("chaz.celery_settings")
    configure(app.conf, broker_url_for(stack.settings))
    return app


def measure_baseline(stack: BenchStack, sizes: Sizes) -> BaselineResult:
    """(a) bare Celery: dispatch latency one at a time, then round trips/s in a closed loop."""
    app = producer_app(stack)
    stack.redis.delete(noop_app.DONE)
    listener = DoneListener(redis.Redis.from_url(stack.settings.effective_redis_url()))
    try:

        def send(key: str) -> None:
            app.send_task(noop_app.TASK, args=[key], queue=noop_app.QUEUE)

        # Latency: one task at a time on the idle worker.
        got: queue.Queue[float] = queue.Queue()
        listener.handler = lambda key, started: got.put(started)
        lat, rtt = [], []
        for i in range(sizes.latency_samples + 10):
            t_wall, t0 = time.time(), time.perf_counter()
            send(f"lat{i}")
            started = got.get(timeout=30)
            if i >= 10:  # the first few warm the connections up
                lat.append(started - t_wall)
                rtt.append(time.perf_counter() - t0)
            time.sleep(0.005)

        loop = ClosedLoop([f"slot{i}" for i in range(sizes.sessions)], send, sizes.senders)
        listener.handler = lambda key, started: loop.complete(key)
        meter = CpuMeter(stack.noop_worker_pids, database=stack.kind == "server")
        result = loop.run(sizes.warmup, sizes.baseline_seconds, meter=meter)
    finally:
        listener.close()
        app.close()
    return BaselineResult(result, Latency.of(lat), Latency.of(rtt))


# -- (b) (c) (d) chaz -----------------------------------------------------------------


@dataclass
class FifoResult:
    messages: int
    hop_rate: float  # turns/s between the first and the last reply (stored timestamps)
    wall_rate: float  # messages / (last reply seen - first post)
    in_order: bool
    errors: int


@dataclass
class DispatchResult:
    latency: Latency  # Ack.created_at - the admission's commit
    rtt: Latency  # post() called -> reply seen by the producer


@dataclass
class ChazResult:
    turns: Throughput
    fifo: FifoResult
    dispatch: DispatchResult
    admissions: Throughput | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    long: LongSessionResult | None = None
    producer: ProducerResult | None = None


def measure_dispatch(stack: BenchStack, listener: ReplyListener, sizes: Sizes) -> DispatchResult:
    """(d) single messages on an idle system, one at a time, over a few sessions:
    from the admission's commit (this process's ``store.admitting`` block
    ended) to the Ack's stamp, like (a)'s send -> task start
    (benchmarks.dispatch has the interleaved comparison and its segments)."""
    from benchmarks.dispatch import watched  # it imports this module

    client = stack.client
    sessions = [client.sessions.create(AGENT.id).id for _ in range(10)]
    seen: queue.Queue[str] = queue.Queue()
    listener.handler = lambda data: seen.put(data["job_id"])
    warm = 10
    rtt: list[float] = []
    jobs: list[str] = []
    with watched(stack) as (committed, _sent):
        for i in range(sizes.latency_samples + warm):
            sid = sessions[i % len(sessions)]
            t0 = time.perf_counter()
            entry = client.sessions.post(sid, f"ping {i}")
            while seen.get(timeout=30) != entry.job_id:
                pass
            if i >= warm:
                rtt.append(time.perf_counter() - t0)
                jobs.append(str(entry.job_id))
            time.sleep(0.02)  # let the worker release the lane: the next one starts idle
    listener.handler = None
    lat = _ack_latencies(stack, sessions, {j: committed[j] for j in jobs})
    return DispatchResult(Latency.of(lat), Latency.of(rtt))


def _ack_latencies(
    stack: BenchStack, sessions: list[str], committed: dict[str, float]
) -> list[float]:
    """Each job's Ack.created_at less its admission's commit time."""
    store = stack.client.services.store
    out: list[float] = []
    for sid in sessions:
        for e in store.entries(sid):
            if e.type is EntryType.ACK and e.job_id in committed:
                out.append(e.created_at.timestamp() - committed[e.job_id])
    return out


def measure_fifo(stack: BenchStack, listener: ReplyListener, sizes: Sizes) -> FifoResult:
    """(c) one session, ``fifo_messages`` posted at once: its turns run one by one."""
    client = stack.client
    sid = client.sessions.create(AGENT.id).id
    n = sizes.fifo_messages
    lock = threading.Lock()
    done = threading.Event()
    state = {"replies": 0, "errors": 0, "last": 0.0}

    def on_reply(data: dict[str, Any]) -> None:
        if data["session_id"] != sid:
            return
        with lock:
            state["replies"] += 1
            state["errors"] += data["type"] == "error"
            state["last"] = time.perf_counter()
            if state["replies"] >= n:
                done.set()

    listener.handler = on_reply
    t0 = time.perf_counter()
    posted = [str(client.sessions.post(sid, f"m{i}").job_id) for i in range(n)]
    if not done.wait(timeout=max(60.0, n * 0.5)):
        raise RuntimeError(f"only {state['replies']} of {n} FIFO turns finished")
    listener.handler = None
    me = agent_sender(AGENT.id)
    replies = [
        e
        for e in client.sessions.entries(sid)
        if e.sender == me and e.type in (EntryType.MESSAGE, EntryType.ERROR)
    ]
    span = (replies[-1].created_at - replies[0].created_at).total_seconds()
    return FifoResult(
        messages=n,
        hop_rate=(len(replies) - 1) / span if span > 0 else float("nan"),
        wall_rate=n / (state["last"] - t0),
        in_order=[e.job_id for e in replies] == posted,
        errors=int(state["errors"]),
    )


def measure_turns(stack: BenchStack, listener: ReplyListener, sizes: Sizes) -> Throughput:
    """(b) ``sessions`` sessions, one message in flight in each, for ``turns_seconds``."""
    client = stack.client
    sessions = [client.sessions.create(AGENT.id).id for _ in range(sizes.sessions)]
    mine = set(sessions)
    errors = [0]

    def post(sid: str) -> None:
        client.sessions.post(sid, "hi")

    loop = ClosedLoop(sessions, post, sizes.senders)

    def on_reply(data: dict[str, Any]) -> None:
        if data["session_id"] in mine:
            errors[0] += data["type"] == "error"
            loop.complete(data["session_id"])

    listener.handler = on_reply
    meter = CpuMeter(stack.worker_pids, database=stack.kind == "server")
    result = loop.run(sizes.warmup, sizes.turns_seconds, drain_timeout=120, meter=meter)
    listener.handler = None
    result.errors += errors[0]
    return result


def measure_admissions(stack: BenchStack, sizes: Sizes) -> Throughput:
    """(e) ``Client.sessions.post`` from ``senders`` threads with no worker consuming."""
    client = stack.client
    sessions = [client.sessions.create(AGENT.id).id for _ in range(sizes.admission_sessions)]
    loop: ClosedLoop

    def post(sid: str) -> None:
        client.sessions.post(sid, "hi")
        loop.complete(sid)

    loop = ClosedLoop(sessions, post, sizes.senders)
    return loop.run(min(1.0, sizes.warmup), sizes.admission_seconds)


# -- (f) a long session, compacted, against a fresh one ------------------------------


@dataclass
class LongSessionResult:
    """(f): one session's sequential turns/s after ``prior_entries`` entries and a
    compaction, against fresh sessions', in the same run (docs/performance.md)."""

    prior_entries: int
    messages: int
    rounds: int
    import_seconds: float
    compact_seconds: float
    #: Replies - 1 and the seconds between the first and the last, per kind.
    fresh_hops: int = 0
    fresh_seconds: float = 0.0
    long_hops: int = 0
    long_seconds: float = 0.0
    in_order: bool = True
    errors: int = 0

    @property
    def fresh_rate(self) -> float:
        return self.fresh_hops / self.fresh_seconds if self.fresh_seconds > 0 else float("nan")

    @property
    def long_rate(self) -> float:
        return self.long_hops / self.long_seconds if self.long_seconds > 0 else float("nan")

    @property
    def ratio(self) -> float:
        return self.long_rate / self.fresh_rate


def _history(n: int) -> list[NewEntry]:
    """A person's Message, the agent's ToolCall, the agent's reply, ...: ``n`` entries."""
    me = agent_sender(AGENT.id)
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(NewEntry(EntryType.MESSAGE, "user:bench", f"question {i} " + "q" * 60))
        elif i % 3 == 1:
            out.append(NewEntry(EntryType.TOOL_CALL, me, '{"name": "clock", "arguments": ""}'))
        else:
            out.append(NewEntry(EntryType.MESSAGE, me, f"answer {i} " + "a" * 120))
    return out


def _sequential(
    stack: BenchStack, listener: ReplyListener, sid: str, n: int
) -> tuple[int, float, bool, int]:
    """Post ``n`` messages into ``sid`` at once; (hops, seconds between the first and
    the last reply by their stored timestamps, in admission order, errors)."""
    client = stack.client
    lock = threading.Lock()
    done = threading.Event()
    state = {"replies": 0, "errors": 0}

    def on_reply(data: dict[str, Any]) -> None:
        if data["session_id"] != sid:
            return
        with lock:
            state["replies"] += 1
            state["errors"] += data["type"] == "error"
            if state["replies"] >= n:
                done.set()

    listener.handler = on_reply
    after = client.sessions.get(sid).last_seq
    posted = [str(client.sessions.post(sid, f"m{i}").job_id) for i in range(n)]
    if not done.wait(timeout=max(60.0, n * 0.5)):
        raise RuntimeError(f"only {state['replies']} of {n} turns of session {sid} finished")
    listener.handler = None
    me = agent_sender(AGENT.id)
    replies = [
        e
        for e in client.sessions.entries(sid, after=after)
        if e.sender == me and e.type in (EntryType.MESSAGE, EntryType.ERROR)
    ]
    span = (replies[-1].created_at - replies[0].created_at).total_seconds()
    return len(replies) - 1, span, [e.job_id for e in replies] == posted, int(state["errors"])


def measure_long_session(
    stack: BenchStack, listener: ReplyListener, sizes: Sizes
) -> LongSessionResult:
    """(f) turns/s in a session of ``long_entries`` prior entries, compacted before
    each round, against a fresh session per round; rounds alternate which goes first."""
    client = stack.client
    long_sid = client.sessions.create(AGENT.id).id
    t0 = time.perf_counter()
    client.services.store.import_entries(long_sid, _history(sizes.long_entries))
    imported = time.perf_counter() - t0
    result = LongSessionResult(
        sizes.long_entries, sizes.long_messages, sizes.long_rounds, imported, 0.0
    )
    for r in range(sizes.long_rounds):
        t0 = time.perf_counter()
        if client.sessions.compact(long_sid) is None:
            raise RuntimeError(f"session {long_sid} had nothing to compact")
        result.compact_seconds += time.perf_counter() - t0
        fresh_sid = client.sessions.create(AGENT.id).id
        order = [("fresh", fresh_sid), ("long", long_sid)]
        for kind, sid in order if r % 2 == 0 else order[::-1]:
            hops, span, in_order, errors = _sequential(stack, listener, sid, sizes.long_messages)
            result.in_order &= in_order
            result.errors += errors
            if kind == "fresh":
                result.fresh_hops += hops
                result.fresh_seconds += span
            else:
                result.long_hops += hops
                result.long_seconds += span
    result.compact_seconds /= sizes.long_rounds
    return result


# -- (g) a producer's CPU per post + wait_for_reply ------------------------------------


@dataclass
class ProducerResult:
    """(g): ``threads`` producer threads, each posting into its own session and
    waiting for the reply with ``client.sessions.wait_for_reply``; CPU time of
    this (the producer's) process and of the workers over the counting window."""

    threads: int
    replies: int
    seconds: float
    #: CPU seconds of this process over the window (``time.process_time``).
    producer_cpu: float
    #: CPU seconds per process group over the window (benchmarks.cpu).
    cpu: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    #: Replies that did not belong to the waiter's own post (must stay 0).
    crossed: int = 0

    @property
    def rate(self) -> float:
        return self.replies / self.seconds if self.seconds > 0 else float("nan")

    @property
    def producer_ms(self) -> float:
        """The producer's CPU milliseconds per post + wait."""
        return 1000 * self.producer_cpu / self.replies if self.replies else float("nan")

    @property
    def worker_ms(self) -> float:
        """The workers' CPU milliseconds per turn, in the same window."""
        if "workers" not in self.cpu or not self.replies:
            return float("nan")
        return 1000 * self.cpu["workers"] / self.replies


def measure_producer(stack: BenchStack, sizes: Sizes) -> ProducerResult:
    """(g) ``producer_threads`` threads in this process, each in a loop of
    ``post`` + ``wait_for_reply`` on a session of its own, for ``producer_seconds``."""
    client = stack.client
    n = sizes.producer_threads
    sessions = [client.sessions.create(AGENT.id).id for _ in range(n)]
    me = agent_sender(AGENT.id)
    stop = threading.Event()
    lock = threading.Lock()
    window = [float("inf"), float("inf")]
    state = {"replies": 0, "errors": 0, "crossed": 0}

    def producer(sid: str) -> None:
        while not stop.is_set():
            try:
                entry = client.sessions.post(sid, "hi")
                reply = client.sessions.wait_for_reply(sid, after=entry.seq, timeout=60)
            except Exception:
                with lock:
                    state["errors"] += 1
                time.sleep(0.01)
                continue
            now = time.perf_counter()
            with lock:
                if reply.job_id != entry.job_id or reply.sender != me:
                    state["crossed"] += 1
                if window[0] <= now < window[1]:
                    state["replies"] += 1

    threads = [
        threading.Thread(target=producer, args=(sid,), name=f"bench-producer-{i}", daemon=True)
        for i, sid in enumerate(sessions)
    ]
    t0 = time.perf_counter()
    window[:] = [t0 + sizes.warmup, t0 + sizes.warmup + sizes.producer_seconds]
    for t in threads:
        t.start()
    meter = CpuMeter(stack.worker_pids, database=stack.kind == "server")
    time.sleep(max(0.0, window[0] - time.perf_counter()))
    meter.start()
    cpu0 = time.process_time()
    time.sleep(max(0.0, window[1] - time.perf_counter()))
    producer_cpu = time.process_time() - cpu0
    cpu = meter.stop()
    stop.set()
    for t in threads:
        t.join(timeout=90)
    return ProducerResult(
        threads=n,
        replies=state["replies"],
        seconds=sizes.producer_seconds,
        producer_cpu=producer_cpu,
        cpu=cpu,
        errors=state["errors"],
        crossed=state["crossed"],
    )
