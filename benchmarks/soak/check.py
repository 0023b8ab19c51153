"""The verdict: what the database says happened to every admitted turn.

Nothing here trusts a worker's log or a producer's memory beyond what it
confirmed: the entries and jobs tables are read once the backlog has
drained, and every rule of docs/reliability.md is checked against them.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from benchmarks.soak.faults import Fault
from benchmarks.soak.load import AGENT, SENDER, reply_for
from benchmarks.soak.stack import Exit

AGENT_SENDER = f"agent:{AGENT.id}"
_CONTENT = re.compile(r"s(\d+) #(\d+)")
#: Entries that show a session's work moving again: a turn starting (or
#: resuming) or a turn ending.
_PROGRESS = ("ack", "message", "error")
NO_FAULT = "(no fault)"
ALL = "all turns"


@dataclass
class Row:
    """One line of the table."""

    faults: int = 0
    turns: int = 0
    completed_once: int = 0
    lost: int = 0
    interrupted: int = 0
    dup_entries: int = 0
    dup_tool_calls: int = 0
    dup_replies: int = 0
    fifo: int = 0
    resumed: int = 0
    crashes: int = 0
    recovery: list[float] = field(default_factory=list)
    #: faults that found no turn in flight (no recovery to measure)
    idle_faults: int = 0

    @property
    def recovery_p50(self) -> float:
        return statistics.median(self.recovery) if self.recovery else float("nan")

    @property
    def recovery_max(self) -> float:
        return max(self.recovery) if self.recovery else float("nan")


@dataclass
class Job:
    id: str
    session_id: str
    ordinal: int
    trigger_entry_id: str | None
    status: str
    attempts: int
    error: Any
    created: float
    started: float | None
    finished: float | None
    #: this job's entries, in seq order (the trigger message excluded)
    entries: list[Entry] = field(default_factory=list)
    n: int | None = None  # the producer's number of its message


@dataclass
class Entry:
    id: str
    session_id: str
    seq: int
    type: str
    sender: str
    content: str
    metadata: dict[str, Any]
    job_id: str | None
    created: float


@dataclass
class JobVerdict:
    """What went wrong with one job (all zero: completed exactly once)."""

    lost: int = 0
    interrupted: int = 0
    dup_entries: int = 0
    dup_tool_calls: int = 0
    dup_replies: int = 0
    fifo: int = 0

    @property
    def clean(self) -> bool:
        return not (
            self.lost
            or self.interrupted
            or self.dup_entries
            or self.dup_tool_calls
            or self.dup_replies
            or self.fifo
        )


@dataclass
class Verdict:
    """The table's rows, plus the evidence behind every non-zero cell."""

    rows: dict[str, Row]
    problems: list[str]
    statuses: Counter[str]
    #: "status code (exception) after fault-kind" -> jobs
    errors: Counter[str]
    #: the same keys -> the error message of one such job
    examples: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.problems)


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def load(conn: psycopg.Connection[Any]) -> tuple[dict[str, Job], list[Entry]]:
    """Every job and entry of the soak's database."""
    jobs: dict[str, Job] = {}
    for row in conn.execute(
        "SELECT id, session_id, ordinal, trigger_entry_id, status, attempts, error, "
        "created_at, started_at, finished_at FROM jobs"
    ):
        jobs[row[0]] = Job(
            row[0], row[1], row[2], row[3], row[4], row[5], row[6],
            row[7].timestamp(), _ts(row[8]), _ts(row[9]),
        )  # fmt: skip
    entries = [
        Entry(r[0], r[1], r[2], r[3], r[4], r[5], r[6] or {}, r[7], r[8].timestamp())
        for r in conn.execute(
            "SELECT id, session_id, seq, type, sender, content, metadata, job_id, created_at "
            "FROM entries ORDER BY session_id, seq"
        )
    ]
    return jobs, entries


def verify(
    jobs: dict[str, Job],
    entries: list[Entry],
    confirmed: dict[str, list[int]],
    faults: list[Fault],
    exits: list[Exit],
    kinds: list[str],
) -> Verdict:
    """Check every rule; one row per fault kind, one for unexposed turns, one in all."""
    rows = {k: Row() for k in [*kinds, NO_FAULT, ALL]}
    problems: list[str] = []
    verdicts: dict[str, JobVerdict] = defaultdict(JobVerdict)
    by_session: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_session[e.session_id].append(e)
    trigger_of: dict[str, Entry] = {}

    for sid, mine in by_session.items():
        users = [e for e in mine if e.type == "message" and e.sender == SENDER]
        seen = Counter(e.content for e in users)
        for text, count in seen.items():
            if count > 1:
                problems.append(f"session {sid}: message {text!r} stored {count} times")
                rows[ALL].dup_entries += count - 1
        numbers = {_number(e.content) for e in users}
        missing = [n for n in confirmed.get(sid, []) if n not in numbers]
        if missing:
            rows[ALL].lost += len(missing)
            problems.append(f"session {sid}: confirmed messages missing: {missing[:10]}")
        for e in users:
            if e.job_id is None or e.job_id not in jobs:
                rows[ALL].lost += 1
                problems.append(f"session {sid}: message {e.content!r} admitted no job")
            else:
                trigger_of[e.job_id] = e
        for e in mine:
            if e.job_id in jobs and not (e.type == "message" and e.sender == SENDER):
                jobs[e.job_id].entries.append(e)

    for job in jobs.values():
        trig = trigger_of.get(job.id)
        job.n = _number(trig.content) if trig else None
        verdicts[job.id] = _check_job(job, trig, problems)

    _check_order(jobs, verdicts, problems)
    _attribute(jobs, verdicts, faults, rows)
    _recoveries(jobs, entries, faults, rows)
    _crashes(exits, faults, rows, problems)

    statuses = Counter(j.status for j in jobs.values())
    errors: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for j in jobs.values():
        if j.status != "succeeded":
            key, message = _failure(j, faults)
            errors[key] += 1
            examples.setdefault(key, message)
    for kind in kinds:
        if rows[kind].faults == 0:
            problems.append(f"no {kind} fault was injected")
    return Verdict(rows, problems, statuses, errors, examples)


def _failure(job: Job, faults: list[Fault]) -> tuple[str, str]:
    """How a job failed, and the last fault before it did: ``failed turn.crashed
    (OperationalError) after pg``, with the error's message as evidence."""
    error = job.error if isinstance(job.error, dict) else {}
    code = str(error.get("code", "unfinished" if job.finished is None else "?"))
    message = str(error.get("message", ""))
    cls = message.split(":", 1)[0] if code == "turn.crashed" and ":" in message else ""
    end = job.finished if job.finished is not None else float("inf")
    before = [f for f in faults if f.start <= end]
    cause = before[-1].kind if before else NO_FAULT
    return f"{job.status} {code}{f' ({cls})' if cls else ''} after {cause}", message


def _number(text: str) -> int | None:
    m = _CONTENT.fullmatch(text)
    return int(m.group(2)) if m else None


def _check_job(job: Job, trig: Entry | None, problems: list[str]) -> JobVerdict:
    v = JobVerdict()
    where = f"job {job.id} ({trig.content if trig else 'no trigger'!r})"
    if job.status == "interrupted":
        v.interrupted = 1
        problems.append(f"{where}: interrupted after {job.attempts} attempts")
    elif job.status != "succeeded":
        v.lost = 1
        code = job.error.get("code") if isinstance(job.error, dict) else None
        problems.append(f"{where}: ended {job.status} ({code or 'unfinished'})")
    replies = [
        e for e in job.entries if e.sender == AGENT_SENDER and e.type in ("message", "error")
    ]
    if len(replies) > 1:
        v.dup_replies = len(replies) - 1
        problems.append(f"{where}: {len(replies)} replies")
    if job.status == "succeeded":
        if not replies:
            v.lost = 1
            problems.append(f"{where}: succeeded without a reply")
        elif trig is not None and replies[0].content != reply_for(trig.content):
            v.lost = 1
            problems.append(f"{where}: wrong reply {replies[0].content[:80]!r}")
    acks = [e for e in job.entries if e.type == "ack" and not e.metadata.get("resumed")]
    if len(acks) > 1:
        v.dup_entries += len(acks) - 1
        problems.append(f"{where}: {len(acks)} Acks")
    if job.started is not None and not acks and job.status == "succeeded":
        problems.append(f"{where}: ran without an Ack")
    for kind in ("tool_call", "tool_result"):
        per_call = Counter(e.metadata.get("call_id") for e in job.entries if e.type == kind)
        extra = sum(c - 1 for c in per_call.values() if c > 1)
        if extra:
            v.dup_tool_calls += extra
            problems.append(f"{where}: {extra} duplicated {kind} entries")
    return v


def _check_order(
    jobs: dict[str, Job], verdicts: dict[str, JobVerdict], problems: list[str]
) -> None:
    """Admission order, start order, reply order, one turn at a time: per adjacent pair."""
    per_session: dict[str, list[Job]] = defaultdict(list)
    for j in jobs.values():
        per_session[j.session_id].append(j)
    for sid, mine in per_session.items():
        mine.sort(key=lambda j: j.ordinal)
        for a, b in itertools.pairwise(mine):
            why = _pair_violation(a, b)
            if why:
                problems.append(f"session {sid}: FIFO: {why} (jobs {a.id}, {b.id})")
                verdicts[a.id].fifo += 1
                verdicts[b.id].fifo += 1


def _pair_violation(a: Job, b: Job) -> str | None:
    if a.n is not None and b.n is not None and a.n >= b.n:
        return f"#{a.n} was admitted before #{b.n}, which was posted first"
    if a.started is not None and b.started is not None and b.started < a.started:
        return f"#{b.n} started before #{a.n}"
    # One turn at a time: everything the earlier job wrote (its reply last)
    # comes before anything the later one wrote (its Ack first).
    if b.entries and a.entries and min(e.seq for e in b.entries) < max(e.seq for e in a.entries):
        return f"#{b.n} wrote before #{a.n} had finished (turns overlapped)"
    a_reply = _reply_seq(a)
    b_reply = _reply_seq(b)
    if a_reply is not None and b_reply is not None and b_reply < a_reply:
        return f"#{b.n} answered before #{a.n}"
    return None


def _reply_seq(j: Job) -> int | None:
    seqs = [e.seq for e in j.entries if e.sender == AGENT_SENDER and e.type in ("message", "error")]
    return min(seqs) if seqs else None


def _exposed(job: Job, fault: Fault) -> bool:
    """Whether ``job`` was admitted and unfinished at some moment of ``fault``."""
    return job.created <= fault.end and (job.finished is None or job.finished >= fault.start)


def _attribute(
    jobs: dict[str, Job],
    verdicts: dict[str, JobVerdict],
    faults: list[Fault],
    rows: dict[str, Row],
) -> None:
    for f in faults:
        rows[f.kind].faults += 1
        rows[ALL].faults += 1
    for job in jobs.values():
        v = verdicts[job.id]
        kinds = {f.kind for f in faults if _exposed(job, f)} or {NO_FAULT}
        for name in [*kinds, ALL]:
            r = rows[name]
            r.turns += 1
            r.completed_once += v.clean
            r.lost += v.lost
            r.interrupted += v.interrupted
            r.dup_entries += v.dup_entries
            r.dup_tool_calls += v.dup_tool_calls
            r.dup_replies += v.dup_replies
            r.fifo += v.fifo
            r.resumed += job.attempts > 1
    # A FIFO violation involves two jobs and was counted on both.
    for r in rows.values():
        r.fifo = (r.fifo + 1) // 2


def _recoveries(
    jobs: dict[str, Job], entries: list[Entry], faults: list[Fault], rows: dict[str, Row]
) -> None:
    """Per fault: the time until every session it caught mid-turn made progress again."""
    progress: dict[str, list[float]] = defaultdict(list)
    for e in entries:
        if e.type == "ack" or (e.sender == AGENT_SENDER and e.type in _PROGRESS):
            progress[e.session_id].append(e.created)
    acks: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        if e.type == "ack" and e.job_id:
            acks[e.job_id].append(e)
    kills = [(f.start, f.victim_pid) for f in faults if f.victim_pid is not None]

    def stalled(pid: int | None, at: float) -> bool:
        # Its worker was killed earlier: the job waits for that kill's
        # recovery, and would only lend that recovery to this fault.
        return pid is not None and any(t < at and p == pid for t, p in kills)

    for f in faults:
        caught = []
        for j in jobs.values():
            if j.started is None or j.started > f.start:
                continue
            if j.finished is not None and j.finished <= f.start:
                continue
            pid = _ran_on(acks[j.id], f.start)
            if (f.victim_pid is None or pid == f.victim_pid) and not stalled(pid, f.start):
                caught.append(j)
        if not caught:
            rows[f.kind].idle_faults += 1
            continue
        worst = 0.0
        for j in caught:
            after = [t for t in progress[j.session_id] if t > f.end]
            unfinished_then = any(
                o.session_id == j.session_id
                and o.created <= f.end
                and (o.finished is None or o.finished > f.end)
                for o in jobs.values()
            )
            if after:
                worst = max(worst, min(after) - f.end)
            elif unfinished_then:
                worst = float("inf")
        f.recovery = worst
        later = [g for g in faults if f.end < g.start <= f.end + worst]
        f.overlapped = later[0].kind if later else None
        rows[f.kind].recovery.append(worst)
        rows[ALL].recovery.append(worst)


def _ran_on(acks: list[Entry], before: float) -> int | None:
    """The pid that the job's latest Ack before ``before`` names (resumes may write one)."""
    mine = [e for e in acks if e.created <= before]
    if not mine:
        return None
    pid = mine[-1].metadata.get("pid")
    return int(pid) if pid is not None else None


def _crashes(
    exits: list[Exit], faults: list[Fault], rows: dict[str, Row], problems: list[str]
) -> None:
    for x in exits:
        if x.expected:
            continue
        before = [f for f in faults if f.start <= x.at]
        kind = before[-1].kind if before else NO_FAULT
        rows[kind].crashes += 1
        rows[ALL].crashes += 1
        last = x.log_tail.strip().splitlines()[-1:] if x.log_tail else []
        problems.append(
            f"{x.role} {x.name} (pid {x.pid}) exited by itself with status "
            f"{x.returncode} after a {kind} fault: {last[0] if last else '(no log)'}"
        )
