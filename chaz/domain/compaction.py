"""Compaction's pure parts: the range, its key, the scripted digest and the model's prompt.

A Summary entry is a context start boundary (docs/contracts.md#context): a
turn's context is the latest Summary and what follows it. Compacting a
session writes a new Summary at its head that stands for the context since
the previous one (that Summary included). :mod:`chaz.usecases.compaction`
runs it; docs/sessions.md#compaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from chaz.domain.agents import Limits
from chaz.domain.entries import EntryType, Said

#: The first line of the request the session's model answers: a model reads
#: it first, and a scripted agent's rule can match it (``{"match": "^Summarize"}``).
SUMMARY_HEADER = "Summarize this conversation so far."
SYSTEM_PROMPT = (
    "You compact conversations. Write a faithful, self-contained summary of the "
    "conversation below: the facts, decisions, open questions and anything the "
    "assistant promised, so that the conversation can go on from the summary alone. "
    "Answer with the summary only."
)
TRANSCRIPT_OPEN = "<<<CONVERSATION"
TRANSCRIPT_CLOSE = "CONVERSATION>>>"
#: Longest transcript (characters) a model's request carries; older text is cut.
MAX_TRANSCRIPT_CHARS = 60_000
#: Characters of one line the scripted digest quotes.
DIGEST_LINE_CHARS = 200


def summary_key(session_id: str, covers: int) -> str:
    """The Summary's idempotency key (runtime scope): one Summary per covered range.

    ``covers`` is the seq of the newest context entry of the session that the
    Summary stands for; compacting the same range twice meets this key.
    """
    return f"summary:{session_id}:{covers}"


def pending(history: Sequence[Said]) -> list[Said]:
    """The context entries a new Summary would add to: those after the leading
    Summary (empty: nothing to compact)."""
    if history and history[0].type is EntryType.SUMMARY:
        return list(history[1:])
    return list(history)


def context_chars(history: Sequence[Said]) -> int:
    """The size of a context in characters: what the automatic trigger measures."""
    return sum(len(e.content) for e in history)


def context_budget(setting: int | None, *limits: Limits | None) -> int | None:
    """The automatic trigger's budget: the smallest of ``CHAZ_MAX_CONTEXT_CHARS``
    and the ``max_context_chars`` of the agent's and the session's limits, those
    that are set (None: no automatic compaction). Every turn asks, so no
    :class:`Limits` is built for it."""
    found = [setting] if setting is not None else []
    found += [x.max_context_chars for x in limits if x and x.max_context_chars is not None]
    return min(found) if found else None


def digest(history: Sequence[Said]) -> str:
    """The scripted backend's summary: deterministic, from counts and first/last lines.

    ``history`` is the range, oldest first, possibly led by the previous
    Summary, whose text is carried over so that nothing summarized before is
    forgotten by the next one.
    """
    previous = history[0] if history and history[0].type is EntryType.SUMMARY else None
    new = pending(history)
    messages = sum(1 for e in new if e.type is EntryType.MESSAGE)
    directives = sum(1 for e in new if e.type is EntryType.DIRECTIVE)
    lines = [
        f"{len(new)} entries compacted ({messages} messages, {directives} directives), "
        f"seq {new[0].seq} to {new[-1].seq}."
        if new
        else "0 entries compacted."
    ]
    if previous is not None:
        lines.append(f"Before them: {_line(previous.content, 4 * DIGEST_LINE_CHARS)}")
    if new:
        lines.append(f"First: {new[0].sender}: {_line(new[0].content)}")
        lines.append(f"Last: {new[-1].sender}: {_line(new[-1].content)}")
    return "\n".join(lines)


def summary_prompt(history: Sequence[Said]) -> str:
    """The user message a model summarizes from: the header, then the range fenced
    as data (a previous Summary first), cut to :data:`MAX_TRANSCRIPT_CHARS` by
    dropping the oldest lines."""
    lines = []
    for e in history:
        who = "previous summary" if e.type is EntryType.SUMMARY else e.sender
        lines.append(f"{who}: {' '.join(e.content.split())}")
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        if size + len(line) + 1 > MAX_TRANSCRIPT_CHARS and kept:
            kept.append(f"[... {len(lines) - len(kept)} older lines left out ...]")
            break
        kept.append(line[:MAX_TRANSCRIPT_CHARS])
        size += len(line) + 1
    body = "\n".join(reversed(kept))
    return f"{SUMMARY_HEADER}\n{TRANSCRIPT_OPEN}\n{body}\n{TRANSCRIPT_CLOSE}"


def _line(text: str, limit: int = DIGEST_LINE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + " [...]"
