"""Compaction's pure parts: the digest, the model's prompt, and the scripted summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaz.domain.agents import Limits
from chaz.domain.compaction import (
    MAX_TRANSCRIPT_CHARS,
    SUMMARY_HEADER,
    context_budget,
    context_chars,
    digest,
    pending,
    summary_key,
    summary_prompt,
)
from chaz.domain.entries import EntryType, Said
from chaz.errors import ModelError, ValidationError
from chaz.runtime.backends.base import TurnContext
from chaz.runtime.backends.scripted import ScriptedBackend


def said(seq: int, text: str, etype: EntryType = EntryType.MESSAGE, who: str = "user:a") -> Said:
    return Said(f"e{seq}", seq, etype, who, text)


def test_the_digest_counts_the_range_and_quotes_its_ends() -> None:
    history = [
        said(3, "earlier\nsummary", EntryType.SUMMARY, "agent:bot"),
        said(4, "hello   there"),
        said(6, "do it", EntryType.DIRECTIVE, "system:x"),
        said(9, "x" * 500, who="agent:bot"),
    ]
    assert pending(history) == history[1:]
    assert digest(history).splitlines() == [
        "3 entries compacted (2 messages, 1 directives), seq 4 to 9.",
        "Before them: earlier summary",
        "First: user:a: hello there",
        f"Last: agent:bot: {'x' * 200} [...]",
    ]
    assert digest([]) == "0 entries compacted." and pending([]) == []
    assert context_chars(history) == len("earlier\nsummary") + 13 + 5 + 500
    assert summary_key("s1", 9) == "summary:s1:9"


def test_the_prompt_fences_the_range_and_keeps_its_newest_lines() -> None:
    history = [said(1, "old " * 10_000), said(2, "the latest", who="agent:bot")]
    history.insert(0, said(0, "before", EntryType.SUMMARY))
    prompt = summary_prompt([history[0], *([said(1, "y" * 1000)] * 100), history[-1]])
    lines = prompt.splitlines()
    assert lines[0] == SUMMARY_HEADER and lines[1] == "<<<CONVERSATION"
    assert lines[-1] == "CONVERSATION>>>" and lines[-2] == "agent:bot: the latest"
    assert lines[2].startswith("[... ") and lines[2].endswith("older lines left out ...]")
    assert len(prompt) < MAX_TRANSCRIPT_CHARS + 200
    small = summary_prompt(history[:1])
    assert "previous summary: before" in small


def test_the_scripted_model_summarizes_with_the_digest_or_its_summary_rule(
    tmp_path: Path,
) -> None:
    turn = TurnContext(session_id="s", job_id="", trigger_content=SUMMARY_HEADER)
    catch_all = ScriptedBackend.from_script([{"steps": [{"say": "a turn's reply"}]}], tmp_path)
    assert catch_all.summarize("the digest", turn) == "the digest"
    ruled = ScriptedBackend.from_script(
        [{"match": "^Summarize", "steps": [{"sleep": 0}, {"say": "S: {input}"}]}], tmp_path
    )
    assert ruled.summarize("the digest", turn) == "S: the digest"
    failing = ScriptedBackend.from_script(
        [{"match": "Summarize", "steps": [{"fail": "no summary today"}]}], tmp_path
    )
    with pytest.raises(ModelError, match="no summary today"):
        failing.summarize("the digest", turn)


def test_the_budget_is_the_smallest_set_and_unset_everywhere_is_off() -> None:
    assert context_budget(None, Limits(), None) is None
    assert context_budget(5000, Limits(), None) == 5000
    assert context_budget(None, Limits(max_context_chars=800), None) == 800
    assert context_budget(5000, Limits(max_context_chars=800), Limits(max_context_chars=900)) == 800
    assert context_budget(700, Limits(max_context_chars=800), Limits()) == 700
    with pytest.raises(ValidationError, match="max_context_chars"):
        Limits(max_context_chars=0)
